-- A table's root location, as its current metadata has it (written by the inspector). Orphan
-- removal is refused when another known table's location is equal to, under or over it.
ALTER TABLE icepack.tables ADD COLUMN location text;
COMMENT ON COLUMN icepack.tables.location IS
  'the table''s root location from its current metadata (NULL until first inspected)';
