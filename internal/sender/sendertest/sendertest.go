// Package sendertest is the conformance suite every sender.Provider
// passes: the same outcomes must get the same classification whichever
// provider produced them (docs/design.md, "Error classes"), so the pool's decisions do
// not depend on the provider.
package sendertest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// Fault is a provider-neutral failure the harness arranges for the next
// send.
type Fault int

const (
	// Transient: the provider refuses for now (SMTP 451, HTTP 500).
	Transient Fault = iota
	// Permanent: the provider refuses the mail for good (SMTP 550, HTTP 422).
	Permanent
	// LostResponse: the provider took the mail and the answer never came.
	LostResponse
	// Unreachable: nothing listens; nothing was sent (uses Harness.Dead).
	Unreachable
)

// Harness is a provider wired to a fault-injecting fake.
type Harness struct {
	Provider sender.Provider
	// Inject arranges f for the next send.
	Inject func(f Fault)
	// Delivered returns how many mails the fake took.
	Delivered func() int
	// Dead is the same provider configured for an address where nothing
	// listens.
	Dead sender.Provider
}

// DeadAddr returns a loopback host:port where nothing listens.
func DeadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// Message returns a Vietnamese test mail with a stable Message-ID.
func Message(key string) *sender.Message {
	return &sender.Message{
		From: "Cửa hàng <orders@example.com>", To: "b@example.com", ToName: "Nguyễn Văn B",
		Subject: "Xác nhận đơn hàng 42", Text: "Cảm ơn quý khách.\n", HTML: "<p>Cảm ơn quý khách.</p>",
		MessageID: mailtype.MessageID(key, "example.com"), DedupeKey: key,
		IdempotencyKey: mailtype.IdempotencyKey("", key), Date: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
}

// Run runs the suite; newHarness gives each subtest a fresh provider and
// fake. A send that must lose its answer runs under a short deadline.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("accepted", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		s := h.Provider.NewSession()
		defer s.Close()
		_, err := s.Send(ctx(t, 5*time.Second), Message("k:accepted"))
		require.NoError(t, err)
		require.Equal(t, 1, h.Delivered())
	})
	for _, c := range []struct {
		name      string
		fault     Fault
		class     mailtype.Class
		delivered int
	}{
		{"transient", Transient, mailtype.Transient, 0},
		{"permanent", Permanent, mailtype.Permanent, 0},
		{"lost response", LostResponse, mailtype.Ambiguous, 1},
		{"unreachable", Unreachable, mailtype.Transient, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			p := h.Provider
			if c.fault == Unreachable {
				p = h.Dead
			} else {
				h.Inject(c.fault)
			}
			s := p.NewSession()
			defer s.Close()
			// 2 s: time for a dial and handshake on a machine busy with the
			// rest of the suite; only the hung cases wait it out.
			_, err := s.Send(ctx(t, 2*time.Second), Message("k:"+c.name))
			require.Error(t, err)
			require.Equal(t, c.class, mailtype.ClassOf(err), "%v", err)
			require.Equal(t, c.delivered, h.Delivered())
			if c.delivered > 0 {
				require.False(t, mailtype.Reroutable(err), "a mail that may have been taken never goes to another provider")
			}
			if c.fault == Unreachable {
				// A refused connection: nothing sent, and a failure of the
				// configuration or reachability that the breaker counts.
				trouble, _ := sender.TroubleOf(err)
				require.Equal(t, sender.TroubleConfig, trouble, "%v", err)
				require.True(t, mailtype.Reroutable(err), "%v", err)
				return
			}
			// The failure does not poison the session: the next mail goes.
			_, err = s.Send(ctx(t, 5*time.Second), Message("k:next:"+c.name))
			require.NoError(t, err)
			require.Equal(t, c.delivered+1, h.Delivered())
		})
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}
