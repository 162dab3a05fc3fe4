-- The job queue (icepack.jobs): enqueue, claim, lease, finish, and its read models.

-- name: job_enqueue
-- Queue a job. With a dedupe key already queued or running, insert nothing (no row returned).
INSERT INTO icepack.jobs
       (table_id, actions, priority, max_attempts, not_before, dedupe_key, trigger, traceparent,
        predicted, rewrite_bytes, benefit, health_score)
VALUES ($1, $2::jsonb, $3, $4, coalesce($5::timestamptz, now()), $6, $7, $8,
        $9::jsonb, $10, $11, $12)
ON CONFLICT (dedupe_key) WHERE state IN ('queued', 'running') DO NOTHING
RETURNING *;

-- name: job_get_active_by_dedupe
-- The queued or running job holding a dedupe key.
SELECT * FROM icepack.jobs
 WHERE dedupe_key = $1 AND state IN ('queued', 'running');

-- name: job_get
-- One job by id.
SELECT * FROM icepack.jobs WHERE id = $1;

-- name: job_claim
-- queued -> running: claim the first due job in claim order (priority, benefit per byte
-- rewritten, worst health, age) that every budget covering its table allows (budget_allows over
-- budget_use), bump its fence, lease it and charge it. A job covered by a budget is only picked
-- here (candidate + the budgets' lock keys in `scopes`, no row of its own): the caller takes
-- the scopes' advisory locks and claims it with job_claim_budgeted, which checks again.
-- A job no budget covers is claimed in this one statement (the fast path).
WITH use AS MATERIALIZED (
    SELECT * FROM icepack.budget_use(coalesce($3::timestamptz, now()))),
next AS (
    SELECT j.id,
           ARRAY(SELECT u.scope_key FROM use u
                  WHERE icepack.budget_covers(u.catalog, u.namespace, t.catalog, t.namespace)
                  ORDER BY u.scope_key) AS scopes
      FROM icepack.jobs j
      LEFT JOIN icepack.tables t ON t.id = j.table_id
     WHERE j.state = 'queued' AND j.not_before <= coalesce($3::timestamptz, now())
       AND NOT EXISTS (
           SELECT 1 FROM use u
            WHERE icepack.budget_covers(u.catalog, u.namespace, t.catalog, t.namespace)
              AND NOT icepack.budget_allows(u.running, u.max_running, u.charged_bytes,
                                            u.rewrite_bytes_per_hour, j.rewrite_bytes))
     ORDER BY j.priority, j.benefit / greatest(j.rewrite_bytes, 1) DESC,
              j.health_score ASC NULLS LAST, j.id
       FOR UPDATE OF j SKIP LOCKED
     LIMIT 1),
taken AS (
    UPDATE icepack.jobs j
       SET state       = 'running',
           lease_owner = $1,
           lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $2),
           fence       = j.fence + 1,
           attempts    = j.attempts + 1,
           started_at  = coalesce($3::timestamptz, now()),
           error       = NULL,
           error_code  = NULL
      FROM next
     WHERE j.id = next.id AND cardinality(next.scopes) = 0
    RETURNING j.*),
charged AS (
    INSERT INTO icepack.budget_charges (job_id, attempt, catalog, namespace, bytes, charged_at)
    SELECT taken.id, taken.attempts, t.catalog, t.namespace, taken.rewrite_bytes,
           taken.started_at
      FROM taken JOIN icepack.tables t ON t.id = taken.table_id
     WHERE taken.rewrite_bytes > 0)
SELECT next.id AS candidate, next.scopes, taken.*
  FROM next LEFT JOIN taken ON true;

-- name: job_claim_budgeted
-- queued -> running for job $4 that job_claim picked (its row is locked by this transaction),
-- after the caller took the advisory locks of every budget scope covering it: check every
-- covering budget again on a fresh snapshot (no other claimer of those scopes is between its
-- check and its commit), then claim and charge it. No row: a budget is used up since the pick.
WITH use AS MATERIALIZED (
    SELECT * FROM icepack.budget_use(coalesce($3::timestamptz, now()))),
taken AS (
    UPDATE icepack.jobs j
       SET state       = 'running',
           lease_owner = $1,
           lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $2),
           fence       = j.fence + 1,
           attempts    = j.attempts + 1,
           started_at  = coalesce($3::timestamptz, now()),
           error       = NULL,
           error_code  = NULL
     WHERE j.id = $4 AND j.state = 'queued'
       AND NOT EXISTS (
           SELECT 1 FROM use u JOIN icepack.tables t ON t.id = j.table_id
            WHERE icepack.budget_covers(u.catalog, u.namespace, t.catalog, t.namespace)
              AND NOT icepack.budget_allows(u.running, u.max_running, u.charged_bytes,
                                            u.rewrite_bytes_per_hour, j.rewrite_bytes))
    RETURNING j.*),
