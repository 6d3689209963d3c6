package bounce_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/smtp"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/bounce"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

var verp = bounce.Verp{LocalPart: "bounces", Domain: "bounce.shop.example", Secret: []byte("test-secret")}

type harness struct {
	sc      *storetest.Schema
	srv     *bounce.Server
	metrics *bounce.Metrics
}

func newHarness(t *testing.T, cfg bounce.Config) *harness {
	t.Helper()
	h := &harness{sc: storetest.New(t), metrics: bounce.NewMetrics(prometheus.NewRegistry())}
	cfg.Addr, cfg.Verp = "127.0.0.1:0", verp
	srv, err := bounce.New(cfg, bounce.Deps{Store: h.sc.Store, Metrics: h.metrics})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
	})
	h.srv = srv
	return h
}

// sentBySMTP writes a mail to `to` recorded as sent by the SMTP relay and
// returns its id.
func (h *harness) sentBySMTP(t *testing.T, order, to string) int64 {
	t.Helper()
	return h.finishedBySMTP(t, order, to, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp",
		ProviderMessageID: "2.0.0 Ok: queued as " + order})
}

// finishedBySMTP writes a mail to `to`, claims it and records outcome as
// its SMTP send's, checks the status it got, and returns its id.
func (h *harness) finishedBySMTP(t *testing.T, order, to string, outcome store.Outcome) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := storetest.InsertPending(ctx, h.sc.Store, storetest.Mail{OrderID: order, ToEmail: to})
	require.NoError(t, err)
	got, err := h.sc.Store.ClaimMails(ctx, store.ClaimParams{Limit: 1, Lease: time.Minute, Worker: "test"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err := h.sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence, Outcome: outcome}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, outcome.Status, res[0].Status)
	return id
}

// deliver sends msg to rcpt over SMTP from the null sender, as an MTA
// sends a report.
func (h *harness) deliver(rcpt, msg string) error {
	return smtp.SendMail(h.srv.Addr(), nil, "", []string{rcpt}, []byte(strings.ReplaceAll(msg, "\n", "\r\n")))
}

func dsn(action, status string) string {
	return "From: MAILER-DAEMON@mx.example\nSubject: Undelivered Mail Returned to Sender\nMIME-Version: 1.0\n" +
		"Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n--b\nContent-Type: text/plain\n\n" +
		"The mail could not be delivered.\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example\n\n" +
		"Final-Recipient: rfc822; gone@example.com\nAction: " + action + "\nStatus: " + status +
		"\nDiagnostic-Code: smtp; 550 " + status + " user unknown\n--b--\n"
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) int {
	t.Helper()
	var d dto.Metric
	require.NoError(t, c.Write(&d))
	return int(d.GetCounter().GetValue())
}

