-- Rewrites whose verification is still to settle (icepack.pending_verifications).

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

-- name: table_pending_verification_begin
-- Record, before a rewrite's CALL, the snapshot it starts from; only while the job holds its
-- fence. An older unsettled row is kept (verifying from the older start covers more).
WITH fenced AS (
    SELECT 1 FROM icepack.jobs WHERE id = $3 AND fence = $4 AND state = 'running')
INSERT INTO icepack.pending_verifications (table_id, start_snapshot_id, job_id, fence, action)
SELECT $1, $2, $3, $4, $5 FROM fenced
ON CONFLICT (table_id) DO UPDATE SET table_id = EXCLUDED.table_id
RETURNING start_snapshot_id, job_id, fence, action, recorded_at;

-- name: table_pending_verification_get
-- The unsettled rewrite of a table, if any.
SELECT table_id, start_snapshot_id, job_id, fence, action, recorded_at
  FROM icepack.pending_verifications WHERE table_id = $1;

-- name: table_pending_verification_settle
-- Delete exactly the row that was verified (or whose table was held), never a newer one.
DELETE FROM icepack.pending_verifications
 WHERE table_id = $1 AND job_id = $2 AND fence = $3 AND recorded_at = $4
RETURNING table_id;
