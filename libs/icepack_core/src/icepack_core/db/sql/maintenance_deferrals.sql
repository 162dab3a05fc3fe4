-- Actions deferred after a commit conflict (icepack.maintenance_deferrals).

-- name: deferral_conflict
-- One more commit conflict in a row for (table $1, action $2): count it, keep its error ($3).
-- $4 an optional pinned clock.
INSERT INTO icepack.maintenance_deferrals AS d (table_id, action, conflicts, last_error, updated_at)
VALUES ($1, $2, 1, $3, coalesce($4::timestamptz, now()))
ON CONFLICT (table_id, action) DO UPDATE
   SET conflicts  = d.conflicts + 1,
       last_error = excluded.last_error,
       updated_at = excluded.updated_at
RETURNING *;

-- name: deferral_defer
-- Defer (table $1, action $2) for $3 seconds from now ($5 an optional pinned clock), with the
-- reason ($4) the planner shows.
UPDATE icepack.maintenance_deferrals
   SET deferred_until = coalesce($5::timestamptz, now()) + make_interval(secs => $3),
       reason         = $4
 WHERE table_id = $1 AND action = $2
RETURNING *;

-- name: deferral_clear
-- (table $1, action $2) committed without a conflict: its conflict record starts over.
DELETE FROM icepack.maintenance_deferrals WHERE table_id = $1 AND action = $2;

-- name: deferral_active
-- The deferrals of table $1 in force at $2 (default now).
SELECT * FROM icepack.maintenance_deferrals
 WHERE table_id = $1 AND deferred_until > coalesce($2::timestamptz, now())
 ORDER BY action;