// Reports to a mail's VERP address change that mail as its verdict says,
// once; every other recipient is refused and changes nothing.
func TestBounceListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bounce.Config{MaxMessageBytes: 64 << 10})
	hard := h.sentBySMTP(t, "1", "Gone@Example.com")
	soft := h.sentBySMTP(t, "2", "full@example.com")
	odd := h.sentBySMTP(t, "3", "odd@example.com")
	late := h.sentBySMTP(t, "4", "slow@example.com")

	require.NoError(t, h.deliver(verp.Address(hard), dsn("failed", "5.1.1")))
	require.NoError(t, h.deliver(verp.Address(hard), dsn("failed", "5.1.1")), "a report sent twice")
	require.NoError(t, h.deliver(verp.Address(soft), dsn("failed", "4.2.2")))
	require.NoError(t, h.deliver(verp.Address(odd), "Subject: your mail\n\nsomething went wrong\n"))
	require.NoError(t, h.deliver(verp.Address(late), dsn("delayed", "4.4.7")))
	require.NoError(t, h.deliver(verp.Address(999999), dsn("failed", "5.1.1")), "a mail that does not exist: nothing to change")

	for rcpt, want := range map[string]string{
		"victim@example.com":                              "550 5.7.1",
		strings.Replace(verp.Address(hard), "+", "+x", 1): "550 5.1.1",
		bounce.Verp{LocalPart: "bounces", Domain: "bounce.shop.example", Secret: []byte("guess")}.Address(hard): "550 5.1.1",
	} {
		err := h.deliver(rcpt, dsn("failed", "5.1.1"))
		code, enhanced, _ := strings.Cut(want, " ")
		require.ErrorContains(t, err, code, rcpt)
		require.ErrorContains(t, err, enhanced, rcpt)
	}
	big := dsn("failed", "5.1.1") + strings.Repeat(strings.Repeat("x", 70)+"\n", 1000)
	require.ErrorContains(t, h.deliver(verp.Address(soft), big), "552")

	require.Equal(t, map[string]string{"1": "failed", "2": "failed", "3": "failed", "4": "sent"},
		h.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.EqualValues(t, 1, h.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '4' AND delivery_delayed_at IS NOT NULL`))
	require.Equal(t, map[string]string{"Gone@example.com": "dsn/bounce"}, h.sc.QueryMap(t, `SELECT address, source FROM suppression`))
	require.Equal(t, map[string]string{
		"order-confirmed:1": "EmailBounced smtp permanent 5.1.1",
		"order-confirmed:2": "EmailBounced smtp transient 4.2.2",
		"order-confirmed:3": "EmailBounced smtp undetermined",
	}, h.sc.QueryMap(t, `SELECT dedupe_key, concat_ws(' ', event_type, payload#>>'{data,provider}',
		payload#>>'{data,provider_event,bounce_type}', payload#>>'{data,provider_event,bounce_subtype}')
		FROM outbox WHERE event_type <> 'EmailSent'`))
	for typ, payload := range h.sc.QueryMap(t, `SELECT event_type || ' ' || dedupe_key, payload::text FROM outbox WHERE event_type <> 'EmailSent'`) {
		require.Empty(t, api.ValidateFeedback(strings.Fields(typ)[0], []byte(payload)), "%s %s", typ, payload)
	}
	require.EqualValues(t, 5, h.sc.QueryInt(t, `SELECT count(*) FROM webhook_event WHERE provider = 'smtp'`), "the duplicate once")
	for label, want := range map[string]int{"relay": 1, "bad_token": 2, "too_large": 1} {
		require.Equal(t, want, counter(t, h.metrics.Refused.WithLabelValues(label)), label)
	}
	require.Equal(t, 1, counter(t, h.metrics.Reports.WithLabelValues("permanent", "false")), "the report for no mail")
}

// A report of a real MTA from the corpus, delivered to a VERP address.
func TestBounceListenerTakesACorpusReport(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bounce.Config{})
	id := h.sentBySMTP(t, "7", "kijitora@example.jp")
	b, err := os.ReadFile("testdata/sisimai/lhost-postfix-13.eml")
	require.NoError(t, err)
	msg := string(b[strings.IndexByte(string(b), '\n')+1:]) // the mbox separator line
	require.NoError(t, h.deliver(verp.Address(id), strings.ReplaceAll(msg, "\r\n", "\n")))
	require.Equal(t, []string{"failed"}, h.sc.QueryStrings(t, `SELECT status FROM mail`))
	require.Equal(t, []string{"kijitora@example.jp dsn/bounce"},
		h.sc.QueryStrings(t, `SELECT address || ' ' || source FROM suppression`))
}

// Copies of a report with other headers change nothing more; a success
// report mailsvc did not ask for changes nothing; an SMTP report for a
// mail Resend sent changes nothing; one client holds at most
// MaxConnsPerIP connections.
func TestBounceListenerRefusesWhatItDidNotAskFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bounce.Config{MaxConnsPerIP: 2})
	id := h.sentBySMTP(t, "1", "gone@example.com")
	ok := h.sentBySMTP(t, "2", "fine@example.com")
	require.NoError(t, h.deliver(verp.Address(id), dsn("failed", "5.1.1")))
	require.NoError(t, h.deliver(verp.Address(id), "Subject: again\n"+dsn("failed", "5.1.1")))
	require.NoError(t, h.deliver(verp.Address(ok), dsn("delivered", "2.0.0")))
	require.EqualValues(t, 1, h.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailBounced'`))
	require.EqualValues(t, 0, h.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE delivered_at IS NOT NULL`))
	require.Equal(t, 1, counter(t, h.metrics.Refused.WithLabelValues("not_asked")))

	h.sc.Exec(t, `UPDATE mail SET provider = 'resend' WHERE id = $1`, ok)
	require.NoError(t, h.deliver(verp.Address(ok), dsn("failed", "5.1.1")))
	require.Equal(t, "sent", h.sc.QueryStrings(t, `SELECT status FROM mail WHERE id = $1`, ok)[0])
	require.EqualValues(t, 0, h.sc.QueryInt(t, `SELECT count(*) FROM suppression WHERE address = 'fine@example.com'`))

	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", h.srv.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = bufio.NewReader(c).ReadString('\n') // the greeting: served
		require.NoError(t, err)
		held = append(held, c)
	}
	third, err := net.Dial("tcp", h.srv.Addr())
	require.NoError(t, err)
	defer third.Close()
	require.NoError(t, third.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = bufio.NewReader(third).ReadString('\n')
	require.ErrorIs(t, err, io.EOF, "a third connection from one address is closed at once")
	require.Len(t, held, 2)
}

// With a certificate configured the listener offers STARTTLS, and a
// report delivered over it is recorded like any other.
func TestBounceListenerSTARTTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "bounce test CA")
	h := newHarness(t, bounce.Config{TLS: tlstest.ServerConfig(ca.Server(t, "127.0.0.1"), nil)})
	id := h.sentBySMTP(t, "1", "gone@example.com")
	c, err := smtp.Dial(h.srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	ok, _ := c.Extension("STARTTLS")
	require.True(t, ok, "STARTTLS offered")
	require.NoError(t, c.StartTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}))
	require.NoError(t, c.Mail(""))
	require.NoError(t, c.Rcpt(verp.Address(id)))
	w, err := c.Data()
	require.NoError(t, err)
	_, err = io.WriteString(w, strings.ReplaceAll(dsn("failed", "5.1.1"), "\n", "\r\n"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, c.Quit())
	require.Equal(t, []string{"failed"}, h.sc.QueryStrings(t, `SELECT status FROM mail`))
}
