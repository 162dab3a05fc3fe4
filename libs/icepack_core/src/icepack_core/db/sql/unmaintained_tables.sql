-- Tables seen in a catalog but left unmaintained (icepack.unmaintained_tables).

-- name: table_unmaintained_list_catalog
-- What discovery last recorded of a catalog's unmaintained tables (reused while a table's
-- metadata location is unchanged, and kept when its metadata cannot be read).
SELECT namespace, name, metadata_location, location, write_paths, catalog_etag
  FROM icepack.unmaintained_tables
 WHERE catalog = $1;

-- name: table_unmaintained_forget_missing
-- Forget the catalog's ($1) unmaintained tables its listing no longer has as such: gone, or
-- now maintained (namespaces $2 and names $3 are the ones it still has).
DELETE FROM icepack.unmaintained_tables u
 WHERE u.catalog = $1
   AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS k(namespace, name)
                    WHERE k.namespace = u.namespace AND k.name = u.name);

-- name: table_unmaintained_upsert_many
-- Record (or refresh) unmaintained tables of catalog $1: parallel arrays of namespace, name,
-- reason, metadata location, location, write paths (JSON text), load error and ETag.
INSERT INTO icepack.unmaintained_tables
       (catalog, namespace, name, reason, metadata_location, location, write_paths, load_error,
        catalog_etag)
SELECT $1, k.namespace, k.name, k.reason, k.metadata_location, k.location,
       k.write_paths::jsonb, k.load_error, k.catalog_etag
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
              $8::text[], $9::text[]) AS k(namespace, name, reason, metadata_location, location,
                                           write_paths, load_error, catalog_etag)
ON CONFLICT (catalog, namespace, name) DO UPDATE
   SET reason = EXCLUDED.reason, metadata_location = EXCLUDED.metadata_location,
       location = EXCLUDED.location, write_paths = EXCLUDED.write_paths,
       load_error = EXCLUDED.load_error, catalog_etag = EXCLUDED.catalog_etag,
       seen_at = now();
