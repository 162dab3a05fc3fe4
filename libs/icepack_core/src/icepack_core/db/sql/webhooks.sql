-- Webhook notifications (icepack_core.notify.webhooks; table webhook_deliveries, migration 0019).

-- name: webhook_table_name
-- The table an event names, for the notification's subject. $1 table id.
SELECT catalog, namespace, name FROM icepack.tables WHERE id = $1;

-- name: webhook_delivery_enqueue
-- Queue one notification (in the consumer's transaction; an event is queued once) and wake
-- the delivery loop at commit. $1 event id, $2 type, $3 table id, $4 the CloudEvent.
WITH queued AS (
    INSERT INTO icepack.webhook_deliveries (event_id, type, table_id, body)
    VALUES ($1, $2, $3, $4::jsonb)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id)
SELECT pg_notify('icepack_events', 'webhook.pending') FROM queued;

-- name: webhook_delivery_claim
-- Claim up to $1 due deliveries for $2 seconds (a claim that outlives its sender is taken
-- again after it), counting the attempt. Oldest due first.
UPDATE icepack.webhook_deliveries d
   SET lease_until = now() + make_interval(secs => $2::float8), attempts = d.attempts + 1
  FROM (SELECT id FROM icepack.webhook_deliveries
         WHERE state = 'pending' AND not_before <= now()
           AND (lease_until IS NULL OR lease_until < now())
         ORDER BY not_before, id
         LIMIT $1
           FOR UPDATE SKIP LOCKED) due
 WHERE d.id = due.id
RETURNING d.id, d.event_id, d.type, d.body, d.attempts;

-- name: webhook_delivery_done
-- A receiver accepted delivery $1 (HTTP status $2).
UPDATE icepack.webhook_deliveries
   SET state = 'delivered', finished_at = now(), lease_until = NULL, last_status = $2,
       last_error = NULL
 WHERE id = $1 AND state = 'pending';

-- name: webhook_delivery_retry
-- Delivery $1 failed (status $2, NULL when no answer; error $3): due again after $4 seconds,
-- or failed for good once it has had $5 attempts.
UPDATE icepack.webhook_deliveries
   SET state = CASE WHEN attempts >= $5 THEN 'failed' ELSE 'pending' END,
       finished_at = CASE WHEN attempts >= $5 THEN now() END,
       not_before = now() + make_interval(secs => $4::float8),
       lease_until = NULL, last_status = $2, last_error = $3
 WHERE id = $1 AND state = 'pending'
RETURNING state;

-- name: webhook_delivery_prune
-- Delete deliveries finished more than $1 seconds ago.
DELETE FROM icepack.webhook_deliveries
 WHERE state <> 'pending' AND finished_at < now() - make_interval(secs => $1::float8);

-- name: webhook_delivery_counts
-- Deliveries by state, and how long the oldest pending one has waited (0: none).
SELECT s.state, count(d.id) AS deliveries,
       coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8 AS oldest_seconds
  FROM unnest(ARRAY['pending', 'delivered', 'failed']) AS s(state)
  LEFT JOIN icepack.webhook_deliveries d ON d.state = s.state
 GROUP BY s.state;
