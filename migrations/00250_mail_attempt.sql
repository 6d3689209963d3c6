-- +goose Up
-- mail_attempt: the sends of a mail that did not end in a first-send
-- success, for its timeline (store.MailTimeline; docs/design.md, "Support
-- search and timeline"): every outcome written onto a `sending` row (the
-- sender's, the janitor's verdict on an expired lease, a release of a
-- claim that never handed the mail over) except `sent` on the mail's first
-- send. The happy path's one send is told by the mail row itself
-- (send_started_at, sent_at, provider, provider_message_id), so it writes
-- nothing here: a trigger whose WHEN clause is evaluated without calling a
-- function writes the row in the outcome's own transaction, whatever
-- statement made it, at no cost to the writes that do not match.
SET LOCAL lock_timeout = '3s';
CREATE TABLE mail_attempt (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mail_id             bigint NOT NULL,       -- mail.id; deleted with the mail
    at                  timestamptz NOT NULL DEFAULT now(), -- when the outcome was written
    claim               integer NOT NULL,      -- mail.attempts: the claim (fencing token)
    send                integer NOT NULL,      -- mail.sends after the outcome
    started_at          timestamptz,           -- handed to the provider; NULL for a release
    status              text NOT NULL,         -- the status the outcome gave the mail
    provider            text,
    provider_message_id text,
    error               text,                  -- mail.last_error after the outcome
    error_class         text
);
CREATE INDEX mail_attempt_mail_idx ON mail_attempt (mail_id, id);

-- +goose StatementBegin
CREATE FUNCTION mail_attempt_recorded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mail_attempt (mail_id, claim, send, started_at, status, provider, provider_message_id, error, error_class)
    VALUES (NEW.id, NEW.attempts, NEW.sends, OLD.send_started_at, NEW.status, NEW.provider,
            NEW.provider_message_id, NEW.last_error, NEW.last_error_class);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION mail_attempt_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mail_attempt a USING old_rows o WHERE a.mail_id = o.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- CREATE TRIGGER locks writes to mail until this migration commits (a
-- moment: no scan); lock_timeout above bounds the wait for that lock.
CREATE TRIGGER mail_attempt_record AFTER UPDATE OF status ON mail FOR EACH ROW
    WHEN (OLD.status = 'sending' AND NEW.status <> 'sending' AND NOT (NEW.status = 'sent' AND NEW.sends <= 1))
    EXECUTE FUNCTION mail_attempt_recorded();
-- Retention deletes finished mails a thousand at a time: one statement
-- trigger per delete removes their attempts through mail_attempt_mail_idx.
CREATE TRIGGER mail_attempt_delete AFTER DELETE ON mail
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION mail_attempt_deleted();

-- +goose Down
SET LOCAL lock_timeout = '3s';
DROP TRIGGER mail_attempt_delete ON mail;
DROP TRIGGER mail_attempt_record ON mail;
DROP FUNCTION mail_attempt_deleted();
DROP FUNCTION mail_attempt_recorded();
DROP TABLE mail_attempt;