charged AS (
    INSERT INTO icepack.budget_charges (job_id, attempt, catalog, namespace, bytes, charged_at)
    SELECT taken.id, taken.attempts, t.catalog, t.namespace, taken.rewrite_bytes,
           taken.started_at
      FROM taken JOIN icepack.tables t ON t.id = taken.table_id
     WHERE taken.rewrite_bytes > 0)
SELECT * FROM taken;

-- name: job_heartbeat
-- running -> running: extend the lease if the fence still matches; tells whether cancel was asked.
UPDATE icepack.jobs
   SET lease_until = coalesce($4::timestamptz, now()) + make_interval(secs => $3)
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING lease_until, cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: job_complete
-- running -> succeeded, fenced.
UPDATE icepack.jobs
   SET state = 'succeeded', finished_at = now(), lease_until = NULL, result = $3::jsonb
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *;

-- name: job_outcome_record
-- Store a running job's measured outcome, fenced: a no-op (no row) for a lost job.
UPDATE icepack.jobs
   SET outcome = $3::jsonb
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING id;

-- name: job_fail
-- running -> queued (retryable, attempts left; due after capped exponential backoff with
-- jitter) or running -> failed, fenced. $3 the error, $4 retryable, $5 base seconds, $6 cap
-- seconds, $7 an optional pinned clock, $8 the error's class (jobs.error_code).
UPDATE icepack.jobs
   SET state       = CASE WHEN $4 AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
       not_before  = CASE WHEN $4 AND attempts < max_attempts
                          THEN coalesce($7::timestamptz, now()) + make_interval(secs =>
                               least($6::float8, $5::float8 * power(2, attempts - 1))
                               * (0.5 + random() * 0.5))
                          ELSE not_before END,
       finished_at = CASE WHEN $4 AND attempts < max_attempts THEN NULL
                          ELSE coalesce($7::timestamptz, now()) END,
       lease_until = NULL,
       error       = $3,
       error_code  = $8
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *;

-- name: job_cancel
-- queued -> cancelled at once; running: ask its executor to stop (it acknowledges, fenced).
UPDATE icepack.jobs
   SET state               = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
       finished_at         = CASE WHEN state = 'queued' THEN now() ELSE finished_at END,
       cancel_requested_at = now()
 WHERE id = $1 AND state IN ('queued', 'running')
RETURNING *;

-- name: job_finish_cancelled
-- running -> cancelled: the executor acknowledges a cancel request, fenced.
UPDATE icepack.jobs
   SET state = 'cancelled', finished_at = now(), lease_until = NULL, error = $3
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *;

-- name: job_reap
-- running -> queued / failed / cancelled for jobs whose lease expired: the executor died or hung.
-- $2 base seconds, $3 cap seconds of the backoff, $4 an optional pinned clock.
WITH expired AS (
    SELECT id
      FROM icepack.jobs
     WHERE state = 'running' AND lease_until < coalesce($4::timestamptz, now())
       FOR UPDATE SKIP LOCKED
     LIMIT $1)
UPDATE icepack.jobs j
   SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                    WHEN j.attempts < j.max_attempts THEN 'queued'
                    ELSE 'failed' END,
       not_before = CASE WHEN j.cancel_requested_at IS NULL AND j.attempts < j.max_attempts
                         THEN coalesce($4::timestamptz, now()) + make_interval(secs =>
                              least($3::float8, $2::float8 * power(2, j.attempts - 1))
                              * (0.5 + random() * 0.5))
                         ELSE j.not_before END,
       finished_at = CASE WHEN j.cancel_requested_at IS NULL AND j.attempts < j.max_attempts
                          THEN NULL ELSE coalesce($4::timestamptz, now()) END,
       error = format('lease of %s expired at %s (attempt %s of %s)',
                      j.lease_owner, j.lease_until, j.attempts, j.max_attempts),
       error_code = 'LEASE_EXPIRED',
       lease_until = NULL
  FROM expired
 WHERE j.id = expired.id
RETURNING j.*;

-- name: job_prune
-- Delete finished jobs older than the retention window (their actions cascade).
DELETE FROM icepack.jobs
 WHERE finished_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1);

-- name: job_count_claimable
-- What KEDA's postgresql trigger scales executors on: how many jobs back-to-back claims would
-- take now (due, queued, within every budget covering them; see icepack.claimable_jobs).
SELECT COALESCE(count(*), 0) FROM icepack.claimable_jobs(now());

