-- What each job's actions did (icepack.job_actions), written fenced by the running job.

-- name: job_actions_of
-- The actions run for some jobs, in the order they ran.
SELECT id, job_id, fence, action, procedure, sql_text, state, output, impact, error,
       started_at, finished_at, duration_ms
  FROM icepack.job_actions
 WHERE job_id = ANY($1::bigint[])
 ORDER BY job_id, id;

-- name: job_last_runs
-- When each action last succeeded on a table (the recommendation's cadence input).
SELECT ja.action, max(ja.finished_at) AS finished_at
  FROM icepack.job_actions ja
  JOIN icepack.jobs j ON j.id = ja.job_id
 WHERE j.table_id = $1 AND ja.state = 'succeeded'
 GROUP BY ja.action;

-- name: job_action_record
-- Record one action an executor ran, only while it still holds the job's fence.
INSERT INTO icepack.job_actions
       (job_id, fence, action, procedure, sql_text, state, output, impact, error,
        started_at, finished_at)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11
 WHERE EXISTS (SELECT 1 FROM icepack.jobs WHERE id = $1 AND fence = $2 AND state = 'running')
RETURNING id;

-- name: job_last_action_runs
-- When each action last succeeded on a table (cadence and due rule, planning.due), and the
-- table's current snapshot when that run's job ended: `snapshot_after` of the job's newest
-- action that recorded one, as text (snapshot ids of any size); NULL when none did; and how
-- many open partitions that run skipped (execution.scoping.metadata_scope), 0 when it recorded none,
-- how many partitions it selected (NULL: not a scoped compaction), and the small files its
-- intent let an open partition hold (`open_max_small_files`; NULL: none, or not a number).
SELECT DISTINCT ON (a.action) a.action, a.finished_at, a.duration_ms,
       (SELECT (e->'params'->>'open_max_small_files')::numeric::bigint
          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(j.actions) = 'array'
                                         THEN j.actions ELSE '[]'::jsonb END) e
         WHERE jsonb_typeof(e) = 'object' AND e->>'action' = a.action
           AND jsonb_typeof(e->'params'->'open_max_small_files') = 'number'
         LIMIT 1) AS open_max_small_files,
       CASE WHEN jsonb_typeof(a.output->'open_partitions_skipped_count') = 'number'
            THEN (a.output->>'open_partitions_skipped_count')::numeric::bigint
            ELSE 0 END AS open_skipped,
       CASE WHEN jsonb_typeof(a.output->'partitions_selected') = 'number'
            THEN (a.output->>'partitions_selected')::numeric::bigint END AS selected,
       (SELECT l.impact->>'snapshot_after' FROM icepack.job_actions l
         WHERE l.job_id = a.job_id AND jsonb_typeof(l.impact->'snapshot_after') = 'number'
         ORDER BY l.finished_at DESC, l.id DESC LIMIT 1) AS snapshot_after
  FROM icepack.job_actions a JOIN icepack.jobs j ON j.id = a.job_id
 WHERE j.table_id = $1 AND a.state = 'succeeded'
 ORDER BY a.action, a.finished_at DESC, a.id DESC;
