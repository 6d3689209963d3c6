package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// last_error_class is written with last_error by the outcome write: the
// class of the outcome's error, NULL for a success, and kept by a release
// without an error, as last_error is (migration 00080).
func TestLastErrorClassFollowsLastError(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	insertMails(t, sc.Store, 4, "c")
	claimed, err := sc.Store.ClaimMails(ctx, claimParams(4))
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	byOrder := map[string]store.Fence{}
	for _, m := range claimed {
		byOrder[m.OrderID] = m.Fence
	}
	outcomes := map[string]store.Outcome{
		"c0": {Status: mailtype.StatusPending, Provider: "smtp", ErrorClass: mailtype.Transient, ErrorReason: mailtype.ReasonDeferred, Error: "451 later"},
		"c1": {Status: mailtype.StatusUnknown, Provider: "smtp", ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonTimeout, Error: "no reply after DATA", Ambiguous: true},
		"c2": {Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "250 ok"},
		"c3": {Status: mailtype.StatusFailed, Provider: "smtp", ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonRejected, Error: "550 no such user"},
	}
	var as []store.Attempt
	for order, o := range outcomes {
		as = append(as, store.Attempt{Fence: byOrder[order], Outcome: o})
	}
	res, err := sc.Store.FinishAttempts(ctx, as)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	require.Equal(t, map[string]string{"c0": "transient", "c1": "ambiguous", "c2": "-", "c3": "permanent"},
		sc.QueryMap(t, `SELECT order_id, COALESCE(last_error_class, '-') FROM mail`))
	for order, want := range map[string]mailtype.Class{"c0": mailtype.Transient, "c2": ""} {
		m, err := sc.Store.MailByKey(ctx, mailtype.ConfirmationKey(order))
		require.NoError(t, err)
		require.Equal(t, want, m.LastErrorClass, order)
	}

	// A release (a claim that never sent) keeps the last error and its class.
	sc.Exec(t, `UPDATE mail SET send_after = now() WHERE order_id = 'c0'`)
	again, err := sc.Store.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, again, 1)
	res, err = sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: again[0].Fence,
		Outcome: store.Outcome{Status: mailtype.StatusPending, Release: true}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'c0' AND status = 'pending'
		AND last_error = 'deferred: 451 later' AND last_error_class = 'transient'`))

	// The next success clears both.
	again, err = sc.Store.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, again, 1)
	res, err = sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: again[0].Fence,
		Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'c0' AND status = 'sent'
		AND last_error IS NULL AND last_error_class IS NULL`))
}

// Migration 00080 derives the class of the rows written before it from
// their last_error, as `mail show` read it until then.
func TestMigration00080DerivesTheClassOfOlderRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Roll back the migrations after 00080, then 00080 itself.
	for {
		v, err := sc.Store.MigrateDown(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, v, int64(80))
		if v == 80 {
			break
		}
	}
	for i, lastErr := range []string{
		"lease_expired: the lease expired during a send whose outcome is unknown; the mail may have been delivered",
		"attempts_exhausted: lease_expired",
		"timeout: timeout (ambiguous): reset after DATA",
		"deferred: deferred (transient): 451 try later",
		"rejected: rejected (permanent): 550 no such user",
		"attempts_exhausted: deferred (transient): 451 try later",
		"stale: event older than its max age",
		"render: template exploded",
		"other: something else",
	} {
		id, err := storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: "m" + string(rune('0'+i))})
		require.NoError(t, err)
		sc.Exec(t, `UPDATE mail SET last_error = $2 WHERE id = $1`, id, lastErr)
	}
	_, err := storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: "none"})
	require.NoError(t, err)
	_, err = sc.Store.MigrateUp(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"m0": "ambiguous", "m1": "ambiguous", "m2": "ambiguous", "m3": "transient", "m4": "permanent",
		"m5": "permanent", "m6": "permanent", "m7": "permanent", "m8": "-", "none": "-",
	}, sc.QueryMap(t, `SELECT order_id, COALESCE(last_error_class, '-') FROM mail`))
}