-- name: job_list
-- Jobs newest first, optionally one state and/or table, before a cursor id.
SELECT * FROM icepack.jobs
 WHERE ($1::text IS NULL OR state = $1)
   AND ($2::bigint IS NULL OR table_id = $2)
   AND ($3::bigint IS NULL OR id < $3)
 ORDER BY id DESC
 LIMIT $4;

-- name: job_running_fence
-- The fence of a running job (NULL when it is not running).
SELECT fence FROM icepack.jobs WHERE id = $1 AND state = 'running';

-- name: job_claim_id
-- queued -> running for one named job (the CLI claims the job it just enqueued). An operator's
-- explicit run: budgets are not checked, but the claim is charged to them like any other.
WITH taken AS (
    UPDATE icepack.jobs
       SET state = 'running', lease_owner = $2, lease_until = now() + make_interval(secs => $3),
           fence = fence + 1, attempts = attempts + 1, started_at = now(), error = NULL,
           error_code = NULL
     WHERE id = $1 AND state = 'queued'
    RETURNING *),
charged AS (
    INSERT INTO icepack.budget_charges (job_id, attempt, catalog, namespace, bytes, charged_at)
    SELECT taken.id, taken.attempts, t.catalog, t.namespace, taken.rewrite_bytes,
           taken.started_at
      FROM taken JOIN icepack.tables t ON t.id = taken.table_id
     WHERE taken.rewrite_bytes > 0)
SELECT * FROM taken;

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
 WHERE started_at > now() - interval '1 hour'
   -- a job claimed in the last hour runs, or finished since (indexes jobs_lease, jobs_finished)
   AND (state = 'running' OR finished_at > now() - interval '1 hour');

-- name: job_conflict_figures
-- The conflict-retried figure: jobs that gave a claim back after a commit conflict (and how
-- many conflicts in all), by state now; and the (table, action) pairs deferred at $1.
SELECT (SELECT count(*) FROM icepack.jobs WHERE conflicts > 0)              AS conflict_retried_jobs,
       (SELECT coalesce(sum(conflicts), 0)::bigint FROM icepack.jobs)       AS conflicts,
       (SELECT count(*) FROM icepack.jobs WHERE conflicts > 0 AND state = 'failed')
                                                                             AS conflict_jobs_failed,
       (SELECT count(*) FROM icepack.maintenance_deferrals
         WHERE deferred_until > coalesce($1::timestamptz, now()))           AS deferred;

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

-- name: job_queue_depth
-- Jobs per state (all five states, zeros included), claimable ones, and the oldest job's age.
SELECT state, jobs, claimable,
       extract(epoch FROM now() - oldest_created_at)::float8 AS oldest_age_seconds
  FROM icepack.v_queue;

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

-- name: job_wait_ahead
-- What stands before a job planned now for table $1 (planning.pressure.QueueAhead): the
-- expected remaining seconds of every other table's running job and due queued job (each
-- expected to take as long as its table's newest succeeded job ran, $3 seconds when none
-- did; a running job less what it already ran), and how many executors claimed a job in the
-- last $4 seconds. $2 is the clock.
WITH active AS (  -- each state through its own partial index (jobs_claimable, jobs_lease)
    SELECT table_id, state, started_at FROM icepack.jobs
     WHERE state = 'queued' AND not_before <= $2::timestamptz
    UNION ALL
    SELECT table_id, state, started_at FROM icepack.jobs WHERE state = 'running'),
ahead AS (
    SELECT a.state, a.started_at,
           coalesce((SELECT extract(epoch FROM p.finished_at - p.started_at)::float8
                       FROM icepack.jobs p
                      WHERE p.table_id = a.table_id AND p.state = 'succeeded'
                        AND p.started_at IS NOT NULL
                      ORDER BY p.id DESC LIMIT 1), $3::float8) AS expected
      FROM active a
     WHERE a.table_id IS DISTINCT FROM $1::bigint)
SELECT coalesce(sum(CASE WHEN state = 'running'
                         THEN greatest(expected
                                       - extract(epoch FROM $2::timestamptz - started_at), 0)
                         ELSE expected END), 0)::float8 AS seconds,
       (SELECT count(DISTINCT lease_owner) FROM icepack.jobs
         WHERE lease_owner IS NOT NULL
           AND started_at > $2::timestamptz - make_interval(secs => $4::float8)
           AND (state = 'running'
                OR finished_at > $2::timestamptz - make_interval(secs => $4::float8)))
         AS executors
  FROM ahead;
