-- 0020: when discovery started listing each configured catalog. A catalog whose last
-- successful listing is older than that (or that is failing) may know only part of its
-- tables, so the location checks of every action that deletes or moves files refuse.
ALTER TABLE icepack.catalog_status
    ADD COLUMN listing_since timestamptz;
