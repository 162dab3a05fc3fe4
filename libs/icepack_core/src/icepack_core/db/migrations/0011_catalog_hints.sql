-- Change hints pushed to the gateway (POST /hooks/catalog-events): one row per table, so
-- duplicates coalesce; discovery refreshes the named table alone and deletes the row.
CREATE TABLE icepack.catalog_hints (
    catalog           text NOT NULL,
    namespace         text NOT NULL,  -- join_namespace of the levels, as icepack.tables
    name              text NOT NULL,
    metadata_location text,
    received_at       timestamptz NOT NULL DEFAULT now(),
    received_count    integer NOT NULL DEFAULT 1 CHECK (received_count >= 1),
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    not_before        timestamptz NOT NULL DEFAULT now(),
    last_error        text,
    PRIMARY KEY (catalog, namespace, name)
);

CREATE INDEX catalog_hints_due ON icepack.catalog_hints (not_before);
