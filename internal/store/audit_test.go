package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestAuditRecordAndList(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	in := []store.AuditEntry{
		{Actor: "ann", Via: store.ViaCLI, Action: "resend", Target: "order-confirmed:42", DedupeKey: "order-confirmed:42",
			Reason: "customer asked", Result: store.AuditDone, Detail: "created order-confirmed:42:resend:1"},
		{Actor: "bob", Via: store.ViaConsole, Action: "suppression-add", Target: "ann@example.com",
			Reason: "", Result: store.AuditRefused, Detail: "not an e-mail address"},
		{Actor: "ann", Via: store.ViaAPI, Action: "reconcile", Target: "order-confirmed:43", DedupeKey: "order-confirmed:43",
			Reason: "provider log", Result: store.AuditFailed, Detail: "database unreachable"},
	}
	var got []store.AuditEntry
	for _, e := range in {
		rec, err := st.RecordAudit(ctx(t), e)
		require.NoError(t, err)
		require.NotZero(t, rec.ID)
		require.WithinDuration(t, time.Now(), rec.At, time.Minute)
		e.ID, e.At = rec.ID, rec.At
		require.Equal(t, e, rec)
		got = append(got, rec)
	}

	all, err := st.ListAudit(ctx(t), store.AuditQuery{Limit: 10})
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i := range all {
		require.Equal(t, got[2-i].ID, all[i].ID, "newest first")
		require.True(t, got[2-i].At.Equal(all[i].At))
	}
	require.Equal(t, got[1].Target, all[1].Target)

	for name, c := range map[string]struct {
		q    store.AuditQuery
		want []int64
	}{
		"by mail":         {store.AuditQuery{DedupeKey: "order-confirmed:42", Limit: 10}, []int64{got[0].ID}},
		"by actor":        {store.AuditQuery{Actor: "ann", Limit: 10}, []int64{got[2].ID, got[0].ID}},
		"by action":       {store.AuditQuery{Action: "suppression-add", Limit: 10}, []int64{got[1].ID}},
		"by target":       {store.AuditQuery{Target: "ann@example.com", Limit: 10}, []int64{got[1].ID}},
		"actor and limit": {store.AuditQuery{Actor: "ann", Limit: 1}, []int64{got[2].ID}},
		"since":           {store.AuditQuery{Since: time.Now().Add(time.Hour), Limit: 10}, nil},
		"nothing":         {store.AuditQuery{Actor: "carol", Limit: 10}, nil},
	} {
		list, err := st.ListAudit(ctx(t), c.q)
		require.NoError(t, err, name)
		var ids []int64
		for _, e := range list {
			ids = append(ids, e.ID)
		}
		require.Equal(t, c.want, ids, name)
	}
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM audit_log`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM audit_log WHERE dedupe_key IS NULL`), "no mail: NULL, not ''")
}

func TestAuditRefusesWhatTheLogCannotHold(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ok := store.AuditEntry{Actor: "ann", Via: store.ViaCLI, Action: "resend", Target: "k", Result: store.AuditDone}
	for name, mut := range map[string]func(*store.AuditEntry){
		"no actor":   func(e *store.AuditEntry) { e.Actor = "" },
		"no action":  func(e *store.AuditEntry) { e.Action = "" },
		"bad via":    func(e *store.AuditEntry) { e.Via = "smoke-signal" },
		"bad result": func(e *store.AuditEntry) { e.Result = "maybe" },
	} {
		e := ok
		mut(&e)
		_, err := sc.Store.RecordAudit(ctx(t), e)
		require.ErrorIs(t, err, store.ErrInvalidAudit, name)
	}
	for _, limit := range []int{0, -1, store.MaxAuditPage + 1} {
		_, err := sc.Store.ListAudit(ctx(t), store.AuditQuery{Limit: limit})
		require.ErrorIs(t, err, store.ErrBadQuery, "limit %d", limit)
	}
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM audit_log`))

	// An operator's bad input is recorded, made storable.
	e := ok
	e.Target = "bad\xffkey\x00" + strings.Repeat("é", store.MaxAuditText)
	rec, err := sc.Store.RecordAudit(ctx(t), e)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rec.Target, "bad\uFFFDkeyé"), rec.Target[:20])
	require.LessOrEqual(t, len(rec.Target), store.MaxAuditText)
	require.Equal(t, []string{rec.Target}, sc.QueryStrings(t, `SELECT target FROM audit_log`))
}
