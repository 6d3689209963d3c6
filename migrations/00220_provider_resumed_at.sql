-- +goose Up
-- provider_state.resumed_at is when the provider's last quota or breaker
-- pause ended (a probe succeeded, an operator resumed it): a mail whose
-- event was still fresh then is sent, not failed stale, although the
-- outage made it wait past its max event age (docs/design.md, "Provider
-- limits, pauses and the breaker"). A small table: no rewrite, no lock
-- held long.
SET LOCAL lock_timeout = '3s';
ALTER TABLE provider_state ADD COLUMN resumed_at timestamptz;

-- +goose Down
ALTER TABLE provider_state DROP COLUMN resumed_at;
