package api

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// patternPhrases says in words what each pattern of the schemas requires,
// so that a reason reads "data.currency: "usd" is not an upper-case ISO 4217
// code" rather than quoting a regular expression. TestEveryPatternHasAPhrase
// keeps it complete.
var patternPhrases = map[string]string{
	uuidPattern:              "is not a UUID (8-4-4-4-12 hexadecimal digits)",
	timestampPattern:         "is not an RFC 3339 date-time with an offset, such as 2026-09-18T08:00:00Z",
	identifierPattern:        "is empty, or has a control character or white space at either end",
	`^order-confirmed:`:      "does not start with order-confirmed:",
	customerNamePattern:      "contains a line break or a NUL",
	localePattern:            "has a control character or white space at either end",
	`^[^\x00\r\n]*$`:         "contains CR, LF or NUL",
	visiblePattern:           "has no visible character",
	`^[0-9]+(\.[0-9]+)?$`:    "is not a decimal amount (digits with an optional '.' fraction)",
	`^[A-Z]{3}$`:             "is not an upper-case ISO 4217 code",
	`^[^\x00-\x1f\x7f]*$`:    "contains a control character",
	enhancedCodePattern:      "is not an RFC 3463 status code class.subject.detail",
	addressLikePattern:       "looks like an e-mail address",
	reservedOrderIDPattern:   "ends in :r and digits or contains :resend:",
	`^[A-Za-z0-9_.-]{1,64}$`: "is not 1 to 64 letters, digits, '_', '.' or '-'",
	fileNamePattern:          "is blank, or contains a path separator (/ or \\), a control character or a bidirectional or invisible formatting character",
	mediaTypePattern:         "is not a media type type/subtype without parameters",
	`^https://`:              "is not an https URL",
	`^[0-9a-f]{64}$`:         "is not 64 lower-case hexadecimal digits (a SHA-256)",
}

// notPhrases says in words what each "not" of the schemas refuses, by the
// location of the schema holding it.
var notPhrases = map[string]string{
	"mail-event.json#/$defs/data/properties/error":                                            "contains an e-mail address",
	"common.json#/$defs/orderId":                                                              "ends in :r and digits or contains :resend:, which name a revision and a resend in dedupe keys: it would share keys with another order",
	"order-confirmed.json#/properties/data/properties/attachments/items/properties/file_name": "is . or .., a path rather than a file name",
}

// The longer patterns of the schemas, as the JSON files hold them after
// decoding.
const (
	uuidPattern         = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	timestampPattern    = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9](\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	idEnd               = `\x00-\x20\x7f\x85\xa0` + "\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
	identifierPattern   = `^[^` + idEnd + `](?:[^\x00-\x1f\x7f]*[^` + idEnd + `])?$`
	localePattern       = `^(?:|[^` + idEnd + `](?:[^\x00-\x1f\x7f]*[^` + idEnd + `])?)$`
	customerNamePattern = `^[^\x00\r\n\x0b\x0c\x85` + "\u2028\u2029" + `]*$`
	visiblePattern      = `[^\x00-\x20\x7f-\xa0` + "\u1680\u2000-\u200a\u2028-\u202f\u205f\u2066-\u2069\u3000" + `]`
	enhancedCodePattern = `^[245]\.[0-9]{1,3}\.[0-9]{1,3}$`
	addressLikePattern  = `[^\s<>"'(),;:]+@[^\s<>"'(),;:]+`
	// reservedOrderIDPattern: order ids that would share dedupe keys with
	// a revision or a resend of another order.
	reservedOrderIDPattern = `:(r[0-9]+$|resend:)`
	// fileNamePattern: an attachment's file name, no path separator and no
	// control character (C0, DEL, C1, the Unicode line and paragraph
	// separators).
	fileNamePattern = `^[^` + fileNameNeg + `]*[^ ` + "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000" + fileNameNeg + `][^` + fileNameNeg + `]*$`
	// fileNameNeg is what a file name must not contain: C0, DEL, C1, the
	// path separators, the line and paragraph separators, and the
	// bidirectional and invisible formatting characters.
	fileNameNeg      = `\x00-\x1f\x7f-\x9f/\\` + "\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
	mediaTypePattern = `^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}$`
)

// reasons flattens a validation error into one line per failed keyword,
// "<field>: <what is wrong>", sorted and without duplicates. Only the
// leaves of the error tree say something; the inner nodes ("allOf failed",
// "$ref failed") only group them.
func reasons(ve *jsonschema.ValidationError, instance any) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		out = append(out, leaf(e, fieldPath(e.InstanceLocation, instance))...)
	}
	walk(ve)
	slices.Sort(out)
	return slices.Compact(out)
}

// leaf is the reasons of one failed keyword at field.
func leaf(e *jsonschema.ValidationError, field string) []string {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return each(field, k.Missing, "is required")
	case *kind.AdditionalProperties:
		return each(field, k.Properties, "is not allowed")
	case *kind.FalseSchema:
		return []string{field + ": is not allowed"}
	case *kind.Pattern:
		if phrase, ok := patternPhrases[k.Want]; ok {
			return []string{fmt.Sprintf("%s: %s %s", field, short(k.Got), phrase)}
		}
		return []string{fmt.Sprintf("%s: %s does not match %q", field, short(k.Got), k.Want)}
	case *kind.Not:
		if phrase, ok := notPhrases[keywordOf(e.SchemaURL)]; ok {
			return []string{field + ": " + phrase}
		}
		return []string{field + ": matches the schema it must not match at " + keywordOf(e.SchemaURL)}
	}
	return []string{field + ": " + e.ErrorKind.LocalizedString(printer)}
}

func each(field string, names []string, what string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = join(field, n) + ": " + what
	}
	return out
}

// fieldPath writes an instance location the way the consumer names fields:
// "data.items[0].quantity", "body" for the whole event.
func fieldPath(loc []string, instance any) string {
	p := ""
	v := instance
	for _, seg := range loc {
		switch x := v.(type) {
		case []any:
			p += "[" + seg + "]"
			var i int
			if _, err := fmt.Sscan(seg, &i); err == nil && i >= 0 && i < len(x) {
				v = x[i]
			} else {
				v = nil
			}
		case map[string]any:
			p = join(p, seg)
			v = x[seg]
		default:
			p = join(p, seg)
			v = nil
		}
	}
	if p == "" {
		return "body"
	}
	return p
}

func join(parent, name string) string {
	if parent == "" || parent == "body" {
		return name
	}
	return parent + "." + name
}

// short quotes a value for a reason, cut to 60 characters.
func short(s string) string {
	if utf8.RuneCountInString(s) > 60 {
		s = string([]rune(s)[:59]) + "…"
	}
	return fmt.Sprintf("%q", s)
}

// keywordOf is the schema location of a keyword, from the schema file on
// ("mail-event.json#/$defs/data/properties/error/not").
func keywordOf(schemaURL string) string {
	return strings.TrimPrefix(schemaURL, SchemaBase)
}
