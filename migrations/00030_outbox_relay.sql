-- +goose Up
-- The relay publishes the rows of one order in the order they were written:
-- it takes a row only while no earlier row of the same order is still
-- unpublished and alive. This index answers that NOT EXISTS probe and, being
-- partial, stays as small as the backlog.
CREATE INDEX outbox_unpublished_order_idx ON outbox (order_id, id)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- Wakes the relay across replicas (LISTEN/NOTIFY) when a row is written.
-- The channel carries the schema name, so deployments (and tests) sharing
-- one database in different schemas do not wake each other; the relay
-- computes the same name (store.outboxChannelSQL). One notification per
-- statement, delivered at commit; polling stays the safety net.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mailsvc_outbox.' || left(TG_TABLE_SCHEMA, 40), '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP INDEX outbox_unpublished_order_idx;
