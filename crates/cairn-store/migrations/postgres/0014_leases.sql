-- A team's daemons share one registry: each daemon records itself (and renews its heartbeat while
-- it lives), and each open run it drives is leased to it until `lease_expires_at`. A daemon that
-- takes a run over increments `lease_epoch`; a write under an older epoch is refused. `home_host`
-- is the host whose state root holds a local run's files (NULL for a run on an SSH or Slurm
-- target, which any daemon reaches).
CREATE TABLE daemons (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    start_time   BIGINT NOT NULL,
    state_root   TEXT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    stopped_at   BIGINT
);

ALTER TABLE workflow_executions ADD COLUMN lease_owner TEXT;
ALTER TABLE workflow_executions ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workflow_executions ADD COLUMN lease_expires_at BIGINT;
ALTER TABLE workflow_executions ADD COLUMN home_host TEXT;

CREATE INDEX workflow_executions_lease ON workflow_executions(lease_owner) WHERE status IN ('PENDING', 'RUNNING');
