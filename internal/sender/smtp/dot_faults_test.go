package smtp

// Tests of dotWriter against hostile content and broken connections: the
// bytes on the wire for message texts where dot-stuffing matters, through
// the real Provider and session, compared with what textproto's DotWriter
// writes for the same go-mail message; the decoded message against the
// input; writers that fail at every byte; and the outcome class of a
// connection that breaks or hangs mid-data.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// hostile are message texts where the dot-stuffing rules matter.
var hostile = map[string]string{
	"dot":               ".",
	"dotdot":            "..",
	"dot line":          ".\n",
	"lone dot inside":   "a\n.\nb\n",
	"crlf dot crlf":     "before\r\n.\r\nafter\r\n",
	"starts crlf dot":   "\r\n.\r\n",
	"bare cr":           "a\rb\r.c\r",
	"cr cr lf":          "a\r\r\n.b\r\r\n",
	"bare lf dots":      "\n\n.\n..\n...\n",
	"long line":         strings.Repeat("x", 10000) + "\n",
	"long dots":         strings.Repeat(".", 10000),
	"long dot lines":    strings.Repeat(".\n", 3000),
	"non-ascii":         "Cảm ơn quý khách.\n.Đơn hàng\n",
	"empty":             "",
	"no newline at end": "no newline at end",
	"ends in cr":        "ends in cr\r",
	"nul and 8bit":      "\x00.\xff\n.\x80\r\n",
	"soft break dot":    strings.Repeat("a", 75) + ".....\n", // QP soft break puts a dot at a line start
}

func hostileMessage(key, text string) *sender.Message {
	return &sender.Message{
		From: "Cửa hàng <orders@example.com>", To: "b@example.com", ToName: "Nguyễn Văn B",
		Subject: ". " + text[:min(len(text), 200)], Text: text, HTML: "<p>\n" + text + "\n</p>",
		MessageID: mailtype.MessageID(key, "example.com"), DedupeKey: key,
		IdempotencyKey: mailtype.IdempotencyKey("", key), Date: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
}

// reference is what textproto's dot writer writes for m (go-mail's WriteTo
// in its own writes), and the undotted message.
func reference(t *testing.T, m *sender.Message) (wire, plain []byte) {
	t.Helper()
	msg, err := buildMsg(m, "")
	require.NoError(t, err)
	var p bytes.Buffer
	_, err = msg.WriteTo(&p)
	require.NoError(t, err)
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	dw := textproto.NewWriter(bw).DotWriter()
	msg, err = buildMsg(m, "")
	require.NoError(t, err)
	_, err = msg.WriteTo(dw)
	require.NoError(t, err)
	require.NoError(t, dw.Close())
	return out.Bytes(), p.Bytes()
}

// rawServer is an SMTP server that keeps the exact bytes of the data.
type rawServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	host string
	port int
	// cutAfter > 0: read that many data bytes, then reset the connection.
	// stallAfter > 0: read that many data bytes, then read nothing more.
	// hangAfterDot: take the data and never reply.
	cutAfter, stallAfter int
	hangAfterDot         bool

	quit chan struct{}

	mu    sync.Mutex
	data  [][]byte // per transaction, raw data incl. the final ".\r\n"
	dots  int      // data ends seen
	bytes int      // data bytes read
}

func newRawServer(t *testing.T, configure func(*rawServer)) *rawServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{ln: ln, quit: make(chan struct{})}
	if configure != nil {
		configure(s)
	}
	a := ln.Addr().(*net.TCPAddr)
	s.host, s.port = a.IP.String(), a.Port
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.session(c)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); close(s.quit); s.wg.Wait() })
	return s
}

func (s *rawServer) session(c net.Conn) {
	r := bufio.NewReaderSize(c, 1<<16)
	w := func(l string) { _, _ = io.WriteString(c, l+"\r\n") }
	w("220 raw ready")
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(l))
		switch {
		case strings.HasPrefix(cmd, "EHLO"):
			w("250-raw")
			w("250-PIPELINING")
			w("250 8BITMIME")
		case strings.HasPrefix(cmd, "MAIL"), strings.HasPrefix(cmd, "RCPT"), cmd == "RSET", cmd == "NOOP":
			w("250 ok")
		case cmd == "DATA":
			w("354 go ahead")
			var got []byte
			for {
				if s.stallAfter > 0 && len(got) >= s.stallAfter {
					<-s.quit // reads nothing more until the test ends
					return
				}
				if s.cutAfter > 0 && len(got) >= s.cutAfter {
					_ = c.(*net.TCPConn).SetLinger(0)
					return
				}
				b, err := r.ReadByte()
				if err != nil {
					return
				}
				got = append(got, b)
				s.mu.Lock()
				s.bytes++
				s.mu.Unlock()
				if bytes.HasSuffix(got, []byte("\r\n.\r\n")) || string(got) == ".\r\n" {
					break
				}
			}
			s.mu.Lock()
			s.data = append(s.data, got)
			s.dots++
			s.mu.Unlock()
			if s.hangAfterDot {
				_, _ = io.Copy(io.Discard, r)
				return
			}
			w("250 2.0.0 queued as RAW1")
		case cmd == "QUIT":
			w("221 bye")
			return
		default:
			w("502 what")
		}
	}
}

