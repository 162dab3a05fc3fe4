-- Polaris policy sources, their targets and the policies read from them (icepack.polaris_*).

-- name: polaris_source_get
-- A catalog's Polaris state (null row: never detected).
SELECT catalog, is_polaris, last_pass_at, last_success_at, last_error, last_error_at, last_requests
  FROM icepack.polaris_sources WHERE catalog = $1;

-- name: polaris_source_detected
-- Record whether a catalog is Polaris.
INSERT INTO icepack.polaris_sources (catalog, is_polaris) VALUES ($1, $2)
ON CONFLICT (catalog) DO UPDATE SET is_polaris = EXCLUDED.is_polaris, detected_at = now();

-- name: polaris_source_pass
-- Record a refresh pass: its requests, and its error (null: it succeeded).
UPDATE icepack.polaris_sources
   SET last_pass_at    = $2,
       last_requests   = $3,
       last_success_at = CASE WHEN $4::text IS NULL THEN $2 ELSE last_success_at END,
       last_error      = coalesce($4, last_error),
       last_error_at   = CASE WHEN $4::text IS NULL THEN last_error_at ELSE $2 END
 WHERE catalog = $1;

-- name: polaris_due_namespaces
-- The catalog's namespaces with a maintained table (distinct), and when each was last read.
SELECT n.namespace, p.checked_at
  FROM (SELECT DISTINCT namespace FROM icepack.tables
         WHERE catalog = $1 AND dropped_at IS NULL) n
  LEFT JOIN icepack.polaris_targets p
    ON (p.catalog, p.scope, p.namespace, p.table_name) = ($1, 'namespace', n.namespace, '');

-- name: polaris_target_checked
-- When one target was last read (null: never).
SELECT checked_at FROM icepack.polaris_targets
 WHERE (catalog, scope, namespace, table_name) = ($1, $2, $3, $4);

-- name: polaris_due_tables
-- Up to $3 maintained tables whose policies were last read before $2 (or never), oldest first.
SELECT t.namespace, t.name
  FROM icepack.tables t
  LEFT JOIN icepack.polaris_targets p
    ON (p.catalog, p.scope, p.namespace, p.table_name) = (t.catalog, 'table', t.namespace, t.name)
 WHERE t.catalog = $1 AND t.dropped_at IS NULL
   AND (p.checked_at IS NULL OR p.checked_at < $2)
 ORDER BY p.checked_at NULLS FIRST, t.id
 LIMIT $3;

-- name: polaris_target_clear
-- Forget one target's policies before writing what it has now.
DELETE FROM icepack.polaris_policies
 WHERE (catalog, scope, namespace, table_name) = ($1, $2, $3, $4);

-- name: polaris_policy_insert
-- One mapped policy of one target.
INSERT INTO icepack.polaris_policies
       (catalog, scope, namespace, table_name, policy_type, name, version, enabled, config,
        unknown, invalid, fetched_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11, $12)
ON CONFLICT (catalog, scope, namespace, table_name, policy_type, name) DO UPDATE
   SET version = EXCLUDED.version, enabled = EXCLUDED.enabled, config = EXCLUDED.config,
       unknown = EXCLUDED.unknown, invalid = EXCLUDED.invalid, fetched_at = EXCLUDED.fetched_at;

-- name: polaris_target_mark
-- Record that one target was read at $5.
INSERT INTO icepack.polaris_targets (catalog, scope, namespace, table_name, checked_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (catalog, scope, namespace, table_name) DO UPDATE SET checked_at = EXCLUDED.checked_at;

-- name: polaris_policy_list_catalog
-- Every Polaris policy kept for one catalog, with its source's failure since its last success.
SELECT p.policy_type, p.scope, p.catalog, p.namespace, p.table_name, p.enabled, p.config,
       p.name, p.version, p.unknown, p.invalid, p.fetched_at,
       CASE WHEN s.last_error_at > coalesce(s.last_success_at, '-infinity') THEN s.last_error
       END AS stale
  FROM icepack.polaris_policies p
  LEFT JOIN icepack.polaris_sources s ON s.catalog = p.catalog
 WHERE p.catalog = $1;

-- name: polaris_source_last_pass
-- When the catalog's last policy refresh pass ran (null: never).
SELECT last_pass_at FROM icepack.polaris_sources WHERE catalog = $1;

-- name: polaris_table_count
-- The catalog's maintained tables (the rolling share of table reads is taken of these).
SELECT count(*) FROM icepack.tables WHERE catalog = $1 AND dropped_at IS NULL;

-- name: polaris_policy_page
-- The Polaris policies kept for catalog $1 (null: every catalog), in target order, at most $2.
SELECT catalog, scope, namespace, table_name, policy_type, name, version, enabled, config,
       unknown, invalid, fetched_at
  FROM icepack.polaris_policies
 WHERE $1::text IS NULL OR catalog = $1
 ORDER BY catalog, scope, namespace, table_name, policy_type, name
 LIMIT $2;

-- name: polaris_source_list
-- Every REST catalog's Polaris state, or catalog $1's.
SELECT catalog, is_polaris, last_pass_at, last_success_at, last_error, last_error_at, last_requests
  FROM icepack.polaris_sources
 WHERE $1::text IS NULL OR catalog = $1
 ORDER BY catalog;
