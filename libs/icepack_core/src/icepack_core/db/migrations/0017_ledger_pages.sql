-- Bounded reads of the deletion ledger (issue #28).
--
-- A job's rows are read a page at a time in id order (GET /jobs/{id}/deletions, restore,
-- quarantine): (job_id, id) serves `job_id = $1 AND id > $2 ORDER BY id LIMIT n` without
-- sorting the job's rows. The unique (job_id, path) index still serves lookups by job alone.
CREATE INDEX deletions_job_page ON icepack.deletions (job_id, id);
DROP INDEX icepack.deletions_job;

-- The live table a ledger row's table is now. A rename is seen by discovery as a drop and a
-- new table; the metadata (and so the location) stays the same, so a dropped table is followed
-- to the one live table of its catalog at its location. None, or more than one: NULL (the
-- quarantined files then wait for an operator, as a dropped table's always did).
CREATE FUNCTION icepack.live_table_at(p_table_id bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
SELECT CASE
         WHEN t.dropped_at IS NULL THEN t.id
         WHEN t.location IS NULL THEN NULL
         ELSE (SELECT CASE WHEN count(*) = 1 THEN min(n.id) END
                 FROM icepack.tables n
                WHERE n.catalog = t.catalog AND n.dropped_at IS NULL
                  AND rtrim(n.location, '/') = rtrim(t.location, '/'))
       END
  FROM icepack.tables t
 WHERE t.id = p_table_id
$$;
COMMENT ON FUNCTION icepack.live_table_at(bigint) IS
  'the table itself when live; a dropped table''s single live successor at the same location (a rename); else NULL';

-- Whether a restore of job p_job_id's quarantined files is queued or running: purge leaves
-- such rows alone, so a restore an operator asked for never loses to the hourly purge.
CREATE FUNCTION icepack.restore_pending(p_job_id bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
SELECT EXISTS (
  SELECT 1 FROM icepack.jobs j
   WHERE j.state IN ('queued', 'running')
     AND j.actions @> jsonb_build_array(jsonb_build_object(
           'action', 'restore_quarantine', 'params', jsonb_build_object('job_id', p_job_id)))
)
$$;
COMMENT ON FUNCTION icepack.restore_pending(bigint) IS
  'true while a queued or running job restores job p_job_id''s quarantined files';
