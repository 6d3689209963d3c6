-- +goose Up
-- console_session: the support console's logins (internal/console,
-- docs/console.md, "Sessions"). The session cookie carries a random id;
-- only its SHA-256 is stored (id_sha256), so a read of this table gives
-- no one a session. user_name is looked up in the configuration on every
-- request (its role comes from there, and a removed user's session is
-- refused); hash_fingerprint is the SHA-256 of the user's password_hash
-- at login, so a changed password ends the user's sessions. Logout
-- deletes the row; expired rows are deleted at each login, at most 1000
-- at a time (console_session_expires_idx).
CREATE TABLE console_session (
    id_sha256        bytea PRIMARY KEY CHECK (length(id_sha256) = 32),
    user_name        text NOT NULL CHECK (user_name <> ''),
    hash_fingerprint bytea NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL
);
CREATE INDEX console_session_expires_idx ON console_session (expires_at);

-- +goose Down
DROP TABLE console_session;
