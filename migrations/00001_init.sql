-- +goose Up
-- mail: the service's own outbox of mails, one row per dedupe_key (docs/design.md, "State machine").
CREATE TABLE mail (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id            uuid UNIQUE,                 -- NULL for tombstones
    dedupe_key          text NOT NULL UNIQUE,
    order_id            text NOT NULL,
    template            text NOT NULL,
    locale              text NOT NULL DEFAULT '',
    to_email            text NOT NULL DEFAULT '',    -- '' for tombstones
    payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
    subject             text NOT NULL DEFAULT '',    -- rendered once, reused by every attempt
    body_text           text NOT NULL DEFAULT '',
    body_html           text NOT NULL DEFAULT '',
    message_id          text NOT NULL DEFAULT '',    -- RFC 5322 Message-ID, derived from dedupe_key
    status              text NOT NULL
        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'unknown')),
    cancel_requested    boolean NOT NULL DEFAULT false,
    cancel_event_id     uuid,                        -- not unique: one cancel covers several mails
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0), -- also the fencing token
    locked_until        timestamptz,                 -- lease end while sending
    locked_by           text,
    send_after          timestamptz NOT NULL DEFAULT now(), -- delay and backoff
    first_attempt_at    timestamptz,                 -- Resend idempotency keys live 24 h from here
    provider            text,
    provider_message_id text,
    last_error          text,                        -- sanitized: no secrets, no addresses
    occurred_at         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    CHECK (status <> 'sending' OR locked_until IS NOT NULL)
);

-- The claim reads due pending rows by (send_after, id) and expired leases by
-- (locked_until, id); both indexes hold only rows with work left, so the
-- claim's cost does not grow with the number of finished rows.
CREATE INDEX mail_pending_due_idx ON mail (send_after, id)
    WHERE status = 'pending' AND NOT cancel_requested;
CREATE INDEX mail_sending_lease_idx ON mail (locked_until, id)
    WHERE status = 'sending';
CREATE INDEX mail_order_id_idx ON mail (order_id);
-- Retention deletes finished rows oldest first.
CREATE INDEX mail_finished_idx ON mail (updated_at)
    WHERE status IN ('sent', 'failed', 'cancelled');
CREATE INDEX mail_unknown_idx ON mail (id) WHERE status = 'unknown';

-- outbox: feedback events for mail.events, written in the same transaction
-- as the state change they report, published by the relay.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid NOT NULL UNIQUE,            -- UUIDv7, made in Go when the row is written
    exchange        text NOT NULL,
    routing_key     text NOT NULL,
    event_type      text NOT NULL,
    order_id        text,                            -- keeps one order's events in write order
    dedupe_key      text,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(), -- publish backoff
    last_error      text,
    dead_at         timestamptz
);
CREATE INDEX outbox_unpublished_idx ON outbox (id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX outbox_dedupe_key_idx ON outbox (dedupe_key);

-- +goose Down
DROP TABLE outbox;
DROP TABLE mail;
