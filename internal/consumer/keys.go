package consumer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// maxScanDepth is the deepest nesting of objects and arrays the key scan
// follows: encoding/json's own limit, so that a body the scan gives up on
// is one json.Unmarshal refuses too ("exceeded max depth").
const maxScanDepth = 10000

// DuplicateKeyError is an object with two keys that encoding/json takes
// for the same field: equal, or equal but for letter case (Unicode simple
// case folding, strings.EqualFold). Go's decoder keeps the last of them and
// matches field names case-insensitively, while other parsers (a JSON
// Schema validator, PostgreSQL's jsonb, the producer's own) keep the first,
// the last, or both, so two parsers of one event could disagree on who
// receives its mail.
type DuplicateKeyError struct {
	// Path names the object: "body" for the event itself, else
	// "data", "data.items[1]", ...
	Path string
	// Key is the later key, First the earlier one it collides with.
	Key, First string
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("%s: key %s duplicates %s (no two keys of one object may be equal ignoring letter case)",
		e.Path, quoteClipped(e.Key), quoteClipped(e.First))
}

// errTooDeep stops a scan at maxScanDepth.
var errTooDeep = fmt.Errorf("nested deeper than %d", maxScanDepth)

// scanFrame is one open object or array of a key scan.
type scanFrame struct {
	object bool
	// keys maps the folded form of each key of the object seen so far to
	// the key as sent; reused from one object to the next at this depth.
	keys map[string]string
	// key is the object's current key, index the array's current element
	// (-1 before the first): the path to the frame above.
	key   string
	index int
	// wantKey: the object's next token is a key or its '}'.
	wantKey bool
}

// findDuplicateKey scans b, one JSON value, with a streaming tokenizer
// (jsontext, the tokenizer of Go's encoding/json/v2, told to accept what
// encoding/json accepts: repeated names and invalid UTF-8) and returns the
// first object that has two keys equal after Unicode simple case folding,
// in document order, at any depth. It returns (nil, err) when it could not
// scan the whole value (b is not JSON, or it nests deeper than
// maxScanDepth) and (nil, nil) when every object's keys are distinct. Only
// the first value of b is scanned: what follows it is json.Unmarshal's to
// refuse. The nesting is followed on an explicit stack, never by
// recursion. encoding/json's own tokenizer (Decoder.Token) took a quarter
// of Decide's time for this scan; jsontext reads the same tokens without
// an allocation for each.
func findDuplicateKey(b []byte) (*DuplicateKeyError, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	// stack[:depth] are the open objects and arrays, outermost first;
	// stack[depth:] are spare frames, kept for their maps. An event nests
	// 4 deep.
	stack := make([]scanFrame, 0, 8)
	depth := 0
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		kind := tok.Kind()
		if depth > 0 {
			top := &stack[depth-1]
			if top.object && top.wantKey {
				if kind == '}' {
					depth--
					if endValue(stack, depth) {
						return nil, nil
					}
					continue
				}
				key := tok.String() // the tokenizer gives a key here or fails
				folded := foldKey(key)
				if first, dup := top.keys[folded]; dup {
					return &DuplicateKeyError{Path: scanPath(stack[:depth-1]), Key: key, First: first}, nil
				}
				top.keys[folded] = key
				top.key, top.wantKey = key, false
				continue
			}
			if !top.object {
				if kind == ']' {
					depth--
					if endValue(stack, depth) {
						return nil, nil
					}
					continue
				}
				top.index++
			}
		}
		switch kind {
		case '{', '[':
			if depth == maxScanDepth {
				return nil, errTooDeep
			}
			if depth == len(stack) {
				stack = append(stack, scanFrame{})
			}
			f := &stack[depth]
			f.object, f.key, f.index, f.wantKey = kind == '{', "", -1, true
			if f.object {
				if f.keys == nil {
					f.keys = make(map[string]string, 8)
				} else {
					clear(f.keys)
				}
			}
			depth++
		default:
			if endValue(stack, depth) {
				return nil, nil
			}
		}
	}
}

// endValue records that a value ended with depth frames open: the object
// holding it waits for its next key. It reports whether that value was
// the whole document.
func endValue(stack []scanFrame, depth int) bool {
	if depth == 0 {
		return true
	}
	if top := &stack[depth-1]; top.object {
		top.wantKey = true
	}
	return false
}

// maxPathLen is the longest path a DuplicateKeyError names, in bytes; a
// longer one keeps its start and its end.
const maxPathLen = 200

// scanPath names the object below the frames (its ancestors, outermost
// first), the way the consumer names fields: "body" for the event itself,
// "data.items[1]". A key that is not a plain name is quoted: data["a.b"].
func scanPath(frames []scanFrame) string {
	if len(frames) == 0 {
		return "body"
	}
	var sb strings.Builder
	for i, f := range frames {
		switch {
		case !f.object:
			sb.WriteString("[" + strconv.Itoa(f.index) + "]")
		case plainName(f.key):
			if i > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(f.key)
		default:
			sb.WriteString("[" + quoteClipped(f.key) + "]")
		}
	}
	p := sb.String()
	if len(p) > maxPathLen {
		head, tail := maxPathLen/3, maxPathLen*2/3
		for !utf8.RuneStart(p[head]) {
			head--
		}
		cut := len(p) - tail
		for !utf8.RuneStart(p[cut]) {
			cut++
		}
		p = p[:head] + "…" + p[cut:]
	}
	return p
}

// plainName reports whether a key can stand in a path unquoted.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// quoteClipped quotes a key for a message, cut to 60 characters.
func quoteClipped(s string) string {
	if utf8.RuneCountInString(s) > 60 {
		s = string([]rune(s)[:59]) + "…"
	}
	return strconv.Quote(s)
}

// foldKey maps a key to the same string as every key strings.EqualFold
// finds equal to it: each rune becomes the smallest rune of its
// unicode.SimpleFold orbit (for ASCII, the upper-case letter), as
// encoding/json folds names when it matches fields. A key that is already
// its own folded form is returned as it is, without a copy.
func foldKey(s string) string {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || 'a' <= c && c <= 'z' {
			break
		}
	}
	if i == len(s) {
		return s
	}
	out := make([]byte, i, len(s))
	copy(out, s[:i])
	for _, r := range s[i:] {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			out = append(out, byte(r))
			continue
		}
		out = utf8.AppendRune(out, foldRune(r))
	}
	return string(out)
}

// foldRune is the smallest rune of r's simple case folding orbit.
func foldRune(r rune) rune {
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}
