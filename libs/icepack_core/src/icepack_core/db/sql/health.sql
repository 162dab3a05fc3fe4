-- Health assessments (icepack.health_assessments) and each table's latest (icepack.table_health_latest).

-- name: health_fleet_counts
-- How many tables still in their catalog are at each health level (latest assessment).
SELECT coalesce(l.health, 'unknown') AS health, count(*) AS tables
  FROM icepack.tables t
  LEFT JOIN icepack.table_health_latest l ON l.table_id = t.id
 WHERE t.dropped_at IS NULL
 GROUP BY 1;

-- name: health_issue_counts
-- How many tables still in their catalog have each issue code in their latest assessment.
SELECT i ->> 'code' AS code, count(*) AS tables
  FROM icepack.tables t
  JOIN icepack.table_health_latest l ON l.table_id = t.id
 CROSS JOIN LATERAL jsonb_array_elements(l.issues) AS i
 WHERE t.dropped_at IS NULL
 GROUP BY 1
 ORDER BY 2 DESC, 1;

-- name: health_assessment_insert
-- Append one health assessment (status_snapshot_id is NULL when the inspection failed).
INSERT INTO icepack.health_assessments (table_id, status_snapshot_id, health, score, issues)
VALUES ($1, $2, $3, $4, $5::jsonb)
RETURNING id;

-- name: health_latest_upsert
-- Make the given assessments (ids $1, one or many, e.g. one inspection's) the latest of their
-- tables in table_health_latest, with each table's newest status snapshot. Run in the
-- transaction that inserted them; a row is only ever replaced by a newer assessment or
-- snapshot (by id), so concurrent or out-of-order calls keep the newest of each.
INSERT INTO icepack.table_health_latest AS l
       (table_id, assessment_id, status_snapshot_id, health, score, issues, assessed_at,
        status_id, inspected_at, status)
SELECT DISTINCT ON (ha.table_id)
       ha.table_id, ha.id, ha.status_snapshot_id, ha.health, ha.score, ha.issues,
       ha.assessed_at, s.id, s.inspected_at, s.status
  FROM icepack.health_assessments ha
  LEFT JOIN LATERAL (SELECT id, inspected_at, status FROM icepack.status_snapshots ss
                      WHERE ss.table_id = ha.table_id ORDER BY ss.id DESC LIMIT 1) s ON true
 WHERE ha.id = ANY($1::bigint[])
 ORDER BY ha.table_id, ha.id DESC
ON CONFLICT (table_id) DO UPDATE SET
    assessment_id = greatest(l.assessment_id, EXCLUDED.assessment_id),
    status_snapshot_id = CASE WHEN EXCLUDED.assessment_id > l.assessment_id
                              THEN EXCLUDED.status_snapshot_id ELSE l.status_snapshot_id END,
    health = CASE WHEN EXCLUDED.assessment_id > l.assessment_id
                  THEN EXCLUDED.health ELSE l.health END,
    score = CASE WHEN EXCLUDED.assessment_id > l.assessment_id
                 THEN EXCLUDED.score ELSE l.score END,
    issues = CASE WHEN EXCLUDED.assessment_id > l.assessment_id
                  THEN EXCLUDED.issues ELSE l.issues END,
    assessed_at = CASE WHEN EXCLUDED.assessment_id > l.assessment_id
                       THEN EXCLUDED.assessed_at ELSE l.assessed_at END,
    status_id = CASE WHEN coalesce(EXCLUDED.status_id, -1) > coalesce(l.status_id, -1)
                     THEN EXCLUDED.status_id ELSE l.status_id END,
    inspected_at = CASE WHEN coalesce(EXCLUDED.status_id, -1) > coalesce(l.status_id, -1)
                        THEN EXCLUDED.inspected_at ELSE l.inspected_at END,
    status = CASE WHEN coalesce(EXCLUDED.status_id, -1) > coalesce(l.status_id, -1)
                  THEN EXCLUDED.status ELSE l.status END;

-- name: health_latest
-- The newest health assessment of a table.
SELECT id, status_snapshot_id, health, score, issues, assessed_at
  FROM icepack.health_assessments
 WHERE table_id = $1
 ORDER BY id DESC
 LIMIT 1;

-- name: health_stale_tables
-- Tables still in their catalog whose newest assessment is older than $1 seconds (or missing):
-- the age-based refresh re-assesses them. A table service $4 already has a work item for is left
-- out: that item assesses it anyway, and a second request would re-do an inspection in progress
-- for the same metadata (at 100,000 tables, 877 of a discovery backlog were inspected twice).
SELECT t.id
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT assessed_at FROM icepack.health_assessments h
                      WHERE h.table_id = t.id ORDER BY h.assessed_at DESC LIMIT 1) h ON true
 WHERE t.dropped_at IS NULL
   AND t.metadata_location IS NOT NULL
   AND (h.assessed_at IS NULL
        OR h.assessed_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1))
   AND NOT EXISTS (SELECT 1 FROM icepack.work_items w WHERE w.service = $4 AND w.table_id = t.id)
 ORDER BY h.assessed_at NULLS FIRST
 LIMIT $3;
