package bounce

import (
	"bufio"
	"errors"
	"io"
	"mime"
	"regexp"
	"strings"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/textproto"
)

// Verdict is what a report says about its mail, for the one recipient
// mailsvc sent it to.
type Verdict string

// The verdicts of a report (docs/contract.md, "What the order service
// hears after EmailSent").
const (
	// Permanent: Action failed with a 5.x.x status: the address does not
	// work; the mail failed and the address is suppressed.
	Permanent Verdict = "permanent"
	// Transient: Action failed with a 4.x.x status (the relay gave up on a
	// temporary failure): the mail failed; the address may work later.
	Transient Verdict = "transient"
	// Undetermined: a report of its mail that says nothing readable (not
	// RFC 3464, or no status): the mail failed; nothing is suppressed.
	Undetermined Verdict = "undetermined"
	// Delayed: Action delayed: still trying; nothing changes but the
	// mail's delivery_delayed_at.
	Delayed Verdict = "delayed"
	// Delivered: Action delivered, relayed or expanded (a success
	// notification, NOTIFY=SUCCESS).
	Delivered Verdict = "delivered"
)

// Report is what one delivery status notification says (RFC 3464):
// the verdict, the recipient's status code (RFC 3463, e.g. "5.1.1") and
// the remote server's diagnostic, as given.
type Report struct {
	Verdict    Verdict
	Status     string
	Diagnostic string
	Action     string
}

// statusCode is an RFC 3463 status code at the start of a Status field.
var statusCode = regexp.MustCompile(`^([245])\.[0-9]{1,3}\.[0-9]{1,3}`)

// maxDSNFields bounds the delivery-status part read, in bytes: a report
// has a few fields per recipient.
const maxDSNFields = 64 << 10

// ParseDSN reads a report message (a multipart/report with a
// message/delivery-status or message/global-delivery-status part, RFC 3464
// and RFC 6533) with go-message and returns what it says. A message that
// is no such report, or whose status says nothing, is Undetermined: it
// came to a valid VERP address, so it is about that mail, but it proves
// nothing about the address. Among several recipient blocks the worst
// counts (failed before delayed before delivered), since mailsvc sends one
// recipient per mail and a relay may add an expanded one.
func ParseDSN(r io.Reader) Report {
	e, err := message.Read(r)
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		return Report{Verdict: Undetermined}
	}
	fields, err := statusPart(e)
	if err != nil {
		return Report{Verdict: Undetermined}
	}
	return judge(fields)
}

// statusPart returns the body of the delivery-status part of e.
func statusPart(e *message.Entity) ([]byte, error) {
	mr := e.MultipartReader()
	if mr == nil {
		return nil, errors.New("not a multipart message")
	}
	for {
		p, err := mr.NextPart()
		if err != nil {
			return nil, err
		}
		t, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if t == "message/delivery-status" || t == "message/global-delivery-status" {
			return io.ReadAll(io.LimitReader(p.Body, maxDSNFields))
		}
	}
}

// judge reads the per-recipient blocks of a delivery-status body (the
// blocks after the per-message one, separated by blank lines) and
// returns the worst verdict; Undetermined when there is none.
func judge(body []byte) Report {
	text := strings.ReplaceAll(string(body), "\r\n", "\n")
	blocks := strings.Split(strings.TrimSpace(text), "\n\n")
	best := Report{Verdict: Undetermined}
	for _, b := range blocks[min(1, len(blocks)):] {
		h, err := textproto.ReadHeader(bufio.NewReader(strings.NewReader(strings.TrimSpace(b) + "\n\n")))
		if err != nil || h.Get("Action") == "" {
			continue
		}
		if r := recipientReport(h); best.Action == "" || rank(r.Verdict) > rank(best.Verdict) {
			best = r
		}
	}
	return best
}

// recipientReport reads one per-recipient block.
func recipientReport(h textproto.Header) Report {
	r := Report{Action: strings.ToLower(strings.TrimSpace(h.Get("Action"))),
		Diagnostic: strings.TrimSpace(h.Get("Diagnostic-Code"))}
	if m := statusCode.FindStringSubmatch(strings.TrimSpace(h.Get("Status"))); m != nil {
		r.Status = m[0]
	}
	switch r.Action {
	case "failed":
		r.Verdict = Undetermined
		switch {
		case strings.HasPrefix(r.Status, "5."):
			r.Verdict = Permanent
		case strings.HasPrefix(r.Status, "4."):
			r.Verdict = Transient
		}
	case "delayed":
		r.Verdict = Delayed
	case "delivered", "relayed", "expanded":
		r.Verdict = Delivered
	default:
		r.Verdict = Undetermined
	}
	return r
}

// rank orders verdicts: a failure outweighs a delay, a delay a delivery.
func rank(v Verdict) int {
	switch v {
	case Permanent:
		return 5
	case Transient:
		return 4
	case Undetermined:
		return 3
	case Delayed:
		return 2
	case Delivered:
		return 1
	}
	return 0
}
