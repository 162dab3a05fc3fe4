-- 0001: the core state of Icepack: tables, the event outbox, work queues, jobs, locks and the
-- table-intelligence aggregates. Every invariant that can live in the schema lives here.

CREATE SCHEMA IF NOT EXISTS icepack;

-- One row per table ever seen in a configured catalog; discovery refreshes it atomically.
CREATE TABLE icepack.tables (
    id                bigserial PRIMARY KEY,
    catalog           text        NOT NULL,
    namespace         text        NOT NULL,
    name              text        NOT NULL,
    metadata_location text,
    properties        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    first_seen_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at      timestamptz NOT NULL DEFAULT now(),
    dropped_at        timestamptz,
    CONSTRAINT tables_identity UNIQUE (catalog, namespace, name),
    CONSTRAINT tables_seen_order CHECK (last_seen_at >= first_seen_at)
);

-- The outbox. Writers insert in the same transaction as the state change they announce; `xid`
-- lets consumers read only below the oldest running transaction, so late commits are not skipped.
CREATE TABLE icepack.events (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL CHECK (topic ~ '^[a-z]+\.[a-z_]+$'),
    table_id    bigint      REFERENCES icepack.tables (id) ON DELETE SET NULL,
    payload     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    traceparent text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX events_xid_id ON icepack.events (xid, id);
CREATE INDEX events_table ON icepack.events (table_id, id);
CREATE INDEX events_created_at ON icepack.events (created_at);

-- A wake-up only: one NOTIFY per topic per statement, delivered at commit. The payload is the
-- topic; consumers re-read the table, so a lost notification delays work, never loses it.
CREATE FUNCTION icepack.events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT DISTINCT topic FROM new_events LOOP
        PERFORM pg_notify('icepack_events', t);
    END LOOP;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_notify AFTER INSERT ON icepack.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION icepack.events_notify();

-- Where each consumer has read up to, as the (xid, id) pair of the last event it handled.
CREATE TABLE icepack.consumer_offsets (
    consumer      text        PRIMARY KEY,
    last_xid      xid8        NOT NULL DEFAULT '0'::xid8,
    last_event_id bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Per-service coalescing work queue: one row per (service, table) however many events asked.
-- `generation` grows with every request, so finishing an item that was re-requested while it was
-- being worked on puts it back instead of deleting it.
CREATE TABLE icepack.work_items (
    service      text        NOT NULL,
    table_id     bigint      NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    reason       text        NOT NULL,
    generation   bigint      NOT NULL DEFAULT 1,
    requested_at timestamptz NOT NULL DEFAULT now(),
    not_before   timestamptz NOT NULL DEFAULT now(),
    traceparent  text,
    claimed_by   text,
    claimed_at   timestamptz,
    lease_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    PRIMARY KEY (service, table_id),
    CONSTRAINT work_items_claim_complete
        CHECK ((claimed_by IS NULL) = (lease_until IS NULL))
);
CREATE INDEX work_items_due ON icepack.work_items (service, not_before, requested_at);

-- The raw metrics contract (TableStatus), one row per inspection, append-only.
CREATE TABLE icepack.status_snapshots (
    id                  bigserial   PRIMARY KEY,
    table_id            bigint      NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    inspected_at        timestamptz NOT NULL,
    inspector           text        NOT NULL,
    metadata_location   text,
    current_snapshot_id bigint,
    status              jsonb       NOT NULL,
    traceparent         text
);
CREATE INDEX status_snapshots_table ON icepack.status_snapshots (table_id, id DESC);

-- Per-manifest aggregates keyed by path. Manifests are immutable, so a row never goes stale.
CREATE TABLE icepack.manifest_stats (
    manifest_path   text        PRIMARY KEY,
    manifest_length bigint      NOT NULL,
    content         smallint    NOT NULL CHECK (content IN (0, 1)),
    stats           jsonb       NOT NULL,
    computed_at     timestamptz NOT NULL DEFAULT now(),
    last_used_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX manifest_stats_last_used ON icepack.manifest_stats (last_used_at);

-- Policy-independent health derived from one status snapshot.
CREATE TABLE icepack.health_assessments (
    id                 bigserial   PRIMARY KEY,
    table_id           bigint      NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    status_snapshot_id bigint      REFERENCES icepack.status_snapshots (id) ON DELETE CASCADE,
    health             text        NOT NULL
        CHECK (health IN ('healthy', 'warning', 'critical', 'unknown')),
    score              integer     NOT NULL CHECK (score BETWEEN 0 AND 100),
    issues             jsonb       NOT NULL DEFAULT '[]'::jsonb,
    assessed_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX health_assessments_table ON icepack.health_assessments (table_id, id DESC);

-- Maintenance policies attached at catalog, namespace or table level.
CREATE TABLE icepack.policies (
    id          bigserial   PRIMARY KEY,
    policy_type text        NOT NULL CHECK (policy_type ~ '^system\.[a-z-]+$'),
    scope       text        NOT NULL CHECK (scope IN ('catalog', 'namespace', 'table')),
    catalog     text        NOT NULL,
    namespace   text,
    table_name  text,
    enabled     boolean     NOT NULL DEFAULT true,
    config      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policies_scope_target CHECK (
        (scope = 'catalog' AND namespace IS NULL AND table_name IS NULL)
        OR (scope = 'namespace' AND namespace IS NOT NULL AND table_name IS NULL)
        OR (scope = 'table' AND namespace IS NOT NULL AND table_name IS NOT NULL))
);
CREATE UNIQUE INDEX policies_one_per_target ON icepack.policies
    (policy_type, scope, catalog, coalesce(namespace, ''), coalesce(table_name, ''));

-- Maintenance jobs. State machine (who moves a job):
--   queued    -> running    executor claim (fence + 1)
--   running   -> succeeded  executor, fenced
--   running   -> queued     executor retryable failure, or the reaper on an expired lease
--   running   -> failed     executor permanent failure / attempts exhausted, fenced; or reaper
--   queued    -> cancelled  operator
--   running   -> cancelled  executor, after an operator set cancel_requested_at
CREATE TABLE icepack.jobs (
    id                  bigserial   PRIMARY KEY,
    table_id            bigint      REFERENCES icepack.tables (id) ON DELETE SET NULL,
    state               text        NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    actions             jsonb       NOT NULL DEFAULT '[]'::jsonb,
    priority            integer     NOT NULL DEFAULT 100,
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    not_before          timestamptz NOT NULL DEFAULT now(),
    lease_owner         text,
    lease_until         timestamptz,
    fence               bigint      NOT NULL DEFAULT 0,
    dedupe_key          text,
    trigger             text        NOT NULL DEFAULT 'planner'
        CHECK (trigger IN ('manual', 'planner', 'cli')),
    error               text,
    result              jsonb,
    traceparent         text,
    cancel_requested_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    CONSTRAINT jobs_finished_iff_terminal
        CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_running_has_lease
        CHECK (state <> 'running' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
);
-- At most one queued or running job per dedupe key (the planner uses the table).
CREATE UNIQUE INDEX jobs_dedupe_active ON icepack.jobs (dedupe_key)
    WHERE state IN ('queued', 'running');
CREATE INDEX jobs_claimable ON icepack.jobs (priority, id) WHERE state = 'queued';
CREATE INDEX jobs_lease ON icepack.jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_table ON icepack.jobs (table_id, id DESC);
CREATE INDEX jobs_finished ON icepack.jobs (finished_at) WHERE finished_at IS NOT NULL;

-- Action intents derived from a status snapshot and the effective policy.
CREATE TABLE icepack.recommendations (
    id                 bigserial   PRIMARY KEY,
    table_id           bigint      NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    status_snapshot_id bigint      REFERENCES icepack.status_snapshots (id) ON DELETE SET NULL,
    actions            jsonb       NOT NULL DEFAULT '[]'::jsonb,
    job_id             bigint      REFERENCES icepack.jobs (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX recommendations_table ON icepack.recommendations (table_id, id DESC);

-- One row per maintenance action an executor ran, written under the job's fence.
CREATE TABLE icepack.job_actions (
    id          bigserial   PRIMARY KEY,
    job_id      bigint      NOT NULL REFERENCES icepack.jobs (id) ON DELETE CASCADE,
    fence       bigint      NOT NULL,
    action      text        NOT NULL,
    procedure   text,
    sql_text    text,
    state       text        NOT NULL CHECK (state IN ('succeeded', 'failed', 'skipped')),
    output      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    impact      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    error       text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    duration_ms integer     GENERATED ALWAYS AS
        ((extract(epoch FROM finished_at - started_at) * 1000)::integer) STORED
);
CREATE INDEX job_actions_job ON icepack.job_actions (job_id, id);

-- One running job per table: taken with the job's fence, released only by its owner.
CREATE TABLE icepack.table_locks (
    table_id    bigint      PRIMARY KEY REFERENCES icepack.tables (id) ON DELETE CASCADE,
    owner       text        NOT NULL,
    job_id      bigint      REFERENCES icepack.jobs (id) ON DELETE CASCADE,
    fence       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
