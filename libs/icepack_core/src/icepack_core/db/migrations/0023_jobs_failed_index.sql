-- Permanently failed jobs per table: the failure backoff's streaks (job_failure_streaks per
-- table, table_backoff_counts fleet-wide at each /metrics scrape) read only these
-- (bench/metrics: the fleet-wide count read every failed job without it).
CREATE INDEX jobs_failed_table ON icepack.jobs (table_id, finished_at) WHERE state = 'failed';
