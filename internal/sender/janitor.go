package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// JanitorStore is what the janitor needs from the database; *store.Store
// implements it.
type JanitorStore interface {
	ExpiredSends(ctx context.Context, limit int) ([]store.ExpiredSend, error)
	GraceExpired(ctx context.Context, fs []store.Fence, grace time.Duration) (int, error)
	FinishAttempts(ctx context.Context, as []store.Attempt) ([]store.AttemptResult, error)
	DeleteFinished(ctx context.Context, window time.Duration, limit int) (int64, error)
	CountUnknown(ctx context.Context) (int64, error)
	DeleteOldRecipientWindows(ctx context.Context, w store.RecipientLimit, limit int) (int64, error)
}

// JanitorConfig configures a Janitor.
type JanitorConfig struct {
	// Interval is the time between two rounds (default 30s; the daemon uses
	// a quarter of sender.lease, at most 30s).
	Interval time.Duration
	// Sender is the pool's configuration: a send whose lease expired is
	// judged by the same rules as one that ended ambiguous in a worker
	// (max attempts, ambiguous policy and budget, backoff).
	Sender Config
	// RetentionWindow is retention.window: sent, failed and cancelled rows
	// older than this are deleted. 0 disables deletion.
	RetentionWindow time.Duration
	// RecipientLimit is the per-recipient safety limit: its counts of
	// windows older than two windows are deleted. Off: none.
	RecipientLimit store.RecipientLimit
	// BatchSize is the most rows one statement changes (default 500).
	BatchSize int
	// MaxBatches bounds the statements of one kind per round (default 20),
	// so a round stays cheap; the next round continues.
	MaxBatches int
	// DBTimeout bounds each statement (default 30s).
	DBTimeout time.Duration
}

func (c JanitorConfig) withDefaults() JanitorConfig {
	if c.Interval <= 0 {
		c.Interval = 30 * time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 20
	}
	if c.DBTimeout <= 0 {
		c.DBTimeout = 30 * time.Second
	}
	c.Sender = c.Sender.WithDefaults()
	return c
}

// JanitorDeps are what a Janitor is built from.
type JanitorDeps struct {
	// Store and Provider are required; the provider gives its name and
	// idempotency window, it is never called.
	Store    JanitorStore
	Provider Provider
	// Fallback is the pool's fallback provider, if any: a send whose lease
	// expired may have gone through either, so a resend counts as safe only
	// within the shorter of their idempotency windows.
	Fallback Provider
	// Templates, when set, may override the ambiguous policy per template.
	Templates TemplateSettings
	// Metrics may be shared with the pool; nil means unregistered metrics.
	Metrics *Metrics
	// Log receives the janitor's logs; nil discards them.
	Log *slog.Logger
	// OnOutboxWritten, when set, is called after a round wrote feedback
	// events. It must not block.
	OnOutboxWritten func()
}

// Round is what one janitor round did.
type Round struct {
	// Settled is how many rows whose lease expired got a verdict: a send
	// that had started is an ambiguous outcome (retried after a backoff, or
	// unknown), a claim with a cancel requested that never started ends
	// cancelled.
	Settled int
	// Deleted is how many finished rows were deleted for retention.
	Deleted int64
	// Unknown is how many rows wait in `unknown` for an operator; they are
	// only counted, never touched.
	Unknown int64
}

// Janitor is one cheap loop, safe on every replica at once (its writes are
// fenced): it settles `sending` rows whose lease expired after their send
// started (the worker crashed, paused or lost the database mid-send: the
// mail may have been delivered): first it gives the send a grace, then,
// if its owner still recorded nothing, it judges it as an ambiguous outcome
// by the pool's rules (the token is kept, so that the original worker can
// still record the provider's answer if it comes back later), deletes finished
// rows older than the retention window in small batches, and counts
// unknown rows. Expired claims that never started a send need no janitor:
// the next claim takes them. Start and Stop are safe for concurrent use.
type Janitor struct {
	cfg     JanitorConfig
	deps    JanitorDeps
	log     *slog.Logger
	metrics *Metrics
	rules   rules

	life lifecycle.Life
}

