package store_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestConsoleSessionCreateLookUpDeleteExpire(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	old := store.ConsoleSession{IDSum: sha256.Sum256([]byte("old")), User: "ann", HashFingerprint: []byte{1},
		Created: now.Add(-9 * time.Hour), Expires: now.Add(-time.Hour)}
	require.NoError(t, st.CreateConsoleSession(ctx(t), old))
	require.Equal(t, int64(1), sc.QueryInt(t, "SELECT count(*) FROM console_session"))

	se := store.ConsoleSession{IDSum: sha256.Sum256([]byte("new")), User: "bob", HashFingerprint: []byte{2, 3},
		Created: now, Expires: now.Add(8 * time.Hour)}
	require.NoError(t, st.CreateConsoleSession(ctx(t), se))
	// The expired one went at this login.
	require.Equal(t, int64(1), sc.QueryInt(t, "SELECT count(*) FROM console_session"))
	_, err := st.ConsoleSessionByID(ctx(t), old.IDSum)
	require.ErrorIs(t, err, store.ErrNotFound)

	got, err := st.ConsoleSessionByID(ctx(t), se.IDSum)
	require.NoError(t, err)
	require.Equal(t, "bob", got.User)
	require.Equal(t, []byte{2, 3}, got.HashFingerprint)
	require.True(t, se.Expires.Equal(got.Expires))

	require.NoError(t, st.DeleteConsoleSession(ctx(t), se.IDSum))
	require.NoError(t, st.DeleteConsoleSession(ctx(t), se.IDSum))
	_, err = st.ConsoleSessionByID(ctx(t), se.IDSum)
	require.ErrorIs(t, err, store.ErrNotFound)

	require.Error(t, st.CreateConsoleSession(ctx(t), store.ConsoleSession{Created: now, Expires: now.Add(time.Hour)}))
}
