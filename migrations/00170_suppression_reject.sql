-- +goose Up
-- A new source of suppression entries: smtp/reject, the SMTP relay
-- refused the recipient for good during the send (suppression.smtp_codes).
-- The constraint is added NOT VALID and validated in a second step, which
-- reads the table without blocking writes.
SET LOCAL lock_timeout = '3s';
ALTER TABLE suppression DROP CONSTRAINT suppression_source_check;
ALTER TABLE suppression ADD CONSTRAINT suppression_source_check
    CHECK (source IN ('webhook/bounce', 'webhook/complaint', 'operator', 'smtp/reject')) NOT VALID;
ALTER TABLE suppression VALIDATE CONSTRAINT suppression_source_check;

-- +goose Down
DELETE FROM suppression WHERE source = 'smtp/reject';
ALTER TABLE suppression DROP CONSTRAINT suppression_source_check;
ALTER TABLE suppression ADD CONSTRAINT suppression_source_check
    CHECK (source IN ('webhook/bounce', 'webhook/complaint', 'operator'));
