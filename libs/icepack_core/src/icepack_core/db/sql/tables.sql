-- name: table_lock_catalog
-- Serialise discovery refreshes of one catalog across replicas (held until commit).
SELECT pg_advisory_xact_lock(hashtextextended('icepack.discovery:' || $1::text, 0));

-- name: table_list_catalog
-- Every known table of one catalog, dropped ones included (discovery diffs against it).
SELECT id, namespace, name, metadata_location, dropped_at, catalog_etag
  FROM icepack.tables
 WHERE catalog = $1;

-- name: table_list_etags
-- The live tables of one catalog with a stored ETag and the metadata location it belongs to
-- (discovery's conditional loads send it as If-None-Match).
SELECT namespace, name, metadata_location, catalog_etag
  FROM icepack.tables
 WHERE catalog = $1 AND dropped_at IS NULL
   AND catalog_etag IS NOT NULL AND metadata_location IS NOT NULL;

-- name: table_insert
-- A table seen for the first time (no ETag yet: discovery sets it with table_set_etags).
INSERT INTO icepack.tables (catalog, namespace, name, metadata_location, properties)
VALUES ($1, $2, $3, $4, $5::jsonb)
RETURNING id;

-- name: table_insert_many
-- Tables seen for the first time, one per row of the arrays ($2 namespaces, $3 names, $4
-- locations, $5 JSON properties); their ids by name.
INSERT INTO icepack.tables (catalog, namespace, name, metadata_location, properties)
SELECT $1, t.namespace, t.name, t.metadata_location, t.properties::jsonb
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
       AS t(namespace, name, metadata_location, properties)
RETURNING id, namespace, name;

-- name: table_get_many_by_name
-- The rows of a catalog's tables named by ($2 namespaces, $3 names), dropped ones included
-- (discovery diffs each chunk of a listing against them).
SELECT t.id, t.namespace, t.name, t.metadata_location, t.dropped_at, t.catalog_etag
  FROM unnest($2::text[], $3::text[]) AS k(namespace, name)
  JOIN icepack.tables t ON t.catalog = $1 AND t.namespace = k.namespace AND t.name = k.name;

-- name: table_update_seen
-- A known table seen again with a new metadata location or after being dropped: record the
-- location (keep the old one when this listing could not load it) and clear dropped_at. The
-- properties are replaced only when this sighting read them with the location ($3 NULL: a SQL
-- catalog's listing has none; the stored ones, which safety rules read, stand). A new
-- location clears the stored ETag (it belonged to the old one; discovery sets the new one with
-- table_set_etags in the same transaction).
UPDATE icepack.tables
   SET metadata_location = coalesce($2, metadata_location),
       properties        = CASE WHEN $2::text IS NULL OR $3::jsonb IS NULL THEN properties
                                ELSE $3::jsonb END,
       catalog_etag      = CASE WHEN $2::text IS NULL THEN catalog_etag END,
       last_seen_at      = now(),
       dropped_at        = NULL
 WHERE id = $1;

-- name: table_set_etags
-- The ETags full loads answered for the metadata locations just recorded ($1 ids, $2 ETags).
UPDATE icepack.tables AS t SET catalog_etag = e.etag
  FROM unnest($1::bigint[], $2::text[]) AS e(id, etag)
 WHERE t.id = e.id;

-- name: table_touch_seen
-- Known tables seen again unchanged: last_seen_at moves once it is 10 minutes old, not on every
-- pass (a pass a minute rewrote every row of the fleet: 100,000 row updates a minute).
UPDATE icepack.tables SET last_seen_at = now()
 WHERE id = ANY($1::bigint[]) AND last_seen_at < now() - interval '10 minutes';

-- name: table_mark_dropped
-- Tables no longer in their catalog's listing (dropped_at set once, at the first miss).
UPDATE icepack.tables SET dropped_at = now()
 WHERE id = ANY($1::bigint[]) AND dropped_at IS NULL
RETURNING id;

-- name: table_get
-- One table by id.
SELECT id, catalog, namespace, name, metadata_location, properties, dropped_at, maintenance_hold,
       location
  FROM icepack.tables
 WHERE id = $1;

-- name: table_list_active
-- Every table still in its catalog, in catalog/namespace/name order.
SELECT id, catalog, namespace, name, metadata_location, last_seen_at
  FROM icepack.tables
 WHERE dropped_at IS NULL
 ORDER BY catalog, namespace, name;

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

-- name: table_get_by_name
-- One table of a catalog by namespace and name (discovery's targeted refresh of a pushed change).
SELECT id, namespace, name, metadata_location, dropped_at
  FROM icepack.tables
 WHERE catalog = $1 AND namespace = $2 AND name = $3;

-- name: table_find_by_metadata_dir
-- The live tables of a catalog whose current metadata file sits in the same directory as $2
-- (a metadata file an S3 notification names). s3a:// and s3n:// name the same objects as s3://.
SELECT namespace, name
  FROM icepack.tables
 WHERE catalog = $1 AND dropped_at IS NULL
   AND regexp_replace(regexp_replace(metadata_location, '^s3[an]://', 's3://'), '[^/]*$', '')
     = regexp_replace(regexp_replace($2::text, '^s3[an]://', 's3://'), '[^/]*$', '');
