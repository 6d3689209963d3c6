-- +goose Up
-- A feedback event whose publish came back unroutable (no queue bound for
-- its routing key: an order service that does not take that event type,
-- or has not bound its queue yet) is retried for relay.unroutable_window.
-- Meanwhile it must not hold back the later events of its order, which
-- other queues may well take: the relay's order guard skips rows marked
-- here. The flag is cleared by the next publish that is not unroutable.
ALTER TABLE outbox ADD COLUMN unroutable boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE outbox DROP COLUMN unroutable;
