package broker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// The management API is not enabled on the test broker, so a stand-in
// answers with the fields RabbitMQ's GET /api/queues/{vhost}/{name}
// documents; the vhost "/" travels as %2F.
func TestManagementReadsReadyAndUnacked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pw, ok := r.BasicAuth()
		if !ok || user != "mon" || pw != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.EscapedPath() {
		case "/prefix/api/queues/%2F/mail.order-events":
			_, _ = w.Write([]byte(`{"name":"mail.order-events","messages":12,"messages_ready":9,"messages_unacknowledged":3,"consumers":2}`))
		case "/prefix/api/queues/%2F/fresh":
			_, _ = w.Write([]byte(`{"name":"fresh","consumers":0}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	m := &broker.Management{BaseURL: strings.Replace(srv.URL, "http://", "http://mon:s3cret@", 1) + "/prefix/", Vhost: "/", Client: srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	st, err := m.InspectQueue(ctx, "mail.order-events")
	require.NoError(t, err)
	require.Equal(t, broker.QueueState{Ready: 9, Unacked: 3, Consumers: 2}, st)

	_, err = m.InspectQueue(ctx, "missing")
	require.ErrorIs(t, err, broker.ErrNoQueue)
	_, err = m.InspectQueue(ctx, "fresh")
	require.ErrorContains(t, err, "no message counts yet")

	wrong := &broker.Management{BaseURL: strings.Replace(srv.URL, "http://", "http://mon:wrong@", 1) + "/prefix", Client: srv.Client()}
	_, err = wrong.InspectQueue(ctx, "mail.order-events")
	require.ErrorContains(t, err, "401")
	require.NotContains(t, err.Error(), "wrong", "the password never appears in an error")
}
