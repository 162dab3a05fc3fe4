-- The event log (icepack.events): publishing, reading in commit order, paging, pruning.

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

-- name: event_page
-- Events newest first with their table, optionally one topic and/or table, before cursor id $3.
SELECT e.id, e.topic, e.table_id, e.payload, e.traceparent, e.created_at,
       t.catalog, t.namespace, t.name AS table_name
  FROM icepack.events e
  LEFT JOIN icepack.tables t ON t.id = e.table_id
 WHERE ($1::text IS NULL OR e.topic = $1)
   AND ($2::bigint IS NULL OR e.table_id = $2)
   AND ($3::bigint IS NULL OR e.id < $3)
 ORDER BY e.id DESC
 LIMIT $4;

-- name: event_page_after
-- Events after id $2 oldest first (for `icepack events --follow`), optionally one topic.
SELECT e.id, e.topic, e.table_id, e.payload, e.traceparent, e.created_at,
       t.catalog, t.namespace, t.name AS table_name
  FROM icepack.events e
  LEFT JOIN icepack.tables t ON t.id = e.table_id
 WHERE ($1::text IS NULL OR e.topic = $1)
   AND e.id > $2
 ORDER BY e.id
 LIMIT $3;
