package smtp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"mime"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newProvider(t *testing.T, srv *smtptest.Server, mode string) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLS: mode, TLSConfig: srv.ClientTLSConfig(), HELO: "test.local"})
	require.NoError(t, err)
	return p
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Run(t, func(t *testing.T) sendertest.Harness {
		srv := smtptest.New(t, smtptest.Options{})
		host, port, _ := net.SplitHostPort(sendertest.DeadAddr(t))
		portN, _ := strconv.Atoi(port)
		dead, err := smtp.New(smtp.Config{Host: host, Port: portN, TLS: smtp.TLSNone})
		require.NoError(t, err)
		return sendertest.Harness{
			Provider: newProvider(t, srv, smtp.TLSNone),
			Dead:     dead,
			Inject: func(f sendertest.Fault) {
				switch f {
				case sendertest.Transient:
					srv.Inject(smtptest.Data, smtptest.Reply(451, "try later"))
				case sendertest.Permanent:
					srv.Inject(smtptest.Rcpt, smtptest.Reply(550, "no such user"))
				case sendertest.LostResponse:
					srv.Inject(smtptest.Data, smtptest.Hang())
				}
			},
			Delivered: srv.Count,
		}
	})
}

func send(t *testing.T, s sender.Session, key string, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := s.Send(ctx, sendertest.Message(key))
	return err
}

func TestReplyCodesAndPhases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		phase  smtptest.Phase
		fault  smtptest.Fault
		class  mailtype.Class
		reason mailtype.Reason
	}{
		{"421 greeting", smtptest.Greeting, smtptest.Reply(421, "busy"), mailtype.Transient, mailtype.ReasonConnect},
		{"451 mail", smtptest.Mail, smtptest.Reply(451, "later"), mailtype.Transient, mailtype.ReasonDeferred},
		{"452 rcpt", smtptest.Rcpt, smtptest.Reply(452, "full"), mailtype.Transient, mailtype.ReasonDeferred},
		{"450 data", smtptest.Data, smtptest.Reply(450, "busy"), mailtype.Transient, mailtype.ReasonDeferred},
		{"421 data", smtptest.Data, smtptest.Reply(421, "closing"), mailtype.Transient, mailtype.ReasonDeferred},
		{"553 mail", smtptest.Mail, smtptest.Reply(553, "bad sender"), mailtype.Permanent, mailtype.ReasonRejected},
		{"554 data", smtptest.Data, smtptest.Reply(554, "spam"), mailtype.Permanent, mailtype.ReasonRejected},
		{"drop at rcpt", smtptest.Rcpt, smtptest.Drop(), mailtype.Transient, mailtype.ReasonConnect},
		{"drop after data", smtptest.Data, smtptest.Drop(), mailtype.Ambiguous, mailtype.ReasonConnect},
		{"hang at mail", smtptest.Mail, smtptest.Hang(), mailtype.Transient, mailtype.ReasonTimeout},
		{"hang after data", smtptest.Data, smtptest.Hang(), mailtype.Ambiguous, mailtype.ReasonTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, smtptest.Options{})
			srv.Inject(c.phase, c.fault)
			s := newProvider(t, srv, smtp.TLSNone).NewSession()
			defer s.Close()
			err := send(t, s, "k:1", 500*time.Millisecond)
			require.Equal(t, c.class, mailtype.ClassOf(err), "%v", err)
			require.Equal(t, c.reason, mailtype.ReasonOf(err), "%v", err)
		})
	}
}

func TestFailedTransactionDoesNotPoisonTheNextMail(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	require.NoError(t, send(t, s, "k:1", 5*time.Second))
	srv.Inject(smtptest.Rcpt, smtptest.Reply(550, "no such user"))
	require.Error(t, send(t, s, "k:2", 5*time.Second))
	srv.Inject(smtptest.Data, smtptest.Reply(451, "later"))
	require.Error(t, send(t, s, "k:3", 5*time.Second))
	require.NoError(t, send(t, s, "k:4", 5*time.Second))
	msgs := srv.Messages()
	require.Len(t, msgs, 2)
	require.Contains(t, string(msgs[1].Data), mailtype.MessageID("k:4", "example.com"))
}

func TestStartTLSRequiredNeverFallsBackToPlaintext(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSStartTLS).NewSession()
	defer s.Close()
	err := send(t, s, "k:1", 5*time.Second)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonTLS, mailtype.ReasonOf(err))
	require.Equal(t, 0, srv.MailCommands(), "no transaction may start in plaintext")
}

