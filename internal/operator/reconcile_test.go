package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestReadKeyLines(t *testing.T) {
	t.Parallel()
	keys, err := operator.ReadKeyLines(strings.NewReader("\uFEFForder-confirmed:0\n# from mail list\norder-confirmed:1\n\n  order-confirmed:2 \r\n" +
		"order-confirmed:1\u00A0\n#x\nbad\xffkey\norder-confirmed:3"))
	require.NoError(t, err)
	require.Len(t, keys, 6)
	require.ErrorIs(t, keys[4].Err, operator.ErrInvalidInput)
	keys[4].Err = nil
	require.Equal(t, []operator.KeyLine{{Line: 1, Key: "order-confirmed:0"}, {Line: 3, Key: "order-confirmed:1"}, {Line: 5, Key: "order-confirmed:2"},
		{Line: 6, Key: "order-confirmed:1"}, {Line: 8, Key: "bad\xffkey"}, {Line: 9, Key: "order-confirmed:3"}}, keys)
	_, err = operator.ReadKeyLines(iotest.ErrReader(errors.New("disk on fire")))
	require.ErrorContains(t, err, "disk on fire")
}

// fakeReconciler answers from a table of keys; a key not in it is not
// found, and "db-down" fails as an unreachable database.
type fakeReconciler struct {
	mails map[string]mailtype.Status
	calls []string
}

var errDown = mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, errors.New("connection refused"))

func (f *fakeReconciler) do(key string, delivered bool, dry bool) (store.ReconcileResult, error) {
	f.calls = append(f.calls, key)
	if key == "db-down" {
		return store.ReconcileResult{}, errDown
	}
	st, ok := f.mails[key]
	switch {
	case !ok:
		return store.ReconcileResult{}, store.ErrNotFound
	case st != mailtype.StatusUnknown:
		return store.ReconcileResult{}, &store.StateError{DedupeKey: key, Status: st, Action: "reconcile", Hint: "only unknown mails are reconciled"}
	}
	if !dry {
		f.mails[key] = mailtype.StatusSent
	}
	if delivered {
		return store.ReconcileResult{Status: mailtype.StatusSent, Feedback: mailtype.EmailSent}, nil
	}
	return store.ReconcileResult{Status: mailtype.StatusPending}, nil
}

func (f *fakeReconciler) Reconcile(_ context.Context, key string, delivered bool) (store.ReconcileResult, error) {
	return f.do(key, delivered, false)
}

func (f *fakeReconciler) ReconcileDryRun(_ context.Context, key string, delivered bool) (store.ReconcileResult, error) {
	return f.do(key, delivered, true)
}

func TestReconcileKeysGoesOnPastRefusalsAndStopsAtTheDatabase(t *testing.T) {
	t.Parallel()
	f := &fakeReconciler{mails: map[string]mailtype.Status{"a": mailtype.StatusUnknown, "b": mailtype.StatusSent, "d": mailtype.StatusUnknown}}
	var lines []string
	sum := operator.ReconcileKeys(context.Background(), f, []string{"a", "b", "c", "a", "db-down", "d"}, true, false,
		func(r operator.KeyResult) { lines = append(lines, operator.ReconcileLine(r, false)) })
	require.Equal(t, []string{
		"a is now sent; EmailSent written to the outbox",
		"b not reconciled: cannot reconcile mail b: it is sent; only unknown mails are reconciled",
		"c not reconciled: no mail has this dedupe key",
		"a skipped: listed before, done once",
		"db-down not reconciled: database (transient): connection refused",
		"d not attempted: the run stopped at a database failure",
	}, lines)
	require.Equal(t, operator.Summary{operator.Reconciled: 1, operator.Refused: 1, operator.NotFound: 1,
		operator.Duplicate: 1, operator.Failed: 1, operator.Skipped: 1}, sum)
	require.False(t, sum.OK())
	require.Equal(t, []string{"a", "b", "c", "db-down"}, f.calls, "a once, d never")
	require.Equal(t, mailtype.StatusUnknown, f.mails["d"])
}

func TestReconcileKeysDryRun(t *testing.T) {
	t.Parallel()
	f := &fakeReconciler{mails: map[string]mailtype.Status{"a": mailtype.StatusUnknown, "b": mailtype.StatusUnknown}}
	var lines []string
	sum := operator.ReconcileKeys(context.Background(), f, []string{"a", "b"}, false, true,
		func(r operator.KeyResult) { lines = append(lines, operator.ReconcileLine(r, true)) })
	require.True(t, sum.OK())
	require.Equal(t, []string{"a would become pending (dry run: nothing changed)", "b would become pending (dry run: nothing changed)"}, lines)
	require.Equal(t, map[string]mailtype.Status{"a": mailtype.StatusUnknown, "b": mailtype.StatusUnknown}, f.mails)
	require.Equal(t, "a would become sent; EmailSent would be written to the outbox (dry run: nothing changed)",
		operator.ReconcileLine(operator.KeyResult{Key: "a", Disposition: operator.Reconciled,
			Result: store.ReconcileResult{Status: mailtype.StatusSent, Feedback: mailtype.EmailSent}}, true))
}

func TestListRow(t *testing.T) {
	t.Parallel()
	changed := now.Add(-90 * time.Minute)
	require.Equal(t, []string{"order-confirmed:42", "unknown", "order_confirmed", "2", "2026-03-01T10:30:00Z", "1h30m0s",
		"(ambiguous) timeout: no reply after DATA"},
		operator.ListRow(store.MailSummary{DedupeKey: "order-confirmed:42", Status: mailtype.StatusUnknown, Template: "order_confirmed",
			Sends: 2, UpdatedAt: changed, LastError: "timeout: no reply after DATA", LastErrorClass: mailtype.Ambiguous}, now))
	require.Equal(t, "-", operator.ListRow(store.MailSummary{UpdatedAt: changed}, now)[6])
	require.Len(t, operator.ListHeader, 7)
}
