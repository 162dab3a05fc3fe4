-- name: table_hold_set
-- Stop automatic maintenance of a table, with the evidence why.
UPDATE icepack.tables SET maintenance_hold = $2::jsonb WHERE id = $1;

-- name: table_hold_lock
-- A table's hold, its row locked until the transaction ends (so a release and an executor
-- setting a new hold cannot interleave). $1 table id.
SELECT id, catalog, namespace, name, maintenance_hold
  FROM icepack.tables
 WHERE id = $1
   FOR UPDATE;

-- name: table_hold_release
-- An operator re-enables automatic maintenance of a table (icepack_core.holds). $1 table id.
UPDATE icepack.tables SET maintenance_hold = NULL
 WHERE id = $1 AND maintenance_hold IS NOT NULL
RETURNING id;

-- name: table_holds_all
-- Every table automatic maintenance is stopped for, by name.
SELECT id, catalog, namespace, name, dropped_at, maintenance_hold
  FROM icepack.tables
 WHERE maintenance_hold IS NOT NULL
 ORDER BY catalog, namespace, name;

-- name: table_plan_inputs
-- What planning one table reads, in one round trip: the table row (as table_get), its newest
-- status snapshot (status_id NULL: never inspected successfully) and assessment score, and
-- whether any job ever ran on it (none: its job history is known to be empty, not read).
SELECT t.id, t.catalog, t.namespace, t.name, t.metadata_location, t.properties, t.dropped_at,
       t.maintenance_hold, t.location, s.id AS status_id, s.status, h.score,
       EXISTS (SELECT 1 FROM icepack.jobs j WHERE j.table_id = t.id) AS has_jobs
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT id, status FROM icepack.status_snapshots
                      WHERE table_id = t.id ORDER BY id DESC LIMIT 1) s ON true
  LEFT JOIN LATERAL (SELECT score FROM icepack.health_assessments
                      WHERE table_id = t.id ORDER BY id DESC LIMIT 1) h ON true
 WHERE t.id = $1;

-- name: job_last_action_runs
-- When each action last succeeded on a table (cadence and due rule, planning.due), and the
-- table's current snapshot when that run's job ended: `snapshot_after` of the job's newest
-- action that recorded one, as text (snapshot ids of any size); NULL when none did; and how
-- many open partitions that run skipped (execution.scoping.metadata_scope), 0 when it recorded none,
-- and how many partitions it selected (NULL: not a scoped compaction).
SELECT DISTINCT ON (a.action) a.action, a.finished_at, a.duration_ms,
       CASE WHEN jsonb_typeof(a.output->'open_partitions_skipped_count') = 'number'
            THEN (a.output->>'open_partitions_skipped_count')::numeric::bigint
            ELSE 0 END AS open_skipped,
       CASE WHEN jsonb_typeof(a.output->'partitions_selected') = 'number'
            THEN (a.output->>'partitions_selected')::numeric::bigint END AS selected,
       (SELECT l.impact->>'snapshot_after' FROM icepack.job_actions l
         WHERE l.job_id = a.job_id AND jsonb_typeof(l.impact->'snapshot_after') = 'number'
         ORDER BY l.finished_at DESC, l.id DESC LIMIT 1) AS snapshot_after
  FROM icepack.job_actions a JOIN icepack.jobs j ON j.id = a.job_id
 WHERE j.table_id = $1 AND a.state = 'succeeded'
 ORDER BY a.action, a.finished_at DESC, a.id DESC;

-- name: status_growth_base
-- The status a table's open-partition growth is measured from (planning.pressure): the newest
-- of table $1 older than status $2 and inspected at or before $3 (the newest's inspection time
-- less the shortest span measured over). A backward scan of status_snapshots_table from $2
-- that stops at the first such row: bounded by the statuses of that span.
SELECT s.inspected_at, s.status
  FROM icepack.status_snapshots s
 WHERE s.table_id = $1 AND s.id < $2 AND s.inspected_at <= $3
 ORDER BY s.id DESC
 LIMIT 1;

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

-- name: job_cancelled_actions
-- When each action named by a table's cancelled jobs was last cancelled (an operator's "not
-- now": the planner does not propose it again within the cadence). Malformed `actions` are
-- ignored. $1 table.
SELECT a.elem->>'action' AS action, max(j.finished_at) AS cancelled_at
  FROM icepack.jobs j
 CROSS JOIN LATERAL jsonb_array_elements(
       CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
       ) AS a(elem)
 WHERE j.table_id = $1 AND j.state = 'cancelled' AND j.finished_at IS NOT NULL
   AND jsonb_typeof(a.elem) = 'object' AND a.elem->>'action' IS NOT NULL
 GROUP BY 1;

