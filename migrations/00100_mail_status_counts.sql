-- +goose Up
-- Counters of finished mails (sent, failed, cancelled) for the stats query
-- (issue 14): counting them read the whole table every 5 s on every
-- replica, a cost that grows with retention. The rows with work left
-- (pending, sending, unknown) are few and are counted through the partial
-- index below; the finished ones are added up from these counters, which
-- triggers keep in the transaction of every change to mail, whichever
-- statement makes it (ingest, outcome writes, janitor, operator commands,
-- retention deletes, a hand-written UPDATE).
--
-- A change never updates a shared row, which would serialise every writer
-- on it: it appends its change to mail_status_delta (nothing for a claim or
-- a lease renewal). The stats collector folds the deltas into
-- mail_status_total (store.CompactStatusCounts) in one statement, so
-- total + delta is exact at every snapshot. Folded rows are dead until
-- autovacuum takes them (within autovacuum_naptime, 1 min by default: the
-- table has no live rows to speak of, so any few dozen dead ones trigger
-- it), so the delta table holds at most about a minute of finished mails.
-- Measured (README, "Metrics"): one plain row insert per finished mail
-- costs about 8 us of server time, half of what an upsert of one row per
-- transaction costs, and a statement trigger would cost every UPDATE of
-- mail (claims and lease renewals too) about 50 us.
CREATE TABLE mail_status_total (
    status text PRIMARY KEY CHECK (status IN ('sent', 'failed', 'cancelled')),
    n      bigint NOT NULL
);
CREATE TABLE mail_status_delta (
    id     bigint GENERATED ALWAYS AS IDENTITY,
    status text NOT NULL,
    n      bigint NOT NULL
);

-- The rows with work left, by status and time of their last change: the
-- counts of the stats query and `mailsvc mail list --status`.
CREATE INDEX mail_active_idx ON mail (status, updated_at)
    WHERE status IN ('pending', 'sending', 'unknown');
-- `mailsvc mail list --status failed`: failed rows among the finished ones.
CREATE INDEX mail_failed_idx ON mail (updated_at) WHERE status = 'failed';
-- A row trigger for inserts and updates: its WHEN clause is evaluated
-- without calling any function, so the writes that involve no finished
-- status (ingest of pending mails, claims, send-started marks, lease
-- renewals) cost nothing; an outcome write appends one delta row per mail
-- that finished. A statement trigger for deletes: retention deletes
-- finished rows a thousand at a time, and appends one delta row per
-- status.
-- +goose StatementBegin
CREATE FUNCTION mail_status_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.status IN ('sent', 'failed', 'cancelled') THEN
        INSERT INTO mail_status_delta (status, n) VALUES (OLD.status, -1);
    END IF;
    IF NEW.status IN ('sent', 'failed', 'cancelled') THEN
        INSERT INTO mail_status_delta (status, n) VALUES (NEW.status, 1);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION mail_status_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mail_status_delta (status, n)
    SELECT status, -count(*) FROM old_rows
    WHERE status IN ('sent', 'failed', 'cancelled') GROUP BY status;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION mail_status_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mail_status_delta;
    DELETE FROM mail_status_total;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- CREATE TRIGGER locks mail against writes until this migration commits,
-- so the count below and the triggers agree: no change is missed or
-- counted twice. The count is one pass over the table, once.
CREATE TRIGGER mail_status_count_insert AFTER INSERT ON mail FOR EACH ROW
    WHEN (NEW.status IN ('sent', 'failed', 'cancelled'))
    EXECUTE FUNCTION mail_status_moved();
CREATE TRIGGER mail_status_count_update AFTER UPDATE OF status ON mail FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND (OLD.status IN ('sent', 'failed', 'cancelled') OR NEW.status IN ('sent', 'failed', 'cancelled')))
    EXECUTE FUNCTION mail_status_moved();
CREATE TRIGGER mail_status_count_delete AFTER DELETE ON mail
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mail_status_deleted();
CREATE TRIGGER mail_status_count_truncate AFTER TRUNCATE ON mail
    FOR EACH STATEMENT EXECUTE FUNCTION mail_status_truncated();

INSERT INTO mail_status_total (status, n)
SELECT s, COALESCE(c.n, 0) FROM unnest(ARRAY['sent', 'failed', 'cancelled']) s
LEFT JOIN (SELECT status, count(*) AS n FROM mail GROUP BY status) c ON c.status = s;

-- The whole-table index of 00040 served only the count by status (and the
-- count above); every status change paid for it.
DROP INDEX mail_status_idx;

-- +goose Down
DROP TRIGGER mail_status_count_truncate ON mail;
DROP TRIGGER mail_status_count_delete ON mail;
DROP TRIGGER mail_status_count_update ON mail;
DROP TRIGGER mail_status_count_insert ON mail;
DROP FUNCTION mail_status_truncated();
DROP FUNCTION mail_status_deleted();
DROP FUNCTION mail_status_moved();
CREATE INDEX mail_status_idx ON mail (status);
DROP INDEX mail_failed_idx;
DROP INDEX mail_active_idx;
DROP TABLE mail_status_delta;
DROP TABLE mail_status_total;
