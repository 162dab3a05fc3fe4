-- 0005: a table whose maintenance failed verification is held until an operator releases it.
ALTER TABLE icepack.tables ADD COLUMN maintenance_hold jsonb;
COMMENT ON COLUMN icepack.tables.maintenance_hold IS
    'NULL, or why automatic maintenance is stopped for this table (set by an executor after a '
    'failed post-commit verification; cleared by an operator with `icepack hold release`)';
