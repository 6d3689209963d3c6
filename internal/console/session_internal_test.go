package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionCookiesAreSignedAndExpire(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	s, err := newSessions([]byte(strings.Repeat("k", 32)), time.Hour, func() time.Time { return now })
	require.NoError(t, err)
	se, ck := s.issue(`ann "the boss"`, Operator)
	got, err := s.check(ck.Value)
	require.NoError(t, err)
	require.Equal(t, se.ID, got.ID)
	require.Equal(t, `ann "the boss"`, got.Name)
	require.Equal(t, Operator, got.Role)
	// A role changed in the cookie breaks its signature.
	forged := strings.Replace(ck.Value, ".operator.", ".viewer.", 1)
	require.NotEqual(t, ck.Value, forged)
	_, err = s.check(forged)
	require.ErrorIs(t, err, errBadSession)
	// Another secret's cookie is not ours.
	other, _ := newSessions([]byte(strings.Repeat("x", 32)), time.Hour, func() time.Time { return now })
	_, err = other.check(ck.Value)
	require.ErrorIs(t, err, errBadSession)
	now = now.Add(time.Hour)
	_, err = s.check(ck.Value)
	require.ErrorIs(t, err, errExpired)
	_, err = newSessions([]byte("short"), time.Hour, time.Now)
	require.EqualError(t, err, "the session secret must be at least 32 bytes")
}

func TestConfirmationNoncesAreOneTimeAndBound(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	s, err := newSessions(nil, time.Hour, func() time.Time { return now })
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
