package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	sc := storetest.NewEmpty(t)
	ctx := context.Background()

	err := sc.Store.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaBehind)

	applied, err := sc.Store.MigrateUp(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	require.NoError(t, sc.Store.CheckSchema(ctx))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('mail','outbox')`, sc.Name))

	again, err := sc.Store.MigrateUp(ctx)
	require.NoError(t, err)
	require.Empty(t, again, "second migrate up must be a no-op")

	for range applied {
		_, err := sc.Store.MigrateDown(ctx)
		require.NoError(t, err)
	}
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('mail','outbox')`, sc.Name))

	_, err = sc.Store.MigrateUp(ctx)
	require.NoError(t, err)
	st, err := sc.Store.MigrateStatus(ctx)
	require.NoError(t, err)
	for _, m := range st {
		require.True(t, m.Applied, "migration %d applied", m.Version)
	}
}

func TestMigrateConcurrentReplicas(t *testing.T) {
	t.Parallel()
	sc := storetest.NewEmpty(t)
	ctx := context.Background()
	other, err := store.Open(ctx, store.Options{URL: sc.URL})
	require.NoError(t, err)
	defer other.Close()
	errs := make(chan error, 2)
	for _, s := range []*store.Store{sc.Store, other} {
		go func() { _, err := s.MigrateUp(ctx); errs <- err }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, sc.Store.CheckSchema(ctx))
}

func TestSchemaConstraints(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, status) VALUES ('0199a1f0-0000-7000-8000-000000000042', 'order-confirmed:42', '42', 'order_confirmed', 'pending')`)
	// A tombstone: NULL event_id, allowed many times.
	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('order-confirmed:43', '43', 'order_confirmed', 'cancelled')`)
	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('order-confirmed:44', '44', 'order_confirmed', 'cancelled')`)
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM mail`))

	for name, q := range map[string]string{
		"duplicate dedupe_key":  `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('order-confirmed:42', '42', 'order_confirmed', 'pending')`,
		"duplicate event_id":    `INSERT INTO mail (event_id, dedupe_key, order_id, template, status) VALUES ('0199a1f0-0000-7000-8000-000000000042', 'x', '42', 'order_confirmed', 'pending')`,
		"bad status":            `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('y', '1', 't', 'bogus')`,
		"sending without lease": `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('z', '1', 't', 'sending')`,
	} {
		_, err := rawExec(sc, q)
		require.Error(t, err, name)
	}
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM mail`))
}

func rawExec(sc *storetest.Schema, q string) (int64, error) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URL: sc.URL})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	return st.ExecForTest(ctx, q)
}
