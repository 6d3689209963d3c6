package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ProviderState is what every replica shares about one provider (table
// provider_state, migration 00095; docs/design.md, "Provider limits,
// pauses and the breaker"). Times are on the database's clock; Now is that
// clock when the row was read, so a reader converts PausedUntil to its own
// clock as PausedUntil - Now + its time of reading. In JSON its keys are
// snake_case; a zero time, an empty reason, error or probe_by is left out.
type ProviderState struct {
	// Provider is the provider's name ("smtp", "resend").
	Provider string `json:"provider"`
	// Reason is why it is paused, "" when it never was or was resumed.
	Reason mailtype.PauseReason `json:"reason,omitempty"`
	// PausedUntil is the end of a rate-limit pause, or the next probe time
	// of a quota or breaker pause; zero when not paused.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// PausedAt is when the current pause began; Error the sanitized error
	// that caused it.
	PausedAt time.Time `json:"paused_at,omitzero"`
	Error    string    `json:"error,omitempty"`
	// Failures counts consecutive configuration failures across replicas.
	Failures int `json:"failures"`
	// ProbeBy names the worker that took the last probe, "" for none.
	ProbeBy string `json:"probe_by,omitempty"`
	// ResumedAt is when the last quota or breaker pause ended (a probe
	// succeeded, an operator resumed the provider); zero when none did.
	ResumedAt time.Time `json:"resumed_at,omitzero"`
	// Now is the database's clock at the read.
	Now time.Time `json:"now"`
}

// Paused reports whether the provider takes no send but a probe: a
// rate-limit pause until PausedUntil, a quota or breaker pause until a
// probe succeeds.
func (s ProviderState) Paused() bool {
	if s.Reason.Probed() {
		return true
	}
	return s.Reason == mailtype.PauseRateLimited && s.PausedUntil.After(s.Now)
}

// ProbeDue reports whether a quota or breaker pause has reached its next
// probe time.
func (s ProviderState) ProbeDue() bool {
	return s.Reason.Probed() && !s.PausedUntil.After(s.Now)
}

// Slots is what TakeSendSlots granted.
type Slots struct {
	// First is the start of the first slot on the database's clock; slot i
	// starts at First + i × the interval asked for. Zero when none was
	// granted (the provider is paused).
	First time.Time
	// State is the provider's state after the statement.
	State ProviderState
}

// providerPaused is the SQL of ProviderState.Paused on a row named s.
const providerPaused = `(s.pause_reason IN ('quota', 'breaker') OR (s.pause_reason = 'rate_limited' AND s.paused_until > now()))`

// providerCols is the RETURNING list scanned by scanProvider.
const providerCols = `s.provider, COALESCE(s.pause_reason, ''), s.paused_until, s.paused_at, COALESCE(s.pause_error, ''),
    s.failures, COALESCE(s.probe_by, ''), s.resumed_at, now()`

// slotsSQL hands out $2 send slots $3 apart from the provider's next free
// slot, never earlier than now (so an idle provider earns no burst): the
// deployment-wide rate limit in one row, one statement per batch. A paused
// provider grants none, unless $4 (a probe).
const slotsSQL = `
UPDATE provider_state s SET
    next_slot = CASE WHEN ` + providerPaused + ` AND NOT $4 THEN s.next_slot
        ELSE greatest(s.next_slot, now()) + $2::int * $3::interval END
WHERE s.provider = $1
RETURNING CASE WHEN ` + providerPaused + ` AND NOT $4 THEN NULL ELSE s.next_slot - $2::int * $3::interval END, ` + providerCols

// TakeSendSlots reserves n send slots of the provider, interval apart,
// after every slot any replica reserved before (the rate limit is 1 /
// interval per second for the whole deployment). The caller starts send i
// no earlier than slot i. A paused provider grants none (Slots.First zero)
// unless probe is set. Errors are classified (transient, ReasonDatabase).
func (s *Store) TakeSendSlots(ctx context.Context, provider string, n int, interval time.Duration, probe bool) (Slots, error) {
	if n <= 0 || interval <= 0 {
		return Slots{}, fmt.Errorf("take send slots: n %d and interval %s must be positive", n, interval)
	}
	var out Slots
	var first *time.Time
	err := s.updateProvider(ctx, provider, func() pgx.Row {
		return s.pool.QueryRow(ctx, slotsSQL, provider, n, interval, probe)
	}, func(r pgx.Row) error {
		return scanProvider(r, &out.State, &first)
	})
	if err != nil {
		return Slots{}, fmt.Errorf("take %d send slots of %s: %w", n, provider, err)
	}
	if first != nil {
		out.First = *first
	}
	return out, nil
}

// pauseSQL pauses a provider for $2 with reason $3 and error $4, unless a
// pause of a higher precedence (mailtype.PauseReasons) lasts: the pause
// ends at the later of the two ends, under the reason of the higher
// precedence.
const pauseSQL = `
UPDATE provider_state s SET
    paused_until = CASE WHEN old.paused THEN greatest(old.paused_until, now() + $2::interval) ELSE now() + $2::interval END,
    pause_reason = CASE WHEN old.paused AND old.rank > array_position(ARRAY['rate_limited', 'quota', 'breaker'], $3::text)
        THEN old.pause_reason ELSE $3::text END,
    pause_error = CASE WHEN old.paused AND old.rank > array_position(ARRAY['rate_limited', 'quota', 'breaker'], $3::text)
        THEN old.pause_error ELSE $4::text END,
    paused_at = CASE WHEN old.paused THEN old.paused_at ELSE now() END,
    updated_at = now()
FROM (SELECT provider, paused_until, pause_reason, pause_error, paused_at, ` + providerPaused + ` AS paused,
        COALESCE(array_position(ARRAY['rate_limited', 'quota', 'breaker'], pause_reason), 0) AS rank
      FROM provider_state s WHERE provider = $1 FOR UPDATE) old
WHERE s.provider = old.provider
RETURNING ` + providerCols

// PauseProvider pauses the provider for every replica: for d (a rate-limit
// pause ends then; a quota or breaker pause probes then), with reason and
// the sanitized error text. A pause of a higher precedence that lasts is
// kept, its end pushed to the later of the two. It returns the state after
// the write.
func (s *Store) PauseProvider(ctx context.Context, provider string, reason mailtype.PauseReason, d time.Duration, errText string) (ProviderState, error) {
	var st ProviderState
	err := s.updateProvider(ctx, provider, func() pgx.Row {
		return s.pool.QueryRow(ctx, pauseSQL, provider, d, string(reason), errText)
	}, func(r pgx.Row) error { return scanProvider(r, &st, nil) })
	if err != nil {
		return ProviderState{}, fmt.Errorf("pause %s (%s): %w", provider, reason, err)
	}
	return st, nil
}

// failureSQL counts a configuration failure; the one that makes $2 in a
// row opens the breaker (a pause until the probe in $3), unless it is open
// already.
const failureSQL = `
UPDATE provider_state s SET
    failures = old.failures + 1,
    paused_until = CASE WHEN old.trip THEN greatest(old.paused_until, now() + $3::interval) ELSE old.paused_until END,
    pause_reason = CASE WHEN old.trip THEN 'breaker' ELSE old.pause_reason END,
    pause_error = CASE WHEN old.trip THEN $4::text ELSE old.pause_error END,
    paused_at = CASE WHEN old.trip AND NOT old.paused THEN now() ELSE old.paused_at END,
    updated_at = now()
FROM (SELECT provider, failures, paused_until, pause_reason, pause_error, paused_at, ` + providerPaused + ` AS paused,
        failures + 1 >= $2 AND pause_reason IS DISTINCT FROM 'breaker' AS trip
      FROM provider_state s WHERE provider = $1 FOR UPDATE) old
WHERE s.provider = old.provider
RETURNING ` + providerCols + `, old.trip`

// CountProviderFailure counts one configuration failure of the provider
// (consecutive across every replica). The one that makes threshold in a
// row opens the breaker: a pause whose first probe comes after probe, with
// errText. tripped reports that this call opened it.
func (s *Store) CountProviderFailure(ctx context.Context, provider string, threshold int, probe time.Duration, errText string) (st ProviderState, tripped bool, err error) {
	err = s.updateProvider(ctx, provider, func() pgx.Row {
		return s.pool.QueryRow(ctx, failureSQL, provider, threshold, probe, errText)
	}, func(r pgx.Row) error { return scanProvider(r, &st, nil, &tripped) })
	if err != nil {
		return ProviderState{}, false, fmt.Errorf("count a failure of %s: %w", provider, err)
	}
	return st, tripped, nil
}

// probeSQL takes the probe of a quota or breaker pause whose probe time
// came: the next one is pushed away, so exactly one worker of the
// deployment probes per period (and a prober that dies is replaced after
// it). The period doubles as the pause ages: the time the pause has lasted,
// at least ProbeFloor, at most $2 (a pause that began 3 s ago probes again
// in 3 s: probes 1, 2, 4, 8 ... s after the pause began, then every $2).
const probeSQL = `
UPDATE provider_state s SET
    paused_until = now() + least($2::interval, greatest($4::interval, now() - COALESCE(s.paused_at, now()))),
    probe_by = $3, updated_at = now()
WHERE s.provider = $1 AND s.pause_reason IN ('quota', 'breaker') AND s.paused_until <= now()
RETURNING ` + providerCols

// ProbeFloor is the least time between two probes of a paused provider,
// and the delay of the first probe after the breaker opens: a relay that
// restarts in a few seconds is found working again about a second after
// it is back.
const ProbeFloor = time.Second

// TakeProbe takes the provider's probe for worker when its time came:
// won is true for exactly one caller per probe period, which then sends
// one mail; the next probe is due after as long as the pause has lasted,
// within [min(ProbeFloor, next), next] (probeSQL). The state is returned
// either way.
func (s *Store) TakeProbe(ctx context.Context, provider, worker string, next time.Duration) (st ProviderState, won bool, err error) {
	err = scanProvider(s.pool.QueryRow(ctx, probeSQL, provider, next, worker, min(ProbeFloor, next)), &st, nil)
	switch {
	case err == nil:
		return st, true, nil
	case errors.Is(interpretError(err), ErrNotFound):
		st, err = s.ProviderState(ctx, provider)
		return st, false, err
	}
	return ProviderState{}, false, fmt.Errorf("take the probe of %s: %w", provider, interpretError(err))
}

// recoverSQL records that the provider works: the failures are forgotten
// and an open breaker closes; with $2 (a probe succeeded, an operator
// resumed it) every pause ends. The end of a quota or breaker pause is
// resumed_at.
const recoverSQL = `
UPDATE provider_state s SET failures = 0,
    resumed_at = CASE WHEN s.pause_reason = 'breaker' OR ($2 AND s.pause_reason = 'quota') THEN now() ELSE s.resumed_at END,
    paused_until = CASE WHEN $2 OR s.pause_reason = 'breaker' THEN NULL ELSE s.paused_until END,
    pause_error = CASE WHEN $2 OR s.pause_reason = 'breaker' THEN NULL ELSE s.pause_error END,
    paused_at = CASE WHEN $2 OR s.pause_reason = 'breaker' THEN NULL ELSE s.paused_at END,
    probe_by = CASE WHEN $2 OR s.pause_reason = 'breaker' THEN NULL ELSE s.probe_by END,
    pause_reason = CASE WHEN $2 OR s.pause_reason = 'breaker' THEN NULL ELSE s.pause_reason END,
    updated_at = now()
WHERE s.provider = $1
RETURNING ` + providerCols

// ProviderRecovered records that a send through the provider got past
// every configuration check: consecutive failures go back to 0 and an open
// breaker closes. With all (a probe succeeded, or an operator resumed the
// provider) a quota or rate-limit pause ends too.
func (s *Store) ProviderRecovered(ctx context.Context, provider string, all bool) (ProviderState, error) {
	var st ProviderState
	err := s.updateProvider(ctx, provider, func() pgx.Row {
		return s.pool.QueryRow(ctx, recoverSQL, provider, all)
	}, func(r pgx.Row) error { return scanProvider(r, &st, nil) })
	if err != nil {
		return ProviderState{}, fmt.Errorf("record %s recovered: %w", provider, err)
	}
	return st, nil
}

// ProviderState reads the provider's state; a provider without a row has
// the zero state (never paused).
func (s *Store) ProviderState(ctx context.Context, provider string) (ProviderState, error) {
	var st ProviderState
	err := scanProvider(s.pool.QueryRow(ctx, `SELECT `+providerCols+` FROM provider_state s WHERE s.provider = $1`, provider), &st, nil)
	if errors.Is(interpretError(err), ErrNotFound) {
		err = s.pool.QueryRow(ctx, `SELECT now()`).Scan(&st.Now)
		st.Provider = provider
	}
	if err != nil {
		return ProviderState{}, fmt.Errorf("read the state of %s: %w", provider, interpretError(err))
	}
	return st, nil
}

// ProviderStates reads the state of every provider, by name.
func (s *Store) ProviderStates(ctx context.Context) ([]ProviderState, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+providerCols+` FROM provider_state s ORDER BY s.provider`)
	if err != nil {
		return nil, fmt.Errorf("read provider states: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProviderState, error) {
		var st ProviderState
		return st, scanProvider(r, &st, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("read provider states: %w", interpretError(err))
	}
	return out, nil
}

// updateProvider runs a statement on the provider's row; when the row is
// missing (a provider name the migration did not insert) it is created and
// the statement runs once more.
func (s *Store) updateProvider(ctx context.Context, provider string, run func() pgx.Row, scan func(pgx.Row) error) error {
	err := scan(run())
	if !errors.Is(interpretError(err), ErrNotFound) {
		return interpretError(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO provider_state (provider) VALUES ($1) ON CONFLICT DO NOTHING`, provider); err != nil {
		return interpretError(err)
	}
	return interpretError(scan(run()))
}

// scanProvider scans providerCols into st, after first when set and
// followed by extra.
func scanProvider(r pgx.Row, st *ProviderState, first **time.Time, extra ...any) error {
	var until, at, resumed *time.Time
	var reason string
	dest := []any{&st.Provider, &reason, &until, &at, &st.Error, &st.Failures, &st.ProbeBy, &resumed, &st.Now}
	if first != nil {
		dest = append([]any{first}, dest...)
	}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return err
	}
	st.Reason = mailtype.PauseReason(reason)
	st.PausedUntil, st.PausedAt, st.ResumedAt = deref(until), deref(at), deref(resumed)
	return nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
