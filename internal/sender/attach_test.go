package sender_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	netmail "net/mail"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// invoicePDF is the file the shop's object store serves.
var invoicePDF = append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte("invoice line 0123456789\n"), 400)...)

const invoiceName = "Hóa đơn số 42.pdf"

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// withInvoice records a confirmation whose event names invoicePDF on a
// real HTTPS server (its own CA), then runs the real fetch stage once: the
// mail's bytes are stored, verified, and the mail is ready.
func (b *bundle) withInvoice(t *testing.T, orderID string) int64 {
	t.Helper()
	return b.withFiles(t, orderID, false)
}

// withFiles is withInvoice, plus, when missing, an optional second file
// the server does not have (404).
func (b *bundle) withFiles(t *testing.T, orderID string, missing bool) int64 {
	t.Helper()
	ca := tlstest.NewCA(t, "object store CA")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/42.pdf" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/pdf")
		_, _ = w.Write(invoicePDF)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	files := []any{map[string]any{
		"file_name": invoiceName, "content_type": "application/pdf", "url": srv.URL + "/42.pdf",
		"sha256": sha(invoicePDF), "size": len(invoicePDF),
	}}
	if missing {
		files = append(files, map[string]any{
			"file_name": "Điều khoản.pdf", "content_type": "application/pdf", "url": srv.URL + "/terms.pdf",
			"sha256": sha(invoicePDF), "size": len(invoicePDF), "optional": true,
		})
	}
	payload, err := json.Marshal(map[string]any{"order_id": orderID, "attachments": files})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = b.sc.Store.Ingest(ctx, []store.IngestItem{{Mail: &store.NewMail{
		EventID: uuid.NewString(), DedupeKey: key(orderID), OrderID: orderID, Template: "order_confirmed",
		Locale: "vi", ToEmail: "b@example.com", Payload: payload, Subject: "Đơn hàng " + orderID,
		BodyText: "Cảm ơn", BodyHTML: "<p>Cảm ơn</p>", MessageID: mailtype.MessageID(key(orderID), "example.com"),
		From: from, IdempotencyKey: "ns:" + key(orderID), OccurredAt: time.Now().UTC(), MaxAge: time.Hour,
		HasAttachments: true,
	}}})
	require.NoError(t, err)
	st := attach.NewStage(attach.Config{
		Fetch: attach.FetchConfig{
			Policy: attach.Policy{AllowedHosts: []string{"127.0.0.1"}}, Exempt: []netip.AddrPort{netip.MustParseAddrPort(u.Host)},
			TLS: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, Timeout: 5 * time.Second,
		},
		Concurrency: 2, RetryBackoff: time.Second, RetryBackoffMax: time.Second, PollInterval: time.Second, MaxEventAge: time.Hour,
	}, b.sc.Store, nil, slog.New(slog.DiscardHandler))
	n, err := st.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND attach_state = 'ready'`, key(orderID)))
	return b.count(t, `SELECT id FROM mail WHERE dedupe_key = $1`, key(orderID))
}

// smtpAttachment parses an SMTP message (net/mail, mime/multipart) and
// returns its one attachment's file name (RFC 2231 decoded), raw
// Content-Disposition and bytes; the first part must be the text and HTML.
func smtpAttachment(t *testing.T, data []byte) (name, disposition string, content []byte) {
	t.Helper()
	msg, err := netmail.ReadMessage(bytes.NewReader(data))
	require.NoError(t, err)
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/mixed", mt)
	r := multipart.NewReader(msg.Body, params["boundary"])
	alt, err := r.NextPart()
	require.NoError(t, err)
	amt, aparams, err := mime.ParseMediaType(alt.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/alternative", amt)
	ar := multipart.NewReader(alt, aparams["boundary"])
	texts := 0
	for {
		_, err := ar.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		texts++
	}
	require.Equal(t, 2, texts, "text and HTML")
	files := 0
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		files++
		name, disposition = p.FileName(), p.Header.Get("Content-Disposition")
		require.Equal(t, "base64", p.Header.Get("Content-Transfer-Encoding"))
		content, err = io.ReadAll(base64.NewDecoder(base64.StdEncoding, p))
		require.NoError(t, err)
	}
	require.Equal(t, 1, files)
	return name, disposition, content
}

// The invoice goes out over SMTP byte for byte, its Vietnamese name
// RFC 2231 encoded, on the first attempt and, identical, on the retry
// after an ambiguous send, then on an operator's resend.
func TestAttachmentOverSMTPFirstAttemptRetryAndResend(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Data, smtptest.Hang())
	id := b.withInvoice(t, "42")
	cfg := testConfig()
	cfg.SendTimeout = 300 * time.Millisecond
	b.start(t, cfg, sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 2)
	msgs := b.srv.Messages()
	require.Len(t, msgs, 2, "the ambiguous send and its retry")
	require.Equal(t, msgs[0].Data, msgs[1].Data, "the retry sends identical bytes")
	name, disp, content := smtpAttachment(t, msgs[1].Data)
	require.Equal(t, invoiceName, name)
	require.Contains(t, disp, `filename*=utf-8''H%C3%B3a%20%C4%91%C6%A1n%20s%E1%BB%91%2042.pdf`, "RFC 2231")
	require.Equal(t, sha(invoicePDF), sha(content))

	newKey, err := b.sc.Store.Resend(context.Background(), key("42"), "example.com", "ns")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND status = 'sent'`, newKey) == 1
	}, 15*time.Second, 10*time.Millisecond)
	msgs = b.srv.Messages()
	require.Len(t, msgs, 3)
	_, _, content = smtpAttachment(t, msgs[2].Data)
	require.Equal(t, sha(invoicePDF), sha(content), "the resend carries the stored bytes")
}

// With the SMTP relay down the mail fails over to Resend with the same
// bytes in its attachments field.
func TestAttachmentOnFailoverToResend(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	stand, fallback := resendAPI(t)
	id := b.withInvoice(t, "7")
	b.start(t, failoverConfig(), sender.Deps{Provider: deadSMTP(t), Fallback: fallback})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	sent := stand.Sent()
	require.Len(t, sent, 1)
	require.Len(t, sent[0].Attachments, 1)
	a := sent[0].Attachments[0]
	require.Equal(t, invoiceName, a.Filename)
	require.Equal(t, "application/pdf", a.ContentType)
	require.Equal(t, sha(invoicePDF), sha(a.Content))
}

// An optional file that cannot be had is left out: the mail goes with
// the rest, and its EmailSent names what it went without.
func TestOptionalAttachmentOmittedAndReported(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.withFiles(t, "9", true)
	b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	msgs := b.srv.Messages()
	require.Len(t, msgs, 1)
	_, _, content := smtpAttachment(t, msgs[0].Data)
	require.Equal(t, sha(invoicePDF), sha(content))
	body := b.sc.QueryStrings(t, `SELECT payload::text FROM outbox WHERE event_type = 'EmailSent'`)
	require.Len(t, body, 1)
	require.Empty(t, api.ValidateFeedback("EmailSent", []byte(body[0])))
	var ev struct {
		Data struct {
			Omitted []string `json:"omitted_attachments"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body[0]), &ev))
	require.Equal(t, []string{"Điều khoản.pdf"}, ev.Data.Omitted)
}
