-- The deletion ledger (icepack.deletions, migration 0014): what orphan removal quarantined, and
-- what purge and restore did with it, and the files snapshot expiry deletes. Every write happens
-- only while the writing job ($1 id, $2 fence) is still running under that fence (as
-- job_action_record): a job that lost its lease cannot record or change anything.

-- name: deletion_record_batch
-- Record listed paths of a job before any is touched ($3 table, $4 action, $5 kind, $6 reason,
-- $7 paths, $8 sizes). A path already recorded for the job is left as it is (a resumed job).
-- fenced is false when the job no longer holds its fence (nothing was written then).
WITH fenced AS (
    SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running'
), written AS (
    INSERT INTO icepack.deletions (job_id, table_id, action, path, size_bytes, kind, reason)
    SELECT $1, $3, $4, p.path, p.size_bytes, $5, $6
      FROM unnest($7::text[], $8::bigint[]) AS p(path, size_bytes)
     WHERE EXISTS (SELECT 1 FROM fenced)
    ON CONFLICT (job_id, path) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM fenced) AS fenced, (SELECT count(*) FROM written) AS written;

-- name: deletion_recorded_batch
-- The next rows of job $1 in state $2 recorded by action $4 after row id $5, oldest first, at
-- most $3 (a job that expires snapshots and removes orphans holds rows of both under one id),
-- of the tables in $6 (a table and the ones it was renamed from: ``table_lineage``). Read by
-- id so that rows left as they were (kept, refused) are passed, never read again.
SELECT * FROM icepack.deletions
 WHERE job_id = $1 AND state = $2 AND action = $4 AND id > $5
   AND table_id = ANY($6::bigint[])
 ORDER BY id
 LIMIT $3;

-- name: deletion_mark_quarantined
-- recorded -> quarantined for row $3 (moved to $4, purge due at $5), under job $1's fence $2.
UPDATE icepack.deletions
   SET state = 'quarantined', quarantine_path = $4, purge_after = $5, changed_at = now()
 WHERE id = $3 AND state = 'recorded'
   AND EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
RETURNING id;

-- name: deletion_mark
-- quarantined -> $4 ('purged' or 'restored') for row $3, under job $1's fence $2.
UPDATE icepack.deletions
   SET state = $4, changed_at = now()
 WHERE id = $3 AND state = 'quarantined'
   AND EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
RETURNING id;

-- name: deletion_purge_due
-- Quarantined rows of the tables in $1 (``table_lineage``) whose window ended before $2,
-- oldest first, at most $3; never a row whose job's restore is queued or running (an
-- operator's restore must not lose to the hourly purge).
SELECT * FROM icepack.deletions d
 WHERE d.table_id = ANY($1::bigint[]) AND d.state = 'quarantined' AND d.purge_after <= $2
   AND NOT icepack.restore_pending(d.job_id)
 ORDER BY d.purge_after, d.id
 LIMIT $3;

-- name: deletion_purge_due_tables
-- Live, not held tables with quarantined files due for purging by $1, at most $2: a row's
-- table, or the live table it was renamed to (``live_table_at``); rows whose restore is
-- pending are not due.
WITH due AS (
    SELECT DISTINCT d.table_id
      FROM icepack.deletions d
     WHERE d.state = 'quarantined' AND d.purge_after <= $1 AND d.table_id IS NOT NULL
       AND NOT icepack.restore_pending(d.job_id)
)
SELECT DISTINCT t.id AS table_id
  FROM due
  JOIN icepack.tables t ON t.id = icepack.live_table_at(due.table_id)
 WHERE t.dropped_at IS NULL AND t.maintenance_hold IS NULL
 ORDER BY t.id
 LIMIT $2;

-- name: deletion_page_job
-- A page of job $1's ledger rows, in the order they were recorded: the rows after id $2 (NULL:
-- from the start), at most $3.
SELECT id, job_id, table_id, action, kind, path, size_bytes, state, quarantine_path,
       purge_after, reason, recorded_at, changed_at
  FROM icepack.deletions
 WHERE job_id = $1 AND ($2::bigint IS NULL OR id > $2)
 ORDER BY id
 LIMIT $3;

-- name: deletion_job_quarantined_tables
-- The tables of job $1's quarantined rows (at most 3: a restore needs exactly one), each with
-- the live table it is now (``live_table_at``; NULL: dropped, and no single successor).
SELECT q.table_id, icepack.live_table_at(q.table_id) AS live_id
  FROM (SELECT DISTINCT table_id FROM icepack.deletions
         WHERE job_id = $1 AND state = 'quarantined') q
 LIMIT 3;

-- name: deletion_job_purged
-- Paths of job $1's purged rows of the tables in $2, oldest first, at most $3 (a restore lists
-- what it cannot bring back; the count is ``deletion_job_states``).
SELECT path FROM icepack.deletions
 WHERE job_id = $1 AND state = 'purged' AND table_id = ANY($2::bigint[])
 ORDER BY id
 LIMIT $3;

-- name: deletion_job_states
-- How many rows (and bytes) of job $1 are in each state.
SELECT state, count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes
  FROM icepack.deletions
 WHERE job_id = $1
 GROUP BY state;

-- name: deletion_quarantine_totals
-- Files in quarantine (orphan removal moved them; purged after purge_after), with bytes, and
-- those whose purge is due.
SELECT count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes,
       count(*) FILTER (WHERE purge_after <= now()) AS due_files,
       coalesce(sum(size_bytes) FILTER (WHERE purge_after <= now()), 0)::bigint AS due_bytes
  FROM icepack.deletions
 WHERE state = 'quarantined';

-- name: deletion_expiry_record
-- Record the files an expire_snapshots run will delete, only while the job still holds its
-- fence. $1 job id, $2 fence, $3 table id, $4 paths, $5 sizes, $6 kinds, $7 reason. A path a
-- previous attempt of the same job recorded (still 'recorded') is refreshed, not duplicated.
INSERT INTO icepack.deletions (job_id, table_id, action, path, size_bytes, kind, reason)
SELECT $1, $3, 'expire_snapshots', f.path, f.size_bytes, f.kind, $7
  FROM unnest($4::text[], $5::bigint[], $6::text[]) AS f(path, size_bytes, kind)
 WHERE EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
ON CONFLICT (job_id, path) DO UPDATE
   SET size_bytes = excluded.size_bytes, kind = excluded.kind, reason = excluded.reason,
       changed_at = now()
 WHERE icepack.deletions.state = 'recorded'
RETURNING id;

-- name: deletion_expiry_recorded
-- The expire_snapshots ledger rows of one job still 'recorded', among the given paths.
-- $1 job id, $2 paths.
SELECT path, kind, size_bytes
  FROM icepack.deletions
 WHERE job_id = $1 AND action = 'expire_snapshots' AND state = 'recorded'
   AND path = ANY($2::text[])
 ORDER BY path;

-- name: deletion_expiry_mark_deleted
-- recorded -> deleted for the given paths of one job, once the procedure's counts matched the
-- ledger; fenced. $1 job id, $2 fence, $3 paths.
UPDATE icepack.deletions d
   SET state = 'deleted', changed_at = now()
 WHERE d.job_id = $1 AND d.action = 'expire_snapshots' AND d.state = 'recorded'
   AND d.path = ANY($3::text[])
   AND EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
RETURNING d.id;

-- name: deletion_counts_by_kind
-- Ledger rows of one job and action per kind and state.
SELECT kind, state, count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes
  FROM icepack.deletions
 WHERE job_id = $1 AND action = $2
 GROUP BY kind, state
 ORDER BY kind, state;
