-- Running totals of each table's inspection (icepack.inspection_totals).

-- name: inspection_totals_get
-- A table's merged aggregates from its last inspection, and whether its touch is due (daily).
SELECT small_threshold, manifest_paths, totals,
       touched_at < now() - interval '1 day' AS touch_due
  FROM icepack.inspection_totals
 WHERE table_key = $1;

-- name: inspection_totals_put
-- Replace a table's merged aggregates ($5: the manifests' last_used_at was refreshed now).
INSERT INTO icepack.inspection_totals AS t
       (table_key, small_threshold, manifest_paths, totals)
VALUES ($1, $2, $3::text[], $4::jsonb)
ON CONFLICT (table_key) DO UPDATE
   SET small_threshold = EXCLUDED.small_threshold, manifest_paths = EXCLUDED.manifest_paths,
       totals = EXCLUDED.totals, computed_at = now(),
       touched_at = CASE WHEN $5 THEN now() ELSE t.touched_at END;
