-- The daemon: which daemon instance owns a run (so a successor recovers only what a dead owner
-- left), the conversation a run was submitted in, and the session kernel's jobs.
ALTER TABLE workflow_executions ADD COLUMN owner TEXT;
ALTER TABLE workflow_executions ADD COLUMN thread_id TEXT;

CREATE INDEX workflow_executions_open ON workflow_executions(status) WHERE status IN ('PENDING', 'RUNNING');

CREATE TABLE kernel_jobs (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       TEXT NOT NULL UNIQUE,
    session      TEXT NOT NULL,
    code         TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('queued','running','ok','error','died','timed_out','interrupted','cancelled')),
    outputs_json TEXT NOT NULL DEFAULT '[]',
    execution_count BIGINT,
    error        TEXT,
    submitted_at BIGINT NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT,
    duration_ms  BIGINT
);
