-- A work item whose holder died (its lease expired: the process was OOM-killed, crashed or lost
-- its node) is not handed straight back: each death is counted, the item waits a backoff, and
-- after ICEPACK_WORK_MAX_DEATHS deaths it is parked (not claimed again) until a new request for
-- the table (a change, an operator) gives it one more try. The service records the reason
-- where an operator looks (the inspector: an INSPECTION_FAILED assessment).
ALTER TABLE icepack.work_items
    ADD COLUMN deaths integer NOT NULL DEFAULT 0,
    ADD COLUMN parked_at timestamptz;
COMMENT ON COLUMN icepack.work_items.deaths IS
  'times a holder died holding this item (lease expired) since it last completed';
COMMENT ON COLUMN icepack.work_items.parked_at IS
  'set when deaths reached the limit: the item is not claimed until requested again';
-- Finding held items whose lease expired, without scanning the queue.
CREATE INDEX work_items_held ON icepack.work_items (service, lease_until)
    WHERE lease_until IS NOT NULL;
