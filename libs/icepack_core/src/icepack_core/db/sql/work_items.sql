-- The work-item queue of the inspector and discovery (icepack.work_items).

-- name: work_request
-- Ask a service to work on a table. Repeated requests coalesce into one row; each bumps the
-- generation so a claim in progress is re-done once it finishes. It also NOTIFYs
-- `work.<service>` on the event channel (delivered at commit, once per transaction): the
-- service's workers woke on the event that caused this request too, and one that claimed before
-- this commit found nothing and would otherwise sleep until its poll timer.
WITH requested AS (
    INSERT INTO icepack.work_items (service, table_id, reason, not_before, traceparent)
    VALUES ($1, $2, $3, coalesce($4::timestamptz, now()), $5)
    ON CONFLICT (service, table_id) DO UPDATE
       SET generation   = icepack.work_items.generation + 1,
           requested_at = now(),
           reason       = EXCLUDED.reason,
           not_before   = least(icepack.work_items.not_before, EXCLUDED.not_before),
           traceparent  = coalesce(EXCLUDED.traceparent, icepack.work_items.traceparent),
           -- A parked item gets one more try: one more death parks it again.
           deaths       = icepack.work_items.deaths
                          - (icepack.work_items.parked_at IS NOT NULL)::int,
           parked_at    = NULL
    RETURNING generation
), woken AS (
    SELECT pg_notify('icepack_events', 'work.' || $1::text)
)
SELECT generation FROM requested, woken;

-- name: work_reap
-- Hand back the items of one service whose holder died (lease expired before $2 or now): each
-- death is counted, the item is due again after $3 * 2^(deaths - 1) seconds (at most $4), and
-- at $5 deaths it is parked (no claim takes it until work_request asks again).
UPDATE icepack.work_items
   SET claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
       deaths     = deaths + 1,
       not_before = coalesce($2::timestamptz, now())
                    + make_interval(secs => least($3::float8 * 2 ^ least(deaths, 30), $4::float8)),
       parked_at  = CASE WHEN deaths + 1 >= $5 THEN coalesce($2::timestamptz, now()) END,
       last_error = 'its holder ' || claimed_by || ' stopped renewing its lease (the process '
                    || 'died or hung) while working on it'
 WHERE service = $1 AND lease_until < coalesce($2::timestamptz, now())
RETURNING table_id, deaths, parked_at IS NOT NULL AS parked, last_error;

-- name: work_claim
-- Claim up to $4 due, unclaimed, unparked items of one service for $3 seconds (an item whose
-- holder died is handed back by work_reap first).
WITH due AS (
    SELECT service, table_id
      FROM icepack.work_items
     WHERE service = $1
       AND not_before <= coalesce($5::timestamptz, now())
       AND lease_until IS NULL
       AND parked_at IS NULL
     ORDER BY not_before, requested_at
       FOR UPDATE SKIP LOCKED
     LIMIT $4)
UPDATE icepack.work_items w
   SET claimed_by  = $2,
       claimed_at  = coalesce($5::timestamptz, now()),
       lease_until = coalesce($5::timestamptz, now()) + make_interval(secs => $3),
       attempts    = w.attempts + 1
  FROM due
 WHERE w.service = due.service AND w.table_id = due.table_id
RETURNING w.table_id, w.generation, w.reason, w.traceparent, w.attempts;

-- name: work_complete
-- Finish a claimed item: delete it if nobody asked again meanwhile, otherwise hand it back.
-- `held` locks the row first and reads its newest generation (FOR UPDATE waits for a request
-- still in flight, then returns the row as that request left it); both branches decide on
-- that one value. Deciding on each branch's own reading lost the item when a request
-- committed in between: the delete re-checked the new row (generation moved: not deleted),
-- the hand-back read the statement's snapshot (generation unchanged: not handed back), so it
-- stayed claimed by a worker done with it until its lease expired.
WITH held AS (
    SELECT generation
      FROM icepack.work_items
     WHERE service = $1 AND table_id = $2 AND claimed_by = $3
       FOR UPDATE),
done AS (
    DELETE FROM icepack.work_items w
     USING held
     WHERE w.service = $1 AND w.table_id = $2 AND held.generation = $4
    RETURNING 1),
again AS (
    UPDATE icepack.work_items w
       SET claimed_by = NULL, claimed_at = NULL, lease_until = NULL, attempts = 0, deaths = 0
      FROM held
     WHERE w.service = $1 AND w.table_id = $2 AND held.generation <> $4
    RETURNING 1)
SELECT (SELECT count(*) FROM done) AS deleted, (SELECT count(*) FROM again) AS requeued;

-- name: work_fail
-- Hand a claimed item back after a failure, due again after $4 seconds.
UPDATE icepack.work_items
   SET claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
       not_before = now() + make_interval(secs => $4), last_error = $5
 WHERE service = $1 AND table_id = $2 AND claimed_by = $3
RETURNING attempts;

-- name: work_release
-- Hand back everything one worker holds (graceful shutdown), due at once.
UPDATE icepack.work_items
   SET claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
       attempts = greatest(attempts - 1, 0)
 WHERE service = $1 AND claimed_by = $2;

-- name: work_heartbeat
-- Extend the lease of an item this worker still holds.
UPDATE icepack.work_items
   SET lease_until = now() + make_interval(secs => $4)
 WHERE service = $1 AND table_id = $2 AND claimed_by = $3
RETURNING lease_until;

-- name: work_pending_count
-- Items of one service waiting or in progress.
SELECT count(*) FROM icepack.work_items WHERE service = $1;