func (s *rawServer) provider(t *testing.T) *Provider {
	p, err := New(Config{Host: s.host, Port: s.port, TLS: TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	return p
}

// TestHostileContentOnTheWireIsTextprotos: every hostile text goes out as
// exactly the bytes textproto's DotWriter writes for the same message.
func TestHostileContentOnTheWireIsTextprotos(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, nil)
	s := srv.provider(t).NewSession()
	defer s.Close()
	var names []string
	for name := range hostile {
		names = append(names, name)
	}
	for i, name := range names {
		m := hostileMessage("k:"+name, hostile[name])
		_, err := s.Send(context.Background(), m)
		require.NoError(t, err, name)
		want, _ := reference(t, m)
		srv.mu.Lock()
		got := srv.data[i]
		srv.mu.Unlock()
		require.Equal(t, string(want), string(got), "%s: wire bytes differ from textproto's", name)
	}
}

// TestHostileContentDecodesToTheInput: through go-smtp's reader the
// server gets go-mail's message unchanged, and its parts decode to the
// input (line breaks as CRLF, as quoted-printable makes them).
func TestHostileContentDecodesToTheInput(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	p, err := New(Config{Host: srv.Host, Port: srv.Port, TLS: TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	s := p.NewSession()
	defer s.Close()
	var names []string
	for name := range hostile {
		names = append(names, name)
	}
	for _, name := range names {
		_, err := s.Send(context.Background(), hostileMessage("k:"+name, hostile[name]))
		require.NoError(t, err, name)
	}
	msgs := srv.Messages()
	require.Len(t, msgs, len(names))
	for i, name := range names {
		m := hostileMessage("k:"+name, hostile[name])
		_, plain := reference(t, m)
		require.Equal(t, string(plain), string(msgs[i].Data), "%s: the server got another message", name)
		parsed, err := mail.ReadMessage(bytes.NewReader(msgs[i].Data))
		require.NoError(t, err, name)
		_, params, err := mime.ParseMediaType(parsed.Header.Get("Content-Type"))
		require.NoError(t, err, name)
		mr := multipart.NewReader(parsed.Body, params["boundary"])
		part, err := mr.NextRawPart()
		require.NoError(t, err, name)
		text, err := io.ReadAll(quotedprintable.NewReader(part))
		require.NoError(t, err, name)
		require.Equal(t, qpLines(hostile[name]), string(text), "%s: text part", name)
	}
}

// qpLines is text as quoted-printable carries it: every line break (LF,
// CR, CRLF) as CRLF.
func qpLines(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// failAfter accepts the first limit bytes, then fails every write.
type failAfter struct {
	limit int
	got   []byte
}

var errBroken = errors.New("broken pipe")

func (f *failAfter) Write(p []byte) (int, error) {
	room := f.limit - len(f.got)
	if room >= len(p) {
		f.got = append(f.got, p...)
		return len(p), nil
	}
	if room < 0 {
		room = 0
	}
	f.got = append(f.got, p[:room]...)
	return room, errBroken
}

// TestDotWriterFailingAtEveryByte: whatever byte the connection breaks
// at, the error reaches the caller (Write or Close), n stays within b, and
// what got through never holds the end of data.
func TestDotWriterFailingAtEveryByte(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 9)) // a fixed seed: the same inputs every run
	for range 200 {
		_, chunks := randomWrites(rng, 1+rng.IntN(300))
		full := oursDot(t, chunks)
		size := 1 + rng.IntN(64)
		for limit := 0; limit < len(full); limit++ {
			f := &failAfter{limit: limit}
			w := newDotWriter(bufio.NewWriterSize(f, size))
			var werr error
			for _, c := range chunks {
				n, err := w.Write(c)
				require.True(t, n >= 0 && n <= len(c), "n %d of %d", n, len(c))
				if err != nil {
					werr = err
					break
				}
			}
			cerr := w.Close()
			require.True(t, werr != nil || cerr != nil, "failure at byte %d of %q lost", limit, full)
			require.True(t, bytes.HasPrefix(full, f.got), "a prefix got through")
			require.False(t, bytes.HasSuffix(f.got, []byte("\r\n.\r\n")), "the end of data got through despite the failure")
		}
	}
}

// TestDotWriterCountOnError: n of a failed Write counts at most the bytes
// of b handed to the buffer (dot.go's doc), compared to what actually
// reached the connection plus what the buffer held.
func TestDotWriterCountOnError(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		strings.Repeat("a", 40),        // one run, no newline
		strings.Repeat("a", 40) + "\n", // run and LF
		strings.Repeat("a", 40) + "\r", // run up to a CR
	} {
		f := &failAfter{limit: 0}
		w := newDotWriter(bufio.NewWriterSize(f, 16))
		n, err := w.Write([]byte(in))
		require.Error(t, err)
		assert.LessOrEqual(t, n, 16, "input %q: n %d, but at most 16 bytes (the buffer) were handed over", in, n)
	}
}

// TestDotWriterBigInputsSmallBuffers: inputs past bufio's buffer (its
// direct-write path) and a wider alphabet, in random writes, match
// textproto.
func TestDotWriterBigInputsSmallBuffers(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 13)) // a fixed seed: the same inputs every run
	alphabet := []byte(".\r\nab\x00\xff ")
	for range 100 {
		in := make([]byte, rng.IntN(20000))
		for i := range in {
			// long runs without line breaks now and then
			if rng.IntN(50) == 0 {
				in[i] = alphabet[rng.IntN(3)]
			} else {
				in[i] = alphabet[3+rng.IntN(len(alphabet)-3)]
			}
		}
		var chunks [][]byte
		for rest := in; len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 9000))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		for _, size := range []int{16, 4096} {
			var a, b bytes.Buffer
			tw := textproto.NewWriter(bufio.NewWriterSize(&a, size)).DotWriter()
			ow := newDotWriter(bufio.NewWriterSize(&b, size))
			for _, c := range chunks {
				_, err := tw.Write(c)
				require.NoError(t, err)
				n, err := ow.Write(c)
				require.NoError(t, err)
				require.Equal(t, len(c), n)
			}
			require.NoError(t, tw.Close())
			require.NoError(t, ow.Close())
			require.True(t, bytes.Equal(a.Bytes(), b.Bytes()), "size %d: output differs", size)
		}
	}
}

