-- +goose Up
-- mailsvc_address_key: the form in which recipient addresses are compared
-- (docs/design.md, "Provider feedback and the suppression list"):
-- surrounding white space removed, the domain (after the last '@') with
-- its ASCII letters lower-cased, the local part kept as it is. RFC 5321
-- section 2.4 lets the local part be case-sensitive while domains are not;
-- lower-casing only ASCII letters (translate, not lower()) makes the
-- result the same whatever the database's locale. A single SELECT without
-- FROM, so the planner inlines it. One definition, used by the claim and
-- by every write of the suppression list, so the two can never disagree.
-- +goose StatementBegin
CREATE FUNCTION mailsvc_address_key(address text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(btrim(address, E' \t\r\n'), '@') = 0 THEN btrim(address, E' \t\r\n')
        ELSE substring(btrim(address, E' \t\r\n') FROM '^(.*)@') || '@'
            || translate(substring(btrim(address, E' \t\r\n') FROM '@([^@]*)$'),
                         'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
    END
$$;
-- +goose StatementEnd

-- suppression: addresses no mail is sent to. A claimed mail whose
-- recipient is here ends failed with reason suppressed, unsent.
CREATE TABLE suppression (
    address    text PRIMARY KEY CHECK (address = mailsvc_address_key(address) AND address <> ''),
    reason     text NOT NULL,
    source     text NOT NULL CHECK (source IN ('webhook/bounce', 'webhook/complaint', 'operator')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- webhook_event: every verified provider webhook, by the provider's
-- webhook id (Resend: svix-id), so that a redelivery changes nothing.
-- Rows older than retention.window are deleted.
CREATE TABLE webhook_event (
    provider    text NOT NULL,
    webhook_id  text NOT NULL,
    event_type  text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, webhook_id)
);
CREATE INDEX webhook_event_received_idx ON webhook_event (received_at);

-- delivered_at: when the provider reported the mail delivered to the
-- recipient's server (Resend's email.delivered), NULL until then.
ALTER TABLE mail ADD COLUMN delivered_at timestamptz;
-- A webhook names the mail by Resend's email id, kept in
-- provider_message_id of the mails Resend accepted.
CREATE INDEX mail_resend_message_id_idx ON mail (provider_message_id)
    WHERE provider = 'resend' AND provider_message_id IS NOT NULL;

-- +goose Down
DROP INDEX mail_resend_message_id_idx;
ALTER TABLE mail DROP COLUMN delivered_at;
DROP TABLE webhook_event;
DROP TABLE suppression;
DROP FUNCTION mailsvc_address_key(text);
