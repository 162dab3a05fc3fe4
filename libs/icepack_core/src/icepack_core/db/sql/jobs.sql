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

-- name: budget_scope_lock
-- Serialise budget checks of one scope until the transaction ends (job_claim's scopes).
SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0));

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

-- name: job_action_record
-- Record one action an executor ran, only while it still holds the job's fence.
INSERT INTO icepack.job_actions
       (job_id, fence, action, procedure, sql_text, state, output, impact, error,
        started_at, finished_at)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11
 WHERE EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
RETURNING id;

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

-- name: budget_set
-- Create or replace the budget of one scope (namespace NULL = the whole catalog).
INSERT INTO icepack.budgets (catalog, namespace, rewrite_bytes_per_hour, max_running)
VALUES ($1, $2, $3, $4)
ON CONFLICT (catalog, namespace) DO UPDATE
   SET rewrite_bytes_per_hour = excluded.rewrite_bytes_per_hour,
       max_running            = excluded.max_running,
       updated_at             = now()
RETURNING id;

-- name: budget_clear
-- Remove the budget of one scope.
DELETE FROM icepack.budgets WHERE catalog = $1 AND namespace IS NOT DISTINCT FROM $2
RETURNING id;

-- name: budget_use_all
-- Every budget with its use now (v_budget_use), catalog-wide ones first.
SELECT * FROM icepack.v_budget_use ORDER BY catalog, namespace NULLS FIRST;

-- name: job_give_back
-- running -> queued without spending the attempt, fenced: the claim found the table busy
-- (another job's lock, $3 = 'lock') or lost an Iceberg commit conflict to a writer ($3 =
-- 'conflict'). The attempt is given back and the budget charge of this claim refunded (it
-- rewrote nothing that counts against the table); the job is due again after a capped
-- exponential backoff with jitter over its give-backs of that kind ($4 base, $5 cap seconds,
-- $6 an optional pinned clock). $7: the reason, kept in `error`.
WITH refund AS (
    DELETE FROM icepack.budget_charges c
     USING icepack.jobs j
     WHERE j.id = $1 AND j.fence = $2 AND j.state = 'running'
       AND c.job_id = j.id AND c.attempt = j.attempts)
UPDATE icepack.jobs
   SET state       = 'queued',
       attempts    = greatest(attempts - 1, 0),
       lock_waits  = lock_waits + (CASE WHEN $3 = 'lock' THEN 1 ELSE 0 END),
       conflicts   = conflicts + (CASE WHEN $3 = 'conflict' THEN 1 ELSE 0 END),
       not_before  = coalesce($6::timestamptz, now()) + make_interval(secs =>
                     least($5::float8, $4::float8 * power(2, least(
                         CASE WHEN $3 = 'lock' THEN lock_waits ELSE conflicts END, 30)))
                     * (0.5 + random() * 0.5)),
       finished_at = NULL,
       lease_until = NULL,
       error       = $7
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *;
