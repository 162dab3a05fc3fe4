-- name: manifest_stats_get_many
-- Cached aggregates of the given manifests, marking them used (for cache pruning).
UPDATE icepack.manifest_stats
   SET last_used_at = now()
 WHERE manifest_path = ANY($1::text[])
RETURNING manifest_path, stats;

-- name: manifest_stats_put
-- Store (or replace, e.g. after a small-file threshold change) one manifest's aggregate.
INSERT INTO icepack.manifest_stats (manifest_path, manifest_length, content, stats)
VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (manifest_path) DO UPDATE
   SET manifest_length = EXCLUDED.manifest_length, content = EXCLUDED.content,
       stats = EXCLUDED.stats, computed_at = now(), last_used_at = now();

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

-- name: health_assessment_insert
-- Append one health assessment (status_snapshot_id is NULL when the inspection failed).
INSERT INTO icepack.health_assessments (table_id, status_snapshot_id, health, score, issues)
VALUES ($1, $2, $3, $4, $5::jsonb)
RETURNING id;

-- name: health_latest
-- The newest health assessment of a table.
SELECT id, status_snapshot_id, health, score, issues, assessed_at
  FROM icepack.health_assessments
 WHERE table_id = $1
 ORDER BY id DESC
 LIMIT 1;

-- name: health_stale_tables
-- Tables still in their catalog whose newest assessment is older than $1 seconds (or missing):
-- the age-based refresh re-assesses them.
SELECT t.id
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT assessed_at FROM icepack.health_assessments h
                      WHERE h.table_id = t.id ORDER BY h.assessed_at DESC LIMIT 1) h ON true
 WHERE t.dropped_at IS NULL
   AND t.metadata_location IS NOT NULL
   AND (h.assessed_at IS NULL
        OR h.assessed_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1))
 ORDER BY h.assessed_at NULLS FIRST
 LIMIT $3;
