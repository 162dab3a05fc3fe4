-- Maintenance budgets, enforced when an executor claims a job.
--
-- A budget covers one catalog (namespace NULL) or one namespace of it, and limits
--   rewrite_bytes_per_hour  the bytes jobs in scope may be charged in any sliding hour;
--   max_running             how many jobs in scope may run at once.
-- Either may be NULL (unlimited), not both. A job is claimable only when EVERY budget covering
-- its table allows it: running < max_running and charged + job.rewrite_bytes <= the hourly
-- budget ("charged" = the sum of budget_charges.bytes with charged_at in the last hour).
CREATE TABLE icepack.budgets (
    id                     bigserial   PRIMARY KEY,
    catalog                text        NOT NULL CHECK (catalog <> ''),
    namespace              text        CHECK (namespace <> ''),
    rewrite_bytes_per_hour bigint      CHECK (rewrite_bytes_per_hour > 0),
    max_running            integer     CHECK (max_running > 0),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT budgets_one_per_scope UNIQUE NULLS NOT DISTINCT (catalog, namespace),
    CONSTRAINT budgets_some_limit
        CHECK (rewrite_bytes_per_hour IS NOT NULL OR max_running IS NOT NULL)
);

-- What each claim charged: one row per claim (attempt) of a job with rewrite_bytes > 0 on a
-- known table, so a retry is charged again (it rewrites again). The scope is copied from the
-- table at claim time. Rows go with their job (job_prune); only the last hour is ever read.
CREATE TABLE icepack.budget_charges (
    id         bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL REFERENCES icepack.jobs (id) ON DELETE CASCADE,
    attempt    integer     NOT NULL CHECK (attempt >= 1),
    catalog    text        NOT NULL,
    namespace  text        NOT NULL,
    bytes      bigint      NOT NULL CHECK (bytes > 0),
    charged_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX budget_charges_recent ON icepack.budget_charges (catalog, charged_at);
CREATE INDEX budget_charges_job ON icepack.budget_charges (job_id);

-- The claim order: priority, then benefit per byte rewritten (highest first), then the worst
-- health (lowest score) first, then age. job_claim and claimable_jobs sort by exactly this.
DROP INDEX icepack.jobs_claimable;
CREATE INDEX jobs_claim_order ON icepack.jobs
    (priority, (benefit / greatest(rewrite_bytes, 1)) DESC, health_score ASC NULLS LAST, id)
    WHERE state = 'queued';

-- Whether a budget (b_catalog, b_namespace) covers a table (t_catalog, t_namespace).
CREATE FUNCTION icepack.budget_covers(b_catalog text, b_namespace text,
                                      t_catalog text, t_namespace text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT b_catalog = t_catalog AND (b_namespace IS NULL OR b_namespace = t_namespace)
$$;

-- THE budget predicate, the one definition job_claim, job_claim_budgeted and claimable_jobs
-- share: may one more job of `bytes` start under a budget with this use?
CREATE FUNCTION icepack.budget_allows(running bigint, max_running integer, charged bigint,
                                      bytes_per_hour bigint, bytes bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (max_running IS NULL OR running < max_running)
       AND (bytes_per_hour IS NULL OR charged + bytes <= bytes_per_hour)
$$;

-- Every budget with its use at `at`: running jobs in scope, bytes charged in (at - 1 h, ...],
-- and the key claims serialise on (a transaction-level advisory lock per scope).
CREATE FUNCTION icepack.budget_use(at timestamptz)
RETURNS TABLE (budget_id bigint, catalog text, namespace text, scope_key text,
               rewrite_bytes_per_hour bigint, max_running integer,
               running bigint, charged_bytes bigint)
LANGUAGE sql STABLE AS $$
    SELECT b.id, b.catalog, b.namespace,
           'icepack.budget:' || b.catalog || chr(31) || coalesce(b.namespace, ''),
           b.rewrite_bytes_per_hour, b.max_running,
           (SELECT count(*)
              FROM icepack.jobs j JOIN icepack.tables t ON t.id = j.table_id
             WHERE j.state = 'running'
               AND icepack.budget_covers(b.catalog, b.namespace, t.catalog, t.namespace)),
           (SELECT coalesce(sum(c.bytes), 0)::bigint
              FROM icepack.budget_charges c
             WHERE c.catalog = b.catalog AND c.charged_at > at - interval '1 hour'
               AND icepack.budget_covers(b.catalog, b.namespace, c.catalog, c.namespace))
      FROM icepack.budgets b
$$;

-- The jobs back-to-back claims at `at` would take, in the order they would take them: walk the
-- due queued jobs in claim order, take each one every covering budget allows given the use so
-- far, and charge it (running + 1, charged + rewrite_bytes) to those budgets. This is what
-- job_claim does one job at a time, so count(*) of it is exactly the number of successful claims
-- in a row (KEDA's job_count_claimable). A job bigger than its hourly budget is never taken.
CREATE FUNCTION icepack.claimable_jobs(at timestamptz)
RETURNS TABLE (job_id bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    b_catalog   text[];
    b_namespace text[];
    b_max       integer[];
    b_hourly    bigint[];
    b_running   bigint[];
    b_charged   bigint[];
    n           integer;
    fits        boolean;
    j           record;
BEGIN
    SELECT array_agg(u.catalog ORDER BY u.budget_id), array_agg(u.namespace ORDER BY u.budget_id),
           array_agg(u.max_running ORDER BY u.budget_id),
           array_agg(u.rewrite_bytes_per_hour ORDER BY u.budget_id),
           array_agg(u.running ORDER BY u.budget_id), array_agg(u.charged_bytes ORDER BY u.budget_id)
      INTO b_catalog, b_namespace, b_max, b_hourly, b_running, b_charged
      FROM icepack.budget_use(at) u;
    n := coalesce(cardinality(b_catalog), 0);
    IF n = 0 THEN  -- no budgets: every due queued job
        RETURN QUERY SELECT q.id FROM icepack.jobs q WHERE q.state = 'queued' AND q.not_before <= at;
        RETURN;
    END IF;
    FOR j IN
        SELECT q.id, q.rewrite_bytes, t.catalog, t.namespace
          FROM icepack.jobs q LEFT JOIN icepack.tables t ON t.id = q.table_id
         WHERE q.state = 'queued' AND q.not_before <= at
         ORDER BY q.priority, q.benefit / greatest(q.rewrite_bytes, 1) DESC,
                  q.health_score ASC NULLS LAST, q.id
    LOOP
        fits := true;
        FOR i IN 1..n LOOP
            IF icepack.budget_covers(b_catalog[i], b_namespace[i], j.catalog, j.namespace)
               AND NOT icepack.budget_allows(b_running[i], b_max[i], b_charged[i], b_hourly[i],
                                             j.rewrite_bytes) THEN
                fits := false;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN NOT fits;
        FOR i IN 1..n LOOP
            IF icepack.budget_covers(b_catalog[i], b_namespace[i], j.catalog, j.namespace) THEN
                b_running[i] := b_running[i] + 1;
                IF j.catalog IS NOT NULL AND j.rewrite_bytes > 0 THEN
                    b_charged[i] := b_charged[i] + j.rewrite_bytes;
                END IF;
            END IF;
        END LOOP;
        job_id := j.id;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Budget use for psql, GET /budgets and the metrics: limits, use now, and the queued jobs in
-- scope that can never run because their rewrite_bytes alone exceed the hourly budget.
CREATE VIEW icepack.v_budget_use AS
SELECT u.budget_id, u.catalog, u.namespace, u.rewrite_bytes_per_hour, u.max_running,
       u.running, u.charged_bytes,
       CASE WHEN u.rewrite_bytes_per_hour IS NULL THEN '{}'::bigint[] ELSE
            ARRAY(SELECT j.id
                    FROM icepack.jobs j JOIN icepack.tables t ON t.id = j.table_id
                   WHERE j.state = 'queued' AND j.rewrite_bytes > u.rewrite_bytes_per_hour
                     AND icepack.budget_covers(u.catalog, u.namespace, t.catalog, t.namespace)
                   ORDER BY j.id) END AS oversized_jobs,
       b.updated_at
  FROM icepack.budget_use(now()) u
  JOIN icepack.budgets b ON b.id = u.budget_id;

-- v_queue's `claimable` now means what KEDA counts: due, queued and within every budget.
CREATE OR REPLACE VIEW icepack.v_queue AS
SELECT s.state,
       count(j.id) AS jobs,
       count(j.id) FILTER (WHERE j.state = 'queued'
                             AND j.id IN (SELECT c.job_id FROM icepack.claimable_jobs(now()) c))
           AS claimable,
       min(j.created_at) AS oldest_created_at
  FROM (VALUES ('queued'), ('running'), ('succeeded'), ('failed'), ('cancelled')) AS s(state)
  LEFT JOIN icepack.jobs j ON j.state = s.state
 GROUP BY s.state;
