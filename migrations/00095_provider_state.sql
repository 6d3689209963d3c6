-- +goose Up
-- provider_state: what every replica shares about a provider (docs/design.md,
-- "Provider limits, pauses and the breaker"): one row per provider name.
--   next_slot     the deployment-wide rate limit: the earliest time the next
--                 send may start (send slots are handed out 1/rate apart, in
--                 batches, by one UPDATE ... RETURNING).
--   paused_until  with pause_reason 'rate_limited', the end of a pause the
--                 provider asked for (HTTP 429 Retry-After / ratelimit-reset);
--                 with 'quota' or 'breaker', the time of the next probe: the
--                 pause lasts until a probe send succeeds.
--   pause_reason  NULL (not paused), 'rate_limited', 'quota' or 'breaker'.
--   pause_error   the sanitized error that paused it; paused_at when.
--   failures      consecutive configuration failures (authentication refused,
--                 TLS, connection refused) across every replica; a success
--                 resets it, sender.breaker_threshold of them open the breaker.
--   probe_by      the worker that took the current probe.
CREATE TABLE provider_state (
    provider     text PRIMARY KEY,
    next_slot    timestamptz NOT NULL DEFAULT '-infinity',
    paused_until timestamptz,
    pause_reason text CHECK (pause_reason IN ('rate_limited', 'quota', 'breaker')),
    pause_error  text,
    paused_at    timestamptz,
    failures     integer NOT NULL DEFAULT 0,
    probe_by     text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO provider_state (provider) VALUES ('smtp'), ('resend');

-- +goose Down
DROP TABLE provider_state;
