-- Lookups the run list and a run's page make for every run they show: the target a planned run
-- was reserved on (the reservations' key is target + run_dir, so this was a scan per run), and
-- the replays of a run.
CREATE INDEX reservations_run ON reservations(run_id);
CREATE INDEX workflow_executions_source ON workflow_executions(source_run_id) WHERE source_run_id IS NOT NULL;
