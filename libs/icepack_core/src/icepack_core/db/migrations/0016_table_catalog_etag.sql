-- The ETag a REST catalog sent with a table's last full load, for that metadata location:
-- discovery sends it back as If-None-Match and a 304 Not Modified means the table is unchanged,
-- so a pass over unchanged tables makes no full loads. NULL when the catalog sent none (or is
-- not REST); cleared whenever metadata_location is set from elsewhere (a pushed change), so a
-- stored ETag always belongs to the stored metadata location.
ALTER TABLE icepack.tables ADD COLUMN catalog_etag text;
COMMENT ON COLUMN icepack.tables.catalog_etag IS
  'ETag of the REST loadTable answer for metadata_location (NULL: none sent); discovery sends it as If-None-Match';
