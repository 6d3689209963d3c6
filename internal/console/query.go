package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// maxField bounds one input field, in bytes: more is refused (400).
const maxField = 1024

// defaultPageSize is a search page's size when none is asked for.
const defaultPageSize = 50

// searchFields are the parameters of a search, in the order of the form.
var searchFields = []string{"order_id", "recipient", "dedupe_key", "event_id", "provider_message_id",
	"template", "provider", "status", "since", "until", "sort", "page", "per_page"}

// queryOf parses the request's query string: a malformed one (a bad
// percent escape, a semicolon) is refused naming the problem, rather
// than its filters silently dropped.
func queryOf(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, bad("the query string is malformed (" + err.Error() + "): percent-encode each value and separate parameters with &")
	}
	return v, nil
}

// onlyParams refuses a parameter of v not in known.
func onlyParams(v url.Values, known ...string) error {
	for k := range v {
		if !slices.Contains(known, k) {
			return bad(fmt.Sprintf("unknown parameter %q (known: %s)", k, strings.Join(known, ", ")))
		}
	}
	return nil
}

// field returns the trimmed value of name, refusing one given more than
// once, too long or not UTF-8.
func field(v url.Values, name string) (string, error) {
	if n := len(v[name]); n > 1 {
		return "", bad(fmt.Sprintf("%s: given %d times: give it once", name, n))
	}
	s := v.Get(name)
	if len(s) > maxField {
		return "", bad(fmt.Sprintf("%s: longer than %d bytes", name, maxField))
	}
	if !utf8.ValidString(s) {
		return "", bad(name + ": not valid UTF-8")
	}
	return strings.TrimSpace(s), nil
}

// parseSearch reads a store.MailQuery from v (a query string or a form):
// an unknown parameter, a bad status, time or page is an error naming it.
// The recipient and the dedupe key go through the operator input rules.
func parseSearch(v url.Values) (store.MailQuery, int, error) {
	for k := range v {
		if !slices.Contains(searchFields, k) && k != "csrf" {
			return store.MailQuery{}, 0, bad(fmt.Sprintf("unknown search parameter %q (known: %s)", k, strings.Join(searchFields, ", ")))
		}
	}
	var q store.MailQuery
	var err error
	get := func(name string, dst *string) {
		if err == nil {
			*dst, err = field(v, name)
		}
	}
	get("order_id", &q.OrderID)
	get("event_id", &q.EventID)
	get("provider_message_id", &q.ProviderMessageID)
	get("template", &q.Template)
	get("provider", &q.Provider)
	var recipient, key, since, until, sort, page, perPage string
	get("recipient", &recipient)
	get("dedupe_key", &key)
	get("since", &since)
	get("until", &until)
	get("sort", &sort)
	get("page", &page)
	get("per_page", &perPage)
	if err != nil {
		return q, 0, err
	}
	if recipient != "" {
		if q.Recipient, err = operator.Address(recipient); err != nil {
			return q, 0, bad("recipient: " + err.Error())
		}
	}
	if key != "" {
		if q.DedupeKey, err = operator.Key(key); err != nil {
			return q, 0, bad("dedupe_key: " + err.Error())
		}
	}
	if q.Statuses, err = parseStatuses(v["status"]); err != nil {
		return q, 0, err
	}
	if q.Since, err = parseTime("since", since); err != nil {
		return q, 0, err
	}
	if q.Until, err = parseTime("until", until); err != nil {
		return q, 0, err
	}
	switch sort {
	case "", "newest":
	case "oldest":
		q.Oldest = true
	default:
		return q, 0, bad(fmt.Sprintf("sort: newest or oldest, got %q", sort))
	}
	return pageOf(q, page, perPage)
}

func parseStatuses(vals []string) ([]mailtype.Status, error) {
	var out []mailtype.Status
	for _, s := range vals {
		if len(s) > maxField {
			return nil, bad(fmt.Sprintf("status: longer than %d bytes", maxField))
		}
		for _, one := range strings.Split(s, ",") {
			one = strings.TrimSpace(one)
			if one == "" {
				continue
			}
			if !slices.Contains(mailtype.Statuses, mailtype.Status(one)) {
				return nil, bad(fmt.Sprintf("status: %q is none of %v", one, mailtype.Statuses))
			}
			out = append(out, mailtype.Status(one))
		}
	}
	return out, nil
}

// timeLayouts are what a time field accepts: RFC 3339, a browser's
// datetime-local (read as UTC) and a date.
var timeLayouts = []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"}

func parseTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, bad(fmt.Sprintf("%s: %q is not a time (2026-05-01, 2026-05-01T14:30 in UTC, or RFC 3339)", name, s))
}

// pageOf sets the page (1-based) and its size on q; it returns the page.
func pageOf(q store.MailQuery, page, perPage string) (store.MailQuery, int, error) {
	n, size := 1, defaultPageSize
	var err error
	if page != "" {
		if n, err = strconv.Atoi(page); err != nil || n < 1 || n > 1_000_000 {
			return q, 0, bad(fmt.Sprintf("page: a number from 1, got %q", page))
		}
	}
	if perPage != "" {
		if size, err = strconv.Atoi(perPage); err != nil || size < 1 || size > store.MaxPageSize {
			return q, 0, bad(fmt.Sprintf("per_page: a number from 1 to %d, got %q", store.MaxPageSize, perPage))
		}
	}
	q.Limit, q.Offset = size, (n-1)*size
	return q, n, nil
}

// pathKey normalises a dedupe key taken from a URL path.
func pathKey(s string) (string, error) {
	if len(s) > maxField {
		return "", bad(fmt.Sprintf("key: longer than %d bytes", maxField))
	}
	k, err := operator.Key(s)
	if err != nil {
		return "", bad("key: " + err.Error())
	}
	return k, nil
}

// pathOrder is an order id taken from a URL path: trimmed, not empty.
func pathOrder(s string) (string, error) {
	id, err := field(url.Values{"order_id": {s}}, "order_id")
	if err == nil && id == "" {
		err = bad("order id: empty (only spaces): give the order's id")
	}
	return id, err
}

// reasonOf is an action's required reason.
func reasonOf(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", bad("reason: required: say why (it goes to the audit log)")
	case len(s) > maxField:
		return "", bad(fmt.Sprintf("reason: longer than %d bytes", maxField))
	case !utf8.ValidString(s):
		return "", bad("reason: not valid UTF-8")
	}
	return s, nil
}

// rangeText is "1–50 of 1,234" for a page of n mails.
func rangeText(p store.MailPage) string {
	total := group(p.Total)
	if p.TotalCapped {
		total = "more than " + total
	}
	if len(p.Mails) == 0 {
		return "0 of " + total
	}
	return fmt.Sprintf("%s–%s of %s", group(int64(p.Offset+1)), group(int64(p.Offset+len(p.Mails))), total)
}

// group writes n with thousands separators: 1,234,567.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
