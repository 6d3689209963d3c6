package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestFinishAuditSetsTheResultOfAStartedRow(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	started, err := st.RecordAudit(ctx(t), store.AuditEntry{Actor: "ann", Via: store.ViaCLI, Action: "resend",
		Target: "nope", DedupeKey: "nope", Reason: "asked", Result: store.AuditStarted})
	require.NoError(t, err)
	require.Equal(t, []string{"started"}, sc.QueryStrings(t, `SELECT result FROM audit_log`))

	done, err := st.FinishAudit(ctx(t), started.ID, store.AuditRefused, "no mail\x00 has \xffit")
	require.NoError(t, err)
	want := started
	want.Result, want.Detail, want.DedupeKey = "refused", "no mail has \uFFFDit", ""
	require.Equal(t, want.Detail, done.Detail)
	require.True(t, want.At.Equal(done.At))
	done.At = want.At
	require.Equal(t, want, done, "no mail has the key: the row appears on no timeline")

	_, err = st.FinishAudit(ctx(t), started.ID, store.AuditDone, "again")
	require.ErrorIs(t, err, store.ErrNotFound, "finished already")
	_, err = st.FinishAudit(ctx(t), started.ID+1, store.AuditDone, "")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.FinishAudit(ctx(t), started.ID, store.AuditStarted, "")
	require.ErrorIs(t, err, store.ErrInvalidAudit)
	require.Equal(t, []string{"refused no mail has \uFFFDit"}, sc.QueryStrings(t, `SELECT result || ' ' || detail FROM audit_log`))
}

func TestListAuditRefusesBadFilters(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for _, c := range []struct {
		q    store.AuditQuery
		want string
	}{
		{store.AuditQuery{Actor: "\xff", Limit: 1}, `list audit: invalid search: actor: not valid UTF-8: "\xff"`},
		{store.AuditQuery{Target: "a\x00b", Limit: 1}, `list audit: invalid search: target: contains a NUL byte: "a\x00b"`},
		{store.AuditQuery{DedupeKey: "k\xfe", Limit: 1}, `list audit: invalid search: dedupe_key: not valid UTF-8: "k\xfe"`},
		{store.AuditQuery{Action: "\x00", Limit: 1}, `list audit: invalid search: action: contains a NUL byte: "\x00"`},
		{store.AuditQuery{Action: "bogus", Limit: 1}, `list audit: invalid search: action: no action "bogus": one of ` +
			`resend, reconcile, provider-resume, suppression-add, suppression-remove, dlq-replay, dlq-skip, outbox-republish`},
	} {
		_, err := sc.Store.ListAudit(ctx(t), c.q)
		require.ErrorIs(t, err, store.ErrBadQuery)
		require.EqualError(t, err, c.want)
	}
	list, err := sc.Store.ListAudit(ctx(t), store.AuditQuery{Action: "dlq-skip", Limit: 1})
	require.NoError(t, err)
	require.Empty(t, list)
}
