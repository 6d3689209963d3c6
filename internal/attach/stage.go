package attach

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Store is what the stage needs of *store.Store.
type Store interface {
	ClaimAttachJobs(ctx context.Context, limit int, lease time.Duration) ([]store.AttachJob, error)
	SaveAttachment(ctx context.Context, mailID int64, idx int, content []byte) error
	NoteAttachmentFailure(ctx context.Context, mailID int64, idx int, reason, detail, status string) error
	AttachmentsReady(ctx context.Context, mailID int64) (bool, error)
	RetryAttachments(ctx context.Context, mailID int64, wait time.Duration) error
	FailAttachments(ctx context.Context, mailID int64, detail string) (bool, error)
}

// Config configures a Stage.
type Config struct {
	Fetch FetchConfig
	// Concurrency is the most fetches at once (attachments.concurrency).
	Concurrency int
	// RetryBackoff and RetryBackoffMax bound the wait before a mail's next
	// fetch pass after a transient failure (capped exponential, jitter).
	RetryBackoff, RetryBackoffMax time.Duration
	// PollInterval is how often the stage looks for due mails.
	PollInterval time.Duration
	// MaxEventAge is mail.max_event_age: a file still failing when the
	// event is that old is given up.
	MaxEventAge time.Duration
	// Now is the clock the max age is judged on; nil means time.Now.
	Now func() time.Time
}

// Stage runs the fetch stage.
type Stage struct {
	cfg     Config
	store   Store
	fetcher *Fetcher
	metrics *Metrics
	log     *slog.Logger
	life    lifecycle.Life
}

// NewStage returns a stage; metrics may be nil (not exported).
func NewStage(cfg Config, st Store, metrics *Metrics, log *slog.Logger) *Stage {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Stage{cfg: cfg, store: st, fetcher: NewFetcher(cfg.Fetch), metrics: metrics, log: log.With("component", "attach")}
}

// Start runs the stage in the background until Stop (internal/lifecycle:
// ctx's cancellation does not stop it). A failing database is logged and
// tried again at the next poll.
func (s *Stage) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(stop, _ context.Context) error { return s.Run(stop) })
}

// Stop ends the stage and waits for it until ctx is done; fetches in
// flight are abandoned (their mails' leases expire and they are fetched
// again).
func (s *Stage) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Done is closed once the stage has ended; Err then says why.
func (s *Stage) Done() <-chan struct{} { return s.life.Done() }

// Err is what ended the stage, nil while it runs.
func (s *Stage) Err() error { return s.life.Err() }

// Run polls for due mails until ctx ends, and returns nil then.
func (s *Stage) Run(ctx context.Context) error {
	defer s.fetcher.Close()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		n, err := s.Once(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("attachment fetch pass failed", "error", err)
		}
		if n > 0 && err == nil {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Once takes up to Concurrency due mails, fetches their files (at most
// Concurrency at once) and records the outcome of each; it returns how
// many mails it took.
func (s *Stage) Once(ctx context.Context) (int, error) {
	// A mail has at most ten files, fetched one after another: its lease
	// outlasts them all, then another replica may take it.
	lease := 10 * (s.cfg.Fetch.Timeout + 30*time.Second)
	jobs, err := s.store.ClaimAttachJobs(ctx, s.cfg.Concurrency, lease)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.Concurrency)
	errs := make([]error, len(jobs))
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.job(ctx, &jobs[i], sem)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return len(jobs), e
		}
	}
	return len(jobs), nil
}

