-- +goose Up
-- The relay lease: one row naming the replica whose relay publishes the
-- outbox. A replica leads while expires_at (the database's clock) is in the
-- future and renews it well before then; any replica may take an expired
-- lease, and each taking increments epoch, the fencing token every write of
-- the leader checks. It needs no session state, so it works through any
-- connection pooler, and a leader whose host vanished loses it after one
-- lease period whatever TCP does.
CREATE TABLE relay_lease (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    holder      text NOT NULL,
    epoch       bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE relay_lease;
