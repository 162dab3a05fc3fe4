-- Budgets (icepack.budgets) and what claimed jobs charge to them (icepack.budget_charges).

-- name: budget_scope_lock
-- Serialise budget checks of one scope until the transaction ends (job_claim's scopes).
SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0));

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
-- $6 an optional pinned clock). $7: the reason, kept in `error`. $8: an optional earliest
-- time (a deferral's end), when later than the backoff. $9: an optional streak, the
-- conflicts in a row on the (table, action) counting this one: when given, the backoff's
-- exponent is streak - 1 instead of the job's earlier conflicts (an attempt that committed
-- progress restarted the streak, so its retry waits the base backoff).
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
       not_before  = greatest(
                     coalesce($6::timestamptz, now()) + make_interval(secs =>
                         least($5::float8, $4::float8 * power(2, least(
                             CASE WHEN $3 = 'lock' THEN lock_waits
                                  WHEN $9::int IS NULL THEN conflicts
                                  ELSE greatest($9::int - 1, 0) END, 30)))
                         * (0.5 + random() * 0.5)),
                     $8::timestamptz),
       finished_at = NULL,
       lease_until = NULL,
       error       = $7
 WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *;
