package smtp

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// textprotoDot is what textproto's dot writer writes for chunks, the
// reference dotWriter must match byte for byte.
func textprotoDot(t testing.TB, chunks [][]byte) []byte {
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	w := textproto.NewWriter(bw).DotWriter()
	for _, c := range chunks {
		_, err := w.Write(c)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return out.Bytes()
}

// oursDot is what dotWriter writes for chunks.
func oursDot(t testing.TB, chunks [][]byte) []byte {
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	w := newDotWriter(bw)
	for _, c := range chunks {
		n, err := w.Write(c)
		require.NoError(t, err)
		require.Equal(t, len(c), n)
	}
	require.NoError(t, w.Close())
	return out.Bytes()
}

// TestDotWriterWritesWhatTextprotoWrites: for the inputs where the rules
// matter (leading dots, CRLF, bare LF and CR, runs of CRs, an empty
// message, data ending mid-line or after a CR) and for random inputs of
// those bytes split at random places into writes, dotWriter writes the
// same bytes as textproto's dot writer. The seed is logged; replay with
// MAILSVC_DOT_SEED.
func TestDotWriterWritesWhatTextprotoWrites(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", ".", "..", ".\r\n", "a\r\n.\r\n", "a\n.b\n", "a\r\r\n.", "\r", "\r\r", "\r.\n.",
		"line\r\n.hidden\r\n..two\r\n", "no newline at end", "ends in cr\r", "ends in lf\n",
		"\n\n.\n", "\r\n\r\n", "x\ry\r\nz",
	} {
		want := textprotoDot(t, [][]byte{[]byte(in)})
		require.Equal(t, string(want), string(oursDot(t, [][]byte{[]byte(in)})), "input %q", in)
		// One byte per write: the state must carry across calls.
		var bytesOf [][]byte
		for i := range len(in) {
			bytesOf = append(bytesOf, []byte{in[i]})
		}
		require.Equal(t, string(want), string(oursDot(t, bytesOf)), "input %q a byte at a time", in)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MAILSVC_DOT_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "MAILSVC_DOT_SEED")
	}
	t.Logf("seed %d (replay with MAILSVC_DOT_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 25))
	for range 2000 {
		in, chunks := randomWrites(rng, rng.IntN(200))
		require.Equal(t, string(textprotoDot(t, chunks)), string(oursDot(t, chunks)), "input %q in %d writes", in, len(chunks))
	}
}

// randomWrites returns n random bytes of those that matter to dot-stuffing
// (and two that do not), and the same bytes split at random places into
// writes.
func randomWrites(rng *rand.Rand, n int) (in []byte, chunks [][]byte) {
	const alphabet = ".\r\nab"
	in = make([]byte, n)
	for i := range in {
		in[i] = alphabet[rng.IntN(len(alphabet))]
	}
	for rest := in; len(rest) > 0; {
		k := 1 + rng.IntN(len(rest))
		chunks, rest = append(chunks, rest[:k]), rest[k:]
	}
	return in, chunks
}

// BenchmarkDotWriter writes a message of about 5.5 KB in CRLF lines (as
// go-mail writes one: quoted-printable, 76-byte lines) through
// textproto's dot writer (the raw baseline) and through dotWriter, in the
// writes go-mail makes; the ratio to read is dot/raw ns/op.
//
//	go test -run '^$' -bench DotWriter ./internal/sender/smtp/
func BenchmarkDotWriter(b *testing.B) {
	line := strings.Repeat("C=E1=BA=A3m =C6=A1n qu=C3=BD kh=C3=A1ch ", 2)[:73] + "=\r\n"
	var chunks [][]byte
	for range 75 {
		chunks = append(chunks, []byte(line))
	}
	chunks = append(chunks, []byte(".a line that starts with a dot\r\n"))
	size := 0
	for _, c := range chunks {
		size += len(c)
	}
	bw := bufio.NewWriter(io.Discard)
	for _, c := range []struct {
		name string
		open func() io.WriteCloser
	}{
		{"raw", func() io.WriteCloser { return textproto.NewWriter(bw).DotWriter() }},
		{"dot", func() io.WriteCloser { return newDotWriter(bw) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				w := c.open()
				for _, chunk := range chunks {
					if _, err := w.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
