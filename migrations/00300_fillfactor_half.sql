-- +goose Up
-- Room on every page of mail and outbox for the new versions of the rows
-- written there (docs/benchmarks.md, "Where the WAL goes"). A version
-- PostgreSQL can write on the page of the old one is logged as the bytes
-- that changed (prefix and suffix compression); one that has to move to
-- another page is logged whole, and its old page is locked and logged
-- once more. A mail row is updated three times after its insert (claim,
-- send-started mark, outcome) and an outbox row once (its published
-- mark), so inserts fill a page to half and leave the rest to those
-- versions: 7,950 WAL bytes a mail at full speed where 70 % on mail
-- (migration 00140) and a full outbox page took 9,300; 35 % gave 7,900.
-- The tables take twice the pages of their live rows; pages written
-- before this migration stay as full as they are. The lock this takes
-- (SHARE UPDATE EXCLUSIVE) does not block reads or writes.
SET LOCAL lock_timeout = '3s';
ALTER TABLE mail SET (fillfactor = 50);
ALTER TABLE outbox SET (fillfactor = 50);

-- +goose Down
SET LOCAL lock_timeout = '3s';
ALTER TABLE outbox RESET (fillfactor);
ALTER TABLE mail SET (fillfactor = 70);
