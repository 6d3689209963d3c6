-- +goose Up
-- What makes a crash, a lost reply or a database outage end truthfully:
--   send_started_at  set by the claim's owner just before it hands the mail to
--                    the provider; the claim resets it. A `sending` row whose
--                    lease expired with it NULL was never handed over: it is
--                    reclaimed silently, no attempt spent. With it set the
--                    send may have reached the provider (ambiguous).
--   sends            sends started, i.e. attempts spent; sender.max_attempts
--                    counts these (attempts stays the claim counter and the
--                    fencing token).
--   ambiguous        ambiguous outcomes so far (sender.ambiguous_retries).
--   from_addr, to_name, reply_to, idempotency_key
--                    everything on the wire besides the rendered content,
--                    fixed when the row is written so that every attempt
--                    sends identical bytes whatever the running config says.
--                    '' in from_addr marks a row written before this
--                    migration: its sender fills them from the config.
ALTER TABLE mail
    ADD COLUMN send_started_at timestamptz,
    ADD COLUMN sends integer NOT NULL DEFAULT 0 CHECK (sends >= 0),
    ADD COLUMN ambiguous integer NOT NULL DEFAULT 0 CHECK (ambiguous >= 0),
    ADD COLUMN from_addr text NOT NULL DEFAULT '',
    ADD COLUMN to_name text NOT NULL DEFAULT '',
    ADD COLUMN reply_to text NOT NULL DEFAULT '',
    ADD COLUMN idempotency_key text NOT NULL DEFAULT '';

-- Rows with work left keep their history: every claim used to count as an
-- attempt, and an in-flight row may have reached the provider.
UPDATE mail SET sends = attempts,
    send_started_at = CASE WHEN status = 'sending' THEN updated_at END
WHERE status IN ('pending', 'sending', 'unknown') AND attempts > 0;

-- Replicas of the previous version must not claim on this schema: they
-- would hand mails over without the send-started mark, and a reclaim
-- would take their in-flight sends for never started. Their claim reads
-- first_attempt_at, so renaming it makes their claims fail (42703) until
-- they are replaced; the sends they had in flight now are marked started
-- above, and their own outcome writes still work.
ALTER TABLE mail RENAME COLUMN first_attempt_at TO first_claimed_at;

-- One row per setting of this deployment. deployment_id namespaces the
-- provider idempotency keys (mail.idempotency_namespace defaults to it), so
-- two deployments sharing a Resend account never replay each other's keys.
CREATE TABLE mailsvc_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO mailsvc_meta (key, value) VALUES ('deployment_id', gen_random_uuid()::text);

-- +goose Down
DROP TABLE mailsvc_meta;
ALTER TABLE mail RENAME COLUMN first_claimed_at TO first_attempt_at;
ALTER TABLE mail
    DROP COLUMN send_started_at,
    DROP COLUMN sends,
    DROP COLUMN ambiguous,
    DROP COLUMN from_addr,
    DROP COLUMN to_name,
    DROP COLUMN reply_to,
    DROP COLUMN idempotency_key;
