-- 0008: a rewrite is verified, or its table is held, whatever happens to the process running it.
-- Before an executor calls a rewrite procedure it records the table's snapshot here (fenced on
-- its job), and deletes the row only once every `replace` snapshot committed after it has been
-- verified or the table has been put on hold. A row left behind (kill -9, lost lease, shutdown)
-- is verified first by the next job that takes the table's lock.
CREATE TABLE icepack.pending_verifications (
    -- One per table: the table lock allows one running job, which settles any older row before
    -- its own rewrite starts.
    table_id          bigint      PRIMARY KEY REFERENCES icepack.tables (id) ON DELETE CASCADE,
    -- The table's current snapshot before the rewrite (NULL: the table had none).
    start_snapshot_id bigint,
    job_id            bigint      NOT NULL REFERENCES icepack.jobs (id) ON DELETE CASCADE,
    fence             bigint      NOT NULL,
    action            text        NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE icepack.pending_verifications IS
    'Rewrites started and not yet verified: every replace snapshot after start_snapshot_id must '
    'be checked (or the table held) before any other maintenance of the table';