-- name: job_failure_streaks
-- Per action named by a table's permanently failed jobs: how many such jobs finished since the
-- action last succeeded on that table, when the newest did and its error (the planner backs
-- off on them). Malformed `actions` (not an array, elements not objects) are ignored. $1 table.
WITH failures AS (
    SELECT DISTINCT j.id, a.elem->>'action' AS action, j.finished_at, j.error
      FROM icepack.jobs j
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
           ) AS a(elem)
     WHERE j.table_id = $1 AND j.state = 'failed' AND jsonb_typeof(a.elem) = 'object'),
successes AS (
    SELECT ja.action, max(ja.finished_at) AS finished_at
      FROM icepack.job_actions ja JOIN icepack.jobs j ON j.id = ja.job_id
     WHERE j.table_id = $1 AND ja.state = 'succeeded'
     GROUP BY ja.action)
SELECT f.action, count(*)::int AS failures, max(f.finished_at) AS last_failed_at,
       (array_agg(f.error ORDER BY f.finished_at DESC, f.id DESC))[1] AS last_error
  FROM failures f LEFT JOIN successes s ON s.action = f.action
 WHERE f.action IS NOT NULL AND (s.finished_at IS NULL OR f.finished_at > s.finished_at)
 GROUP BY f.action;

-- name: job_outcome_history
-- Per action, its newest measured runs on a table (planning.throttle): succeeded jobs whose
-- outcome holds, for that action, a numeric predicted benefit and measured/predicted ratio;
-- newest first, at most $2 per action. Malformed outcomes are ignored. $1 table.
WITH runs AS (
    SELECT j.id, j.finished_at, a.elem->>'action' AS action,
           (a.elem->>'predicted_benefit')::float8 AS predicted_benefit,
           (a.elem->>'ratio')::float8 AS ratio
      FROM icepack.jobs j
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(j.outcome->'actions') = 'array' THEN j.outcome->'actions'
                ELSE '[]'::jsonb END
           ) AS a(elem)
     WHERE j.table_id = $1 AND j.state = 'succeeded' AND j.outcome IS NOT NULL
       AND jsonb_typeof(a.elem) = 'object'
       AND jsonb_typeof(a.elem->'action') = 'string'
       AND jsonb_typeof(a.elem->'predicted_benefit') = 'number'
       AND jsonb_typeof(a.elem->'ratio') = 'number'),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY action ORDER BY finished_at DESC, id DESC) AS n
      FROM runs)
SELECT action, finished_at, predicted_benefit, ratio
  FROM ranked
 WHERE n <= $2
 ORDER BY action, n;

-- name: policy_list_catalog
-- Every policy attached in one catalog (any scope).
SELECT policy_type, scope, catalog, namespace, table_name, enabled, config
  FROM icepack.policies WHERE catalog = $1;

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

-- name: table_set_properties
-- Keep a table's properties as its current metadata has them (icepack.* overrides live there).
UPDATE icepack.tables SET properties = $2::jsonb WHERE id = $1;

-- name: table_set_location
-- Keep a table's root location as its current metadata has it (orphan-removal overlap check).
UPDATE icepack.tables SET location = $2 WHERE id = $1 AND location IS DISTINCT FROM $2;

-- name: table_locations_known
-- Every table of every catalog Icepack knows of, for the location checks (orphan-removal
-- overlap, confinement): each live maintained table with its root location (or, until
-- inspected, its metadata location) and properties (write paths), and each table listed but
-- not maintained (id NULL, ``unmaintained`` says why) with what its metadata last said.
SELECT id, catalog, namespace, name, location, metadata_location, properties,
       NULL::text AS unmaintained
  FROM icepack.tables
 WHERE dropped_at IS NULL
UNION ALL
SELECT NULL, catalog, namespace, name, location, metadata_location, write_paths, reason
  FROM icepack.unmaintained_tables;

-- name: table_pending_verification_begin
-- Record, before a rewrite's CALL, the snapshot it starts from; only while the job holds its
-- fence. An older unsettled row is kept (verifying from the older start covers more).
WITH fenced AS (
    SELECT 1 FROM icepack.jobs WHERE id = $3 AND fence = $4 AND state = 'running')
INSERT INTO icepack.pending_verifications (table_id, start_snapshot_id, job_id, fence, action)
SELECT $1, $2, $3, $4, $5 FROM fenced
ON CONFLICT (table_id) DO UPDATE SET table_id = EXCLUDED.table_id
RETURNING start_snapshot_id, job_id, fence, action, recorded_at;

-- name: table_pending_verification_get
-- The unsettled rewrite of a table, if any.
SELECT table_id, start_snapshot_id, job_id, fence, action, recorded_at
  FROM icepack.pending_verifications WHERE table_id = $1;

-- name: table_pending_verification_settle
-- Delete exactly the row that was verified (or whose table was held), never a newer one.
DELETE FROM icepack.pending_verifications
 WHERE table_id = $1 AND job_id = $2 AND fence = $3 AND recorded_at = $4
RETURNING table_id;