func TestTLSModes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode    string
		opts    smtptest.Options
		wantTLS bool
	}{
		{smtp.TLSStartTLS, smtptest.Options{STARTTLS: true}, true},
		{smtp.TLSOpportunistic, smtptest.Options{STARTTLS: true}, true},
		{smtp.TLSOpportunistic, smtptest.Options{}, false},
		{smtp.TLSImplicit, smtptest.Options{ImplicitTLS: true}, true},
		{smtp.TLSNone, smtptest.Options{STARTTLS: true}, false},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, c.opts)
			s := newProvider(t, srv, c.mode).NewSession()
			defer s.Close()
			require.NoError(t, send(t, s, "k:1", 5*time.Second))
			msgs := srv.Messages()
			require.Len(t, msgs, 1)
			require.Equal(t, c.wantTLS, msgs[0].TLS)
		})
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{STARTTLS: true, Username: "u", Password: "p4ss"})
	good, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLSConfig: srv.ClientTLSConfig(), Username: "u", Password: "p4ss"})
	require.NoError(t, err)
	s := good.NewSession()
	defer s.Close()
	require.NoError(t, send(t, s, "k:1", 5*time.Second))

	bad, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLSConfig: srv.ClientTLSConfig(), Username: "u", Password: "wrong-secret"})
	require.NoError(t, err)
	s2 := bad.NewSession()
	defer s2.Close()
	err = send(t, s2, "k:2", 5*time.Second)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonAuth, mailtype.ReasonOf(err))
	require.NotContains(t, err.Error(), "wrong-secret")
	require.Equal(t, 1, srv.Count())
}

func TestMessageIsSevenBitStableAndEncoded(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{No8BITMIME: true})
	p, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLS: smtp.TLSNone, IdempotencyHeader: "Resend-Idempotency-Key"})
	require.NoError(t, err)
	s := p.NewSession()
	defer s.Close()
	m := sendertest.Message("order-confirmed:42")
	m.Text = strings.Repeat("Cảm ơn quý khách đã mua hàng tại cửa hàng của chúng tôi. ", 20) + "\n"
	for range 2 {
		_, err := s.Send(context.Background(), m)
		require.NoError(t, err)
	}
	msgs := srv.Messages()
	require.Len(t, msgs, 2)
	require.Equal(t, msgs[0].Data, msgs[1].Data, "every attempt sends identical bytes")
	raw := msgs[0].Data
	for i, line := range bytes.Split(raw, []byte("\r\n")) {
		require.LessOrEqual(t, len(line), 78, "line %d too long: %q", i, line)
		for _, b := range line {
			require.Less(t, b, byte(0x80), "line %d is not 7-bit: %q", i, line)
		}
	}
	parsed, err := mail.ReadMessage(bufio.NewReader(bytes.NewReader(raw)))
	require.NoError(t, err)
	dec := new(mime.WordDecoder)
	subj, err := dec.DecodeHeader(parsed.Header.Get("Subject"))
	require.NoError(t, err)
	require.Equal(t, "Xác nhận đơn hàng 42", subj)
	to, err := parsed.Header.AddressList("To")
	require.NoError(t, err)
	require.Equal(t, "Nguyễn Văn B", to[0].Name)
	from, err := parsed.Header.AddressList("From")
	require.NoError(t, err)
	require.Equal(t, "Cửa hàng", from[0].Name)
	require.Equal(t, m.MessageID, parsed.Header.Get("Message-ID"))
	require.Equal(t, "order-confirmed:42", parsed.Header.Get("X-Dedupe-Key"))
	require.Equal(t, "order-confirmed:42", parsed.Header.Get("Resend-Idempotency-Key"))
	require.Contains(t, parsed.Header.Get("Content-Type"), "multipart/alternative")
	require.Empty(t, parsed.Header.Get("User-Agent"))
	body, err := io.ReadAll(parsed.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "text/plain")
	require.Contains(t, string(body), "text/html")
	require.Contains(t, string(body), "quoted-printable")
}

func TestDeadlineCoversTheWholeCall(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	srv.Inject(smtptest.Greeting, smtptest.Hang())
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	start := time.Now()
	err := send(t, s, "k:1", 300*time.Millisecond)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonTimeout, mailtype.ReasonOf(err))
}

