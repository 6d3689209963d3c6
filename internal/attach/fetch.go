package attach

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// FetchConfig configures a Fetcher.
type FetchConfig struct {
	Policy Policy
	// Exempt are exact addresses and ports the dial guard lets through
	// even when Policy.AllowPrivate is false: a known internal object
	// store, or a test's own server. Nothing else on a private address is.
	Exempt []netip.AddrPort
	// TLS is the client TLS configuration (its RootCAs); nil means the
	// system roots.
	TLS *tls.Config
	// Timeout bounds one fetch, connection to last byte (attachments.timeout).
	Timeout time.Duration
	// MinRate, in bytes per second, over each ProgressWindow is the
	// trickle guard (attachments.min_rate, attachments.progress_window);
	// MinRate 0 turns it off.
	MinRate        int
	ProgressWindow time.Duration
}

// maxRedirects is the most redirects one fetch follows, each checked
// against the policy.
const maxRedirects = 5

// Fetcher fetches and verifies one attachment at a time per call; safe
// for concurrent use.
type Fetcher struct {
	cfg    FetchConfig
	client *http.Client
}

// NewFetcher returns a Fetcher whose connections go only where cfg.Policy
// lets them: no proxy from the environment, the dial guard on every
// resolved address, every redirect checked.
func NewFetcher(cfg FetchConfig) *Fetcher {
	f := &Fetcher{cfg: cfg}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: f.control}
	var tlsCfg *tls.Config
	if cfg.TLS != nil {
		tlsCfg = cfg.TLS.Clone()
	}
	tr := &http.Transport{
		Proxy: nil, DialContext: d.DialContext, TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: cfg.Timeout,
		MaxResponseHeaderBytes: 64 << 10, DisableCompression: true, MaxIdleConnsPerHost: 2,
		IdleConnTimeout: 30 * time.Second,
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
	return f
}

// Close drops the idle connections.
func (f *Fetcher) Close() { f.client.CloseIdleConnections() }

func (f *Fetcher) control(network, address string, c syscall.RawConn) error {
	if ap, err := netip.ParseAddrPort(address); err == nil {
		for _, e := range f.cfg.Exempt {
			if e.Addr().Unmap() == ap.Addr().Unmap() && e.Port() == ap.Port() {
				return nil
			}
		}
	}
	return f.cfg.Policy.control(network, address, c)
}

func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return refuse(ReasonRedirect, false, "more than %d redirects", maxRedirects)
	}
	if r := f.cfg.Policy.checkURL(req.URL); r != nil {
		r.Detail = "redirect to " + req.URL.Redacted() + ": " + r.Detail
		return r
	}
	return nil
}

var (
	errTimeout = errors.New("attachments.timeout ran out")
	errSlow    = errors.New("under attachments.min_rate")
)

// Fetch fetches ref and returns its bytes once they are verified: status
// 200, the announced content type (the response's, and the bytes' own
// for the types magic recognises), exactly ref.Size bytes, and ref.SHA256.
// A refusal says why and whether trying again may help.
func (f *Fetcher) Fetch(ctx context.Context, ref store.AttachmentRef) ([]byte, *Refusal) {
	u, err := url.Parse(ref.URL)
	if err != nil {
		return nil, refuse(ReasonScheme, false, "not a URL")
	}
	if r := f.cfg.Policy.checkURL(u); r != nil {
		return nil, r
	}
	ctx, cancel := context.WithTimeoutCause(ctx, f.cfg.Timeout, errTimeout)
	defer cancel()
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	var read atomic.Int64
	stop := f.watch(&read, abort)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, refuse(ReasonScheme, false, "not a URL")
	}
	req.Header.Set("Accept", ref.ContentType)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer resp.Body.Close()
	if r := checkResponse(resp, ref); r != nil {
		return nil, r
	}
	b, err := readAll(resp.Body, ref.Size, &read)
	if err == nil {
		err = ctx.Err() // a body cut short by the guard may end as if complete
	}
	if err != nil {
		return nil, classify(ctx, err)
	}
	if r := verify(b, ref); r != nil {
		return nil, r
	}
	return b, nil
}

