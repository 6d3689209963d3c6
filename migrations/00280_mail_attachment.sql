-- +goose Up
-- Attachments by reference (claim-check; docs/design.md, "Attachments").
-- mail.attach_state: NULL for a mail without attachments; 'pending' while
-- its files are not all fetched and verified (the claim never takes such
-- a mail); 'ready' once every file is stored (or an optional one given
-- up); 'failed' when a required file could not be had (the mail failed,
-- reason attachment). attach_next_at is when the fetch stage may try the
-- mail next (and its lease while it fetches); attach_attempts counts its
-- fetch passes.
SET LOCAL lock_timeout = '3s';
ALTER TABLE mail
    ADD COLUMN attach_state text CHECK (attach_state IN ('pending', 'ready', 'failed')),
    ADD COLUMN attach_next_at timestamptz,
    ADD COLUMN attach_attempts integer NOT NULL DEFAULT 0;
-- The fetch stage's queue: only mails waiting for their files.
CREATE INDEX mail_attach_pending_idx ON mail (attach_next_at, id)
    WHERE attach_state = 'pending' AND status IN ('pending', 'held');

-- One row per attachment of a mail: the reference as the event gave it,
-- the fetch's state, and once fetched and verified, the bytes. The bytes
-- are stored once per mail (TOAST keeps them out of the row), so every
-- attempt, failover and resend sends exactly them, whether or not the URL
-- still works. Deleted with the mail (ON DELETE CASCADE: retention's one
-- DELETE FROM mail removes them).
CREATE TABLE mail_attachment (
    mail_id      bigint NOT NULL REFERENCES mail (id) ON DELETE CASCADE,
    idx          smallint NOT NULL CHECK (idx >= 0),  -- position in data.attachments
    file_name    text NOT NULL,
    content_type text NOT NULL,
    url          text NOT NULL,
    sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size         bigint NOT NULL CHECK (size > 0),
    optional     boolean NOT NULL DEFAULT false,
    -- pending: not fetched yet; fetched: content holds the verified bytes;
    -- failed: given up (a required file fails the mail); omitted: an
    -- optional file given up, the mail goes without it.
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fetched', 'failed', 'omitted')),
    attempts     integer NOT NULL DEFAULT 0,
    reason       text,   -- the last refusal's reason (attachments.Reason*)
    detail       text,   -- its detail, for mail show and the feedback
    content      bytea,
    fetched_at   timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (mail_id, idx),
    CHECK ((status = 'fetched') = (content IS NOT NULL)),
    CHECK (content IS NULL OR octet_length(content) = size)
);
ALTER TABLE mail_attachment ALTER COLUMN content SET STORAGE EXTERNAL; -- already compressed (PDF, images): no pglz pass

-- +goose Down
SET LOCAL lock_timeout = '3s';
DROP TABLE mail_attachment;
DROP INDEX mail_attach_pending_idx;
ALTER TABLE mail DROP COLUMN attach_attempts, DROP COLUMN attach_next_at, DROP COLUMN attach_state;
