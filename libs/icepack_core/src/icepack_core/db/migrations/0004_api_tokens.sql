-- 0004: operator API tokens for the gateway's write endpoints (job submit/cancel, policies).
-- A token is `icepack_<key_id>_<secret>`: `key_id` finds the row, and only the SHA-256 of the
-- whole token is stored, so a leaked database does not leak usable tokens. The token itself is
-- shown once, when it is created.

CREATE TABLE icepack.api_tokens (
    id           bigserial   PRIMARY KEY,
    name         text        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$'),
    key_id       text        NOT NULL UNIQUE CHECK (key_id ~ '^[a-z0-9]{12}$'),
    token_hash   bytea       NOT NULL CHECK (octet_length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT api_tokens_revoked_after_created CHECK (revoked_at IS NULL OR revoked_at >= created_at)
);
-- One live token per name, so `icepack token revoke NAME` names exactly one; revoked rows stay
-- for the audit trail.
CREATE UNIQUE INDEX api_tokens_active_name ON icepack.api_tokens (name) WHERE revoked_at IS NULL;
