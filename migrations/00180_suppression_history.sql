-- +goose Up
-- The suppression list gets scope in time and a history
-- (docs/design.md, "Provider feedback and the suppression list"):
--   - seen and last_seen count the reports that named an address already
--     listed (the first reason and source are kept);
--   - expires_at ends an entry made by transient bounces
--     (suppression.transient_*); NULL is permanent, until an operator
--     removes it;
--   - suppression_event keeps every report that touched an address, its
--     transient bounces, and its removal, for `mailsvc suppression show`.
-- The suppression table is small (one row per bad address): the UPDATE
-- below reads it once.
SET LOCAL lock_timeout = '3s';
ALTER TABLE suppression ADD COLUMN last_seen timestamptz,
    ADD COLUMN seen integer NOT NULL DEFAULT 1 CHECK (seen >= 1),
    ADD COLUMN expires_at timestamptz;
UPDATE suppression SET last_seen = created_at;
ALTER TABLE suppression ALTER COLUMN last_seen SET DEFAULT now(), ALTER COLUMN last_seen SET NOT NULL;
ALTER TABLE suppression DROP CONSTRAINT suppression_source_check;
ALTER TABLE suppression ADD CONSTRAINT suppression_source_check
    CHECK (source IN ('webhook/bounce', 'webhook/complaint', 'webhook/transient', 'dsn/bounce', 'dsn/transient',
                      'operator', 'smtp/reject'));

-- The claim asks, per taken row, whether its recipient is listed and in
-- force: this index answers it from the index alone (an index-only scan),
-- as the primary key did before expires_at.
CREATE UNIQUE INDEX suppression_active_idx ON suppression (address) INCLUDE (expires_at);

CREATE TABLE suppression_event (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    address text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    kind    text NOT NULL CHECK (kind IN ('suppressed', 'seen_again', 'transient', 'removed')),
    source  text NOT NULL,
    reason  text NOT NULL
);
CREATE INDEX suppression_event_address_idx ON suppression_event (address, at);
INSERT INTO suppression_event (address, at, kind, source, reason)
SELECT address, created_at, 'suppressed', source, reason FROM suppression;

-- +goose Down
DROP TABLE suppression_event;
DROP INDEX suppression_active_idx;
DELETE FROM suppression WHERE source IN ('webhook/transient', 'dsn/bounce', 'dsn/transient');
ALTER TABLE suppression DROP CONSTRAINT suppression_source_check;
ALTER TABLE suppression ADD CONSTRAINT suppression_source_check
    CHECK (source IN ('webhook/bounce', 'webhook/complaint', 'operator', 'smtp/reject'));
ALTER TABLE suppression DROP COLUMN expires_at, DROP COLUMN seen, DROP COLUMN last_seen;
