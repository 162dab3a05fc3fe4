-- Small data files fingerprinted at first sight (icepack.data_file_fingerprints).

-- name: fingerprint_of_table
-- Table $1's fingerprints read with schema $2, checksummed or not ($3), at most $4 of them.
SELECT path, file_size, records, constant_ids, rows_read, checksum
  FROM icepack.data_file_fingerprints
 WHERE table_id = $1 AND schema_key = $2 AND checksummed = $3
 LIMIT $4;

-- name: fingerprint_known_paths
-- Which of the paths $2 table $1 holds a fingerprint of, read with schema $3 and checksum $4.
SELECT path
  FROM icepack.data_file_fingerprints
 WHERE table_id = $1 AND path = ANY($2::text[]) AND schema_key = $3 AND checksummed = $4;

-- name: fingerprint_put
-- Store fingerprints of table $1 (one per index of the arrays $2..$9); a path stored before is
-- replaced (another schema or checksum setting).
INSERT INTO icepack.data_file_fingerprints AS f
       (table_id, path, file_size, records, schema_key, constant_ids, checksummed, rows_read,
        checksum)
SELECT $1, p.path, p.file_size, p.records, $5, p.constant_ids::integer[], $6, p.records,
       p.checksum
  FROM unnest($2::text[], $3::bigint[], $4::bigint[], $7::text[], $8::numeric[])
       AS p (path, file_size, records, constant_ids, checksum)
ON CONFLICT (table_id, path) DO UPDATE
   SET file_size = excluded.file_size, records = excluded.records,
       schema_key = excluded.schema_key, constant_ids = excluded.constant_ids,
       checksummed = excluded.checksummed, rows_read = excluded.rows_read,
       checksum = excluded.checksum, taken_at = now();

-- name: fingerprint_keep_only
-- Drop table $1's fingerprints of files not among the paths $2 (they left the table).
DELETE FROM icepack.data_file_fingerprints
 WHERE table_id = $1 AND NOT (path = ANY($2::text[]));

-- name: fingerprint_drop_table
-- Drop every fingerprint of table $1 (its files are no longer read in process).
DELETE FROM icepack.data_file_fingerprints WHERE table_id = $1;

-- name: fingerprint_bound
-- Keep table $1's newest $2 fingerprints, drop the rest.
DELETE FROM icepack.data_file_fingerprints
 WHERE table_id = $1
   AND path IN (SELECT path FROM icepack.data_file_fingerprints
                 WHERE table_id = $1
                 ORDER BY taken_at DESC, path
                OFFSET $2);
