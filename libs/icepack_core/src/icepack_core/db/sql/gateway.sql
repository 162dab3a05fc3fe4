-- Read models of the gateway and the operator CLI. Every value from a request is a bind
-- parameter; optional filters are `$n IS NULL OR ...`.

-- name: table_find
-- One table by its identity, dropped ones included (their history stays readable).
SELECT id, catalog, namespace, name, metadata_location, properties, first_seen_at,
       last_seen_at, dropped_at, maintenance_hold
  FROM icepack.tables
 WHERE catalog = $1 AND namespace = $2 AND name = $3;

-- name: table_page_by_name
-- A page of tables still in their catalog, in (catalog, namespace, name) order after the keyset
-- cursor ($6, $7, $8), with their latest health and current status (the handler picks a few
-- metrics from it). $1 catalog, $2 namespace, $3 health, $4 issue code, $5 search text, $9 limit.
-- Latest health and status come from table_health_latest; a table with status snapshots but
-- no assessment (not written by record_inspection) falls back to its newest snapshot.
WITH page AS (
    SELECT t.id, t.catalog, t.namespace, t.name, t.last_seen_at,
           coalesce(l.health, 'unknown') AS health, l.score, l.issues, l.assessed_at,
           l.table_id AS assessed_id
      FROM icepack.tables t
      LEFT JOIN icepack.table_health_latest l ON l.table_id = t.id
     WHERE t.dropped_at IS NULL
       AND (t.catalog, t.namespace, t.name) > ($6::text, $7::text, $8::text)
       AND ($1::text IS NULL OR t.catalog = $1)
       AND ($2::text IS NULL OR t.namespace = $2)
       AND ($3::text IS NULL OR coalesce(l.health, 'unknown') = $3)
       AND ($4::text IS NULL
            OR l.issues @> jsonb_build_array(jsonb_build_object('code', $4::text)))
       AND ($5::text IS NULL
            OR strpos(lower(t.catalog || '.' || t.namespace || '.' || t.name), lower($5)) > 0)
     ORDER BY t.catalog, t.namespace, t.name
     LIMIT $9)
