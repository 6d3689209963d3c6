package sender_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/mail"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// hostileNames are stored customer names (raw payload values) and the
// display name the To header must carry: the one the templates greet with.
var hostileNames = []struct {
	name string
	raw  string
	want string
}{
	{"10000 characters", strings.Repeat("x", 10_000), strings.Repeat("x", templates.MaxNameRunes-1) + "…"},
	{"10000 characters with spaces", strings.Repeat("Nguyễn ", 10_000/7), strings.Repeat("Nguyễn ", 8) + "Nguyễn…"},
	{"trailing backslash", `Bob\`, `Bob\`},
	{"quotes", `Bob "the builder" O'Neil`, `Bob "the builder" O'Neil`},
	{"bidi override", "Evil\u202Egnp.exe", "Evilgnp.exe"},
	{"line break", "Bob\r\nBcc: x@example.com", ""},
	{"vietnamese", "Nguyễn Văn B", "Nguyễn Văn B"},
}

// insertNamed inserts a pending mail for orderID whose payload carries the
// raw customer name.
func (b *bundle) insertNamed(t *testing.T, orderID, name string) int64 {
	t.Helper()
	id, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: orderID, CustomerName: name})
	require.NoError(t, err)
	return id
}

func TestSMTPToHeaderCarriesTheCleanedName(t *testing.T) {
	t.Parallel()
	for _, c := range hostileNames {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			id := b.insertNamed(t, "42", c.raw)
			b.start(t, testConfig(), sender.Deps{})

			b.waitRow(t, id, mailtype.StatusSent, 1)
			msgs := b.srv.Messages()
			require.Len(t, msgs, 1)
			raw := msgs[0].Data
			for i, line := range bytes.Split(raw, []byte("\r\n")) {
				require.LessOrEqual(t, len(line), 998, "line %d is over the RFC 5322 limit", i)
			}
			require.NotContains(t, string(raw), "\u202E")
			require.NotContains(t, strings.ToUpper(string(raw)), "=E2=80=AE", "no encoded bidi override either")
			parsed, err := mail.ReadMessage(bytes.NewReader(raw))
			require.NoError(t, err)
			to, err := parsed.Header.AddressList("To")
			require.NoError(t, err)
			require.Len(t, to, 1)
			require.Equal(t, "customer@example.com", to[0].Address)
			require.Equal(t, c.want, to[0].Name)
			require.Empty(t, parsed.Header.Get("Bcc"))
		})
	}
}

func TestSMTPToHeaderEncodesAVietnameseName(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insertNamed(t, "42", "Nguye\u0302\u0303n Văn B") // decomposed "ễ" is NFC-composed
	b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	msgs := b.srv.Messages()
	require.Len(t, msgs, 1)
	parsed, err := mail.ReadMessage(bytes.NewReader(msgs[0].Data))
	require.NoError(t, err)
	header := parsed.Header.Get("To")
	require.True(t, strings.HasPrefix(strings.ToLower(header), "=?utf-8?q?"), "RFC 2047 encoded: %q", header)
	for _, r := range header {
		require.Less(t, r, rune(0x80), "the To header is 7-bit: %q", header)
	}
	name, err := new(mime.WordDecoder).DecodeHeader(strings.TrimSuffix(header, " <customer@example.com>"))
	require.NoError(t, err)
	require.Equal(t, "Nguyễn Văn B", name)
}

func TestResendToCarriesTheCleanedName(t *testing.T) {
	t.Parallel()
	for _, c := range hostileNames {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			api := resendtest.New(t, "re_test")
			prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
			require.NoError(t, err)
			id := b.insertNamed(t, "42", c.raw)
			b.start(t, testConfig(), sender.Deps{Provider: prov})

			b.waitRow(t, id, mailtype.StatusSent, 1)
			sent := api.Sent()
			require.Len(t, sent, 1)
			var body struct {
				To []string `json:"to"`
			}
			require.NoError(t, json.Unmarshal(sent[0].Payload, &body))
			require.Len(t, body.To, 1)
			to, err := mail.ParseAddress(body.To[0])
			require.NoError(t, err, "%q", body.To[0])
			require.Equal(t, "customer@example.com", to.Address)
			require.Equal(t, c.want, to.Name)
		})
	}
}
