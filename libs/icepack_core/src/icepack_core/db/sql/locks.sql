-- Per-table maintenance locks (icepack.table_locks), held by a running job.

-- name: lock_acquire
-- Take a table's lock for a job under its current fence. Succeeds when the lock is free, expired,
-- or held by an older fence of the same job; never while the job's fence has moved on.
INSERT INTO icepack.table_locks (table_id, owner, job_id, fence, expires_at)
SELECT $1, $2, $3, $4, now() + make_interval(secs => $5)
 WHERE $3::bigint IS NULL
    OR EXISTS (SELECT 1 FROM icepack.jobs j
                WHERE j.id = $3 AND j.fence = $4 AND j.state = 'running')
ON CONFLICT (table_id) DO UPDATE
   SET owner = EXCLUDED.owner, job_id = EXCLUDED.job_id, fence = EXCLUDED.fence,
       acquired_at = now(), expires_at = EXCLUDED.expires_at
 WHERE icepack.table_locks.expires_at < now()
    OR (icepack.table_locks.job_id = EXCLUDED.job_id
        AND icepack.table_locks.fence <= EXCLUDED.fence)
RETURNING fence, expires_at;

-- name: lock_renew
-- Extend a lock this owner holds under this fence, while the job still has that fence.
UPDATE icepack.table_locks l
   SET expires_at = now() + make_interval(secs => $4)
 WHERE l.table_id = $1 AND l.owner = $2 AND l.fence = $3
   AND (l.job_id IS NULL
        OR EXISTS (SELECT 1 FROM icepack.jobs j WHERE j.id = l.job_id AND j.fence = $3))
RETURNING expires_at;

-- name: lock_release
-- Release a lock only if this owner still holds it under a fence the job still has.
DELETE FROM icepack.table_locks l
 WHERE l.table_id = $1 AND l.owner = $2 AND l.fence = $3
   AND (l.job_id IS NULL
        OR EXISTS (SELECT 1 FROM icepack.jobs j WHERE j.id = l.job_id AND j.fence = $3))
RETURNING table_id;

-- name: lock_get
-- The current lock of a table, if any and not expired.
SELECT table_id, owner, job_id, fence, acquired_at, expires_at
  FROM icepack.table_locks
 WHERE table_id = $1 AND expires_at >= now();
