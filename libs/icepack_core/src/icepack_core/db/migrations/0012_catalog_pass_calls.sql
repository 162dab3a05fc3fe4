-- The requests discovery's last successful pass sent each catalog, by kind
-- ({"list": n, "load": n, "query": n}): what a pass costs the catalog, visible where an
-- operator looks (and exported as the icepack.discovery.catalog.calls metric).
ALTER TABLE icepack.catalog_status
    ADD COLUMN last_pass_calls jsonb NOT NULL DEFAULT '{}'::jsonb;
