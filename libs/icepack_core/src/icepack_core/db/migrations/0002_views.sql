-- 0002: plain-named views so psql is a first-class interface.

-- Latest health of every table that is still in its catalog, worst first.
CREATE VIEW icepack.v_table_health AS
SELECT t.id AS table_id,
       t.catalog, t.namespace, t.name,
       coalesce(h.health, 'unknown') AS health,
       h.score,
       (SELECT string_agg(i ->> 'code', ',' ORDER BY i ->> 'code')
          FROM jsonb_array_elements(h.issues) AS i) AS issues,
       (s.status ->> 'data_file_count')::bigint AS data_files,
       (s.status ->> 'small_file_count')::bigint AS small_files,
       (s.status ->> 'snapshot_count')::bigint AS snapshots,
       (s.status ->> 'position_delete_file_count')::bigint
         + (s.status ->> 'equality_delete_file_count')::bigint
         + (s.status ->> 'deletion_vector_count')::bigint AS delete_files,
       s.inspected_at,
       h.assessed_at
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT * FROM icepack.health_assessments ha
                      WHERE ha.table_id = t.id ORDER BY ha.id DESC LIMIT 1) h ON true
  LEFT JOIN LATERAL (SELECT * FROM icepack.status_snapshots ss
                      WHERE ss.table_id = t.id ORDER BY ss.id DESC LIMIT 1) s ON true
 WHERE t.dropped_at IS NULL;

-- Job counts by state; `claimable` is exactly what KEDA scales executors on.
CREATE VIEW icepack.v_queue AS
SELECT s.state,
       count(j.id) AS jobs,
       count(j.id) FILTER (WHERE j.state = 'queued' AND j.not_before <= now()) AS claimable,
       min(j.created_at) AS oldest_created_at
  FROM (VALUES ('queued'), ('running'), ('succeeded'), ('failed'), ('cancelled')) AS s(state)
  LEFT JOIN icepack.jobs j ON j.state = s.state
 GROUP BY s.state;

-- The last 200 jobs with their table and how long they ran.
CREATE VIEW icepack.v_recent_jobs AS
SELECT j.id, j.state, t.catalog, t.namespace, t.name AS table_name,
       (SELECT string_agg(a ->> 'action', ',') FROM jsonb_array_elements(j.actions) a) AS actions,
       j.trigger, j.attempts, j.max_attempts, j.fence, j.lease_owner,
       j.created_at, j.started_at, j.finished_at,
       j.finished_at - j.started_at AS ran_for,
       j.error
  FROM icepack.jobs j
  LEFT JOIN icepack.tables t ON t.id = j.table_id
 ORDER BY j.id DESC
 LIMIT 200;

-- The newest 200 events with their table.
CREATE VIEW icepack.v_events_tail AS
SELECT e.id, e.topic, t.catalog, t.namespace, t.name AS table_name, e.payload,
       e.created_at, e.traceparent
  FROM icepack.events e
  LEFT JOIN icepack.tables t ON t.id = e.table_id
 ORDER BY e.id DESC
 LIMIT 200;
