-- 0029: Apache Polaris as a policy source (icepack_core.polaris). Discovery reads a Polaris
-- catalog's applicable policies per target (the catalog, each namespace, each table, each
-- on its own refresh period) and keeps what it mapped here; policy resolution merges these
-- rows with icepack.policies (the precedence is in icepack_core.policy). A failed read keeps
-- the rows it would have replaced (the last known policies) and records why.
CREATE TABLE icepack.polaris_policies (
    catalog     text        NOT NULL,
    scope       text        NOT NULL CHECK (scope IN ('catalog', 'namespace', 'table')),
    namespace   text        NOT NULL DEFAULT '',  -- '' for the catalog
    table_name  text        NOT NULL DEFAULT '',  -- '' unless scope = 'table'
    policy_type text        NOT NULL,
    name        text        NOT NULL,
    version     integer     NOT NULL,
    enabled     boolean     NOT NULL,
    config      jsonb       NOT NULL CHECK (jsonb_typeof(config) = 'object'),
    unknown     jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(unknown) = 'object'),
    invalid     text,
    fetched_at  timestamptz NOT NULL,
    PRIMARY KEY (catalog, scope, namespace, table_name, policy_type, name)
);

-- When each target's applicable policies were last read (its next read is due a period later).
CREATE TABLE icepack.polaris_targets (
    catalog    text        NOT NULL,
    scope      text        NOT NULL CHECK (scope IN ('catalog', 'namespace', 'table')),
    namespace  text        NOT NULL DEFAULT '',
    table_name text        NOT NULL DEFAULT '',
    checked_at timestamptz NOT NULL,
    PRIMARY KEY (catalog, scope, namespace, table_name)
);

-- Per catalog: whether it is Polaris, and how its last policy refresh went.
CREATE TABLE icepack.polaris_sources (
    catalog         text PRIMARY KEY,
    is_polaris      boolean     NOT NULL,
    detected_at     timestamptz NOT NULL DEFAULT now(),
    last_pass_at    timestamptz,
    last_success_at timestamptz,
    last_error      text,
    last_error_at   timestamptz,
    last_requests   integer     NOT NULL DEFAULT 0
);

COMMENT ON TABLE icepack.polaris_policies IS
    'Polaris policies mapped onto Icepack''s (origin polaris), per attachment target';
COMMENT ON COLUMN icepack.polaris_policies.invalid IS
    'Why Icepack cannot use the policy (a value it cannot accept, naming the key); passed over';
COMMENT ON COLUMN icepack.polaris_policies.unknown IS
    'Keys Icepack does not use, kept and shown';
COMMENT ON COLUMN icepack.polaris_sources.last_error IS
    'The last failed refresh (no secret); the rows read before it stay in use';
