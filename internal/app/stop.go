package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/store"
)

// stopStage orders the stop. Every component of a stage stops at once,
// each within its own budget, so a component that hangs cannot take time
// from another (a stuck consumer once used a shared deadline up and the
// sender then cut its sends after DATA); the next stage starts when the
// whole stage has stopped or been abandoned.
type stopStage int

const (
	// stopFirst: the intake and the delivery — consumer, sender, janitor,
	// stats.
	stopFirst stopStage = iota
	// stopLast: the relay, which publishes the feedback the first stage
	// wrote until then, and the HTTP server (probes and metrics).
	stopLast
)

const (
	// componentStopBudget is the Stop budget of every component but the
	// sender.
	componentStopBudget = 5 * time.Second
	// senderRecordMargin is what the sender gets on top of
	// sender.shutdown_timeout to record the outcomes of the sends that
	// finished within it (and to cancel the rest).
	senderRecordMargin = 5 * time.Second
	// abandonGrace is how long past its budget a Stop may take to return
	// (a hard stop after its context ended) before it is abandoned: logged,
	// and left behind when the process exits.
	abandonGrace = time.Second
	// storeCloseGrace bounds the wait for the database pool to close.
	storeCloseGrace = time.Second
)

// senderStopBudget is the sender's Stop budget: its own
// sender.shutdown_timeout plus the margin to record.
func senderStopBudget(cfg *config.Config) time.Duration {
	return cfg.Sender.ShutdownTimeout + senderRecordMargin
}

// ShutdownBound is the longest `mailsvc serve` takes to exit after SIGTERM:
// the first stage (the sender's budget, the longest of it) and the last
// one, each with the abandon grace, and the close of the database pool.
// With the defaults (sender.shutdown_timeout 20s) it is 33 s; a container
// platform's grace period must exceed it.
func ShutdownBound(cfg *config.Config) time.Duration {
	first := max(senderStopBudget(cfg), componentStopBudget)
	return first + abandonGrace + componentStopBudget + abandonGrace + storeCloseGrace
}

// run starts parts in order, waits for ctx or the first component that
// stops by itself (a failure: its Done closed before Stop), then stops the
// started ones (stopAll). It returns the start error or the failure; nil
// after a clean stop on ctx, whatever a Stop returned.
func run(ctx context.Context, log *slog.Logger, parts []named) error {
	var started []named
	var runErr error
	serving, endServing := context.WithCancel(context.Background())
	defer endServing()
	failed := make(chan error, 1)
	for _, p := range parts {
		if err := p.c.Start(ctx); err != nil {
			runErr = fmt.Errorf("start %s: %w", p.name, err)
			break
		}
		started = append(started, p)
		go watch(serving, p, failed)
	}
	if runErr == nil {
		log.Info("mailsvc serving")
		select {
		case <-ctx.Done():
		case runErr = <-failed:
			log.Error("a component failed; stopping", "error", runErr)
		}
	}
	endServing()
	stopAll(log, started)
	log.Info("mailsvc stopped")
	return runErr
}

// watch reports p on failed when it stops by itself while serving lasts;
// one failure is enough to stop, so further ones are dropped.
func watch(serving context.Context, p named, failed chan<- error) {
	select {
	case <-p.c.Done():
	case <-serving.Done():
		return
	}
	if serving.Err() != nil {
		return // stopAll began: a stop, not a failure
	}
	select {
	case failed <- fmt.Errorf("%s failed: %w", p.name, p.c.Err()):
	default:
	}
}

// stopAll stops parts stage by stage, the components of a stage at once.
func stopAll(log *slog.Logger, parts []named) {
	for stage := stopFirst; stage <= stopLast; stage++ {
		var wg sync.WaitGroup
		for _, p := range parts {
			if p.stage == stage {
				wg.Go(func() { stopOne(log, p) })
			}
		}
		wg.Wait()
	}
}

// stopOne stops p within its budget. A Stop that returns an error is
// logged; one that has not returned abandonGrace after its budget is
// logged and abandoned.
func stopOne(log *slog.Logger, p named) {
	budget := p.budget
	if budget <= 0 {
		budget = componentStopBudget
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- p.c.Stop(ctx) }()
	abandon := time.NewTimer(budget + abandonGrace)
	defer abandon.Stop()
	select {
	case err := <-stopped:
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("stop component", "component", p.name, "budget", budget.String(), "error", err)
		}
	case <-abandon.C:
		log.Error("component did not stop within its budget; abandoned", "component", p.name, "budget", budget.String())
	}
}

// closeStore closes the database pool, waiting at most storeCloseGrace: a
// pool waits for its connections, and an abandoned component may hold one.
func closeStore(st *store.Store, log *slog.Logger) {
	closed := make(chan struct{})
	go func() {
		st.Close()
		close(closed)
	}()
	t := time.NewTimer(storeCloseGrace)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		log.Error("database pool did not close in time; a connection is still in use")
	}
}
