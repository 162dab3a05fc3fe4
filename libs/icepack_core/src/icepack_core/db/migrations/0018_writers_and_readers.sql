-- 0018: working beside the writers (lock collisions and commit conflicts are not failures) and
-- read-only API tokens.

-- A token's scope: 'read' may call every read endpoint (when ICEPACK_GATEWAY_READ_AUTH=true),
-- never a write; 'write' may do both. Tokens created before scopes existed could write, and
-- still can.
ALTER TABLE icepack.api_tokens
    ADD COLUMN scope text NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write'));

-- Claims of a job that found its table locked by another job (LockHeld), and of its attempts
-- that lost an Iceberg commit conflict to a writer: neither spends an attempt or the budget
-- (the claim is given back), so each is counted here instead (the conflict-retried figure).
ALTER TABLE icepack.jobs
    ADD COLUMN lock_waits integer NOT NULL DEFAULT 0 CHECK (lock_waits >= 0),
    ADD COLUMN conflicts  integer NOT NULL DEFAULT 0 CHECK (conflicts >= 0);

-- Per table and action, the commit conflicts in a row (reset by a run that commits without
-- one). After repeated conflicts the action is deferred on that table to a quieter moment:
-- `deferred_until` and `reason` are what the planner shows and waits for.
CREATE TABLE icepack.maintenance_deferrals (
    table_id       bigint      NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    action         text        NOT NULL CHECK (action <> ''),
    conflicts      integer     NOT NULL DEFAULT 0 CHECK (conflicts >= 0),
    last_error     text,
    deferred_until timestamptz,
    reason         text,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, action)
);
COMMENT ON TABLE icepack.maintenance_deferrals IS
  'commit conflicts in a row per (table, action); deferred_until: no new job for it before then';
