-- +goose Up
-- The per-recipient safety limit (mail.recipient_limit): a runaway
-- producer must not mail one customer a thousand times. Mails over the
-- limit are recorded 'held': never claimed, never lost, released or
-- cancelled by an operator (mailsvc mail release / mail cancel-held).
SET LOCAL lock_timeout = '3s';
-- The new status. The constraint is added NOT VALID and validated in a
-- second step, which scans the table without blocking writes.
ALTER TABLE mail DROP CONSTRAINT mail_status_check;
ALTER TABLE mail ADD CONSTRAINT mail_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'unknown', 'held')) NOT VALID;
ALTER TABLE mail VALIDATE CONSTRAINT mail_status_check;

-- recipient_window counts the mails recorded for one recipient (the
-- address lower-cased) in one fixed window of mail.recipient_limit_window.
-- The ingest statement adds to it in the same statement that inserts the
-- mails, so the row lock orders replicas: the limit holds across them.
-- Old windows are deleted by the retention sweep.
CREATE TABLE recipient_window (
    recipient    text NOT NULL,
    window_start timestamptz NOT NULL,
    mails        integer NOT NULL CHECK (mails >= 0),
    PRIMARY KEY (recipient, window_start)
);
CREATE INDEX recipient_window_start_idx ON recipient_window (window_start);

-- The held mails, for the stats and the operator commands.
CREATE INDEX mail_held_idx ON mail (id) WHERE status = 'held';

-- +goose Down
DROP INDEX mail_held_idx;
DROP TABLE recipient_window;
UPDATE mail SET status = 'pending' WHERE status = 'held';
ALTER TABLE mail DROP CONSTRAINT mail_status_check;
ALTER TABLE mail ADD CONSTRAINT mail_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'unknown'));
