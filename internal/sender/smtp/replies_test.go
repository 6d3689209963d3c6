package smtp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

func mailErr(t *testing.T, err error) *mailtype.Error {
	t.Helper()
	var me *mailtype.Error
	require.True(t, errors.As(err, &me), "%v", err)
	return me
}

// TestDotReplyNotFourOrFiveHundred: the server read the whole message and
// answered the final dot with a reply other than 250. Another 2xx is a
// positive completion reply (RFC 5321, section 4.2.1): the mail is sent.
// A 3xx or a code outside the protocol says nothing, and the server may
// well have taken the mail (it did here): ambiguous, never transient (a
// resend would be a duplicate).
func TestDotReplyNotFourOrFiveHundred(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		reply string
		class mailtype.Class // "" for sent
	}{
		{"251 2.0.0 queued as x", ""},
		{"200 ok", ""},
		{"354 more please", mailtype.Ambiguous},
		{"999 queued", mailtype.Ambiguous},
	} {
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s pipelining=%v", c.reply, pipelining), func(t *testing.T) {
				t.Parallel()
				srv := newScripted(t, func(s *scripted) { s.pipelining, s.dotReply = pipelining, c.reply })
				s := srv.provider(t).NewSession()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				r, err := s.Send(ctx, sendertest.Message("k:1"))
				require.NoError(t, s.Close())
				srv.shutdown()
				_, _, taken, _ := srv.counts()
				require.Equal(t, 1, taken)
				if c.class == "" {
					require.NoError(t, err)
					require.Equal(t, c.reply[4:], r.ProviderMessageID)
					return
				}
				me := mailErr(t, err)
				require.Equal(t, c.class, me.Class, "%v (reason %v, detail %+v)", err, me.Reason, me.Detail)
				require.Equal(t, mailtype.ProviderDetail{}, me.Detail)
			})
		}
	}
}

// TestEnvelopeReplyNotFourOrFiveHundred: MAIL FROM or DATA answered with a
// code that is not the expected one and not a 4xx/5xx (a 2xx/3xx). Nothing
// was sent. go-mail's path took that as no usable reply (reason connect,
// no SMTP detail, not reroutable; at MAIL FROM on a warm connection a new
// connection is tried in the call), and so does this one: such a reply is
// no refusal, so it carries no SMTP detail and is not reroutable.
func TestEnvelopeReplyNotFourOrFiveHundred(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		configure func(s *scripted)
	}{
		{"MAIL FROM answered 220", func(s *scripted) { s.mailReply = "220 scripted ESMTP" }},
		{"DATA answered 250", func(s *scripted) { s.dataReply = "250 2.0.0 ok" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newScripted(t, c.configure)
			s := srv.provider(t).NewSession()
			err := send(t, s, "k:1", 5*time.Second)
			require.NoError(t, s.Close())
			srv.shutdown()
			me := mailErr(t, err)
			require.Equal(t, mailtype.Transient, me.Class, "%v", err)
			require.Equal(t, mailtype.ReasonConnect, me.Reason, "%v", err)
			require.Equal(t, mailtype.ProviderDetail{}, me.Detail, "%v", err)
			require.False(t, me.Reroutable, "%v", err)
		})
	}
}

// TestDotNeverLeftIsNotAmbiguous: the server answers DATA 354 and resets
// the connection before any of the message arrives. The message and its
// final dot fail to be written (a small message is flushed whole only by
// closing the DATA writer), so the server cannot have taken it; a
// message larger than the write buffer meets the same reset inside
// WriteTo and is transient either way (go-mail's DataCloser, used before,
// ignored the failed write and reported the missing reply: ambiguous).
func TestDotNeverLeftIsNotAmbiguous(t *testing.T) {
	t.Parallel()
	srv := newScripted(t, func(s *scripted) { s.pipelining, s.resetAfter354 = true, true })
	s := srv.provider(t).NewSession()
	err := send(t, s, "k:1", 5*time.Second)
	require.NoError(t, s.Close())
	srv.shutdown()
	_, _, taken, _ := srv.counts()
	_, data := srv.lines()
	require.Equal(t, []int{0, 0}, []int{taken, data})
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
}

// TestOddlyDeliveredRepliesKeepTheSessionInStep: replies written a byte at
// a time, multi-line 250 and 354 replies, pipelined or not: three mails
// on one connection, each taken once.
func TestOddlyDeliveredRepliesKeepTheSessionInStep(t *testing.T) {
	t.Parallel()
	for _, pipelining := range []bool{true, false} {
		for _, split := range []bool{true, false} {
			t.Run(fmt.Sprintf("pipelining=%v split=%v", pipelining, split), func(t *testing.T) {
				t.Parallel()
				srv := newScripted(t, func(s *scripted) { s.pipelining, s.split, s.multiline = pipelining, split, true })
				srv.sendAll(t, "k:1", "k:2", "k:3")
				conns, mails, taken, _ := srv.counts()
				require.Equal(t, []int{1, 3, 3}, []int{conns, mails, taken})
			})
		}
	}
}

// TestPipelinedWarmConnectionOver: the warm-connection cases of
// warm_test.go, to a server that offers PIPELINING.
func TestPipelinedWarmConnectionOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		configure func(s *scripted)
	}{
		{"421 after 250 of DATA", func(s *scripted) { s.closeAfterData, s.afterData = true, "421 4.4.2 closing connection" }},
		{"close after 250 of DATA", func(s *scripted) { s.closeAfterData = true }},
		{"one per connection", func(s *scripted) { s.perConn = 1 }},
		{"RSET required", func(s *scripted) { s.requireRset = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newScripted(t, func(s *scripted) { c.configure(s); s.pipelining = true })
			srv.sendAll(t, "k:1", "k:2", "k:3")
			_, _, taken, _ := srv.counts()
			require.Equal(t, 3, taken)
		})
	}
}

// TestPipelinedHangIsCutByTheDeadline: a server that offers PIPELINING and
// never answers RCPT TO (MAIL FROM answered) or delays MAIL FROM past the
// deadline: the call ends by the context deadline, transient (timeout),
// nothing taken, on one MAIL FROM.
func TestPipelinedHangIsCutByTheDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		phase smtptest.Phase
		fault smtptest.Fault
	}{
		{"hang at rcpt", smtptest.Rcpt, smtptest.Hang()},
		{"delay at mail", smtptest.Mail, smtptest.Delay(3 * time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, smtptest.Options{})
			s := newProvider(t, srv, smtp.TLSNone).NewSession()
			defer s.Close()
			require.NoError(t, send(t, s, "k:1", 5*time.Second))
			srv.Inject(c.phase, c.fault)
			start := time.Now()
			err := send(t, s, "k:2", 300*time.Millisecond)
			require.Less(t, time.Since(start), 2*time.Second)
			require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
			require.Equal(t, mailtype.ReasonTimeout, mailtype.ReasonOf(err), "%v", err)
			require.Equal(t, 1, srv.Count())
			require.Equal(t, 2, srv.MailCommands())
		})
	}
}
