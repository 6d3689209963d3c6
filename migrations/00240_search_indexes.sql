-- +goose NO TRANSACTION
-- +goose Up
-- The indexes of the support search (store.SearchMails; docs/design.md,
-- "Support search and timeline"). The search's other filters use indexes
-- that exist already: dedupe_key and event_id (unique), order_id
-- (mail_order_id_idx), the statuses with work left, failed and held (the
-- partial indexes of migrations 00100 and 00150), and outbox.event_id
-- (unique) for a feedback event's id.
--
-- Built CONCURRENTLY, outside a transaction: a build on a large table
-- takes seconds per index, and a plain build would hold writes to mail
-- (ingest, claims, outcomes) for all of them. A concurrent build takes
-- only SHARE UPDATE EXCLUSIVE, which conflicts with no read or write, so
-- no lock_timeout is needed to keep the writers moving; it waits for the
-- transactions older than itself to end. A build that fails (or is
-- interrupted) leaves an INVALID index and goose does not record the
-- version: each build is preceded by a DROP ... IF EXISTS so that running
-- the migration again replaces it.
--
-- Write cost: an index gets an entry for every row version it covers
-- that is not a heap-only (HOT) update. A mail's row versions on the
-- happy path are the insert, the claim and the outcome (the send-started
-- mark stays HOT: it changes no indexed column), so each full index below
-- costs three index insertions per mail, measured by
-- BenchmarkSearchIndexWrites (docs/benchmarks.md).

-- The time order of the search, newest or oldest first, and its
-- created_at range: a page is the first rows of an ordered scan. The
-- columns a search filters on without an index of their own (status,
-- template, provider) are included, so that a count of those filters
-- reads the index, not the wide rows (a mail row is kilobytes). They
-- change only on writes that are not heap-only anyway (claims and
-- outcomes change status), so they cost no HOT update, only bytes.
DROP INDEX CONCURRENTLY IF EXISTS mail_created_idx;
CREATE INDEX CONCURRENTLY mail_created_idx ON mail (created_at, id) INCLUDE (status, template, provider);

-- The mails that ended without being sent, by status in time order: a
-- search of failed, cancelled or unknown mails (a few percent of the
-- table) reads only them, and counts them from the index alone. The other statuses are served as before: pending, sending
-- and held rows are few (mail_active_idx, mail_held_idx), sent ones are
-- most rows (mail_created_idx in time order finds a page at once). A
-- partial index costs only the row versions it holds: nothing on the
-- happy path.
DROP INDEX CONCURRENTLY IF EXISTS mail_unsent_idx;
CREATE INDEX CONCURRENTLY mail_unsent_idx ON mail (status, created_at, id)
    WHERE status IN ('failed', 'cancelled', 'unknown');

-- The recipient, matched case-insensitively on the whole address, in
-- time order: an address with thousands of mails (a shop's own copy
-- address, a test address) gives its newest page at once, and its count
-- from the index alone.
DROP INDEX CONCURRENTLY IF EXISTS mail_recipient_idx;
CREATE INDEX CONCURRENTLY mail_recipient_idx ON mail (lower(to_email), created_at, id);

-- Any provider's message id. It replaces mail_resend_message_id_idx (the
-- Resend mails only), whose every entry it holds: the webhook's lookup
-- (provider = $1 AND provider_message_id = $2) uses it as well, so a
-- Resend mail still pays one entry, and an SMTP mail pays one from its
-- outcome on (its pending and sending versions have no id).
DROP INDEX CONCURRENTLY IF EXISTS mail_provider_message_id_idx;
CREATE INDEX CONCURRENTLY mail_provider_message_id_idx ON mail (provider_message_id)
    WHERE provider_message_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS mail_resend_message_id_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS mail_resend_message_id_idx;
CREATE INDEX CONCURRENTLY mail_resend_message_id_idx ON mail (provider_message_id)
    WHERE provider = 'resend' AND provider_message_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS mail_provider_message_id_idx;
DROP INDEX CONCURRENTLY IF EXISTS mail_recipient_idx;
DROP INDEX CONCURRENTLY IF EXISTS mail_unsent_idx;
DROP INDEX CONCURRENTLY IF EXISTS mail_created_idx;
