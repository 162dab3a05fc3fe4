-- Each catalog's last listing, its outcome and its gaps (icepack.catalog_status).

-- name: catalog_status_all
-- Each catalog discovery has recorded: its last successful pass (epoch seconds; NULL never),
-- whether its last pass failed, tables listed and skipped, and the last pass's wall time.
SELECT catalog, extract(epoch FROM last_ok_at)::float8 AS last_ok,
       last_error IS NOT NULL AS failing, table_count,
       jsonb_array_length(skipped_tables) AS skipped, last_pass_seconds
  FROM icepack.catalog_status
 ORDER BY catalog;

-- name: catalog_status_listing_started
-- Discovery started (again): each configured catalog ($1) must finish a listing after now
-- before the location checks trust what Icepack knows of its tables.
INSERT INTO icepack.catalog_status (catalog, listing_since)
SELECT c, now() FROM unnest($1::text[]) AS c
ON CONFLICT (catalog) DO UPDATE SET listing_since = now(), updated_at = now();

-- name: catalog_listing_gaps
-- The catalogs whose tables Icepack may not all know: discovery started listing them and has
-- not finished a listing since, or their last listing failed.
SELECT catalog, listing_since, last_ok_at, last_error_at
  FROM icepack.catalog_status
 WHERE last_error IS NOT NULL
    OR (listing_since IS NOT NULL AND (last_ok_at IS NULL OR last_ok_at < listing_since))
 ORDER BY catalog;

-- name: catalog_status_ok
-- A catalog was listed successfully; the error (if any) is cleared. $3: the tables this pass
-- skipped, with why (a JSON list); $4: the requests it sent, by kind (a JSON object); $5: the
-- pass's wall time in seconds.
INSERT INTO icepack.catalog_status (catalog, last_ok_at, table_count, skipped_tables,
                                    last_pass_calls, last_pass_seconds)
VALUES ($1, now(), $2, $3::jsonb, $4::jsonb, $5)
ON CONFLICT (catalog) DO UPDATE
   SET last_ok_at = now(), table_count = EXCLUDED.table_count,
       skipped_tables = EXCLUDED.skipped_tables, last_pass_calls = EXCLUDED.last_pass_calls,
       last_pass_seconds = EXCLUDED.last_pass_seconds,
       last_error = NULL, last_error_at = NULL, updated_at = now();

-- name: catalog_status_error
-- A catalog could not be listed; its tables are left as they were.
INSERT INTO icepack.catalog_status (catalog, last_error, last_error_at)
VALUES ($1, $2, now())
ON CONFLICT (catalog) DO UPDATE
   SET last_error = EXCLUDED.last_error, last_error_at = now(), updated_at = now();

-- name: catalog_status_get
-- The discovery state of one catalog.
SELECT catalog, last_ok_at, last_error, last_error_at, table_count, skipped_tables
  FROM icepack.catalog_status
 WHERE catalog = $1;
