-- Icepack's own policy types beside Polaris' system.* ones (icepack.table-statistics: keep
-- table and partition statistics current). Same shape: a prefix, a dot, lowercase words.
ALTER TABLE icepack.policies DROP CONSTRAINT policies_policy_type_check;
ALTER TABLE icepack.policies ADD CONSTRAINT policies_policy_type_check
    CHECK (policy_type ~ '^(system|icepack)\.[a-z-]+$');