SELECT p.id, p.catalog, p.namespace, p.name, p.last_seen_at, p.health, p.score, p.issues,
       p.assessed_at, 0 AS sort_key,
       coalesce(l.inspected_at, s.inspected_at) AS inspected_at,
       CASE WHEN p.assessed_id IS NULL THEN s.status ELSE l.status END AS status
  FROM page p
  LEFT JOIN icepack.table_health_latest l ON l.table_id = p.assessed_id
  LEFT JOIN LATERAL (SELECT inspected_at, status FROM icepack.status_snapshots ss
                      WHERE p.assessed_id IS NULL AND ss.table_id = p.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 ORDER BY p.catalog, p.namespace, p.name;

-- name: table_page_by_score
-- Like table_page_by_name, ordered by health score (worst first unless $10 asks for best
-- first), then identity; tables never assessed come last either way (sort key 101, or 1 best
-- first). Keyset cursor ($11 sort key, $6, $7, $8).
-- The assessed tables are read in score order from table_health_latest's (score, table_id)
-- index (one branch per direction; $10 switches the other off), so a page costs about `limit`
-- index entries, not the fleet; the never-assessed tail is only looked for when the assessed
-- ones do not fill the page. The wide status documents are read for the page's rows only.
WITH candidates AS NOT MATERIALIZED (
    SELECT t.id, t.catalog, t.namespace, t.name, t.last_seen_at,
           coalesce(l.health, 'unknown') AS health, l.score, l.issues, l.assessed_at,
           l.table_id AS assessed_id
      FROM icepack.tables t
      LEFT JOIN icepack.table_health_latest l ON l.table_id = t.id
     WHERE t.dropped_at IS NULL
       AND ($1::text IS NULL OR t.catalog = $1)
       AND ($2::text IS NULL OR t.namespace = $2)
       AND ($3::text IS NULL OR coalesce(l.health, 'unknown') = $3)
       AND ($4::text IS NULL
            OR l.issues @> jsonb_build_array(jsonb_build_object('code', $4::text)))
       AND ($5::text IS NULL
            OR strpos(lower(t.catalog || '.' || t.namespace || '.' || t.name), lower($5)) > 0)),
worst AS (
    SELECT c.*, c.score AS sort_key
      FROM candidates c
     WHERE NOT $10::boolean
       AND c.score >= $11::integer
       AND (c.score, c.catalog, c.namespace, c.name) > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.score, c.catalog, c.namespace, c.name
     LIMIT $9),
best AS (
    SELECT c.*, -c.score AS sort_key
      FROM candidates c
     WHERE $10::boolean
       AND c.score <= -$11::integer
       AND (-c.score, c.catalog, c.namespace, c.name) > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.score DESC, c.catalog, c.namespace, c.name
     LIMIT $9),
assessed AS (
    SELECT * FROM worst
    UNION ALL
    SELECT * FROM best),
never AS (
    SELECT c.*, CASE WHEN $10::boolean THEN 1 ELSE 101 END AS sort_key
      FROM candidates c
     WHERE c.assessed_id IS NULL
       AND (SELECT count(*) FROM assessed) < $9
       AND (CASE WHEN $10::boolean THEN 1 ELSE 101 END, c.catalog, c.namespace, c.name)
           > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.catalog, c.namespace, c.name
     LIMIT $9),
page AS (
    SELECT * FROM assessed
    UNION ALL
    SELECT * FROM never
     ORDER BY sort_key, catalog, namespace, name
     LIMIT $9)
SELECT p.id, p.catalog, p.namespace, p.name, p.last_seen_at, p.health, p.score, p.issues,
       p.assessed_at, p.sort_key,
       coalesce(l.inspected_at, s.inspected_at) AS inspected_at,
       CASE WHEN p.assessed_id IS NULL THEN s.status ELSE l.status END AS status
  FROM page p
  LEFT JOIN icepack.table_health_latest l ON l.table_id = p.assessed_id
  LEFT JOIN LATERAL (SELECT inspected_at, status FROM icepack.status_snapshots ss
                      WHERE p.assessed_id IS NULL AND ss.table_id = p.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 ORDER BY p.sort_key, p.catalog, p.namespace, p.name;

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

-- name: recommendation_latest
-- The newest recommendation for a table.
SELECT id, status_snapshot_id, actions, job_id, created_at
  FROM icepack.recommendations
 WHERE table_id = $1
 ORDER BY id DESC
 LIMIT 1;

-- name: job_page
-- Jobs newest first with their table, optionally one state and/or table, before cursor id $3.
SELECT j.*, t.catalog, t.namespace, t.name AS table_name
  FROM icepack.jobs j
  LEFT JOIN icepack.tables t ON t.id = j.table_id
 WHERE ($1::text IS NULL OR j.state = $1)
   AND ($2::bigint IS NULL OR j.table_id = $2)
   AND ($3::bigint IS NULL OR j.id < $3)
 ORDER BY j.id DESC
 LIMIT $4;

-- name: job_detail
-- One job with its table (and the table's maintenance hold, if any).
SELECT j.*, t.catalog, t.namespace, t.name AS table_name, t.maintenance_hold AS table_hold
  FROM icepack.jobs j
  LEFT JOIN icepack.tables t ON t.id = j.table_id
 WHERE j.id = $1;

-- name: job_actions_of
-- The actions run for some jobs, in the order they ran.
SELECT id, job_id, fence, action, procedure, sql_text, state, output, impact, error,
       started_at, finished_at, duration_ms
  FROM icepack.job_actions
 WHERE job_id = ANY($1::bigint[])
 ORDER BY job_id, id;

-- name: job_queue_depth
-- Jobs per state (all five states, zeros included), claimable ones, and the oldest job's age.
SELECT state, jobs, claimable,
       extract(epoch FROM now() - oldest_created_at)::float8 AS oldest_age_seconds
  FROM icepack.v_queue;

-- name: event_page
-- Events newest first with their table, optionally one topic and/or table, before cursor id $3.
SELECT e.id, e.topic, e.table_id, e.payload, e.traceparent, e.created_at,
       t.catalog, t.namespace, t.name AS table_name
  FROM icepack.events e
  LEFT JOIN icepack.tables t ON t.id = e.table_id
 WHERE ($1::text IS NULL OR e.topic = $1)
   AND ($2::bigint IS NULL OR e.table_id = $2)
   AND ($3::bigint IS NULL OR e.id < $3)
 ORDER BY e.id DESC
 LIMIT $4;

-- name: event_page_after
-- Events after id $2 oldest first (for `icepack events --follow`), optionally one topic.
SELECT e.id, e.topic, e.table_id, e.payload, e.traceparent, e.created_at,
       t.catalog, t.namespace, t.name AS table_name
  FROM icepack.events e
  LEFT JOIN icepack.tables t ON t.id = e.table_id
 WHERE ($1::text IS NULL OR e.topic = $1)
   AND e.id > $2
 ORDER BY e.id
 LIMIT $3;

-- name: policy_list
-- Policies, optionally narrowed to a type, scope, catalog, namespace or table.
SELECT id, policy_type, scope, catalog, namespace, table_name, enabled, config,
       created_at, updated_at
  FROM icepack.policies
 WHERE ($1::text IS NULL OR policy_type = $1)
   AND ($2::text IS NULL OR scope = $2)
   AND ($3::text IS NULL OR catalog = $3)
   AND ($4::text IS NULL OR namespace = $4)
   AND ($5::text IS NULL OR table_name = $5)
 ORDER BY catalog, scope, coalesce(namespace, ''), coalesce(table_name, ''), policy_type;

-- name: policy_upsert
-- Create or replace the policy of one type at one target; `created` tells which happened.
INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name, enabled, config)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
ON CONFLICT (policy_type, scope, catalog, coalesce(namespace, ''), coalesce(table_name, ''))
DO UPDATE SET enabled = EXCLUDED.enabled, config = EXCLUDED.config, updated_at = now()
RETURNING id, policy_type, scope, catalog, namespace, table_name, enabled, config,
          created_at, updated_at, (xmax = 0) AS created;

-- name: policy_delete
-- Remove the policy of one type at one target; no row when there was none.
DELETE FROM icepack.policies
 WHERE policy_type = $1 AND scope = $2 AND catalog = $3
   AND namespace IS NOT DISTINCT FROM $4 AND table_name IS NOT DISTINCT FROM $5
RETURNING id;

-- name: job_last_runs
-- When each action last succeeded on a table (the recommendation's cadence input).
SELECT ja.action, max(ja.finished_at) AS finished_at
  FROM icepack.job_actions ja
  JOIN icepack.jobs j ON j.id = ja.job_id
 WHERE j.table_id = $1 AND ja.state = 'succeeded'
 GROUP BY ja.action;

-- name: table_detail
-- One table with its latest health, status, recommendation and job, in one round trip.
SELECT t.id, t.catalog, t.namespace, t.name, t.metadata_location, t.properties,
       t.first_seen_at, t.last_seen_at, t.dropped_at, t.maintenance_hold,
       to_jsonb(h) AS health, to_jsonb(s) AS status, to_jsonb(r) AS recommendation,
       j.id AS job_id
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT assessment_id AS id, status_snapshot_id, health, score, issues,
                            assessed_at
                       FROM icepack.table_health_latest WHERE table_id = t.id) h ON true
  LEFT JOIN LATERAL (SELECT id, inspected_at, inspector, metadata_location,
                            current_snapshot_id, status
                       FROM icepack.status_snapshots WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) s ON true
  LEFT JOIN LATERAL (SELECT id, status_snapshot_id, actions, job_id, created_at
                       FROM icepack.recommendations WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) r ON true
  LEFT JOIN LATERAL (SELECT id FROM icepack.jobs WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) j ON true
 WHERE t.catalog = $1 AND t.namespace = $2 AND t.name = $3;
