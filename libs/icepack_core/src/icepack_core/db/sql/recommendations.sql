-- The planner's recommendations (icepack.recommendations).

-- name: recommendation_latest
-- The newest recommendation for a table.
SELECT id, status_snapshot_id, actions, job_id, created_at
  FROM icepack.recommendations
 WHERE table_id = $1
 ORDER BY id DESC
 LIMIT 1;

-- name: recommendation_insert
-- Record what the planner recommended for a table (and the job it enqueued, if any).
INSERT INTO icepack.recommendations (table_id, status_snapshot_id, actions, job_id)
VALUES ($1, $2, $3::jsonb, $4)
RETURNING id;

-- name: recommendation_stale_tables
-- Live, inspected tables whose newest recommendation is older than $1 seconds (or missing).
SELECT t.id FROM icepack.tables t
 WHERE t.dropped_at IS NULL
   AND EXISTS (SELECT 1 FROM icepack.status_snapshots s WHERE s.table_id = t.id)
   AND NOT EXISTS (SELECT 1 FROM icepack.recommendations r
                    WHERE r.table_id = t.id
                      AND r.created_at > coalesce($2::timestamptz, now()) - make_interval(secs => $1))
 ORDER BY t.id
 LIMIT $3;
