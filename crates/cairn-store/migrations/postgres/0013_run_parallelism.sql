-- How many steps of a run may execute at once, as it was submitted (--parallel).
ALTER TABLE workflow_executions ADD COLUMN parallelism BIGINT NOT NULL DEFAULT 1;
