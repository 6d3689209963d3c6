-- +goose NO TRANSACTION
-- +goose Up
-- Priority lanes (docs/design.md, "Priority lanes"): each mail has a lane,
-- 0 bulk (the default: confirmations) or 1 priority (cancellation notices,
-- operator resends, and any template whose settings.yaml says so), set when
-- the row is written and never changed. The claim takes the due rows of
-- each lane by weight, so the claim's partial index leads with the lane: one
-- ordered scan per lane, each touching only rows with work left: a mail whose
-- attachments are still being fetched (attach_state 'pending', migration
-- 00280) is not in the index until they are, so a burst of such mails never
-- slows the claim.
--
-- A column with a constant default is added without rewriting the table
-- (PostgreSQL 11 and later), under a brief ACCESS EXCLUSIVE lock, bounded
-- by lock_timeout so that a long transaction makes the migration fail
-- (run it again) instead of stalling every writer behind it. The index is
-- built CONCURRENTLY (see migration 00240): a failed build leaves an
-- INVALID index that the DROP ... IF EXISTS replaces on the next run. The
-- old index goes last, once the new one serves the claim. Its entries per
-- mail are unchanged (one per pending row version); the key is 2 bytes wider.
SET lock_timeout = '3s';
ALTER TABLE mail ADD COLUMN IF NOT EXISTS lane smallint NOT NULL DEFAULT 0;
RESET lock_timeout;
DROP INDEX CONCURRENTLY IF EXISTS mail_pending_lane_due_idx;
CREATE INDEX CONCURRENTLY mail_pending_lane_due_idx ON mail (lane, send_after, id)
    WHERE status = 'pending' AND NOT cancel_requested AND attach_state IS DISTINCT FROM 'pending';
DROP INDEX CONCURRENTLY IF EXISTS mail_pending_due_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS mail_pending_due_idx;
CREATE INDEX CONCURRENTLY mail_pending_due_idx ON mail (send_after, id)
    WHERE status = 'pending' AND NOT cancel_requested;
DROP INDEX CONCURRENTLY IF EXISTS mail_pending_lane_due_idx;
ALTER TABLE mail DROP COLUMN IF EXISTS lane;
