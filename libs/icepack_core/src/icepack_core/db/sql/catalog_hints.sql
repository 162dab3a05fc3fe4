-- Catalog change hints (icepack.catalog_hints): what discovery should look at first.

-- name: catalog_hint_upsert
-- Record a pushed change; a duplicate for the same table coalesces into the waiting row (and
-- makes it due now). Returns whether the row is new.
INSERT INTO icepack.catalog_hints AS h (catalog, namespace, name, metadata_location)
VALUES ($1, $2, $3, $4)
ON CONFLICT (catalog, namespace, name) DO UPDATE
   SET metadata_location = coalesce(EXCLUDED.metadata_location, h.metadata_location),
       received_at       = now(),
       received_count    = h.received_count + 1,
       not_before        = least(h.not_before, now())
RETURNING (xmax = 0) AS created, received_count;

-- name: catalog_hint_claim
-- Take up to $1 due hints for $2 seconds (a crashed claimer's hints come back after that).
UPDATE icepack.catalog_hints h
   SET not_before = now() + make_interval(secs => $2), attempts = h.attempts + 1
  FROM (SELECT catalog, namespace, name FROM icepack.catalog_hints
         WHERE not_before <= now()
         ORDER BY not_before
         LIMIT $1
           FOR UPDATE SKIP LOCKED) due
 WHERE (h.catalog, h.namespace, h.name) = (due.catalog, due.namespace, due.name)
RETURNING h.catalog, h.namespace, h.name, h.metadata_location, h.received_at, h.attempts;

-- name: catalog_hint_done
-- A handled hint goes, unless it was received again meanwhile (then it stays, due now).
DELETE FROM icepack.catalog_hints
 WHERE catalog = $1 AND namespace = $2 AND name = $3 AND received_at = $4;

-- name: catalog_hint_failed
-- A hint whose refresh failed: try again after $4 seconds, with the reason kept.
UPDATE icepack.catalog_hints
   SET not_before = now() + make_interval(secs => $4), last_error = $5
 WHERE catalog = $1 AND namespace = $2 AND name = $3;

-- name: catalog_hint_drop
-- A hint given up on (too many attempts or an unknown catalog): the next poll covers it.
DELETE FROM icepack.catalog_hints WHERE catalog = $1 AND namespace = $2 AND name = $3;
