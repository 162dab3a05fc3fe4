-- What the planner predicts a job buys and costs, and what it measurably bought.
--   predicted     per action, the predicted effect (files, bytes, manifests, delete files and
--                 snapshots before -> after; bytes to rewrite), written at enqueue;
--   rewrite_bytes the bytes the job is predicted to rewrite: what it charges a rewrite budget;
--   benefit       the predicted benefit (files and manifests a full scan no longer opens);
--                 claims order by benefit per byte rewritten;
--   health_score  the table's health score when planned (ties in that order);
--   outcome       the measured effect after the job, beside the prediction.
ALTER TABLE icepack.jobs
    ADD COLUMN predicted     jsonb,
    ADD COLUMN rewrite_bytes bigint           NOT NULL DEFAULT 0 CHECK (rewrite_bytes >= 0),
    ADD COLUMN benefit       double precision NOT NULL DEFAULT 0 CHECK (benefit >= 0),
    ADD COLUMN health_score  double precision,
    ADD COLUMN outcome       jsonb;
