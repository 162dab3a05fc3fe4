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
