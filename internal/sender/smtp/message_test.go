package smtp

// Tests of the MIME boundary: an order whose item names hold "--" and a
// boundary where a quoted-printable soft line break puts it at a line start
// (the old boundary, from the dedupe key alone, and a new one computed for
// other content) still has its two parts, built and through a real SMTP
// server; the same mail gives the same bytes on every build; a candidate
// that occurs in the content is passed over; and quoted-printable never
// makes a boundary that is not in the raw content.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// orderMail is an order confirmation listing items the way the
// order_confirmed template does ("- " and the name at a line start), in
// both parts. Line breaks are CRLF, as quoted-printable decodes them, so a
// decoded part compares with the input byte for byte.
func orderMail(key string, items ...string) *sender.Message {
	var list strings.Builder
	for _, it := range items {
		list.WriteString("\r\n- " + it + "\r\n  1 × ₫65,000 = ₫65,000\r\n")
	}
	return &sender.Message{
		From: "Cửa hàng <orders@example.com>", To: "b@example.com", ToName: "Nguyễn Văn B",
		Subject:   "Your order #42 is confirmed",
		Text:      "Hello,\r\n\r\nORDER SUMMARY\r\n" + list.String() + "\r\nTotal: ₫65,000\r\n",
		HTML:      "<p>Hello,</p>\r\n<pre>" + list.String() + "</pre>\r\n",
		MessageID: mailtype.MessageID(key, "example.com"), DedupeKey: key,
		IdempotencyKey: mailtype.IdempotencyKey("", key), Date: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
}

// injected is an item name that puts "--" and b at the start of an encoded
// line: after "- " and 73 characters quoted-printable breaks the line.
func injected(b string) string {
	return strings.Repeat("x", 73) + "--" + b
}

// oldBoundary is the boundary buildMsg used to take, from the dedupe key
// alone: anyone who knows the key can compute it.
func oldBoundary(key string) string {
	sum := sha256.Sum256([]byte("boundary:" + key))
	return "mailsvc-" + hex.EncodeToString(sum[:12])
}

// written is the message go-mail writes for m; with a non-empty force, the
// message is written with that boundary instead of its own.
func written(t *testing.T, m *sender.Message, force string) []byte {
	t.Helper()
	msg, err := buildMsg(m, "")
	require.NoError(t, err)
	if force != "" {
		msg.SetBoundary(force)
	}
	var b bytes.Buffer
	_, err = msg.WriteTo(&b)
	require.NoError(t, err)
	return b.Bytes()
}

// mimePart is one part of a multipart message: its Content-Type and its
// decoded body.
type mimePart struct{ contentType, body string }

// parseParts reads raw's multipart body with mime/multipart, decoding each
// part's quoted-printable. It stops at the first error.
func parseParts(raw []byte) ([]mimePart, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	var parts []mimePart
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return parts, nil
		}
		if err != nil {
			return parts, err
		}
		body, err := io.ReadAll(quotedprintable.NewReader(p))
		if err != nil {
			return parts, err
		}
		parts = append(parts, mimePart{p.Header.Get("Content-Type"), string(body)})
	}
}

// requireTwoParts: raw is exactly m's text part and HTML part, decoded
// byte for byte.
func requireTwoParts(t *testing.T, m *sender.Message, raw []byte) {
	t.Helper()
	parts, err := parseParts(raw)
	require.NoError(t, err)
	require.Equal(t, []mimePart{
		{"text/plain; charset=UTF-8", m.Text},
		{"text/html; charset=UTF-8", m.HTML},
	}, parts)
}

