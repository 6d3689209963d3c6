package sender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/config"
)

// JanitorStore is what the janitor needs from the database; *store.Store
// implements it.
type JanitorStore interface {
	ExpireLeases(ctx context.Context, maxAttempts, limit int) (int, error)
	DeleteFinished(ctx context.Context, window time.Duration, limit int) (int64, error)
	CountUnknown(ctx context.Context) (int64, error)
}

// JanitorConfig configures a Janitor.
type JanitorConfig struct {
	// Interval is the time between two rounds (default 30s).
	Interval time.Duration
	// MaxAttempts is sender.max_attempts: a row whose lease expired with
	// this many attempts is failed.
	MaxAttempts int
	// RetentionWindow is retention.window: sent, failed and cancelled rows
	// older than this are deleted. 0 disables deletion.
	RetentionWindow time.Duration
	// BatchSize is the most rows one statement changes (default 500).
	BatchSize int
	// MaxBatches bounds the statements of one kind per round (default 20),
	// so a round stays cheap; the next round continues.
	MaxBatches int
	// DBTimeout bounds each statement (default 30s).
	DBTimeout time.Duration
}

// JanitorConfigFrom copies the janitor's settings of a loaded configuration.
func JanitorConfigFrom(c *config.Config) JanitorConfig {
	return JanitorConfig{MaxAttempts: c.Sender.MaxAttempts, RetentionWindow: c.Retention.Window}
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
	return c
}

// Round is what one janitor round did.
type Round struct {
	// Expired is how many rows whose last lease expired were ended (failed,
	// or cancelled when a cancel was requested).
	Expired int
	// Deleted is how many finished rows were deleted for retention.
	Deleted int64
	// Unknown is how many rows wait in `unknown` for an operator; they are
	// only counted, never touched.
	Unknown int64
}

// Janitor is one cheap loop, safe on every replica at once (its statements
// skip rows another replica holds): it ends `sending` rows whose lease
// expired with attempts exhausted (a lease expiry counts as an attempt, so
// a mail that crashes its worker every time cannot loop forever), deletes
// finished rows older than the retention window in small batches, and
// counts unknown rows. Start and Stop are safe for concurrent use.
type Janitor struct {
	cfg             JanitorConfig
	st              JanitorStore
	log             *slog.Logger
	onOutboxWritten func()

	mu      sync.Mutex
	state   int
	cancel  context.CancelFunc
	stopped chan struct{}
}

// NewJanitor returns a Janitor that has not started. log may be nil;
// onOutboxWritten, when set, is called after a round wrote feedback events.
func NewJanitor(cfg JanitorConfig, st JanitorStore, log *slog.Logger, onOutboxWritten func()) (*Janitor, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxAttempts <= 0 {
		return nil, fmt.Errorf("janitor config: sender.max_attempts must be positive, got %d", cfg.MaxAttempts)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Janitor{cfg: cfg, st: st, log: log.With("component", "janitor"), onOutboxWritten: onOutboxWritten}, nil
}

// Start runs a round now and then every Interval in the background, until
// Stop. It returns an error when called twice or after Stop.
func (j *Janitor) Start(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state != 0 {
		return errors.New("janitor: Start called twice or after Stop")
	}
	j.state = 1
	ctx, j.cancel = context.WithCancel(context.WithoutCancel(ctx))
	j.stopped = make(chan struct{})
	go j.loop(ctx)
	return nil
}

// Stop ends the loop, cutting a round in progress, and waits for it until
// ctx ends. Idempotent; safe without Start.
func (j *Janitor) Stop(ctx context.Context) error {
	j.mu.Lock()
	state := j.state
	j.state = 2
	j.mu.Unlock()
	if state != 1 {
		return nil
	}
	j.cancel()
	select {
	case <-j.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop janitor: %w", ctx.Err())
	}
}

func (j *Janitor) loop(ctx context.Context) {
	defer close(j.stopped)
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		r, err := j.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.Warn("janitor round", "error", err)
		case r.Expired > 0 || r.Deleted > 0:
			j.log.Info("janitor round", "expired", r.Expired, "deleted", r.Deleted, "unknown", r.Unknown)
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
		n, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) (int, error) {
			return j.st.ExpireLeases(c, j.cfg.MaxAttempts, j.cfg.BatchSize)
		})
		r.Expired += n
		if n > 0 && j.onOutboxWritten != nil {
			j.onOutboxWritten()
		}
		if err != nil {
			return r, err
		}
		if n < j.cfg.BatchSize {
			break
		}
	}
	for range j.cfg.MaxBatches {
		if j.cfg.RetentionWindow <= 0 {
			break
		}
		n, err := withTimeout(ctx, j.cfg.DBTimeout, func(c context.Context) (int64, error) {
			return j.st.DeleteFinished(c, j.cfg.RetentionWindow, j.cfg.BatchSize)
		})
		r.Deleted += n
		if err != nil {
			return r, err
		}
		if n < int64(j.cfg.BatchSize) {
			break
		}
	}
	u, err := withTimeout(ctx, j.cfg.DBTimeout, j.st.CountUnknown)
	r.Unknown = u
	return r, err
}

func withTimeout[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(c)
}
