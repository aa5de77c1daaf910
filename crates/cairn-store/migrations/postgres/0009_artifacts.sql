-- The files a completed attempt produced (its declared outputs), one row per file.
CREATE TABLE artifacts (
    run_id      TEXT NOT NULL REFERENCES workflow_executions(run_id),
    step_id     TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    name        TEXT NOT NULL,
    path        TEXT NOT NULL,
    bytes       BIGINT NOT NULL,
    sha256      TEXT NOT NULL,
    reused_from TEXT,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, path),
    FOREIGN KEY (run_id, step_id) REFERENCES tool_calls(run_id, step_id)
);

CREATE INDEX artifacts_sha256 ON artifacts(sha256);
CREATE INDEX artifacts_step ON artifacts(run_id, step_id);

-- Evidence never changes after it is recorded.
CREATE TRIGGER artifacts_no_update BEFORE UPDATE ON artifacts FOR EACH ROW EXECUTE FUNCTION cairn_refuse('artifacts are append-only');
CREATE TRIGGER artifacts_no_delete BEFORE DELETE ON artifacts FOR EACH ROW EXECUTE FUNCTION cairn_refuse('artifacts are append-only');
