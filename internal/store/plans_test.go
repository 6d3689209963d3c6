package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestGenericPlansOnlyWherePrepared: a pool in the default exec mode
// (prepared statements) plans them generically on every session; a pool in
// a transaction pooler's mode sets nothing; a plan_cache_mode in the URL is
// kept. None of it travels in the startup packet (see
// TestThroughPgBouncer).
func TestGenericPlansOnlyWherePrepared(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for _, c := range []struct{ url, want string }{
		{sc.URL, "force_generic_plan"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "cache_statement"), "force_generic_plan"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "exec"), "auto"},
		{storetest.WithParam(sc.URL, "default_query_exec_mode", "simple_protocol"), "auto"},
		{storetest.WithParam(sc.URL, "plan_cache_mode", "force_custom_plan"), "force_custom_plan"},
	} {
		st, err := store.Open(ctx, store.Options{URL: c.url, MaxConns: 2})
		require.NoError(t, err)
		got, err := st.SettingForTest(ctx, "plan_cache_mode")
		st.Close()
		require.NoError(t, err)
		require.Equal(t, c.want, got, c.url)
	}
}
