-- When the planner should plan a table again without an event (planning.due): a maintenance
-- action was due but the table's minimum interval between runs had not passed yet. One row per
-- table, replaced at each planning (deleted when nothing waits); the planner's upkeep turns due
-- rows into `replan` work items. Without it a hot table whose writer stopped waited for the
-- 900 s re-plan timer.
CREATE TABLE icepack.planner_replans (
    table_id   bigint PRIMARY KEY REFERENCES icepack.tables (id) ON DELETE CASCADE,
    replan_at  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX planner_replans_due ON icepack.planner_replans (replan_at);
COMMENT ON TABLE icepack.planner_replans IS
  'per table: when the planner plans it again without an event (an action held back only by the minimum interval)';
