-- 0003: per-catalog discovery state, so a catalog that cannot be listed shows up as an error
-- instead of an empty fleet (discovery leaves its `tables` rows untouched meanwhile).

-- One row per configured catalog discovery has tried; written in the refresh's transaction.
CREATE TABLE icepack.catalog_status (
    catalog       text        PRIMARY KEY,
    last_ok_at    timestamptz,
    last_error    text,
    last_error_at timestamptz,
    table_count   integer     NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT catalog_status_error_complete
        CHECK ((last_error IS NULL) = (last_error_at IS NULL))
);

-- Age-based refresh looks up each table's newest assessment.
CREATE INDEX health_assessments_assessed ON icepack.health_assessments (table_id, assessed_at DESC);
