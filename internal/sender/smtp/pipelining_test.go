package smtp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestPipeliningGroupsTheEnvelope: to a server that offers PIPELINING (RFC
// 2920) MAIL FROM, RCPT TO and DATA go out together, the server reading
// the next commands before it answered MAIL FROM; to one that does not,
// each command waits for the previous reply. Either way every mail is
// taken once, on one connection.
func TestPipeliningGroupsTheEnvelope(t *testing.T) {
	t.Parallel()
	for _, pipelining := range []bool{true, false} {
		srv := newScripted(t, func(s *scripted) { s.pipelining = pipelining })
		srv.sendAll(t, "k:1", "k:2", "k:3")
		conns, mails, taken, _ := srv.counts()
		grouped, data := srv.lines()
		want := 0
		if pipelining {
			want = 3
		}
		require.Equal(t, []int{1, 3, 3, want}, []int{conns, mails, taken, grouped}, "pipelining %v: conns, mails, taken, grouped", pipelining)
		require.Positive(t, data)
	}
}

// TestPipelinedRefusedRecipientSendsNoMessage: a refused recipient fails
// the mail by its reply (5xx permanent and the mail's own verdict, 4xx
// transient and reroutable) whether the envelope went pipelined or not,
// and no line of the message is ever sent, also to a server that answers
// the pipelined DATA with 354 despite the refusal (RFC 2920, section 3.1).
func TestPipelinedRefusedRecipientSendsNoMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                   string
		pipelining, acceptData bool
		reply                  string
		class                  mailtype.Class
		code                   int
		enhanced               string
		reroutable             bool
	}{
		{"550 pipelined", true, false, "550 5.1.1 no such user", mailtype.Permanent, 550, "5.1.1", false},
		{"550 pipelined, DATA accepted anyway", true, true, "550 5.1.1 no such user", mailtype.Permanent, 550, "5.1.1", false},
		{"550 one by one", false, false, "550 5.1.1 no such user", mailtype.Permanent, 550, "5.1.1", false},
		{"450 pipelined, DATA accepted anyway", true, true, "450 4.2.1 mailbox busy", mailtype.Transient, 450, "4.2.1", true},
		{"450 one by one", false, false, "450 4.2.1 mailbox busy", mailtype.Transient, 450, "4.2.1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newScripted(t, func(s *scripted) {
				s.pipelining, s.acceptDataAnyway, s.rcptReply = c.pipelining, c.acceptData, c.reply
			})
			s := srv.provider(t).NewSession()
			err := send(t, s, "k:1", 5*time.Second)
			require.NoError(t, s.Close())
			srv.shutdown()
			var me *mailtype.Error
			require.True(t, errors.As(err, &me), "%v", err)
			require.Equal(t, c.class, me.Class, "%v", err)
			require.Equal(t, mailtype.ProviderDetail{SMTPCode: c.code, SMTPEnhancedCode: c.enhanced}, me.Detail)
			require.Equal(t, c.reroutable, me.Reroutable)
			_, _, taken, _ := srv.counts()
			_, data := srv.lines()
			require.Equal(t, []int{0, 0}, []int{taken, data}, "messages taken, message lines read")
		})
	}
}