// TestNoDisplayNameFailsTheMail checks that the display name is set, never
// parsed: names that broke `"name" <addr>` parsing are delivered as they are.
func TestNoDisplayNameFailsTheMail(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	names := []string{`Bob\`, `\`, `"`, `Bob "B" \"`, `<b@example.com>`, `a, b: c; @d`, "Nguyễn \"Văn\" B\\"}
	for i, name := range names {
		m := sendertest.Message("k:" + strconv.Itoa(i))
		m.ToName = name
		_, err := s.Send(context.Background(), m)
		require.NoError(t, err, "name %q", name)
	}
	msgs := srv.Messages()
	require.Len(t, msgs, len(names))
	for i, msg := range msgs {
		parsed, err := mail.ReadMessage(bufio.NewReader(bytes.NewReader(msg.Data)))
		require.NoError(t, err)
		to, err := parsed.Header.AddressList("To")
		require.NoError(t, err)
		require.Len(t, to, 1)
		require.Equal(t, "b@example.com", to[0].Address)
		require.Equal(t, names[i], to[0].Name)
		require.Equal(t, []string{"b@example.com"}, msg.To, "the envelope has the one recipient")
	}
}

func TestBadRecipientAddressIsPermanent(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	m := sendertest.Message("k:1")
	m.To = "not an address"
	_, err := s.Send(context.Background(), m)
	require.Equal(t, mailtype.Permanent, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonInvalidAddress, mailtype.ReasonOf(err))
	require.Equal(t, 0, srv.Count())
}

