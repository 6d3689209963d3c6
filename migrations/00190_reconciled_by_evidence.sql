-- +goose Up
-- An unknown mail that the provider's own report settled (reconciliation by
-- provider evidence, docs/design.md "Reconciliation by provider evidence"): when
-- mailsvc settled it, and which report did. NULL for every other mail. Changes of the
-- catalog only: no rewrite, no scan.
-- reconciled_at: when mailsvc settled the mail (database clock).
ALTER TABLE mail ADD COLUMN reconciled_at timestamptz;
-- reconciled_by: what settled it; 'provider_evidence' is the one kind so far.
ALTER TABLE mail ADD COLUMN reconciled_by text CHECK (reconciled_by IN ('provider_evidence'));
-- evidence_type, evidence_id, evidence_at: the report that settled it, as
-- its data.provider_event says: the provider's event type
-- (email.delivered, email.bounced, ...), its id (Resend's svix-id, or
-- dsn:<mail id>:<verdict>:<status> for an SMTP report) and when the
-- provider recorded it.
ALTER TABLE mail ADD COLUMN evidence_type text;
ALTER TABLE mail ADD COLUMN evidence_id text;
ALTER TABLE mail ADD COLUMN evidence_at timestamptz;

-- +goose Down
ALTER TABLE mail DROP COLUMN evidence_at;
ALTER TABLE mail DROP COLUMN evidence_id;
ALTER TABLE mail DROP COLUMN evidence_type;
ALTER TABLE mail DROP COLUMN reconciled_by;
ALTER TABLE mail DROP COLUMN reconciled_at;
