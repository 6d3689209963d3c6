package bounce

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/emersion/go-imap"
	"github.com/emersion/go-imap/client"
	"github.com/emersion/go-message"

	"github.com/mailsvc/mailsvc/internal/lifecycle"
)

// PollerConfig configures the mailbox poller (bounces.imap_url,
// bounces.imap_interval): for setups where reports land in an existing
// mailbox instead of reaching the bounce listener.
type PollerConfig struct {
	// URL is imaps://USER:PASSWORD@HOST[:PORT]/MAILBOX (or imap:// on a
	// trusted network); the mailbox defaults to INBOX.
	URL string
	// Verp reads the VERP address a report was sent to.
	Verp Verp
	// Interval is the time between two polls; 0 means 1 minute.
	Interval time.Duration
	// TLS is the client TLS configuration for imaps://; nil: system roots.
	TLS *tls.Config
	// MaxMessageBytes bounds one report read; 0 means 1 MiB.
	MaxMessageBytes int64
	// Timeout bounds one poll's connection; 0 means 1 minute.
	Timeout time.Duration
	// AcceptDelivered records success reports, as Config's.
	AcceptDelivered bool
}

// Poller reads reports from a mailbox: each unseen message addressed to a
// valid VERP address (Delivered-To, X-Original-To, Envelope-To or To) is
// recorded on its mail like a report to the listener, then deleted; a
// message with no valid address is left in place, flagged \Seen and
// \Flagged, for a person. A long-lived component (internal/lifecycle).
type Poller struct {
	cfg  PollerConfig
	deps Deps
	life lifecycle.Life
}

// NewPoller builds the poller; the URL must be imap:// or imaps:// with a
// user and password.
func NewPoller(cfg PollerConfig, deps Deps) (*Poller, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultIMAPInterval
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if _, _, err := parseIMAPURL(cfg.URL); err != nil {
		return nil, err
	}
	if !cfg.Verp.On() {
		return nil, errors.New("bounce poller: bounces.address and bounces.secret are required")
	}
	return &Poller{cfg: cfg, deps: fillDeps(deps)}, nil
}

// Start polls in the background until Stop.
func (p *Poller) Start(ctx context.Context) error {
	return p.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		return func(stop, _ context.Context) error {
			t := time.NewTicker(p.cfg.Interval)
			defer t.Stop()
			for {
				if n, err := p.Poll(stop); err != nil && stop.Err() == nil {
					p.deps.Log.Warn("bounce mailbox poll failed; next poll as usual", "error", err)
				} else if n > 0 {
					p.deps.Log.Info("bounce mailbox polled", "reports", n)
				}
				select {
				case <-stop.Done():
					return nil
				case <-t.C:
				}
			}
		}, nil
	})
}

// Stop ends the poller within ctx.
func (p *Poller) Stop(ctx context.Context) error { return p.life.Stop(ctx) }

// Done is closed once the poller has stopped; Err then says why.
func (p *Poller) Done() <-chan struct{} { return p.life.Done() }

// Err is what ended the poller, nil while it runs.
func (p *Poller) Err() error { return p.life.Err() }

// Poll reads the mailbox once and returns how many reports it recorded.
func (p *Poller) Poll(ctx context.Context) (int, error) {
	u, mailbox, err := parseIMAPURL(p.cfg.URL)
	if err != nil {
		return 0, err
	}
	c, err := p.dial(u)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Logout() }()
	stop := context.AfterFunc(ctx, func() { _ = c.Terminate() })
	defer stop()
	pw, _ := u.User.Password()
	if err := c.Login(u.User.Username(), pw); err != nil {
		return 0, fmt.Errorf("imap login as %s: %w", u.User.Username(), err)
	}
	if _, err := c.Select(mailbox, false); err != nil {
		return 0, fmt.Errorf("imap select %s: %w", mailbox, err)
	}
	crit := imap.NewSearchCriteria()
	crit.WithoutFlags = []string{imap.SeenFlag, imap.DeletedFlag}
	uids, err := c.UidSearch(crit)
	if err != nil || len(uids) == 0 {
		return 0, err
	}
	return p.process(c, uids)
}

