-- Lookups the run list and a run's page make for every run they show.
CREATE INDEX reservations_run ON reservations(run_id);
CREATE INDEX workflow_executions_source ON workflow_executions(source_run_id) WHERE source_run_id IS NOT NULL;
