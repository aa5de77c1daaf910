-- Quotas on a principal or a workflow (runs open at once, runs queued at once, steps a day), and a
-- run held queued by one (`held_since`, cleared when it is admitted). Open runs are counted by
-- whom they were submitted by and by workflow, so both are indexed with the status.
CREATE TABLE quotas (
    subject_kind TEXT NOT NULL CHECK (subject_kind IN ('principal', 'workflow')),
    subject      TEXT NOT NULL,
    measure      TEXT NOT NULL,
    quota_limit  BIGINT NOT NULL CHECK (quota_limit >= 0),
    queue        BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (subject_kind, subject, measure)
);

ALTER TABLE workflow_executions ADD COLUMN held_since BIGINT;
CREATE INDEX workflow_executions_submitter ON workflow_executions (submitted_by, status);
CREATE INDEX workflow_executions_workflow ON workflow_executions (workflow, status);
