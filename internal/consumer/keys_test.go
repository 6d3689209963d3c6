package consumer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestFindDuplicateKey: the scan finds two keys of one object that
// strings.EqualFold finds equal, at any depth, names the object's path,
// and lets everything else through, including the same key in sibling
// objects.
func TestFindDuplicateKey(t *testing.T) {
	t.Parallel()
	type dup struct{ path, key, first string }
	cases := []struct {
		name string
		json string
		want *dup // nil: no duplicate
	}{
		{"scalar", `42`, nil},
		{"empty object", `{}`, nil},
		{"empty array", `[]`, nil},
		{"distinct keys", `{"a":1,"b":2,"c":{"d":[1,2,{"e":null}]}}`, nil},
		{"a and A_ differ", `{"a":1,"A_":2}`, nil},
		{"a and a-space differ", `{"a":1,"a ":2}`, nil},
		{"ss and sharp s differ (no full case folding)", `{"ss":1,"ß":2}`, nil},
		{"dotted capital I is not i", `{"i":1,"İ":2}`, nil},
		{"dotless i is not I", `{"I":1,"ı":2}`, nil},
		{"same key in a child object", `{"email":"a","data":{"email":"b"}}`, nil},
		{"same key in sibling objects", `{"a":{"k":1,"v":1},"b":{"k":2,"v":2}}`, nil},
		{"same keys in every element of an array", `{"items":[{"sku":"1","name":"a"},{"sku":"2","name":"b"},{"SKU":"3","NAME":"c"}]}`, nil},
		{"same key at every depth", `{"k":{"k":{"k":[{"k":{"k":1}}]}}}`, nil},
		{"a key once closed and reopened around", `{"a":{"b":1},"b":{"a":1}}`, nil},
		{"a huge number is not parsed", `{"n":1e400,"m":-0.5e-400}`, nil},

		{"exact duplicate in the envelope", `{"event_id":"x","event_id":"y"}`, &dup{"body", "event_id", "event_id"}},
		{"case variant in the envelope", `{"event_type":"OrderShipped","Event_Type":"OrderConfirmed"}`, &dup{"body", "Event_Type", "event_type"}},
		{"exact duplicate email in data", `{"data":{"email":"a@example.com","email":"victim@example.com"}}`, &dup{"data", "email", "email"}},
		{"case variant email in data", `{"data":{"email":"a@example.com","EMAIL":"victim@example.com"}}`, &dup{"data", "EMAIL", "email"}},
		{"escaped key decodes equal", `{"email":1,"em\u0061il":2}`, &dup{"body", "email", "email"}},
		{"Kelvin sign and k", `{"k":1,"` + "\u212a" + `":2}`, &dup{"body", "\u212a", "k"}},
		{"Kelvin sign escaped and K", `{"sku":1,"\u212Aey":2,"KEY":3}`, &dup{"body", "KEY", "\u212aey"}},
		{"long s and S", `{"sku":1,"` + "\u017fKU" + `":2}`, &dup{"body", "\u017fKU", "sku"}},
		{"final sigma and sigma", `{"` + "\u03c3" + `":1,"` + "\u03c2" + `":2}`, &dup{"body", "\u03c2", "\u03c3"}},
		{"sharp s and capital sharp s", `{"` + "stra\u00dfe" + `":1,"` + "STRA\u1e9eE" + `":2}`, &dup{"body", "STRA\u1e9eE", "stra\u00dfe"}},
		{"invalid UTF-8 decodes to the same U+FFFD", "{\"\xff\":1,\"\xfe\":2}", &dup{"body", "\ufffd", "\ufffd"}},
		{"nested customer", `{"data":{"customer":{"email":"a","EMAIL":"b"}}}`, &dup{"data.customer", "EMAIL", "email"}},
		{"second item", `{"data":{"items":[{"sku":"1"},{"sku":"2","Sku":"3"}]}}`, &dup{"data.items[1]", "Sku", "sku"}},
		{"deep in an item", `{"data":{"items":[{"sku":"1","options":{"gift":{"card":[[1],{"to":"B","TO":"C"}]}}}]}}`,
			&dup{"data.items[0].options.gift.card[1]", "TO", "to"}},
		{"arrays of arrays", `{"a":[[[{"x":1}],[{"x":1,"X":2}]]]}`, &dup{"a[0][1][0]", "X", "x"}},
		{"after a closed child", `{"a":{"b":{"c":1}},"b":[1,{"a":2}],"A":3}`, &dup{"body", "A", "a"}},
		{"a top-level array", `[{"a":1},{"a":1,"a":2}]`, &dup{"[1]", "a", "a"}},
		{"the first in document order", `{"b":{"x":1,"x":2},"a":1,"a":2}`, &dup{"b", "x", "x"}},
		{"a key that is not a plain name is quoted", `{"data":{"x.y":{"k":1,"K":2}}}`, &dup{`data["x.y"]`, "K", "k"}},
		{"a duplicate before a syntax error", `{"a":1,"A":2,`, &dup{"body", "A", "a"}},
	}
	for _, c := range cases {
		got, err := consumer.FindDuplicateKeyForTest([]byte(c.json))
		require.NoError(t, err, c.name)
		if c.want == nil {
			require.Nil(t, got, c.name)
			continue
		}
		require.NotNil(t, got, c.name)
		require.Equal(t, *c.want, dup{got.Path, got.Key, got.First}, c.name)
		require.True(t, strings.EqualFold(got.Key, got.First), c.name)
		require.Contains(t, got.Error(), fmt.Sprintf("%s: key %q duplicates %q", c.want.path, c.want.key, c.want.first), c.name)
	}
}

