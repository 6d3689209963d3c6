package attach_test

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// invoice is a small PDF-looking file; its SHA-256 is what events announce.
var invoice = []byte("%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n")

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileServer is a real HTTPS server with its own CA, serving the test's
// routes.
type fileServer struct {
	srv  *httptest.Server
	ca   *tlstest.CA
	addr netip.AddrPort
}

func newFileServer(t *testing.T, mux *http.ServeMux) *fileServer {
	t.Helper()
	ca := tlstest.NewCA(t, "attach test CA")
	leaf := ca.Server(t, "127.0.0.1")
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	ap, err := netip.ParseAddrPort(u.Host)
	require.NoError(t, err)
	return &fileServer{srv: srv, ca: ca, addr: ap}
}

func (f *fileServer) url(path string) string { return f.srv.URL + path }

// config lets the fetch reach exactly the test server among private
// addresses: the guard itself stays on.
func (f *fileServer) config() attach.FetchConfig {
	return attach.FetchConfig{
		Policy: attach.Policy{AllowedHosts: []string{"127.0.0.1", "169.254.169.254", "*.example.com"}},
		Exempt: []netip.AddrPort{f.addr}, TLS: &tls.Config{RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12},
		Timeout: 5 * time.Second, MinRate: 1000, ProgressWindow: time.Second, // a loaded machine may take hundreds of ms for the TLS handshake alone
	}
}

func ref(u string, b []byte, ctype string) store.AttachmentRef {
	return store.AttachmentRef{FileName: "Hóa đơn.pdf", ContentType: ctype, URL: u, SHA256: sum(b), Size: int64(len(b))}
}

func serve(ctype string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(body)
	}
}

func routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/invoice.pdf", serve("application/pdf", invoice))
	mux.HandleFunc("/html-as-pdf", serve("application/pdf", []byte("<html>phish</html>")))
	mux.HandleFunc("/pdf-as-html", serve("text/html; charset=utf-8", invoice))
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/to-elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://10.0.0.1/invoice.pdf", http.StatusFound)
	})
	mux.HandleFunc("/to-invoice", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/invoice.pdf", http.StatusFound)
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	mux.HandleFunc("/busy", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.HandleFunc("/growing", func(w http.ResponseWriter, r *http.Request) {
		// No Content-Length: the file grows past its announced size while
		// it streams.
		w.Header().Set("Content-Type", "application/pdf")
		fl := w.(http.Flusher)
		for i := 0; i < 64 && r.Context().Err() == nil; i++ {
			_, _ = w.Write(invoice)
			fl.Flush()
		}
	})
	mux.HandleFunc("/trickle", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for _, c := range invoice {
			_, _ = w.Write([]byte{c})
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
	})
	return mux
}

func TestFetchVerifiesTheBytes(t *testing.T) {
	t.Parallel()
	fs := newFileServer(t, routes())
	f := attach.NewFetcher(fs.config())
	defer f.Close()
	for _, path := range []string{"/invoice.pdf", "/to-invoice"} {
		b, r := f.Fetch(t.Context(), ref(fs.url(path), invoice, "application/pdf"))
		require.Nil(t, r, "%s: %v", path, r)
		require.Equal(t, sum(invoice), sum(b), path)
	}
}

// The bad-input table: each is refused with its reason, and whether a
// retry may help.
func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	fs := newFileServer(t, routes())
	cfg := fs.config()
	f := attach.NewFetcher(cfg)
	defer f.Close()
	other := fmt.Sprintf("https://127.0.0.1:%d/invoice.pdf", fs.addr.Port()+1)
	wrong := ref(fs.url("/invoice.pdf"), invoice, "application/pdf")
	wrong.SHA256 = sum([]byte("another file"))
	longer := ref(fs.url("/invoice.pdf"), invoice, "application/pdf")
	longer.Size++
	shorter := ref(fs.url("/invoice.pdf"), invoice, "application/pdf")
	shorter.Size--
	cases := []struct {
		name      string
		ref       store.AttachmentRef
		reason    attach.Reason
		transient bool
		detail    string
	}{
		{"loopback address", ref(other, invoice, "application/pdf"), attach.ReasonAddress, false, "127.0.0.1 is not a public address"},
		{"cloud metadata address", ref("https://169.254.169.254/latest/meta-data/", invoice, "application/pdf"), attach.ReasonAddress, false, "169.254.169.254 is not a public address"},
		{"redirect to a private address", ref(fs.url("/to-metadata"), invoice, "application/pdf"), attach.ReasonAddress, false, "169.254.169.254"},
		{"redirect off the allow-list", ref(fs.url("/to-elsewhere"), invoice, "application/pdf"), attach.ReasonHost, false, "redirect to https://10.0.0.1/invoice.pdf"},
		{"http URL", ref(strings.Replace(fs.url("/invoice.pdf"), "https:", "http:", 1), invoice, "application/pdf"), attach.ReasonScheme, false, `"http" is not https`},
		{"host off the allow-list", ref("https://localhost/invoice.pdf", invoice, "application/pdf"), attach.ReasonHost, false, `"localhost" is not on attachments.allowed_hosts`},
		{"wrong checksum", wrong, attach.ReasonChecksum, false, "announced " + sum([]byte("another file"))},
		{"fewer bytes than announced", longer, attach.ReasonSize, false, "bytes, announced"},
		{"more bytes than announced", shorter, attach.ReasonTooLarge, false, "Content-Length"},
		{"growing past its size while streaming", ref(fs.url("/growing"), invoice, "application/pdf"), attach.ReasonTooLarge, false, "more than the announced"},
		{"trickling one byte a second", ref(fs.url("/trickle"), invoice, "application/pdf"), attach.ReasonSlow, true, "attachments.min_rate"},
		{"bytes that are not the announced type", ref(fs.url("/html-as-pdf"), []byte("<html>phish</html>"), "application/pdf"), attach.ReasonContentType, false, "the bytes are not application/pdf"},
		{"a server that says another type", ref(fs.url("/pdf-as-html"), invoice, "application/pdf"), attach.ReasonContentType, false, "text/html"},
		{"not found", ref(fs.url("/gone"), invoice, "application/pdf"), attach.ReasonStatus, false, "HTTP 404"},
		{"server busy", ref(fs.url("/busy"), invoice, "application/pdf"), attach.ReasonStatus, true, "HTTP 503"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			b, r := f.Fetch(t.Context(), c.ref)
			require.Nil(t, b)
			require.NotNil(t, r)
			require.Equal(t, c.reason, r.Reason, "%v", r)
			require.Equal(t, c.transient, r.Transient, "%v", r)
			require.Contains(t, r.Detail, c.detail)
			require.Less(t, time.Since(start), 3*time.Second, "a refusal takes well under the fetch timeout")
		})
	}
}

// With attachments.allow_private, private addresses are reachable (a
// store on the LAN); without, the guard holds even for an allowed host.
func TestAllowPrivate(t *testing.T) {
	t.Parallel()
	fs := newFileServer(t, routes())
	cfg := fs.config()
	cfg.Exempt = nil
	_, r := attach.NewFetcher(cfg).Fetch(t.Context(), ref(fs.url("/invoice.pdf"), invoice, "application/pdf"))
	require.NotNil(t, r)
	require.Equal(t, attach.ReasonAddress, r.Reason)
	cfg.Policy.AllowPrivate = true
	b, r := attach.NewFetcher(cfg).Fetch(t.Context(), ref(fs.url("/invoice.pdf"), invoice, "application/pdf"))
	require.Nil(t, r)
	require.Equal(t, invoice, b)
}
