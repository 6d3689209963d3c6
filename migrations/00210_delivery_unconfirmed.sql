-- +goose Up
-- Sent mails with no delivery and no complaint report yet, by provider and
-- send time: the "delivery unconfirmed" flag (docs/design.md, "Delivery
-- unconfirmed") is read through it by the stats query every few seconds,
-- by `mailsvc mail list --unconfirmed`, and its predicate is the flag's
-- (store.unconfirmedWhere). A mail enters it when it is sent and leaves it
-- when its delivery or complaint is reported or a bounce fails it, so for
-- a provider that reports deliveries it holds the mails of the last minutes
-- plus those really missing a report; the provider leads, so the reads of
-- the providers that report never touch the rows of one that does not
-- (SMTP without success notifications, whose every sent mail stays here
-- until retention deletes it). A plain build locks writes to mail for its
-- duration, one pass over the table; lock_timeout keeps a migration that
-- waits behind a long transaction from stalling the writers queued behind it.
SET LOCAL lock_timeout = '3s';
CREATE INDEX mail_unconfirmed_idx ON mail (provider, sent_at)
    WHERE status = 'sent' AND delivered_at IS NULL AND complained_at IS NULL;

-- +goose Down
DROP INDEX mail_unconfirmed_idx;
