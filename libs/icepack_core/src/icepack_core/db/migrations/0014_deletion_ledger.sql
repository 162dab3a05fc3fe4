-- The deletion ledger: every file an Icepack action deletes (or quarantines) is recorded here
-- before it is touched. One row per (job, path), so a resumed job never moves a file twice.
--   state: recorded     listed, not yet touched;
--          quarantined  moved to quarantine_path (orphan removal), purge due at purge_after;
--          deleted      deleted by the action (expiry's files, after the procedure's counts
--                       were checked against the ledger);
--          restored     moved back from quarantine by an operator;
--          purged       deleted from quarantine after the retention window.
-- job_id is not a foreign key: the ledger outlives pruned jobs (it is the audit log).
CREATE TABLE icepack.deletions (
    id              bigserial   PRIMARY KEY,
    job_id          bigint      NOT NULL,
    table_id        bigint      REFERENCES icepack.tables (id) ON DELETE SET NULL,
    action          text        NOT NULL
        CHECK (action IN ('remove_orphan_files', 'expire_snapshots')),
    path            text        NOT NULL,
    size_bytes      bigint      CHECK (size_bytes >= 0),
    kind            text        NOT NULL
        CHECK (kind IN ('orphan', 'data', 'position_delete', 'equality_delete', 'manifest',
                        'manifest_list', 'statistics', 'partition_statistics')),
    reason          text        NOT NULL,
    state           text        NOT NULL DEFAULT 'recorded'
        CHECK (state IN ('recorded', 'quarantined', 'deleted', 'restored', 'purged')),
    quarantine_path text,
    purge_after     timestamptz,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    changed_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT deletions_once_per_job UNIQUE (job_id, path),
    CONSTRAINT deletions_quarantine_has_path
        CHECK (state <> 'quarantined' OR (quarantine_path IS NOT NULL AND purge_after IS NOT NULL))
);
CREATE INDEX deletions_job ON icepack.deletions (job_id);
CREATE INDEX deletions_table ON icepack.deletions (table_id, recorded_at DESC);
CREATE INDEX deletions_purge_due ON icepack.deletions (purge_after) WHERE state = 'quarantined';

-- For psql: what was deleted or quarantined, newest first, with the table's name.
CREATE VIEW icepack.v_deletions AS
SELECT d.id, d.job_id, t.catalog, t.namespace, t.name AS table_name, d.action, d.kind,
       d.path, d.size_bytes, d.state, d.quarantine_path, d.purge_after, d.reason,
       d.recorded_at, d.changed_at
  FROM icepack.deletions d
  LEFT JOIN icepack.tables t ON t.id = d.table_id
 ORDER BY d.recorded_at DESC, d.id DESC;
