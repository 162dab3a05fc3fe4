-- Row count and content checksum of small data files, taken when the inspector first sees
-- them (inspection.first_sight), so that a compaction's verification, minutes later, reads
-- only the files the rewrite wrote. A data file never changes once written; a row is used only
-- for the same file (path, size, record count) read the same way (schema_key, the identity
-- partition columns left out, with or without the checksum).
CREATE TABLE icepack.data_file_fingerprints (
    table_id bigint NOT NULL REFERENCES icepack.tables (id) ON DELETE CASCADE,
    path text NOT NULL,
    file_size bigint NOT NULL CHECK (file_size >= 0),
    records bigint NOT NULL CHECK (records >= 0),
    schema_key text NOT NULL CHECK (schema_key ~ '^[0-9a-f]{64}$'),
    constant_ids integer[] NOT NULL,
    checksummed boolean NOT NULL,
    rows_read bigint NOT NULL CHECK (rows_read = records),
    checksum numeric(40, 0) NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, path)
);
COMMENT ON TABLE icepack.data_file_fingerprints IS
  'small data files fingerprinted at first sight; a compaction verification reads these instead of the files';
COMMENT ON COLUMN icepack.data_file_fingerprints.schema_key IS
  'sha256 of the columns (field id, type, position) the rows were read with';
COMMENT ON COLUMN icepack.data_file_fingerprints.checksum IS
  'sum of the 64-bit row hashes (0 when not checksummed)';
-- Dropping a table's oldest rows past its bound.
CREATE INDEX data_file_fingerprints_age ON icepack.data_file_fingerprints (table_id, taken_at);
