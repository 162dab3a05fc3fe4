-- Table status snapshots (icepack.status_snapshots).

-- name: status_history
-- A table's status snapshots before cursor id $2 (NULL: from the newest), newest first, with
-- the metrics the history charts plot.
SELECT id, inspected_at,
       (status ->> 'data_file_count')::bigint AS data_file_count,
       (status ->> 'data_file_bytes')::bigint AS data_file_bytes,
       (status ->> 'record_count')::bigint AS record_count,
       (status ->> 'small_file_count')::bigint AS small_file_count,
       (status ->> 'snapshot_count')::bigint AS snapshot_count,
       (status ->> 'manifest_count')::bigint AS manifest_count,
       (status ->> 'position_delete_file_count')::bigint
         + (status ->> 'equality_delete_file_count')::bigint
         + coalesce((status ->> 'deletion_vector_count')::bigint, 0) AS delete_file_count
  FROM icepack.status_snapshots
 WHERE table_id = $1 AND ($2::bigint IS NULL OR id < $2)
 ORDER BY id DESC
 LIMIT $3;

-- name: status_snapshot_insert
-- Append one inspection's TableStatus.
INSERT INTO icepack.status_snapshots
       (table_id, inspected_at, inspector, metadata_location, current_snapshot_id, status,
        traceparent)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)
RETURNING id;

-- name: status_latest
-- The newest status snapshot of a table.
SELECT id, inspected_at, inspector, metadata_location, current_snapshot_id, status
  FROM icepack.status_snapshots
 WHERE table_id = $1
 ORDER BY id DESC
 LIMIT 1;

-- name: status_growth_base
-- The status a table's open-partition growth is measured from (planning.pressure): the newest
-- of table $1 older than status $2 and inspected at or before $3 (the newest's inspection time
-- less the shortest span measured over). A backward scan of status_snapshots_table from $2
-- that stops at the first such row: bounded by the statuses of that span. Also the newest
-- status inspected before a compaction ended ($3: its end), whose rate is carried across it.
SELECT s.id, s.inspected_at, s.status
  FROM icepack.status_snapshots s
 WHERE s.table_id = $1 AND s.id < $2 AND s.inspected_at <= $3
 ORDER BY s.id DESC
 LIMIT 1;

-- name: status_latest_per_table
-- Every live table of one catalog with its newest status snapshot (tables never inspected are
-- left out).
SELECT t.id, t.catalog, t.namespace, t.name, t.properties, t.dropped_at, t.maintenance_hold,
       s.status
  FROM icepack.tables t
  JOIN LATERAL (SELECT status FROM icepack.status_snapshots ss
                 WHERE ss.table_id = t.id ORDER BY ss.id DESC LIMIT 1) s ON true
 WHERE t.dropped_at IS NULL AND t.catalog = $1
 ORDER BY t.namespace, t.name;
