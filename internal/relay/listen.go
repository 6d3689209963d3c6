package relay

import (
	"context"

	"github.com/mailsvc/mailsvc/internal/backoff"
)

// listen wakes the relay on every outbox notification (LISTEN/NOTIFY, so
// rows written by other replicas go out without polling latency) until ctx
// is done. A lost LISTEN connection is reopened with capped, jittered
// backoff, which starts again from its shortest delay once a connection
// listened; meanwhile polling (PollInterval) keeps rows flowing.
func (r *Relay) listen(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		listened, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			failures = 0
		}
		failures++
		d := backoff.Delay(failures, r.cfg.ReconnectBackoff, r.cfg.ReconnectBackoffMax)
		r.log.Warn("outbox LISTEN connection lost, polling until it is back", "error", err, "retry_in", d.String())
		if !backoff.Sleep(ctx.Done(), d) {
			return
		}
	}
}

// listenOnce listens on one connection until it fails or ctx is done;
// listened reports that the LISTEN was established.
func (r *Relay) listenOnce(ctx context.Context) (listened bool, err error) {
	l, err := r.st.ListenOutbox(ctx, r.cfg.Name+"-listen")
	if err != nil {
		return false, err
	}
	defer l.Close()
	r.Wake() // rows written while nobody listened
	for {
		if err := l.Wait(ctx); err != nil {
			return true, err
		}
		r.Wake()
	}
}
