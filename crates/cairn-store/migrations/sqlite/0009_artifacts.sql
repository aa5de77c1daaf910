-- The files a completed attempt produced (its declared outputs), one row per file, written in the
-- transaction that completes the step; a replay child's reused steps get copies of their source's
-- rows (reused_from: the run whose attempt produced the bytes). `trace` looks rows up by hash.
CREATE TABLE artifacts (
    run_id      TEXT NOT NULL REFERENCES workflow_executions(run_id),
    step_id     TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    name        TEXT NOT NULL,
    path        TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    reused_from TEXT,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, path),
    FOREIGN KEY (run_id, step_id) REFERENCES tool_calls(run_id, step_id)
) STRICT;

CREATE INDEX artifacts_sha256 ON artifacts(sha256);
CREATE INDEX artifacts_step ON artifacts(run_id, step_id);

-- Evidence never changes after it is recorded.
CREATE TRIGGER artifacts_no_update BEFORE UPDATE ON artifacts BEGIN SELECT RAISE(ABORT, 'artifacts are append-only'); END;
CREATE TRIGGER artifacts_no_delete BEFORE DELETE ON artifacts BEGIN SELECT RAISE(ABORT, 'artifacts are append-only'); END;
