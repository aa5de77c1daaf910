-- The newest runs of one status (`GET /runs?status=`, MCP `list_runs` with a status, and a
-- follower of the run list asking whether any is still open) read from this index in order,
-- rather than every run sorted: the list's cost no longer grows with the registry.
CREATE INDEX workflow_executions_status_created ON workflow_executions (status, created_at DESC);
