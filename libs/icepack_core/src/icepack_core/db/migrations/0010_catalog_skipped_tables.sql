-- 0008: tables discovery had to leave out of its last pass (a NUL byte in a property, a name
-- Spark cannot be sent), with the reason, so one bad table is visible instead of silently
-- missing, and never again a reason to abandon the rest of its catalog's refresh.

ALTER TABLE icepack.catalog_status
    ADD COLUMN skipped_tables jsonb NOT NULL DEFAULT '[]'::jsonb
        CONSTRAINT catalog_status_skipped_is_list CHECK (jsonb_typeof(skipped_tables) = 'array');

COMMENT ON COLUMN icepack.catalog_status.skipped_tables IS
    'Tables the last successful listing skipped: [{"table": "ns.name", "reason": "..."}]';
