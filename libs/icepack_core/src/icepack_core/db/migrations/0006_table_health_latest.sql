-- 0006: each table's latest health assessment and status in one row, so the fleet listing
-- ranks tables by score with an index walk instead of looking up every table's newest
-- `health_assessments` and `status_snapshots` row on each request.
--
-- A read model derived from the append-only history: `record_inspection` upserts it (query
-- `health_latest_upsert`) in the same transaction that appends the assessment, so it never
-- disagrees with the newest history row. Tables never assessed have no row here.
CREATE TABLE icepack.table_health_latest (
    table_id           bigint      PRIMARY KEY REFERENCES icepack.tables (id) ON DELETE CASCADE,
    -- The newest `health_assessments` row (by id) and its values.
    assessment_id      bigint      NOT NULL,
    status_snapshot_id bigint,
    health             text        NOT NULL
        CHECK (health IN ('healthy', 'warning', 'critical', 'unknown')),
    score              integer     NOT NULL CHECK (score BETWEEN 0 AND 100),
    issues             jsonb       NOT NULL DEFAULT '[]'::jsonb,
    assessed_at        timestamptz NOT NULL,
    -- The newest `status_snapshots` row (by id). It is the assessment's own snapshot, except
    -- after a failed inspection (assessment without snapshot): then it is the last good one.
    status_id          bigint,
    inspected_at       timestamptz,
    status             jsonb
);
COMMENT ON TABLE icepack.table_health_latest IS
    'Latest assessment + status per table (read model of health_assessments/status_snapshots, '
    'kept current by record_inspection in the same transaction)';
COMMENT ON COLUMN icepack.table_health_latest.status_snapshot_id IS
    'The assessment''s status snapshot (NULL when the inspection failed), as in '
    'health_assessments';
COMMENT ON COLUMN icepack.table_health_latest.status_id IS
    'Id of the newest status snapshot, whose inspected_at and TableStatus document follow';

-- The worst-first (and best-first, scanned backwards) keyset page of /tables.
CREATE INDEX table_health_latest_score ON icepack.table_health_latest (score, table_id);

-- Backfill from the history: each table's newest assessment and newest status snapshot.
INSERT INTO icepack.table_health_latest
       (table_id, assessment_id, status_snapshot_id, health, score, issues, assessed_at,
        status_id, inspected_at, status)
SELECT t.id, h.id, h.status_snapshot_id, h.health, h.score, h.issues, h.assessed_at,
       s.id, s.inspected_at, s.status
  FROM icepack.tables t
  JOIN LATERAL (SELECT id, status_snapshot_id, health, score, issues, assessed_at
                  FROM icepack.health_assessments ha
                 WHERE ha.table_id = t.id ORDER BY ha.id DESC LIMIT 1) h ON true
  LEFT JOIN LATERAL (SELECT id, inspected_at, status FROM icepack.status_snapshots ss
                      WHERE ss.table_id = t.id ORDER BY ss.id DESC LIMIT 1) s ON true;