// TestTroublesAndReroutes: which failures say something about the relay
// or the configuration (the breaker counts them), and which prove that the
// relay did not take the mail without refusing its recipient (another
// provider may take it).
func TestTroublesAndReroutes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		opts       smtptest.Options
		mode       string
		phase      smtptest.Phase
		fault      *smtptest.Fault
		password   string
		trusted    bool
		trouble    sender.Trouble
		reroutable bool
		taken      int
	}{
		{name: "STARTTLS required, not offered", mode: smtp.TLSStartTLS, trouble: sender.TroubleConfig, reroutable: true},
		{name: "certificate does not verify", opts: smtptest.Options{STARTTLS: true}, mode: smtp.TLSStartTLS,
			trouble: sender.TroubleConfig, reroutable: true},
		{name: "implicit TLS, certificate does not verify", opts: smtptest.Options{ImplicitTLS: true}, mode: smtp.TLSImplicit,
			trouble: sender.TroubleConfig, reroutable: true},
		{name: "535 credentials refused", opts: smtptest.Options{STARTTLS: true, Username: "u", Password: "right"}, mode: smtp.TLSStartTLS,
			password: "wrong", trusted: true, trouble: sender.TroubleConfig, reroutable: true},
		{name: "421 greeting", phase: smtptest.Greeting, fault: ptr(smtptest.Reply(421, "busy")), mode: smtp.TLSNone,
			trouble: sender.TroubleBusy, reroutable: true},
		{name: "554 greeting", phase: smtptest.Greeting, fault: ptr(smtptest.Reply(554, "no service")), mode: smtp.TLSNone,
			trouble: sender.TroubleOutage, reroutable: true},
		{name: "550 to MAIL FROM", phase: smtptest.Mail, fault: ptr(smtptest.Reply(550, "5.7.1 sender refused")), mode: smtp.TLSNone, reroutable: true},
		{name: "451 to RCPT", phase: smtptest.Rcpt, fault: ptr(smtptest.Reply(451, "4.3.0 later")), mode: smtp.TLSNone, reroutable: true},
		{name: "550 5.1.1 bad recipient", phase: smtptest.Rcpt, fault: ptr(smtptest.ReplyText(550, "5.1.1 no such user")), mode: smtp.TLSNone},
		{name: "451 after DATA", phase: smtptest.Data, fault: ptr(smtptest.Reply(451, "later")), mode: smtp.TLSNone},
		{name: "no reply after DATA", phase: smtptest.Data, fault: ptr(smtptest.Drop()), mode: smtp.TLSNone, trouble: sender.TroubleOutage, taken: 1},
		{name: "no reply to MAIL FROM", phase: smtptest.Mail, fault: ptr(smtptest.Drop()), mode: smtp.TLSNone, trouble: sender.TroubleOutage},
		{name: "421 4.3.2 to MAIL FROM closes the channel", phase: smtptest.Mail, fault: ptr(smtptest.ReplyText(421, "4.3.2 shutting down")), mode: smtp.TLSNone,
			trouble: sender.TroubleOutage, reroutable: true},
		{name: "421 4.7.0 throttling", phase: smtptest.Mail, fault: ptr(smtptest.ReplyText(421, "4.7.0 Try again later, closing connection")), mode: smtp.TLSNone,
			trouble: sender.TroubleRateLimited, reroutable: true},
		{name: "451 4.7.1 rate to RCPT", phase: smtptest.Rcpt, fault: ptr(smtptest.ReplyText(451, "4.7.1 Rate limit exceeded")), mode: smtp.TLSNone,
			trouble: sender.TroubleRateLimited, reroutable: true},
		{name: "454 SES throttling after DATA", phase: smtptest.Data, fault: ptr(smtptest.ReplyText(454, "Throttling failure: Maximum sending rate exceeded.")), mode: smtp.TLSNone,
			trouble: sender.TroubleRateLimited, reroutable: true},
		{name: "454 SES daily quota after DATA", phase: smtptest.Data, fault: ptr(smtptest.ReplyText(454, "Throttling failure: Daily message quota exceeded.")), mode: smtp.TLSNone,
			trouble: sender.TroubleQuota, reroutable: true},
		{name: "451 4.7.1 after DATA is the mail's (a milter's soft reject)", phase: smtptest.Data, fault: ptr(smtptest.ReplyText(451, "4.7.1 Try again later")), mode: smtp.TLSNone},
		{name: "450 4.7.1 too many recipients from the client is throttling", phase: smtptest.Rcpt,
			fault: ptr(smtptest.ReplyText(450, "4.7.1 Error: too many recipients from [127.0.0.1]")), mode: smtp.TLSNone,
			trouble: sender.TroubleRateLimited, reroutable: true},
		{name: "450 4.2.0 greylisted RCPT is the mail's", phase: smtptest.Rcpt, fault: ptr(smtptest.ReplyText(450, "4.2.0 Greylisted, see http://postgrey.schweikert.ch/help")), mode: smtp.TLSNone,
			reroutable: true},
		{name: "452 4.2.2 mailbox over quota is the mail's", phase: smtptest.Rcpt, fault: ptr(smtptest.ReplyText(452, "4.2.2 Mailbox full, quota exceeded")), mode: smtp.TLSNone,
			reroutable: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, c.opts)
			if c.fault != nil {
				srv.Inject(c.phase, *c.fault)
			}
			cfg := smtp.Config{Host: srv.Host, Port: srv.Port, TLS: c.mode, HELO: "test.local"}
			if c.trusted {
				cfg.TLSConfig = srv.ClientTLSConfig()
			}
			if c.password != "" {
				cfg.Username, cfg.Password = "u", mailtype.Secret(c.password)
			}
			p, err := smtp.New(cfg)
			require.NoError(t, err)
			s := p.NewSession()
			defer s.Close()
			err = send(t, s, "k:1", 5*time.Second)
			require.Error(t, err)
			trouble, _ := sender.TroubleOf(err)
			require.Equal(t, c.trouble, trouble, "%v", err)
			require.Equal(t, c.reroutable, mailtype.Reroutable(err), "%v", err)
			require.Equal(t, c.taken, srv.Count())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestWarmConnectionThatDiedIsReplacedOnce: a connection that finished a
// transaction a moment ago is used without NOOP; when it turns out closed
// (MAIL FROM gets no reply), the mail goes on a new connection within the
// same call, once, and a refusal by a live server is not retried.
func TestWarmConnectionThatDiedIsReplacedOnce(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	require.NoError(t, send(t, s, "k:1", 5*time.Second))
	srv.Inject(smtptest.Mail, smtptest.Drop())
	require.NoError(t, send(t, s, "k:2", 5*time.Second), "a dead warm connection is replaced")
	require.Equal(t, 2, srv.Count())
	require.Equal(t, 3, srv.MailCommands(), "MAIL FROM: k:1, k:2 on the dead connection, k:2 again")

	srv.Inject(smtptest.Mail, smtptest.Reply(451, "busy"))
	err := send(t, s, "k:3", 5*time.Second)
	require.Error(t, err, "a reply is the server's verdict, not a dead connection")
	require.Equal(t, 4, srv.MailCommands())
	require.Equal(t, 2, srv.Count())
}
