-- What the gateway's /metrics adds for alerting (icepack_gateway.alert_metrics), read at scrape
-- time. Every answer is grouped by a bounded key (catalog, consumer, action, error class,
-- state), never by table.

-- name: table_held_counts
-- Tables still in their catalog whose automatic maintenance is stopped, per catalog.
SELECT catalog, count(*) AS tables
  FROM icepack.tables
 WHERE maintenance_hold IS NOT NULL AND dropped_at IS NULL
 GROUP BY catalog;

-- name: table_backoff_counts
-- Tables still in their catalog with at least one action resting after permanent failures,
-- per catalog: the planner's failure backoff (job_failure_streaks, fleet-wide): n permanently
-- failed jobs naming the action since it last succeeded on the table, the newest at `last`,
-- rest until last + least(cap, base * 2^(n-1)). $1 base seconds, $2 cap seconds.
WITH failures AS (
    SELECT DISTINCT j.table_id, j.id, a.elem->>'action' AS action, j.finished_at
      FROM icepack.jobs j
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
           ) AS a(elem)
     WHERE j.state = 'failed' AND j.table_id IS NOT NULL AND jsonb_typeof(a.elem) = 'object'),
successes AS (
    SELECT j.table_id, ja.action, max(ja.finished_at) AS finished_at
      FROM icepack.job_actions ja JOIN icepack.jobs j ON j.id = ja.job_id
     WHERE ja.state = 'succeeded' AND j.table_id IN (SELECT table_id FROM failures)
     GROUP BY j.table_id, ja.action),
streaks AS (
    SELECT f.table_id, f.action, count(*) AS n, max(f.finished_at) AS last
      FROM failures f
      LEFT JOIN successes s ON s.table_id = f.table_id AND s.action = f.action
     WHERE f.action IS NOT NULL AND (s.finished_at IS NULL OR f.finished_at > s.finished_at)
     GROUP BY f.table_id, f.action)
SELECT t.catalog, count(DISTINCT t.id) AS tables
  FROM streaks s JOIN icepack.tables t ON t.id = s.table_id
 WHERE t.dropped_at IS NULL
   AND s.last + make_interval(secs => least($2::float8,
                                            $1::float8 * power(2, least(s.n - 1, 60)))) > now()
 GROUP BY t.catalog;

-- name: job_finished_recent
-- Jobs that reached a terminal state in the last hour, by state.
SELECT state, count(*) AS jobs
  FROM icepack.jobs
 WHERE state IN ('succeeded', 'failed', 'cancelled')
   AND finished_at > now() - interval '1 hour'
 GROUP BY state;

-- name: job_failures_recent
-- Jobs failed for good in the last hour, by action named ('' for a job naming none) and error
-- class (jobs.error_code; UNCLASSIFIED for rows failed before it existed). A job naming two
-- actions counts once for each.
SELECT coalesce(a.elem->>'action', '') AS action,
       coalesce(j.error_code, 'UNCLASSIFIED') AS reason, count(*) AS jobs
  FROM icepack.jobs j
  LEFT JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
        ) AS a(elem) ON jsonb_typeof(a.elem) = 'object'
 WHERE j.state = 'failed' AND j.finished_at > now() - interval '1 hour'
 GROUP BY 1, 2;

-- name: job_claim_times
-- The oldest claimable job's wait (seconds since it became due: created, or its retry's
-- not_before), and claim latency over the jobs claimed in the last hour (the same wait, at
-- claim): median, p90, p99 and how many. NULLs when there are none.
SELECT (SELECT extract(epoch FROM now() - min(greatest(j.created_at, j.not_before)))::float8
          FROM icepack.claimable_jobs(now()) c JOIN icepack.jobs j ON j.id = c.job_id)
         AS oldest_claimable_seconds,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]::float8[]) WITHIN GROUP (ORDER BY
           greatest(extract(epoch FROM started_at - greatest(created_at, not_before)), 0)::float8)
         AS claim_latency,
       count(*) AS claimed
  FROM icepack.jobs
 WHERE started_at > now() - interval '1 hour';

-- name: consumer_lag_age
-- Per consumer, how long its oldest unread event has waited (0 when it is caught up).
SELECT c.consumer,
       coalesce(extract(epoch FROM now() - (
           SELECT min(e.created_at) FROM icepack.events e
            WHERE (e.xid, e.id) > (c.last_xid, c.last_event_id))), 0)::float8 AS seconds
  FROM icepack.consumer_offsets c
 ORDER BY c.consumer;

-- name: catalog_status_all
-- Each catalog discovery has recorded: its last successful pass (epoch seconds; NULL never),
-- whether its last pass failed, tables listed and skipped, and the last pass's wall time.
SELECT catalog, extract(epoch FROM last_ok_at)::float8 AS last_ok,
       last_error IS NOT NULL AS failing, table_count,
       jsonb_array_length(skipped_tables) AS skipped, last_pass_seconds
  FROM icepack.catalog_status
 ORDER BY catalog;

-- name: table_pending_verification_counts
-- Rewrites started and not yet verified: all of them, and the stale ones (recorded more than
-- $1 seconds, a job lease, ago and no longer covered by their job running under the same
-- fence: a crash or a lost lease left them for the next job on the table), with the oldest
-- stale one's age (NULL: none).
SELECT count(*) AS pending,
       count(*) FILTER (WHERE stale) AS stale,
       extract(epoch FROM now() - min(recorded_at) FILTER (WHERE stale))::float8 AS oldest_stale
  FROM (SELECT p.recorded_at,
               p.recorded_at < now() - make_interval(secs => $1::float8)
               AND NOT EXISTS (SELECT 1 FROM icepack.jobs j
                                WHERE j.id = p.job_id AND j.state = 'running'
                                  AND j.fence = p.fence) AS stale
          FROM icepack.pending_verifications p) v;

-- name: deletion_quarantine_totals
-- Files in quarantine (orphan removal moved them; purged after purge_after), with bytes, and
-- those whose purge is due.
SELECT count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes,
       count(*) FILTER (WHERE purge_after <= now()) AS due_files,
       coalesce(sum(size_bytes) FILTER (WHERE purge_after <= now()), 0)::bigint AS due_bytes
  FROM icepack.deletions
 WHERE state = 'quarantined';
