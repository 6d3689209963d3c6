-- +goose Up
-- revision: which confirmation of a reopened order a mail belongs to. An
-- order that is cancelled, reopened and confirmed again is a new revision
-- (data.revision of the input events, absent meaning 1); an OrderCancelled
-- of revision n cancels, or tombstones, the mails of revision n only. Rows
-- written before this migration are revision 1.
ALTER TABLE mail ADD COLUMN revision integer NOT NULL DEFAULT 1 CHECK (revision >= 1);
-- mail_order_id_idx (order_id) still serves the cancel: one order has few rows.

-- +goose Down
ALTER TABLE mail DROP COLUMN revision;
