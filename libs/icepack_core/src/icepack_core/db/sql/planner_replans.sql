-- Tables the planner is asked to plan again (icepack.planner_replans).

-- name: recommendation_replan_set
-- Plan table $1 again at $2 without an event (NULL: nothing waits; the row goes).
WITH gone AS (
    DELETE FROM icepack.planner_replans WHERE table_id = $1 AND $2::timestamptz IS NULL)
INSERT INTO icepack.planner_replans (table_id, replan_at)
SELECT $1, $2::timestamptz WHERE $2::timestamptz IS NOT NULL
ON CONFLICT (table_id) DO UPDATE SET replan_at = EXCLUDED.replan_at, updated_at = now();

-- name: recommendation_replans_take_due
-- Take (delete) up to $2 re-plans due at $1 (NULL: now), oldest first; the
-- caller requests their work items in the same transaction.
DELETE FROM icepack.planner_replans p
 WHERE p.table_id IN (SELECT r.table_id FROM icepack.planner_replans r
                       WHERE r.replan_at <= coalesce($1::timestamptz, now())
                       ORDER BY r.replan_at
                       LIMIT $2
                         FOR UPDATE SKIP LOCKED)
RETURNING p.table_id;
