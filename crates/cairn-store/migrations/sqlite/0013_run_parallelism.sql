-- How many steps of a run may execute at once, as it was submitted (--parallel), so a run taken
-- over by the next daemon's recovery continues at the same parallelism.
ALTER TABLE workflow_executions ADD COLUMN parallelism INTEGER NOT NULL DEFAULT 1;
