package smtp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// TestProviderDetailOfReplies: a failed send carries the reply code and
// the enhanced status code of the reply that decided it, as the server
// wrote them; a failure without a reply carries none.
func TestProviderDetailOfReplies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		phase  smtptest.Phase
		fault  smtptest.Fault
		class  mailtype.Class
		detail mailtype.ProviderDetail
	}{
		{"550 5.1.1 at rcpt", smtptest.Rcpt, smtptest.ReplyText(550, "5.1.1 <b@example.com> User unknown"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}},
		{"451 4.7.1 at data", smtptest.Data, smtptest.ReplyText(451, "4.7.1 Try again later"),
			mailtype.Transient, mailtype.ProviderDetail{SMTPCode: 451, SMTPEnhancedCode: "4.7.1"}},
		{"550 without an enhanced code", smtptest.Rcpt, smtptest.ReplyText(550, "User unknown"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 550}},
		{"550 with the code alone", smtptest.Rcpt, smtptest.ReplyText(550, "5.1.1"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}},
		{"553 at mail, go-smtp's default X.0.0", smtptest.Mail, smtptest.Reply(553, "bad sender"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 553, SMTPEnhancedCode: "5.0.0"}},
		{"class disagreeing with the reply", smtptest.Rcpt, smtptest.ReplyText(550, "4.2.2 mailbox full"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 550}},
		{"an IP address is no enhanced code", smtptest.Data, smtptest.ReplyText(554, "Rejected from 192.5.1.10"),
			mailtype.Permanent, mailtype.ProviderDetail{SMTPCode: 554}},
		{"421 greeting", smtptest.Greeting, smtptest.ReplyText(421, "4.3.2 too busy"),
			mailtype.Transient, mailtype.ProviderDetail{SMTPCode: 421, SMTPEnhancedCode: "4.3.2"}},
		{"dropped at rcpt", smtptest.Rcpt, smtptest.Drop(), mailtype.Transient, mailtype.ProviderDetail{}},
		{"no reply after data", smtptest.Data, smtptest.Hang(), mailtype.Ambiguous, mailtype.ProviderDetail{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, smtptest.Options{})
			srv.Inject(c.phase, c.fault)
			s := newProvider(t, srv, smtp.TLSNone).NewSession()
			defer s.Close()
			err := send(t, s, "k:1", 500*time.Millisecond)
			require.Equal(t, c.class, mailtype.ClassOf(err), "%v", err)
			require.Equal(t, c.detail, mailtype.DetailOf(err), "%v", err)
			require.Zero(t, srv.Queued(c.phase), "the fault was used")
		})
	}
}

// TestAuthRefusalDetail: a refused AUTH (535 5.7.8) keeps its reply as
// detail although its text is rewritten to redact the password.
func TestAuthRefusalDetail(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{STARTTLS: true, Username: "u", Password: "p4ss"})
	p, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLSConfig: srv.ClientTLSConfig(), Username: "u", Password: "wrong-secret"})
	require.NoError(t, err)
	s := p.NewSession()
	defer s.Close()
	err = send(t, s, "k:1", 5*time.Second)
	require.Equal(t, mailtype.ReasonAuth, mailtype.ReasonOf(err), "%v", err)
	require.Equal(t, mailtype.ProviderDetail{SMTPCode: 535, SMTPEnhancedCode: "5.7.8"}, mailtype.DetailOf(err))
	require.Zero(t, srv.Count())
}
