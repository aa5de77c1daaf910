-- SQLite's 0021 in PostgreSQL's types: a registered workflow version's steps in its DAG's order,
-- and a run's counts by status from an index.
CREATE TABLE workflow_steps (
    workflow TEXT NOT NULL,
    version  TEXT NOT NULL,
    position BIGINT NOT NULL,
    step_id  TEXT NOT NULL,
    pipeline BIGINT NOT NULL,
    layer    BIGINT NOT NULL,
    PRIMARY KEY (workflow, version, position),
    UNIQUE (workflow, version, step_id),
    FOREIGN KEY (workflow, version) REFERENCES workflows(name, version)
);

CREATE INDEX tool_calls_status ON tool_calls (run_id, status);
