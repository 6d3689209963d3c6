-- +goose Up
-- Room on every page of mail for heap-only (HOT) updates: a send-started
-- mark that keeps the lease changes no indexed column (store.StartLease),
-- so PostgreSQL can write the new row version on the same page without
-- adding an entry to any of mail's indexes, but only when that page has
-- space left. Inserts and the other updates fill a page to 70 % and leave
-- the rest to HOT versions. Pages written before this migration stay as
-- full as they are. The lock this takes (SHARE UPDATE EXCLUSIVE) does not
-- block reads or writes.
ALTER TABLE mail SET (fillfactor = 70);

-- +goose Down
ALTER TABLE mail RESET (fillfactor);
