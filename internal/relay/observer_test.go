package relay_test

import (
	"testing"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// observe binds names.EventsQueue (exclusive) to the events exchange,
// declared as the relay does, with pattern and collects every message
// until the test ends.
func observe(t *testing.T, names *brokertest.Names, pattern string) *brokertest.Observer {
	t.Helper()
	return brokertest.Observe(t, names.EventsExchange, names.EventsQueue, pattern)
}

// bindRejecting binds a queue that refuses every message, so the broker
// nacks what is routed to it (brokertest.BindRejecting).
func bindRejecting(t *testing.T, names *brokertest.Names, pattern string) {
	t.Helper()
	brokertest.BindRejecting(t, names.EventsExchange, names.Prefix+"rejecting", pattern)
}
