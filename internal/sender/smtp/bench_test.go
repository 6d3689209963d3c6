package smtp_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// sessionMails is how many mails one op of BenchmarkSession sends, so that
// `make bench`'s -benchtime 1x still times many.
const sessionMails = 200

// BenchmarkSession: sessionMails mails per op on one warm connection to a discarding
// go-smtp server (which offers PIPELINING), mailsvc's session beside a
// raw go-mail client on its own connection, the same message of about
// 5 KB, directly and through a proxy that delays everything it forwards by 1 ms each way (a relay a few milliseconds away). The ratio to read is
// session/raw of the same link: the session pipelines the envelope (two
// round trips a mail where go-mail's transaction takes four).
func BenchmarkSession(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("raw/latency=%s", delay), func(b *testing.B) { benchRawSession(b, delay) })
		b.Run(fmt.Sprintf("session/latency=%s", delay), func(b *testing.B) { benchSession(b, delay) })
	}
}

// benchServer is a discarding server, behind a delaying proxy when delay
// is positive; it returns the host and port to dial.
func benchServer(b *testing.B, delay time.Duration) (*smtptest.Server, string, int) {
	srv := smtptest.New(b, smtptest.Options{Discard: true})
	if delay <= 0 {
		return srv, srv.Host, srv.Port
	}
	px := testproxy.New(b, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)))
	px.Latency(b, delay)
	host, port, _ := net.SplitHostPort(px.Addr)
	n, _ := strconv.Atoi(port)
	return srv, host, n
}

func benchMessage() *sender.Message {
	m := sendertest.Message("k:bench")
	m.Text = strings.Repeat("Cảm ơn quý khách đã mua hàng tại cửa hàng của chúng tôi.\n", 40)
	m.HTML = "<p>" + strings.Repeat("Cảm ơn quý khách đã mua hàng tại cửa hàng của chúng tôi.<br>\n", 40) + "</p>"
	return m
}

func benchSession(b *testing.B, delay time.Duration) {
	srv, host, port := benchServer(b, delay)
	p, err := smtp.New(smtp.Config{Host: host, Port: port, TLS: smtp.TLSNone, HELO: "bench.local"})
	if err != nil {
		b.Fatal(err)
	}
	s := p.NewSession()
	defer s.Close()
	m := benchMessage()
	ctx := context.Background()
	for b.Loop() {
		for range sessionMails {
			if _, err := s.Send(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	report(b, srv)
}

// report checks that the server took every mail and reports the time per
// mail.
func report(b *testing.B, srv *smtptest.Server) {
	b.StopTimer()
	if got, want := srv.Count(), b.N*sessionMails; got != want {
		b.Fatalf("server took %d mails, want %d", got, want)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*sessionMails), "µs/mail")
}

func benchRawSession(b *testing.B, delay time.Duration) {
	srv, host, port := benchServer(b, delay)
	c, err := gomail.NewClient(host, gomail.WithPort(port), gomail.WithTLSPolicy(gomail.NoTLS),
		gomail.WithoutNoop(), gomail.WithoutRset(), gomail.WithHELO("bench.local"))
	if err != nil {
		b.Fatal(err)
	}
	if err := c.DialWithContext(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	m := benchMessage()
	for b.Loop() {
		for range sessionMails {
			rawSend(b, c, m)
		}
	}
	report(b, srv)
}

// rawSend is a plain go-mail send of m on c: MAIL, RCPT, DATA, each
// waiting for its reply.
func rawSend(b *testing.B, c *gomail.Client, m *sender.Message) {
	msg := gomail.NewMsg()
	if err := msg.From(m.From); err != nil {
		b.Fatal(err)
	}
	if err := msg.To(m.To); err != nil {
		b.Fatal(err)
	}
	msg.Subject(m.Subject)
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	if err := c.Send(msg); err != nil {
		b.Fatal(err)
	}
}
