package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestSessionCookiesAreSignedStoredAndExpire(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	s, err := newSessions([]byte(strings.Repeat("k", 32)), time.Hour, func() time.Time { return now }, sc.Store)
	require.NoError(t, err)
	ctx := context.Background()
	u := Credential{Name: `ann "the boss"`, Role: Operator, Hash: []byte("$2a$10$hash")}
	ck, err := s.issue(ctx, u)
	require.NoError(t, err)
	got, fp, err := s.check(ctx, ck.Value)
	require.NoError(t, err)
	require.Equal(t, `ann "the boss"`, got.Name)
	require.Equal(t, fingerprint(u.Hash), fp)
	require.Equal(t, int64(1), sc.QueryInt(t, "SELECT count(*) FROM console_session"))
	// An id changed in the cookie breaks its signature.
	forged := strings.Repeat("0", 64) + ck.Value[64:]
	_, _, err = s.check(ctx, forged)
	require.ErrorIs(t, err, errBadSession)
	// Another secret's cookie is not ours; another process with ours
	// (a replica, a restart) accepts it.
	other, _ := newSessions([]byte(strings.Repeat("x", 32)), time.Hour, func() time.Time { return now }, sc.Store)
	_, _, err = other.check(ctx, ck.Value)
	require.ErrorIs(t, err, errBadSession)
	replica, _ := newSessions([]byte(strings.Repeat("k", 32)), time.Hour, func() time.Time { return now }, sc.Store)
	_, _, err = replica.check(ctx, ck.Value)
	require.NoError(t, err)
	now = now.Add(time.Hour)
	_, _, err = s.check(ctx, ck.Value)
	require.ErrorIs(t, err, errExpired)
	_, err = newSessions([]byte("short"), time.Hour, time.Now, sc.Store)
	require.EqualError(t, err, "the session secret must be at least 32 bytes")
}

func TestConfirmationNoncesAreOneTimeAndBound(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	s, err := newSessions(nil, time.Hour, func() time.Time { return now }, nil)
	require.NoError(t, err)
	n := s.nonce("session:a", "resend\x00order-confirmed:42")
	require.False(t, s.consume("session:b", n, "resend\x00order-confirmed:42"), "another session's")
	require.False(t, s.consume("session:a", n, "resend\x00order-confirmed:43"), "another target's")
	require.True(t, s.consume("session:a", n, "resend\x00order-confirmed:42"))
	require.False(t, s.consume("session:a", n, "resend\x00order-confirmed:42"), "used once")
	n = s.nonce("session:a", "replay")
	now = now.Add(nonceTTL)
	require.False(t, s.consume("session:a", n, "replay"), "expired")
	// At most maxNonces are kept per session: the oldest go first.
	var all []string
	for range maxNonces + 5 {
		all = append(all, s.nonce("session:a", "replay"))
		now = now.Add(time.Second)
	}
	for i, n := range all {
		require.Equal(t, i >= 5, s.consume("session:a", n, "replay"), i)
	}
}