// What the scan cannot read it reports as an error, never a duplicate:
// json.Unmarshal refuses all of it, and Decide says malformed_json. What
// follows the first value is not scanned.
func TestFindDuplicateKeyLeavesBrokenJSONToTheDecoder(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `{`, `{"a":1,`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"a":tru}`, `{1:2}`, `"abc`} {
		got, err := consumer.FindDuplicateKeyForTest([]byte(in))
		require.Error(t, err, in)
		require.Nil(t, got, in)
	}
	got, err := consumer.FindDuplicateKeyForTest([]byte(`{"a":1} {"a":1,"a":2}`))
	require.NoError(t, err)
	require.Nil(t, got)
}

// Deep nesting neither panics nor recurses: the scan follows what
// encoding/json follows (10000 levels) and gives up beyond, where
// json.Unmarshal refuses the body too.
func TestFindDuplicateKeyDeepNesting(t *testing.T) {
	t.Parallel()
	nest := func(depth int, inner string) []byte {
		return []byte(strings.Repeat(`{"a":[`, depth/2) + inner + strings.Repeat(`]}`, depth/2))
	}
	limit := consumer.MaxScanDepthForTest
	require.Equal(t, 10000, limit)

	atLimit := nest(limit-2, `{"x":1,"y":2}`) // limit-2 levels, then the innermost object: limit-1
	got, err := consumer.FindDuplicateKeyForTest(atLimit)
	require.NoError(t, err)
	require.Nil(t, got)
	require.NoError(t, json.Unmarshal(atLimit, new(any)))

	dupAtLimit := nest(limit-2, `{"x":[],"X":2}`)
	got, err = consumer.FindDuplicateKeyForTest(dupAtLimit)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, "X", got.Key)
	require.LessOrEqual(t, len(got.Path), 250, "a deep path is cut in the middle: %s", got.Path)
	require.True(t, strings.HasPrefix(got.Path, "a[0].a[0]"), got.Path)
	require.True(t, strings.HasSuffix(got.Path, "a[0].a[0]"), got.Path)
	require.Contains(t, got.Path, "…")

	for _, depth := range []int{limit + 2, 200000} {
		deep := nest(depth, `1`)
		got, err = consumer.FindDuplicateKeyForTest(deep)
		require.Error(t, err, depth)
		require.Nil(t, got)
		require.ErrorContains(t, json.Unmarshal(deep, new(any)), "exceeded max depth", "encoding/json gives up there too")
		arrays := []byte(strings.Repeat(`[`, depth))
		_, err = consumer.FindDuplicateKeyForTest(arrays)
		require.Error(t, err, depth)
	}

	d := newDecider(t)
	d.MaxBytes = 1 << 20
	for _, inner := range []string{`{"x":1,"x":2}`, `1`} {
		got := d.Decide(consumer.Message{Body: rawData(`"note":` + string(nest(limit+2, inner)))()})
		require.Equal(t, consumer.ActionDeadLetter, got.Action)
		require.Equal(t, mailtype.ReasonMalformedJSON, got.Err.Reason, "%v", got.Err)
	}
}

