-- +goose Up
-- audit_log: every operator action (resend, reconcile, provider resume,
-- suppression add and remove, dead-letter replay) taken through the CLI,
-- the console or its API: who, when, through what, what on which target,
-- why, and the result (docs/design.md, "Audit log"). Rows are only ever
-- appended. dedupe_key is set when the action concerns one mail, so the
-- mail's timeline lists it (audit_log_mail_idx); `mailsvc audit list`
-- reads the newest first (audit_log_at_idx).
CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text NOT NULL CHECK (actor <> ''),
    via        text NOT NULL CHECK (via IN ('cli', 'console', 'api')),
    action     text NOT NULL CHECK (action <> ''),
    target     text NOT NULL,
    dedupe_key text,
    reason     text NOT NULL DEFAULT '',
    result     text NOT NULL CHECK (result IN ('done', 'refused', 'failed')),
    detail     text NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_mail_idx ON audit_log (dedupe_key, at DESC, id DESC) WHERE dedupe_key IS NOT NULL;

-- +goose Down
DROP TABLE audit_log;
