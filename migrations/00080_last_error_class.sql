-- +goose Up
-- last_error_class: the class (docs/design.md, "Error classes") of the error
-- in last_error: 'transient', 'permanent' or 'ambiguous', NULL while
-- last_error is NULL. It is written with last_error by the same statements
-- (the outcome write, a stale insert, a notice that could not be rendered),
-- so `mailsvc mail show` reads what the last attempt ended in instead of
-- matching words in last_error's text.
ALTER TABLE mail ADD COLUMN last_error_class text
    CHECK (last_error_class IN ('transient', 'permanent', 'ambiguous'));
-- Rows written before this migration: the class is derived once from the
-- text, as `mail show` read it until now (a lease that expired mid-send,
-- or an error marked "(ambiguous)", is ambiguous), and from the reasons
-- that are always permanent. One pass over the rows that have a last_error.
UPDATE mail SET last_error_class = CASE
        WHEN last_error LIKE '%lease_expired%' OR last_error LIKE '%(ambiguous)%' THEN 'ambiguous'
        WHEN last_error LIKE 'stale:%' OR last_error LIKE 'render:%' OR last_error LIKE 'attempts_exhausted:%'
            OR last_error LIKE '%(permanent)%' THEN 'permanent'
        WHEN last_error LIKE '%(transient)%' THEN 'transient'
    END
WHERE last_error IS NOT NULL;

-- +goose Down
ALTER TABLE mail DROP COLUMN last_error_class;
