-- SQLite's 0022: the newest runs of one status, read from an index in order.
CREATE INDEX workflow_executions_status_created ON workflow_executions (status, created_at DESC);
