-- API tokens (icepack.api_tokens); only a key's hash is stored.

-- name: token_insert
-- Store a new token's public key id and the SHA-256 of the token (never the token itself).
INSERT INTO icepack.api_tokens (name, key_id, token_hash, scope)
VALUES ($1, $2, $3, $4)
RETURNING id, name, key_id, scope, created_at, last_used_at, revoked_at;

-- name: token_get_by_key
-- The token row a presented token's key id points at (revoked rows included, to say so).
SELECT id, name, key_id, scope, token_hash, created_at, last_used_at, revoked_at
  FROM icepack.api_tokens
 WHERE key_id = $1;

-- name: token_touch
-- Record that a token was just used (at most once a minute, to keep writes rare).
UPDATE icepack.api_tokens
   SET last_used_at = now()
 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: token_revoke
-- live -> revoked for the live token of a name; no row when there is none.
UPDATE icepack.api_tokens
   SET revoked_at = now()
 WHERE name = $1 AND revoked_at IS NULL
RETURNING id, name, key_id, scope, created_at, last_used_at, revoked_at;

-- name: token_list
-- Every token, newest first (no hashes).
SELECT id, name, key_id, scope, created_at, last_used_at, revoked_at
  FROM icepack.api_tokens
 ORDER BY id DESC;
