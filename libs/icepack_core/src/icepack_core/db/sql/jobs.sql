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
-- queued -> running: claim the next due job (priority, then age), bump its fence, lease it.
WITH next AS (
    SELECT id
      FROM icepack.jobs
     WHERE state = 'queued' AND not_before <= coalesce($3::timestamptz, now())
     ORDER BY priority, id
       FOR UPDATE SKIP LOCKED
     LIMIT 1)
UPDATE icepack.jobs j
   SET state       = 'running',
       lease_owner = $1,
       lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $2),
       fence       = j.fence + 1,
       attempts    = j.attempts + 1,
       started_at  = coalesce($3::timestamptz, now()),
       error       = NULL
  FROM next
 WHERE j.id = next.id
RETURNING j.*;

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
-- jitter) or running -> failed, fenced. $4 retryable, $5 base seconds, $6 cap seconds,
-- $7 an optional pinned clock.
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
       error       = $3
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
       lease_until = NULL
  FROM expired
 WHERE j.id = expired.id
RETURNING j.*;

-- name: job_prune
-- Delete finished jobs older than the retention window (their actions cascade).
DELETE FROM icepack.jobs
 WHERE finished_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1);

-- name: job_count_claimable
-- What KEDA's postgresql trigger scales executors on: queued jobs that are due.
SELECT COALESCE(count(*), 0) FROM icepack.jobs WHERE state = 'queued' AND not_before <= now();

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
-- queued -> running for one named job (the CLI claims the job it just enqueued).
UPDATE icepack.jobs
   SET state = 'running', lease_owner = $2, lease_until = now() + make_interval(secs => $3),
       fence = fence + 1, attempts = attempts + 1, started_at = now(), error = NULL
 WHERE id = $1 AND state = 'queued'
RETURNING *;