// job fetches the pending files of one mail, then makes it ready, fails
// it, or schedules its next pass.
func (s *Stage) job(ctx context.Context, j *store.AttachJob, sem chan struct{}) error {
	expired := s.cfg.Now().After(j.OccurredAt.Add(s.cfg.MaxEventAge))
	retry := false
	for i := range j.Refs {
		ref := &j.Refs[i]
		if ref.Status != store.AttachPending {
			continue
		}
		sem <- struct{}{}
		b, r := s.fetch(ctx, *ref)
		<-sem
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r == nil {
			if err := s.store.SaveAttachment(ctx, j.MailID, ref.Index, b); err != nil {
				return err
			}
			s.metrics.Stored.Add(float64(len(b)))
			s.metrics.Fetched.Inc()
			ref.Status = store.AttachFetched
			continue
		}
		s.metrics.Failures.WithLabelValues(string(r.Reason)).Inc()
		optionalDone := ref.Optional && s.optionalSpent(j, ref)
		if r.Transient && !expired && !optionalDone {
			retry = true
			if err := s.store.NoteAttachmentFailure(ctx, j.MailID, ref.Index, string(r.Reason), r.Detail, ""); err != nil {
				return err
			}
			continue
		}
		switch {
		case r.Transient && !expired:
			r = &Refusal{Reason: ReasonExpired, Detail: fmt.Sprintf("optional: still failing after %d attempts: %s: %s",
				ref.Attempts+1, r.Reason, r.Detail)}
			s.metrics.Failures.WithLabelValues(string(ReasonExpired)).Inc()
		case r.Transient:
			r = &Refusal{Reason: ReasonExpired, Detail: fmt.Sprintf("still failing when the max event age ran out: %s: %s", r.Reason, r.Detail)}
			s.metrics.Failures.WithLabelValues(string(ReasonExpired)).Inc()
		}
		done, err := s.giveUp(ctx, j, ref, r)
		if err != nil || done {
			return err
		}
	}
	if retry {
		return s.store.RetryAttachments(ctx, j.MailID, backoff.Delay(j.Pass, s.cfg.RetryBackoff, s.cfg.RetryBackoffMax))
	}
	_, err := s.store.AttachmentsReady(ctx, j.MailID)
	return err
}

// OptionalAttempts is how many fetches an optional file gets before the
// mail goes without it. A required file is retried until the event's max
// age runs out; an optional one must not hold the mail that long, or the
// mail it was optional for would go stale waiting and never be sent.
const OptionalAttempts = 3

// optionalSpent reports whether the optional file ref has had its chance:
// OptionalAttempts fetches with this one, or a quarter of the event's max
// age gone (so that, with a short mail.max_event_age, the mail still
// leaves well before it turns stale).
func (s *Stage) optionalSpent(j *store.AttachJob, ref *store.AttachmentRef) bool {
	return ref.Attempts+1 >= OptionalAttempts || s.cfg.Now().After(j.OccurredAt.Add(s.cfg.MaxEventAge/4))
}

// giveUp records a file that will not be had: an optional one is omitted
// (the mail goes without it), a required one fails the mail. done is true
// when the mail failed.
func (s *Stage) giveUp(ctx context.Context, j *store.AttachJob, ref *store.AttachmentRef, r *Refusal) (done bool, err error) {
	detail := fmt.Sprintf("%s: %s: %s", ref.FileName, r.Reason, r.Detail)
	status := store.AttachFailed
	if ref.Optional {
		status = store.AttachOmitted
	}
	if err := s.store.NoteAttachmentFailure(ctx, j.MailID, ref.Index, string(r.Reason), r.Detail, status); err != nil {
		return false, err
	}
	ref.Status = status
	s.log.Info("attachment refused", "mail_id", j.MailID, "dedupe_key", j.DedupeKey, "file", ref.FileName,
		"reason", r.Reason, "detail", r.Detail, "optional", ref.Optional)
	if ref.Optional {
		return false, nil
	}
	failed, err := s.store.FailAttachments(ctx, j.MailID, detail)
	if failed {
		s.metrics.MailsFailed.Inc()
	}
	return true, err
}

func (s *Stage) fetch(ctx context.Context, ref store.AttachmentRef) ([]byte, *Refusal) {
	start := time.Now()
	b, r := s.fetcher.Fetch(ctx, ref)
	s.metrics.Fetch.Observe(time.Since(start).Seconds())
	return b, r
}
