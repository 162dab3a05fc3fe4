-- Where each event consumer has read to (icepack.consumer_offsets), and its lag.

-- name: consumer_lag_age
-- Per consumer, how long the next event it will read has waited (0 when it is caught up): the
-- first event after its cursor in (xid, id) order, one index probe per consumer.
SELECT c.consumer,
       coalesce(extract(epoch FROM now() - (
           SELECT e.created_at FROM icepack.events e
            WHERE (e.xid, e.id) > (c.last_xid, c.last_event_id)
            ORDER BY e.xid, e.id LIMIT 1)), 0)::float8 AS seconds
  FROM icepack.consumer_offsets c
 ORDER BY c.consumer;

-- name: consumer_offset_ensure
-- Create a consumer's offset row at the beginning of the outbox if it has none.
INSERT INTO icepack.consumer_offsets (consumer) VALUES ($1)
ON CONFLICT (consumer) DO NOTHING;

-- name: consumer_offset_lock
-- Lock a consumer's offset for this transaction; no row when a replica of it holds the lock.
SELECT last_xid, last_event_id
  FROM icepack.consumer_offsets
 WHERE consumer = $1
   FOR UPDATE SKIP LOCKED;

-- name: consumer_offset_advance
-- Move a consumer's cursor, in the same transaction as the consumer's own writes.
UPDATE icepack.consumer_offsets
   SET last_xid = $2::xid8, last_event_id = $3, updated_at = now()
 WHERE consumer = $1;

-- name: consumer_lag
-- Events each consumer has not read yet.
SELECT c.consumer,
       (SELECT count(*) FROM icepack.events e
         WHERE (e.xid, e.id) > (c.last_xid, c.last_event_id)) AS lag
  FROM icepack.consumer_offsets c
 ORDER BY c.consumer;

-- name: webhook_consumer_start
-- Create the notifying consumer's cursor at the current horizon (the newest event no running
-- transaction can still precede) if it has none: turning webhooks on notifies what happens
-- from then on, not the retained history. $1 consumer name.
INSERT INTO icepack.consumer_offsets (consumer, last_xid, last_event_id)
SELECT $1, coalesce(h.xid, '0'::xid8), coalesce(h.id, 0)
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT e.xid, e.id FROM icepack.events e
                      WHERE e.xid < pg_snapshot_xmin(pg_current_snapshot())
                      ORDER BY e.xid DESC, e.id DESC LIMIT 1) AS h ON true
ON CONFLICT (consumer) DO NOTHING;

-- name: webhook_consumer_forget
-- Webhooks are off: drop the notifying consumer's cursor, so it neither shows as lagging nor
-- keeps the planner from pruning events. $1 consumer name.
DELETE FROM icepack.consumer_offsets WHERE consumer = $1;