// NewJanitor returns a Janitor that has not started. It returns an error
// naming the config key when cfg.Sender is invalid or a dependency is
// missing.
func NewJanitor(cfg JanitorConfig, deps JanitorDeps) (*Janitor, error) {
	cfg = cfg.withDefaults()
	if cfg.Sender.MaxAttempts <= 0 {
		return nil, fmt.Errorf("janitor config: sender.max_attempts must be positive, got %d", cfg.Sender.MaxAttempts)
	}
	if deps.Store == nil || deps.Provider == nil {
		return nil, errors.New("janitor: a store and a provider are required")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := deps.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	r := newRules(cfg.Sender, deps.Provider, deps.Templates)
	if deps.Fallback != nil {
		r.window = min(r.window, deps.Fallback.IdempotencyWindow())
	}
	return &Janitor{cfg: cfg, deps: deps, log: log.With("component", "janitor"), metrics: m, rules: r}, nil
}

// Start runs a round now and then every Interval in the background, until
// Stop. It follows the rules of internal/lifecycle: a second Start, or one
// after Stop, returns lifecycle.ErrStarted; ctx's cancellation does not
// stop the loop.
func (j *Janitor) Start(ctx context.Context) error {
	return j.life.Start(ctx, func(stop, _ context.Context) error {
		j.loop(stop)
		return nil
	})
}

// Stop ends the loop, cutting a round in progress, and waits for it until
// ctx ends (then it returns ctx's error). Idempotent; safe without Start
// (lifecycle.Life.Stop).
func (j *Janitor) Stop(ctx context.Context) error {
	return j.life.Stop(ctx)
}

// Done is closed once the loop has ended; Err then says why (a loop that
// ends before Stop has failed: lifecycle.ErrExited).
func (j *Janitor) Done() <-chan struct{} { return j.life.Done() }

// Err is what ended the loop, nil while it runs (lifecycle.Life.Err).
func (j *Janitor) Err() error { return j.life.Err() }

func (j *Janitor) loop(ctx context.Context) {
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		r, err := j.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.Warn("janitor round", "error", err)
		case r.Settled > 0 || r.Deleted > 0:
			j.log.Info("janitor round", "settled", r.Settled, "deleted", r.Deleted, "unknown", r.Unknown)
		}
		if r.Unknown > 0 {
			j.log.Warn("mails wait in unknown for reconciliation (mailsvc mail reconcile)", "unknown", r.Unknown)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce runs one round and reports what it did. It returns the first
// error (the round stops there); what was done before it is reported.
func (j *Janitor) RunOnce(ctx context.Context) (Round, error) {
	var r Round
	for range j.cfg.MaxBatches {
		n, more, err := j.settle(ctx)
		r.Settled += n
		if err != nil {
			return r, err
		}
		if !more {
			break
		}
	}
	for range j.cfg.MaxBatches {
		if j.cfg.RetentionWindow <= 0 {
			break
		}
		n, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) (int64, error) {
			return j.deps.Store.DeleteFinished(c, j.cfg.RetentionWindow, j.cfg.BatchSize)
		})
		r.Deleted += n
		if err != nil {
			return r, err
		}
		if n < int64(j.cfg.BatchSize) {
			break
		}
	}
	if err := j.forgetRecipientWindows(ctx); err != nil {
		return r, err
	}
	u, err := withTimeout(ctx, j.cfg.DBTimeout, j.deps.Store.CountUnknown)
	r.Unknown = u
	return r, err
}

// forgetRecipientWindows deletes the per-recipient counts that no longer
// decide anything, a batch at a time, at most MaxBatches a round.
func (j *Janitor) forgetRecipientWindows(ctx context.Context) error {
	if j.cfg.RecipientLimit.Mails <= 0 || j.cfg.RecipientLimit.Window <= 0 {
		return nil
	}
	for range j.cfg.MaxBatches {
		n, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) (int64, error) {
			return j.deps.Store.DeleteOldRecipientWindows(c, j.cfg.RecipientLimit, j.cfg.BatchSize)
		})
		if err != nil || n < int64(j.cfg.BatchSize) {
			return err
		}
	}
	return nil
}

// settle handles one batch of expired sends and reports how many it
// settled and whether a full batch was read (more may wait). A started
// send first gets a grace (store.GraceExpired), and a verdict only once
// that ran out as well.
func (j *Janitor) settle(ctx context.Context) (int, bool, error) {
	rows, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) ([]store.ExpiredSend, error) {
		return j.deps.Store.ExpiredSends(c, j.cfg.BatchSize)
	})
	if err != nil || len(rows) == 0 {
		return 0, false, err
	}
	var grace []store.Fence
	var judged []store.ExpiredSend
	for _, e := range rows {
		if e.Started && !e.Graced {
			grace = append(grace, e.Fence)
		} else {
			judged = append(judged, e)
		}
	}
	if len(grace) > 0 {
		if _, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) (int, error) {
			return j.deps.Store.GraceExpired(c, grace, j.Grace())
		}); err != nil {
			return 0, false, err
		}
	}
	n, err := j.judge(ctx, judged)
	return n, len(rows) == j.cfg.BatchSize, err
}

// judge writes the verdicts of rows, fenced, and returns how many landed.
func (j *Janitor) judge(ctx context.Context, rows []store.ExpiredSend) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	as := make([]store.Attempt, len(rows))
	for i, e := range rows {
		as[i] = store.Attempt{Fence: e.Fence, Outcome: j.verdict(e).Record, Settle: true}
	}
	res, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) ([]store.AttemptResult, error) {
		return j.deps.Store.FinishAttempts(c, as)
	})
	if err != nil {
		return 0, err
	}
	n, wrote := 0, false
	for i, r := range res {
		if r.Err != nil {
			continue // the owner recorded it meanwhile, or another janitor did
		}
		n++
		wrote = wrote || r.Event != ""
		j.metrics.countAmbiguous(j.rules.provider, as[i].Outcome, r.Status)
		if r.Status == mailtype.StatusPending {
			j.log.Warn("lease expired", "mail_id", rows[i].ID, "dedupe_key", r.DedupeKey, "event_id", r.EventID,
				"started", rows[i].Started, "status", r.Status, "attempts", rows[i].Sends, "error_reason", as[i].Outcome.ErrorReason)
		} else {
			logMailFinished(j.log, j.cfg.Sender.OutcomeLevel, r.Finished, as[i].Outcome)
		}
	}
	if wrote && j.deps.OnOutboxWritten != nil {
		j.deps.OnOutboxWritten()
	}
	return n, nil
}

// verdict judges one expired send. A claim that never started is released
// (it only gets here with a cancel requested: cancelled). A started send
// whose grace ran out is an ambiguous outcome under the pool's rules.
func (j *Janitor) verdict(e store.ExpiredSend) verdict {
	if !e.Started {
		return releaseVerdict()
	}
	a := j.rules.attempt(e.Template, e.Sends, e.Ambiguous, time.Since(e.FirstAttemptAt))
	return decide(errLeaseExpired, Receipt{}, a)
}

// Grace is how long a started send whose lease expired waits for its
// owner before the janitor judges it: twice the pool's statement timeout
// plus a second, longer than a live owner's completer needs to retry a
// write that hung in a dead connection once the database answers again.
func (j *Janitor) Grace() time.Duration {
	return 2*j.cfg.Sender.DBTimeout + time.Second
}

func withTimeout[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(c)
}
