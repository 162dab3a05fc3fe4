-- name: event_publish
-- Append one event to the outbox inside the caller's transaction; the trigger NOTIFYs at commit.
INSERT INTO icepack.events (topic, table_id, payload, traceparent)
VALUES ($1, $2, $3::jsonb, $4)
RETURNING id;

-- name: event_publish_many
-- Append one event per row of the arrays ($2 table ids, $3 JSON payloads, $4 traceparents), in
-- array order, inside the caller's transaction (discovery's new tables: one statement a chunk).
INSERT INTO icepack.events (topic, table_id, payload, traceparent)
SELECT $1, e.table_id, e.payload::jsonb, e.traceparent
  FROM unnest($2::bigint[], $3::text[], $4::text[]) WITH ORDINALITY AS e(table_id, payload, traceparent, n)
 ORDER BY e.n;

-- name: event_read_after
-- Events after a consumer's (xid, id) cursor whose transactions are all finished: below the
-- oldest running xid nothing can still appear, so a late commit is read late, never skipped.
SELECT id, topic, table_id, payload, traceparent, created_at, xid
  FROM icepack.events
 WHERE (xid, id) > ($1::xid8, $2::bigint)
   AND xid < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY xid, id
 LIMIT $3;

-- name: event_tail
-- The newest events, optionally for one topic and/or table, newest first.
SELECT id, topic, table_id, payload, traceparent, created_at
  FROM icepack.events
 WHERE ($1::text IS NULL OR topic = $1)
   AND ($2::bigint IS NULL OR table_id = $2)
   AND ($3::bigint IS NULL OR id < $3)
 ORDER BY id DESC
 LIMIT $4;

-- name: event_prune
-- Delete events every consumer has read and that are older than the retention window.
DELETE FROM icepack.events e
 WHERE e.created_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1)
   AND NOT EXISTS (SELECT 1 FROM icepack.consumer_offsets c
                    WHERE (c.last_xid, c.last_event_id) < (e.xid, e.id));

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
