-- +goose Up
-- `mailsvc outbox republish --order ID` reads the published feedback events
-- of the orders it is given, in write order (docs/operating.md, "Feedback
-- backfill"). The published rows are kept for retention.window; this index
-- finds an order's among them without a scan of the outbox.
CREATE INDEX IF NOT EXISTS outbox_published_order_idx ON outbox (order_id, id) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS outbox_published_order_idx;