// TestBoundaryInContentSplitsNothing: an order whose item names put the
// old boundary and a new one computed for other content at a line start
// keeps its two parts and its whole text, as built and as a real SMTP
// server receives it. With either of those boundaries forced, the same
// message loses its text after the item: the content is a working attack.
func TestBoundaryInContentSplitsNothing(t *testing.T) {
	t.Parallel()
	const key = "order-confirmed:42"
	old := oldBoundary(key)
	other := boundary(orderMail(key, "Áo thun"))
	m := orderMail(key, "Áo thun", injected(old), injected(other))

	b := boundary(m)
	require.NotEqual(t, old, b)
	require.NotEqual(t, other, b)
	require.NotContains(t, m.Text, b)
	require.NotContains(t, m.HTML, b)
	raw := written(t, m, "")
	require.Contains(t, string(raw), "\r\n--"+old+"\r\n", "the old boundary at a line start")
	require.Contains(t, string(raw), "\r\n--"+other+"\r\n", "the other boundary at a line start")
	requireTwoParts(t, m, raw)

	for _, forced := range []string{old, other} {
		parts, _ := parseParts(written(t, m, forced))
		require.NotEmpty(t, parts)
		require.NotEqual(t, m.Text, parts[0].body, "boundary %s: the text part is whole", forced)
		require.NotContains(t, parts[0].body, forced)
	}

	srv := smtptest.New(t, smtptest.Options{No8BITMIME: true})
	p, err := New(Config{Host: srv.Host, Port: srv.Port, TLS: TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	s := p.NewSession()
	defer s.Close()
	_, err = s.Send(context.Background(), m)
	require.NoError(t, err)
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, string(raw), string(msgs[0].Data))
	requireTwoParts(t, m, msgs[0].Data)
}

// TestMessageBytesAreTheSameOnEveryBuild: a mail rebuilt from a copy of
// its stored fields is written with the same bytes, boundary included,
// and the boundary moves with the key and with each part.
func TestMessageBytesAreTheSameOnEveryBuild(t *testing.T) {
	t.Parallel()
	const key = "order-confirmed:42"
	for _, m := range []*sender.Message{
		orderMail(key, "Áo thun"),
		orderMail(key, "Áo thun", injected(oldBoundary(key))),
		hostileMessage("k:soft break dot", hostile["soft break dot"]),
	} {
		again := *m
		first := written(t, m, "")
		require.Equal(t, string(first), string(written(t, &again, "")))
		require.Contains(t, string(first), "boundary="+boundary(m)+"\r\n")
	}

	base := orderMail(key, "Áo thun")
	for name, change := range map[string]func(m *sender.Message){
		"key":  func(m *sender.Message) { m.DedupeKey = "order-confirmed:43" },
		"text": func(m *sender.Message) { m.Text += "." },
		"html": func(m *sender.Message) { m.HTML += "." },
	} {
		m := *base
		change(&m)
		require.NotEqual(t, boundary(base), boundary(&m), "changed %s", name)
	}
}

// TestBoundaryPassesOverCandidatesInContent: boundary is sum's first
// candidate unless the text or the HTML holds it, then the next one free.
// boundary(m) cannot be handed content holding its own first candidate
// (the candidate is a hash of that content), so the content is given to
// freeBoundary beside the sum of the mail without it.
func TestBoundaryPassesOverCandidatesInContent(t *testing.T) {
	t.Parallel()
	m := orderMail("order-confirmed:42", "Áo thun")
	sum := contentSum(m.DedupeKey, m.Text, m.HTML)
	first, second, third := candidate(sum, 0), candidate(sum, 1), candidate(sum, 2)
	require.Equal(t, first, boundary(m))
	require.Regexp(t, regexp.MustCompile(`^mailsvc-[0-9a-f]{24}$`), first)
	require.Len(t, map[string]bool{first: true, second: true, third: true}, 3)

	require.Equal(t, first, freeBoundary(sum, m.Text, m.HTML))
	require.Equal(t, second, freeBoundary(sum, m.Text+injected(first), m.HTML))
	require.Equal(t, second, freeBoundary(sum, m.Text, m.HTML+first))
	require.Equal(t, third, freeBoundary(sum, m.Text+first, m.HTML+second))
}

// TestContentSumFieldsCannotShift: moving bytes from one field to the
// next changes the sum.
func TestContentSumFieldsCannotShift(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, contentSum("ab", "c", ""), contentSum("a", "bc", ""))
	require.NotEqual(t, contentSum("k", "ab", ""), contentSum("k", "a", "b"))
	require.NotEqual(t, contentSum("k", "", "x"), contentSum("k", "x", ""))
}

// TestQuotedPrintableAddsNoBoundary checks boundary's argument on random
// content made of a boundary, its pieces and what quoted-printable escapes
// or breaks lines at: whenever the encoded content holds the boundary, the
// raw content does.
func TestQuotedPrintableAddsNoBoundary(t *testing.T) {
	t.Parallel()
	const b = "mailsvc-0123456789abcdef3d20c0ff"
	pieces := []string{b, "--" + b, "=", "=3D", "3D", " ", "\t", "\r", "\n", "\r\n", "\xc3\xa1", "\xff", "M", "A"}
	rng := rand.New(rand.NewPCG(3, 5)) // a fixed seed: the same inputs every run
	inRaw := 0
	for range 5000 {
		var raw strings.Builder
		for range 1 + rng.IntN(12) {
			switch rng.IntN(3) {
			case 0:
				raw.WriteString(pieces[rng.IntN(len(pieces))])
			case 1:
				i, j := rng.IntN(len(b)), rng.IntN(len(b))
				raw.WriteString(b[min(i, j):max(i, j)])
			default:
				raw.WriteString(strings.Repeat("x", rng.IntN(80)))
			}
		}
		var enc bytes.Buffer
		w := quotedprintable.NewWriter(&enc)
		_, err := io.WriteString(w, raw.String())
		require.NoError(t, err)
		require.NoError(t, w.Close())
		if strings.Contains(enc.String(), b) {
			require.Contains(t, raw.String(), b)
			inRaw++
		}
	}
	require.Positive(t, inRaw, "no input had the boundary in its encoding")
}
