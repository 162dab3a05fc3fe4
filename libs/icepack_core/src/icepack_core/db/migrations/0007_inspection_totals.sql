-- 0007: the merged manifest aggregates of each table's last inspection, so re-inspection after
-- a commit adds the manifests the commit added and subtracts the ones it removed instead of
-- fetching and merging one `manifest_stats` row per manifest of the snapshot.
--
-- A cache only: `totals` (versioned jsonb, see inspect/manifests.py `Totals`) is exactly the
-- sum of the `manifest_stats` aggregates of `manifest_paths` computed with `small_threshold`.
-- Any row can be deleted at any time; the next inspection then merges per-manifest rows again.
CREATE TABLE icepack.inspection_totals (
    -- The table's base location (`TableMetadata.location`); tables sharing a location may
    -- overwrite each other's row, which costs reuse, never correctness.
    table_key       text        PRIMARY KEY,
    small_threshold bigint      NOT NULL,
    manifest_paths  text[]      NOT NULL,
    totals          jsonb       NOT NULL,
    computed_at     timestamptz NOT NULL DEFAULT now(),
    -- When the `manifest_stats.last_used_at` of manifest_paths was last refreshed (daily).
    touched_at      timestamptz NOT NULL DEFAULT now()
);

-- A totals row is only valid while the `manifest_stats` rows of its manifests exist (a removed
-- manifest is subtracted with its cached aggregate). Clearing or pruning `manifest_stats`
-- therefore drops the totals built on the rows it removes.
CREATE FUNCTION icepack.inspection_totals_forget_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM icepack.inspection_totals t
     WHERE t.manifest_paths && ARRAY(SELECT manifest_path FROM gone);
    RETURN NULL;
END $$;

CREATE TRIGGER manifest_stats_delete_forgets_totals
    AFTER DELETE ON icepack.manifest_stats
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION icepack.inspection_totals_forget_deleted();

CREATE FUNCTION icepack.inspection_totals_forget_all() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE icepack.inspection_totals;
    RETURN NULL;
END $$;

CREATE TRIGGER manifest_stats_truncate_forgets_totals
    AFTER TRUNCATE ON icepack.manifest_stats
    FOR EACH STATEMENT EXECUTE FUNCTION icepack.inspection_totals_forget_all();
