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
