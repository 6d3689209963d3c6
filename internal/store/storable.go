package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// What PostgreSQL can store, checked in Go before a value reaches SQL, so
// that a value the database would refuse is refused as the event's fault
// (dead-lettered with reason invalid_field) and a refusal of a checked
// value is known to be the statement's fault, never the event's.
const (
	// maxIndexedLen bounds a value of an indexed text column: a btree
	// entry holds at most about 2.7 kB (SQLSTATE 54000 beyond).
	maxIndexedLen = 2000
	// numericMaxIntDigits and numericMaxScale are the range of numeric,
	// which jsonb stores every JSON number as (SQLSTATE 22003 beyond).
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	// numericMaxExponent is the largest exponent magnitude numeric's input
	// reads, INT_MAX/2 exclusive, even for a zero.
	numericMaxExponent = 1<<30 - 1
)

// Check reports whether PostgreSQL can store the item exactly as it is:
// event ids are UUIDs; every text value is valid UTF-8 without NUL (text
// cannot hold U+0000); keys fit a btree index; a mail's Payload is JSON that
// jsonb accepts (see checkJSONB). It returns nil or a permanent
// *mailtype.Error with ReasonInvalidField naming the field. Ingest expects
// checked items: the consumer checks each event when it parses it.
func (it IngestItem) Check() error {
	switch {
	case it.Mail != nil:
		return it.Mail.check()
	case it.Cancel != nil:
		return it.Cancel.check()
	}
	return invalidField("ingest item", "has neither a mail nor a cancel")
}

func (m *NewMail) check() error {
	if err := checkUUID("event_id", m.EventID); err != nil {
		return err
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"dedupe_key", m.DedupeKey, maxIndexedLen}, {"order_id", m.OrderID, maxIndexedLen},
		{"template", m.Template, 0}, {"locale", m.Locale, 0}, {"to_email", m.ToEmail, 0},
		{"subject", m.Subject, 0}, {"body_text", m.BodyText, 0}, {"body_html", m.BodyHTML, 0},
		{"message_id", m.MessageID, 0},
	} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if len(m.Payload) == 0 {
		return nil // stored as {}
	}
	return checkJSONB("payload", m.Payload)
}

func (c *Cancel) check() error {
	if err := checkUUID("event_id", c.EventID); err != nil {
		return err
	}
	if err := checkText("order_id", c.OrderID, maxIndexedLen-len(mailtype.ConfirmationKey(""))); err != nil {
		return err
	}
	return checkText("template", c.Template, 0)
}

func invalidField(field, format string, args ...any) *mailtype.Error {
	return mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidField, "%s %s", field, fmt.Sprintf(format, args...))
}

func checkUUID(field, v string) error {
	if uuid.Validate(v) != nil {
		return invalidField(field, "is not a UUID")
	}
	return nil
}

// checkText refuses what a text column cannot hold, and more than max
// bytes when max > 0.
func checkText(field, v string, max int) error {
	switch {
	case !utf8.ValidString(v):
		return invalidField(field, "is not valid UTF-8")
	case strings.IndexByte(v, 0) >= 0:
		return invalidField(field, "contains a NUL character, which PostgreSQL text cannot hold")
	case max > 0 && len(v) > max:
		return invalidField(field, "is %d bytes, more than the %d an index entry holds", len(v), max)
	}
	return nil
}

// checkJSONB refuses JSON that jsonb does not accept although it is valid
// JSON: invalid UTF-8, a \u0000 escape (jsonb text cannot hold U+0000), a
// \u escape of a UTF-16 surrogate that is not a high one followed by a low
// one, and a number outside numeric's range (at most 131072 digits before
// the decimal point and 16383 after it).
func checkJSONB(field string, raw []byte) error {
	if !utf8.Valid(raw) || !json.Valid(raw) {
		return invalidField(field, "is not valid JSON in UTF-8")
	}
	for i := 0; i < len(raw); {
		var n int
		var err error
		switch c := raw[i]; {
		case c == '"':
			n, err = checkJSONString(raw[i:])
		case c == '-' || c >= '0' && c <= '9':
			n = numberLen(raw[i:])
			err = checkNumber(raw[i : i+n])
		default:
			n = 1
		}
		if err != nil {
			return invalidField(field, "%v", err)
		}
		i += n
	}
	return nil
}

// checkJSONString checks the string literal s starts with and returns its
// length. It checks \u escapes as PostgreSQL's JSON lexer does.
func checkJSONString(s []byte) (int, error) {
	high := false // the previous character was a high surrogate escape
	for j := 1; j < len(s); {
		switch s[j] {
		case '"':
			if high {
				return 0, fmt.Errorf("has a high surrogate escape not followed by a low one")
			}
			return j + 1, nil
		case '\\':
			if j+1 < len(s) && s[j+1] == 'u' && j+6 <= len(s) {
				cp, err := strconv.ParseUint(string(s[j+2:j+6]), 16, 16)
				if err != nil {
					return 0, fmt.Errorf("has a bad \\u escape")
				}
				if high, err = nextEscape(high, rune(cp)); err != nil {
					return 0, err
				}
				j += 6
				continue
			}
			j += 2
		default:
			j++
		}
		if high {
			return 0, fmt.Errorf("has a high surrogate escape not followed by a low one")
		}
	}
	return 0, fmt.Errorf("has an unterminated string")
}

// nextEscape checks one \u escape cp after a high surrogate escape (high)
// or not, and reports whether cp is a high surrogate.
func nextEscape(high bool, cp rune) (bool, error) {
	switch {
	case cp >= 0xD800 && cp <= 0xDBFF:
		if high {
			return false, fmt.Errorf("has a high surrogate escape not followed by a low one")
		}
		return true, nil
	case cp >= 0xDC00 && cp <= 0xDFFF:
		if !high {
			return false, fmt.Errorf("has a low surrogate escape without a high one before it")
		}
		return false, nil
	case high:
		return false, fmt.Errorf("has a high surrogate escape not followed by a low one")
	case cp == 0:
		return false, fmt.Errorf("has a \\u0000 escape, which jsonb cannot hold")
	}
	return false, nil
}

// numberLen is the length of the JSON number s starts with.
func numberLen(s []byte) int {
	n := 0
	for n < len(s) && bytes.IndexByte([]byte("+-.0123456789eE"), s[n]) >= 0 {
		n++
	}
	return n
}

// checkNumber refuses a JSON number that numeric cannot hold.
func checkNumber(num []byte) error {
	s := strings.TrimPrefix(string(num), "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if hasExp {
		var err error
		exp, err = strconv.ParseInt(strings.TrimPrefix(expText, "+"), 10, 64)
		if err != nil || exp >= numericMaxExponent || exp <= -numericMaxExponent {
			return fmt.Errorf("has a number whose exponent is out of numeric's range")
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if int64(len(frac))-exp > numericMaxScale {
		return fmt.Errorf("has a number with more than %d digits after the decimal point", numericMaxScale)
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first >= 0 && int64(len(intPart)-first)+exp > numericMaxIntDigits {
		return fmt.Errorf("has a number with more than %d digits before the decimal point", numericMaxIntDigits)
	}
	return nil
}