// foldKey agrees with strings.EqualFold: every rune of an orbit of
// unicode.SimpleFold folds to the same rune, one that EqualFold finds
// equal to it, and runes of different orbits fold apart.
func TestFoldKeyIsEqualFold(t *testing.T) {
	t.Parallel()
	orbitOf := map[string]rune{} // folded form -> a rune of a real orbit that folds to it
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // surrogates: not in a decoded key
		}
		s := string(r)
		f := consumer.FoldKeyForTest(s)
		if unicode.SimpleFold(r) == r {
			if f != s {
				t.Fatalf("%U has no other case, yet folds to %q", r, f)
			}
			continue
		}
		if !strings.EqualFold(s, f) {
			t.Fatalf("%U folds to %q, which EqualFold does not match", r, f)
		}
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if consumer.FoldKeyForTest(string(o)) != f {
				t.Fatalf("%U and %U are one orbit but fold apart", r, o)
			}
		}
		if other, ok := orbitOf[f]; ok && !strings.EqualFold(string(other), s) {
			t.Fatalf("%U and %U fold together, but EqualFold tells them apart", other, r)
		}
		orbitOf[f] = r
	}
	for _, k := range []string{"event_id", "EVENT_ID", "K", "x-1"} {
		require.Equal(t, strings.ToUpper(k), consumer.FoldKeyForTest(k), "ASCII folds to upper case")
	}
}

// dupBody is a valid OrderConfirmed of orderID as JSON with old, which
// must occur once, replaced by new.
func dupBody(t *testing.T, orderID, old, new string) []byte {
	t.Helper()
	b := string(body(t, confirmedNow(orderID)))
	require.Equal(t, 1, strings.Count(b, old), "%s in %s", old, b)
	return []byte(strings.Replace(b, old, new, 1))
}

// dupCase is an event with two keys that encoding/json takes for one.
type dupCase struct {
	name, old, new string
	// path and key are what the reason names.
	path, key, first string
}

var dupCases = []dupCase{
	{"exact duplicate email", `"email":"b@example.com"`, `"email":"b@example.com","email":"victim@example.com"`, "data", "email", "email"},
	{"case variant email", `"email":"b@example.com"`, `"email":"b@example.com","EMAIL":"victim@example.com"`, "data", "EMAIL", "email"},
	{"Kelvin sign in an item's key", `"sku":"SKU-1"`, `"sku":"SKU-1","\u212aind":"a","kind":"b"`, "data.items[0]", "kind", "\u212aind"},
	{"two event_ids", `"event_id":"`, `"event_id":"0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d","event_id":"`, "body", "event_id", "event_id"},
	{"event_type in another case", `"event_type":"OrderConfirmed"`, `"event_type":"OrderConfirmed","EVENT_TYPE":"OrderShipped"`, "body", "EVENT_TYPE", "event_type"},
	{"quantity twice in an item", `"quantity":2`, `"quantity":2,"Quantity":2000`, "data.items[0]", "Quantity", "quantity"},
	{"deep in an item", `"sku":"SKU-1"`, `"sku":"SKU-1","options":{"gift":{"cards":[{"to":"B"},{"to":"B","To":"C"}]}}`, "data.items[0].options.gift.cards[1]", "To", "to"},
}

