-- Alerting and notifications (docs/architecture.md, "Telemetry" and "Notifications").
--
-- jobs.error_code: the class of the error a job last failed with, the `code` of the Icepack
-- exception that failed it (VERIFICATION_FAILED, ACTION_REFUSED, TABLE_LOCKED, ...;
-- UNEXPECTED for any other exception, LEASE_EXPIRED when the reaper failed it). A bounded set,
-- so /metrics can count permanent failures by it; the free text stays in `error`.
ALTER TABLE icepack.jobs ADD COLUMN error_code text
    CONSTRAINT jobs_error_code_format CHECK (error_code ~ '^[A-Z][A-Z0-9_]{0,63}$');
COMMENT ON COLUMN icepack.jobs.error_code IS
  'class of the last failure: the IcepackError code (UNEXPECTED, LEASE_EXPIRED); NULL after a claim';

-- catalog_status.last_pass_seconds: wall time of the last successful pass (listing + apply).
ALTER TABLE icepack.catalog_status ADD COLUMN last_pass_seconds double precision
    CONSTRAINT catalog_status_pass_seconds_nonnegative CHECK (last_pass_seconds >= 0);
COMMENT ON COLUMN icepack.catalog_status.last_pass_seconds IS
  'wall time of the last successful pass: listing the catalog and applying the listing';

-- One row per outbox event chosen for webhook delivery (ICEPACK_WEBHOOK_TOPICS), written by
-- the notifying consumer in the transaction that advances its cursor (so an event is queued
-- exactly once), then sent by the delivery loop: pending -> delivered, or failed after
-- ICEPACK_WEBHOOK_MAX_ATTEMPTS. `body` is the CloudEvent as sent, redacted.
CREATE TABLE icepack.webhook_deliveries (
    id          bigserial PRIMARY KEY,
    event_id    bigint NOT NULL UNIQUE,
    type        text NOT NULL,
    table_id    bigint,
    body        jsonb NOT NULL,
    state       text NOT NULL DEFAULT 'pending'
                CONSTRAINT webhook_deliveries_state_check
                CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    not_before  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz,
    last_status integer,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CONSTRAINT webhook_deliveries_finished CHECK ((state = 'pending') = (finished_at IS NULL))
);
CREATE INDEX webhook_deliveries_due ON icepack.webhook_deliveries (not_before)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_finished_at ON icepack.webhook_deliveries (finished_at)
    WHERE state <> 'pending';
COMMENT ON TABLE icepack.webhook_deliveries IS
  'webhook notifications of chosen outbox events (CloudEvents): pending, delivered or failed, with attempts and the last error';
