package store_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// ProbePooling tells a transaction pooler (testproxy.TxPool, which hands
// out server sessions per transaction as PgBouncer's pool_mode =
// transaction does) from a direct connection and from a session-keeping
// proxy, whatever the pooler's size, and finds that pgx's cached prepared
// statements break there and that exec mode prepares nothing.
func TestProbePooling(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	upstream := testproxy.HostPort(t, sc.URL, "5432")
	open := func(t *testing.T, url string) *store.Store {
		st, err := store.Open(testCtx(t), store.Options{URL: url, MaxConns: 2})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}
	probe := func(t *testing.T, url string) store.Pooling {
		p, err := open(t, url).ProbePooling(testCtx(t))
		require.NoError(t, err)
		return p
	}
	t.Run("direct", func(t *testing.T) {
		require.Equal(t, store.Pooling{CachesStatements: true}, probe(t, sc.URL))
	})
	t.Run("session proxy", func(t *testing.T) {
		px := testproxy.New(t, upstream)
		require.Equal(t, store.Pooling{CachesStatements: true}, probe(t, px.RewriteURL(t, sc.URL)))
	})
	for _, servers := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("transaction pooler of %d", servers), func(t *testing.T) {
			url := testproxy.NewTxPool(t, upstream, servers).RewriteURL(t, sc.URL)
			require.Equal(t, store.Pooling{Shared: true, CachesStatements: true, StatementsBreak: true}, probe(t, url))
			for _, mode := range []string{"exec", "simple_protocol"} {
				require.Equal(t, store.Pooling{Shared: true}, probe(t, storetest.WithParam(url, "default_query_exec_mode", mode)), mode)
			}
		})
	}
}