// process fetches uids one by one, records each report and deletes it,
// or flags it when it names no mail.
func (p *Poller) process(c *client.Client, uids []uint32) (int, error) {
	n := 0
	section := &imap.BodySectionName{Peek: true}
	for _, uid := range uids {
		set := new(imap.SeqSet)
		set.AddNum(uid)
		msgs := make(chan *imap.Message, 1)
		if err := c.UidFetch(set, []imap.FetchItem{section.FetchItem(), imap.FetchRFC822Size}, msgs); err != nil {
			return n, fmt.Errorf("imap fetch %d: %w", uid, err)
		}
		m := <-msgs
		var body []byte
		if m != nil && int64(m.Size) <= p.cfg.MaxMessageBytes {
			if r := m.GetBody(section); r != nil {
				body, _ = io.ReadAll(io.LimitReader(r, p.cfg.MaxMessageBytes))
			}
		}
		recorded, err := p.record(body)
		if err != nil {
			return n, err // left unseen: the next poll tries again
		}
		flags := []any{imap.SeenFlag, imap.FlaggedFlag}
		if recorded {
			flags, n = []any{imap.SeenFlag, imap.DeletedFlag}, n+1
		}
		if err := c.UidStore(set, imap.FormatFlagsOp(imap.AddFlags, true), flags, nil); err != nil {
			return n, fmt.Errorf("imap store %d: %w", uid, err)
		}
	}
	return n, c.Expunge(nil)
}

// record records body on the mail its VERP address names and reports
// whether it found one.
func (p *Poller) record(body []byte) (bool, error) {
	id, ok := p.mailOf(body)
	if !ok {
		p.deps.Metrics.Refused.WithLabelValues("bad_token").Inc()
		return false, nil
	}
	rep := ParseDSN(bytes.NewReader(body))
	if rep.Verdict == Delivered && !p.cfg.AcceptDelivered {
		p.deps.Metrics.Refused.WithLabelValues("not_asked").Inc()
		return true, nil // processed: dropped, mailsvc did not ask for it
	}
	s := &Server{cfg: Config{StoreTimeout: 10 * time.Second}, deps: p.deps}
	return true, s.record(id, rep)
}

// mailOf finds a valid VERP address among the headers a delivering MTA
// leaves (Delivered-To, X-Original-To, Envelope-To) and To.
func (p *Poller) mailOf(body []byte) (int64, bool) {
	e, err := message.Read(bytes.NewReader(body))
	if e == nil || (err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err)) {
		return 0, false
	}
	for _, key := range []string{"Delivered-To", "X-Original-To", "Envelope-To", "To"} {
		for _, v := range e.Header.Values(key) {
			for _, a := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '<' || r == '>' }) {
				if id, err := p.cfg.Verp.Parse(a); err == nil {
					return id, true
				}
			}
		}
	}
	return 0, false
}

func (p *Poller) dial(u *url.URL) (*client.Client, error) {
	addr := u.Host
	if u.Scheme == "imaps" {
		if u.Port() == "" {
			addr += ":993"
		}
		c, err := client.DialTLS(addr, p.cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("imap dial %s: %w", addr, err)
		}
		c.Timeout = p.cfg.Timeout
		return c, nil
	}
	if u.Port() == "" {
		addr += ":143"
	}
	c, err := client.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("imap dial %s: %w", addr, err)
	}
	c.Timeout = p.cfg.Timeout
	return c, nil
}

// parseIMAPURL checks raw and returns it with its mailbox (INBOX when
// the path is empty). The error never quotes the URL: it holds a password.
func parseIMAPURL(raw string) (*url.URL, string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "imap" && u.Scheme != "imaps") || u.Host == "" || u.User == nil {
		return nil, "", errors.New("bounces.imap_url: must be imaps://USER:PASSWORD@HOST[:PORT]/MAILBOX (or imap://)")
	}
	mailbox := strings.TrimPrefix(u.Path, "/")
	if mailbox == "" {
		mailbox = "INBOX"
	}
	return u, mailbox, nil
}
