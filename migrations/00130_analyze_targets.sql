-- +goose Up
-- No planner statistics for the wide columns: no query filters on the
-- rendered content or the payloads, and computing their statistics made
-- an ANALYZE of mail cost about 170 ms of server time on 5,000 rows
-- (store.AnalyzeStale analyzes the hot tables when autovacuum does not).
-- A column list in ANALYZE would skip them too, but would leave the
-- table's change counter unreset, so it would look stale for ever.
ALTER TABLE mail ALTER COLUMN subject SET STATISTICS 0,
    ALTER COLUMN body_text SET STATISTICS 0,
    ALTER COLUMN body_html SET STATISTICS 0,
    ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE outbox ALTER COLUMN payload SET STATISTICS 0;

-- +goose Down
ALTER TABLE mail ALTER COLUMN subject SET STATISTICS -1,
    ALTER COLUMN body_text SET STATISTICS -1,
    ALTER COLUMN body_html SET STATISTICS -1,
    ALTER COLUMN payload SET STATISTICS -1;
ALTER TABLE outbox ALTER COLUMN payload SET STATISTICS -1;
