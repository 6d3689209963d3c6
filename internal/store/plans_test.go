package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestGenericPlansOnlyWherePrepared: a pool in the default exec mode
// (prepared statements) plans them generically and ends a session idle in
// a transaction for IdleInTransactionTimeout; a pool in a transaction
// pooler's mode sets nothing; a setting in the URL is kept. None of it travels in the startup packet (see
// TestThroughPgBouncer).
func TestGenericPlansOnlyWherePrepared(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for _, c := range []struct{ url, plans, idle string }{
		{sc.URL, "force_generic_plan", "1min"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "cache_statement"), "force_generic_plan", "1min"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "exec"), "auto", "0"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "simple_protocol"), "auto", "0"},
		{storetest.WithParam(sc.URL, "plan_cache_mode", "force_custom_plan"), "force_custom_plan", "1min"},
		{storetest.WithParam(sc.URL, "idle_in_transaction_session_timeout", "5s"), "force_generic_plan", "5s"},
	} {
		st, err := store.Open(ctx, store.Options{URL: c.url, MaxConns: 2})
		require.NoError(t, err)
		plans, err := st.SettingForTest(ctx, "plan_cache_mode")
		require.NoError(t, err)
		idle, err := st.SettingForTest(ctx, "idle_in_transaction_session_timeout")
		st.Close()
		require.NoError(t, err)
		require.Equal(t, c.plans, plans, c.url)
		require.Equal(t, c.idle, idle, c.url)
	}
}
