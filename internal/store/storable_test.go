package store_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Check must agree with PostgreSQL: a payload it accepts, jsonb accepts;
// one it refuses, jsonb refuses. Both sides are asked here.
func TestCheckAgreesWithJSONB(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	cases := []struct {
		payload string
		ok      bool
	}{
		{`{"a":"x","b":[1,2,{"c":null,"d":true}]}`, true},
		{`{"a":"\u00e9\n\"\\","\u00e9":1}`, true},
		{`{"a":"\ud83d\ude00"}`, true},
		{`{"a":"\\u0000"}`, true},
		{`{"a":1e131071,"b":-9.5e131071,"c":-0.001e131074}`, true},
		{`{"a":1e-16383,"b":12345e-16383,"c":1.5e-16382}`, true},
		{`{"a":0e1073741822,"b":0,"c":-0.0}`, true},
		{`{"a":"\u0000"}`, false},
		{`{"\u0000":1}`, false},
		{`{"a":"\ud83d"}`, false},
		{`{"a":"\ude00"}`, false},
		{`{"a":"\ud83d\ud83d\ude00"}`, false},
		{`{"a":"\ud83dx"}`, false},
		{`{"a":"\ud83d\n"}`, false},
		{`{"a":"\ud83d\u0041"}`, false},
		{`{"a":1e131072}`, false},
		{`{"a":10e131071}`, false},
		{`{"a":0.001e131075}`, false},
		{`{"a":1e-16384}`, false},
		{`{"a":0.0e-99999}`, false},
		{`{"a":1000e-16386}`, false},
		{`{"a":0e1073741823}`, false},
		{`{"a":1e99999999999999999999}`, false},
		{"{\"a\":\"\xff\"}", false},
	}
	for _, c := range cases {
		m := confirm("1")
		m.Mail.Payload = []byte(c.payload)
		err := m.Check()
		_, pgErr := sc.Store.ExecForTest(testCtx(t), `SELECT $1::text::jsonb`, c.payload)
		require.Equal(t, c.ok, pgErr == nil, "PostgreSQL on %s: %v", c.payload, pgErr)
		require.Equal(t, c.ok, err == nil, "Check on %s: %v", c.payload, err)
		if err != nil {
			require.Equal(t, mailtype.Permanent, mailtype.ClassOf(err))
			require.Equal(t, mailtype.ReasonInvalidField, mailtype.ReasonOf(err))
		}
	}
}

func TestCheckRefusesWhatTextCannotHold(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for _, v := range []string{"a\x00b", "a\xffb"} {
		_, pgErr := sc.Store.ExecForTest(testCtx(t), `SELECT $1::text`, v)
		require.Error(t, pgErr, "PostgreSQL refuses %q", v)
	}
	cases := map[string]func(*store.IngestItem){
		"NUL in subject":          func(it *store.IngestItem) { it.Mail.Subject = "a\x00b" },
		"invalid UTF-8 in body":   func(it *store.IngestItem) { it.Mail.BodyHTML = "<p>\xff</p>" },
		"NUL in a cancel's id":    func(it *store.IngestItem) { *it = cancelOf("a\x00b") },
		"event_id not a UUID":     func(it *store.IngestItem) { it.Mail.EventID = "42" },
		"cancel id not a UUID":    func(it *store.IngestItem) { *it = cancelOf("1"); it.Cancel.EventID = "x" },
		"key too long to index":   func(it *store.IngestItem) { it.Mail.DedupeKey = strings.Repeat("k", 2001) },
		"order too long to key":   func(it *store.IngestItem) { *it = cancelOf(strings.Repeat("1", 1990)) },
		"neither mail nor cancel": func(it *store.IngestItem) { *it = store.IngestItem{} },
	}
	for name, change := range cases {
		it := confirm("1")
		change(&it)
		err := it.Check()
		require.Error(t, err, name)
		require.Equal(t, mailtype.Permanent, mailtype.ClassOf(err), name)
		require.Equal(t, mailtype.ReasonInvalidField, mailtype.ReasonOf(err), name)
	}
	require.NoError(t, confirm("1").Check())
	require.NoError(t, cancelOf("1").Check())
	require.NoError(t, modeConfirm("1").Check())
}
