-- Cached per-manifest statistics (icepack.manifest_stats).

-- name: manifest_stats_get_many
-- Cached aggregates of the given manifests, marking them used (for cache pruning).
UPDATE icepack.manifest_stats
   SET last_used_at = now()
 WHERE manifest_path = ANY($1::text[])
RETURNING manifest_path, stats;

-- name: manifest_stats_put
-- Store (or replace, e.g. after a small-file threshold change) one manifest's aggregate.
INSERT INTO icepack.manifest_stats (manifest_path, manifest_length, content, stats)
VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (manifest_path) DO UPDATE
   SET manifest_length = EXCLUDED.manifest_length, content = EXCLUDED.content,
       stats = EXCLUDED.stats, computed_at = now(), last_used_at = now();

-- name: manifest_stats_touch
-- Mark cached aggregates used (for cache pruning) when the totals row served them instead.
UPDATE icepack.manifest_stats
   SET last_used_at = now()
 WHERE manifest_path = ANY($1::text[]);
