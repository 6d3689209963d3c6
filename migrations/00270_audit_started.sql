-- +goose Up
-- audit_log.result 'started': the intent record of an operator action,
-- written before the action runs and set to done, refused or failed when
-- it ends (docs/design.md, "Audit log"). A row left 'started' is an action
-- whose process stopped before it recorded the result: the outcome is
-- unknown, never an action without a row.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_result_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_result_check
    CHECK (result IN ('started', 'done', 'refused', 'failed'));

-- +goose Down
UPDATE audit_log SET result = 'failed',
    detail = 'outcome unknown: the process stopped before recording the result; check the mail'
    WHERE result = 'started';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_result_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_result_check
    CHECK (result IN ('done', 'refused', 'failed'));
