-- +goose Up
-- The ACCESS EXCLUSIVE lock below waits for every transaction that uses
-- mail or outbox, and while it waits every later statement on them waits
-- behind it: a transaction left open on mail would stall every replica.
-- So the migration waits at most 3 s for a lock and otherwise fails
-- (SQLSTATE 55P03, lock timeout), changing nothing; run it again.
SET LOCAL lock_timeout = '3s';
-- Room on every page of mail for heap-only (HOT) updates: a send-started
-- mark that keeps the lease changes no indexed column (store.StartLease),
-- so PostgreSQL can write the new row version on the same page without
-- adding an entry to any of mail's indexes, but only when that page has
-- space left. Inserts and the other updates fill a page to 70 % and leave
-- the rest to HOT versions. Pages written before this migration stay as
-- full as they are. The lock this takes (SHARE UPDATE EXCLUSIVE) does not
-- block reads or writes.
ALTER TABLE mail SET (fillfactor = 70);

-- The rendered content and the payloads are compressed with LZ4 where the
-- server was built with it (default_toast_compression lists lz4): pglz
-- compression was the largest single function in a CPU profile of the
-- server under a full-speed run, and LZ4 compresses several times faster.
-- Values written earlier keep their compression; both are read alike.
-- This is a change of the catalog only (no rewrite), but it takes an
-- ACCESS EXCLUSIVE lock on mail and outbox for that moment (bounded by the
-- lock timeout above).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE mail ALTER COLUMN body_text SET COMPRESSION lz4,
            ALTER COLUMN body_html SET COMPRESSION lz4,
            ALTER COLUMN payload SET COMPRESSION lz4;
        ALTER TABLE outbox ALTER COLUMN payload SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '3s';
ALTER TABLE outbox ALTER COLUMN payload SET COMPRESSION DEFAULT;
ALTER TABLE mail ALTER COLUMN body_text SET COMPRESSION DEFAULT,
    ALTER COLUMN body_html SET COMPRESSION DEFAULT,
    ALTER COLUMN payload SET COMPRESSION DEFAULT;
ALTER TABLE mail RESET (fillfactor);
