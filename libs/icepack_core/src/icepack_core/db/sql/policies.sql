-- Icepack's policy attachments (icepack.policies).

-- name: policy_list
-- Policies, optionally narrowed to a type, scope, catalog, namespace or table.
SELECT id, policy_type, scope, catalog, namespace, table_name, enabled, config,
       created_at, updated_at
  FROM icepack.policies
 WHERE ($1::text IS NULL OR policy_type = $1)
   AND ($2::text IS NULL OR scope = $2)
   AND ($3::text IS NULL OR catalog = $3)
   AND ($4::text IS NULL OR namespace = $4)
   AND ($5::text IS NULL OR table_name = $5)
 ORDER BY catalog, scope, coalesce(namespace, ''), coalesce(table_name, ''), policy_type;

-- name: policy_upsert
-- Create or replace the policy of one type at one target; `created` tells which happened.
INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name, enabled, config)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
ON CONFLICT (policy_type, scope, catalog, coalesce(namespace, ''), coalesce(table_name, ''))
DO UPDATE SET enabled = EXCLUDED.enabled, config = EXCLUDED.config, updated_at = now()
RETURNING id, policy_type, scope, catalog, namespace, table_name, enabled, config,
          created_at, updated_at, (xmax = 0) AS created;

-- name: policy_delete
-- Remove the policy of one type at one target; no row when there was none.
DELETE FROM icepack.policies
 WHERE policy_type = $1 AND scope = $2 AND catalog = $3
   AND namespace IS NOT DISTINCT FROM $4 AND table_name IS NOT DISTINCT FROM $5
RETURNING id;

-- name: policy_list_catalog
-- Every policy attached in one catalog (any scope).
SELECT policy_type, scope, catalog, namespace, table_name, enabled, config
  FROM icepack.policies WHERE catalog = $1;