// Decide dead-letters every case as malformed_json, naming the path and
// the key, before it reads even event_type. Plain json.Unmarshal would
// have taken the later key: the victim's address.
func TestDecideRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	for i, c := range dupCases {
		b := dupBody(t, fmt.Sprint(800+i), c.old, c.new)
		got := d.Decide(consumer.Message{Body: b})
		require.Equal(t, consumer.ActionDeadLetter, got.Action, c.name)
		require.Equal(t, mailtype.Permanent, got.Err.Class, c.name)
		require.Equal(t, mailtype.ReasonMalformedJSON, got.Err.Reason, c.name)
		require.Equal(t, "other", got.EventType, c.name)
		var de *consumer.DuplicateKeyError
		require.True(t, errors.As(got.Err, &de), c.name)
		require.Equal(t, []string{c.path, c.key, c.first}, []string{de.Path, de.Key, de.First}, c.name)
		require.Contains(t, mailtype.Sanitize(got.Err.Err.Error()), fmt.Sprintf("%s: key %q duplicates %q", c.path, c.key, c.first), c.name)
		require.NoError(t, consumer.DecodeForTest(b), "%s: without the scan it decodes", c.name)
	}
	var ev struct {
		Data struct{ Email string } `json:"data"`
	}
	require.NoError(t, json.Unmarshal(dupBody(t, "1", dupCases[1].old, dupCases[1].new), &ev))
	require.Equal(t, "victim@example.com", ev.Data.Email, "what Go alone would have sent to")
}

// Against the real broker and database: an event with a duplicate key,
// in data, in the envelope or deep in an item, is dead-lettered with
// reason malformed_json and a reason naming the key and its path, and
// writes nothing: no mail row, no outbox row.
func TestDuplicateKeysAreDeadLetteredWritingNothing(t *testing.T) {
	t.Parallel()
	for i, c := range dupCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.start(t)
			poison := dupBody(t, fmt.Sprint(810+i), c.old, c.new)
			b.publish(t, "order.confirmed", poison)
			r.waitConsumed(t, 1)
			require.Equal(t, 1, r.consumed(t, "other", "dead_lettered"))
			require.Equal(t, 1.0, r.metric(t, "mailsvc_events_dead_lettered_total", "reason", "malformed_json"))
			require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail`), "no mail row")
			require.Equal(t, 0, b.count(t, `SELECT count(*) FROM outbox`), "no outbox row")
			dead := b.deadLetters(t)
			require.Len(t, dead, 1, "exactly one dead letter")
			require.Equal(t, poison, dead[0].Body)
			require.Equal(t, "malformed_json", deadletter.Reason(dead[0].Headers))
			require.Equal(t, "permanent", dead[0].Headers[deadletter.HeaderErrorClass])
			require.Contains(t, dead[0].Headers[deadletter.HeaderError], fmt.Sprintf("%s: key %q duplicates %q", c.path, c.key, c.first))
			require.Zero(t, b.queueDepth(t, b.names.Queue))
		})
	}
}

// What encoding/json takes for valid JSON the scan reads to its end: the
// fallback of Decide that refuses a body whose keys could not be checked
// is never reached for a body json.Unmarshal accepts. Under `go test` the
// seeds run; `go test -fuzz FuzzFindDuplicateKey ./internal/consumer/`
// searches further.
func FuzzFindDuplicateKey(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, `{"a":1,"A":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"\u212a":1,"k":2}`,
		`[{"x":[1,2,{"y":null,"Y":true}]}]`, `{"a":1} {"a":1,"a":2}`, `1e400`, ` "s" `, `{"a":{"b":{"c":[[],{}]}}}`,
		`{"a":1,}`, `{`, `{"é":1,"É":2}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := consumer.FindDuplicateKeyForTest(b)
		if json.Valid(b) {
			require.NoError(t, err, "%q", b)
		}
		if got != nil {
			require.NoError(t, err)
			require.True(t, strings.EqualFold(got.Key, got.First), "%q: %q and %q", b, got.Key, got.First)
		}
	})
}