// watch cancels the fetch with errSlow when a progress window passes with
// fewer than MinRate*ProgressWindow bytes read; stop ends it.
func (f *Fetcher) watch(read *atomic.Int64, abort context.CancelCauseFunc) (stop func()) {
	if f.cfg.MinRate <= 0 || f.cfg.ProgressWindow <= 0 {
		return func() {}
	}
	least := int64(float64(f.cfg.MinRate) * f.cfg.ProgressWindow.Seconds())
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(f.cfg.ProgressWindow)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := read.Load()
				if n-last < least {
					abort(errSlow)
					return
				}
				last = n
			}
		}
	}()
	return func() { close(done) }
}

func checkResponse(resp *http.Response, ref store.AttachmentRef) *Refusal {
	if resp.StatusCode != http.StatusOK {
		c := resp.StatusCode
		return refuse(ReasonStatus, c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout,
			"HTTP %d", c)
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || !strings.EqualFold(mt, ref.ContentType) {
		return refuse(ReasonContentType, false, "the server says %q, the event %q",
			mailtype.Sanitize(resp.Header.Get("Content-Type")), ref.ContentType)
	}
	if resp.ContentLength > ref.Size {
		return refuse(ReasonTooLarge, false, "Content-Length %d, announced %d bytes", resp.ContentLength, ref.Size)
	}
	return nil
}

// readAll reads at most size+1 bytes, counting them in read as they come.
func readAll(body io.Reader, size int64, read *atomic.Int64) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, size))
	chunk := make([]byte, 32<<10)
	for {
		n, err := body.Read(chunk)
		if n > 0 {
			buf.Write(chunk[:n])
			read.Add(int64(n))
			if int64(buf.Len()) > size {
				return nil, refuse(ReasonTooLarge, false, "more than the announced %d bytes", size)
			}
		}
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// magic are the first bytes of the types whose bytes can tell a lying
// Content-Type.
var magic = map[string][]string{
	"application/pdf": {"%PDF-"},
	"image/png":       {"\x89PNG\r\n\x1a\n"},
	"image/jpeg":      {"\xff\xd8\xff"},
	"image/gif":       {"GIF87a", "GIF89a"},
	"application/zip": {"PK\x03\x04"},
}

func verify(b []byte, ref store.AttachmentRef) *Refusal {
	if int64(len(b)) != ref.Size {
		return refuse(ReasonSize, false, "%d bytes, announced %d", len(b), ref.Size)
	}
	if prefixes, ok := magic[strings.ToLower(ref.ContentType)]; ok {
		match := false
		for _, p := range prefixes {
			match = match || bytes.HasPrefix(b, []byte(p))
		}
		if !match {
			return refuse(ReasonContentType, false, "the bytes are not %s", ref.ContentType)
		}
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != ref.SHA256 {
		return refuse(ReasonChecksum, false, "SHA-256 %s, announced %s", got, ref.SHA256)
	}
	return nil
}

// classify turns a transport or read error into a refusal.
func classify(ctx context.Context, err error) *Refusal {
	var r *Refusal
	switch cause := context.Cause(ctx); {
	case errors.As(err, &r):
		return r
	case errors.Is(err, errPrivateAddress):
		return refuse(ReasonAddress, false, "%s", mailtype.Sanitize(unwrapPrivate(err)))
	case errors.Is(cause, errSlow):
		return refuse(ReasonSlow, true, "%s", errSlow)
	case errors.Is(cause, errTimeout):
		return refuse(ReasonTimeout, true, "%s", errTimeout)
	default:
		return refuse(ReasonNetwork, true, "%s", mailtype.Sanitize(err.Error()))
	}
}

func unwrapPrivate(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.HasPrefix(e.Error(), errPrivateAddress.Error()) {
			return e.Error()
		}
	}
	return errPrivateAddress.Error()
}