// bigMessage is larger than the loopback socket buffers, so that a server
// that stops reading or resets makes the client's write fail.
func bigMessage(key string) *sender.Message {
	m := hostileMessage(key, strings.Repeat(".line starting with a dot\n", 1<<20)) // ~26 MB
	m.HTML = ""
	return m
}

// TestConnectionResetMidDataIsTransient: the server resets the connection
// after 64 KB of a large message: the write fails before the final dot,
// the server has nothing, and the failure is transient.
func TestConnectionResetMidDataIsTransient(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(s *rawServer) { s.cutAfter = 64 << 10 })
	s := srv.provider(t).NewSession()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Send(ctx, bigMessage("k:reset"))
	require.Error(t, err)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Zero(t, srv.dots)
}

// TestServerStallingMidDataIsTransient: the server stops reading after
// 64 KB; the deadline cuts the write before the final dot: transient.
func TestServerStallingMidDataIsTransient(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(s *rawServer) { s.stallAfter = 64 << 10 })
	s := srv.provider(t).NewSession()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := s.Send(ctx, bigMessage("k:stall"))
	require.Error(t, err)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
	require.Equal(t, mailtype.ReasonTimeout, mailtype.ReasonOf(err), "%v", err)
	require.NoError(t, s.Close())
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Zero(t, srv.dots)
}

// TestHangAfterWholeDataIsAmbiguous: data and dot written, no reply.
func TestHangAfterWholeDataIsAmbiguous(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(s *rawServer) { s.hangAfterDot = true })
	s := srv.provider(t).NewSession()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	m := hostileMessage("k:hang", "a\r\n.\r\nb")
	_, err := s.Send(ctx, m)
	require.Equal(t, mailtype.Ambiguous, mailtype.ClassOf(err), "%v", err)
	want, _ := reference(t, m)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Equal(t, 1, srv.dots)
	require.Equal(t, string(want), string(srv.data[0]))
}
