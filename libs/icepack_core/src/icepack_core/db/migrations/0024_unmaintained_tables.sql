-- 0024: tables a catalog lists that Icepack does not maintain (outside the catalog's
-- include/exclude), recorded by discovery only so the location checks of every action that
-- deletes or moves files know their roots. Never inspected, planned or maintained. A row is
-- replaced by each successful listing of its catalog and removed when the listing lacks it.
CREATE TABLE icepack.unmaintained_tables (
    catalog           text        NOT NULL,
    namespace         text        NOT NULL,
    name              text        NOT NULL,
    reason            text        NOT NULL,
    metadata_location text,
    location          text,
    write_paths       jsonb       NOT NULL DEFAULT '{}'::jsonb
        CONSTRAINT unmaintained_write_paths_object CHECK (jsonb_typeof(write_paths) = 'object'),
    load_error        text,
    catalog_etag      text,
    seen_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (catalog, namespace, name)
);

COMMENT ON TABLE icepack.unmaintained_tables IS
    'Tables listed but not maintained (excluded), kept only for the location checks';
COMMENT ON COLUMN icepack.unmaintained_tables.write_paths IS
    'The table''s write.*.path properties (only those), as its metadata last read had them';
COMMENT ON COLUMN icepack.unmaintained_tables.load_error IS
    'Why its metadata could not be read on the last pass (earlier location and write paths kept)';
COMMENT ON COLUMN icepack.unmaintained_tables.catalog_etag IS
    'The ETag of its last full REST load (its next load is conditional)';
