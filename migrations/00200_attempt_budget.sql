-- +goose Up
-- `mailsvc mail reconcile --not-delivered` gives a mail a fresh attempt
-- budget (issue 30): budget_base is the number of sends (mail.sends) that
-- reconcile settled as not delivered, and sender.max_attempts bounds only
-- sends - budget_base, the sends since. mail.sends stays the total, as
-- `mail show` and the feedback events' attempts report it. A constant
-- default: no table rewrite.
SET LOCAL lock_timeout = '3s';
ALTER TABLE mail ADD COLUMN budget_base integer NOT NULL DEFAULT 0 CHECK (budget_base >= 0);

-- +goose Down
SET LOCAL lock_timeout = '3s';
ALTER TABLE mail DROP COLUMN budget_base;
