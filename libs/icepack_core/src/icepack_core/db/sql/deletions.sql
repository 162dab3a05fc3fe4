-- The deletion ledger (icepack.deletions, migration 0014): what orphan removal quarantined, and
-- what purge and restore did with it. Every write happens only while the writing job ($1 id,
-- $2 fence) is still running under that fence (as job_action_record): a job that lost its lease
-- cannot record or change anything.

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
-- The next rows of job $1 in state $2 recorded by action $4, oldest first, at most $3 (a job
-- that expires snapshots and removes orphans holds rows of both under one id).
SELECT * FROM icepack.deletions
 WHERE job_id = $1 AND state = $2 AND action = $4
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
-- Quarantined rows of table $1 whose window ended before $2, oldest first, at most $3.
SELECT * FROM icepack.deletions
 WHERE table_id = $1 AND state = 'quarantined' AND purge_after <= $2
 ORDER BY purge_after, id
 LIMIT $3;

-- name: deletion_purge_due_tables
-- Live, not held tables with quarantined files due for purging by $1, at most $2.
SELECT DISTINCT d.table_id
  FROM icepack.deletions d
  JOIN icepack.tables t ON t.id = d.table_id
 WHERE d.state = 'quarantined' AND d.purge_after <= $1
   AND t.dropped_at IS NULL AND t.maintenance_hold IS NULL
 ORDER BY d.table_id
 LIMIT $2;

-- name: deletion_list_job
-- The ledger rows of job $1, in the order they were recorded.
SELECT id, job_id, table_id, action, kind, path, size_bytes, state, quarantine_path,
       purge_after, reason, recorded_at, changed_at
  FROM icepack.deletions
 WHERE job_id = $1
 ORDER BY id;

-- name: deletion_job_states
-- How many rows (and bytes) of job $1 are in each state.
SELECT state, count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes
  FROM icepack.deletions
 WHERE job_id = $1
 GROUP BY state;
