-- +goose Up
-- delivery_delayed_at: when the provider last reported that it is still
-- trying to deliver the mail (Resend's email.delivery_delayed), NULL
-- until then. A change of the catalog only: no rewrite, no scan.
ALTER TABLE mail ADD COLUMN delivery_delayed_at timestamptz;
-- complained_at: when the recipient first marked the mail as spam (Resend's
-- email.complained), NULL until then: one EmailComplained per mail.
ALTER TABLE mail ADD COLUMN complained_at timestamptz;

-- +goose Down
ALTER TABLE mail DROP COLUMN complained_at;
ALTER TABLE mail DROP COLUMN delivery_delayed_at;
