-- The registry: workflows, runs, step records (tool_calls) and the append-only event log.

CREATE TABLE workflows (
    name          TEXT NOT NULL,
    version       TEXT NOT NULL,
    digest        TEXT NOT NULL,
    path          TEXT NOT NULL,
    spec_json     TEXT NOT NULL,
    registered_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;

CREATE TABLE workflow_executions (
    run_id        TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    version       TEXT NOT NULL,
    identity_hash TEXT NOT NULL,
    input_json    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('PENDING','RUNNING','READY','BLOCKED','FAILED','CANCELLED')),
    revision      INTEGER NOT NULL,
    run_dir       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    finished_at   INTEGER,
    findings_json TEXT NOT NULL DEFAULT '[]',
    error         TEXT,
    source_run_id TEXT REFERENCES workflow_executions(run_id),
    replay_json   TEXT,
    FOREIGN KEY (workflow, version) REFERENCES workflows(name, version)
) STRICT;

CREATE INDEX workflow_executions_created ON workflow_executions(created_at DESC);

CREATE TABLE tool_calls (
    run_id            TEXT NOT NULL REFERENCES workflow_executions(run_id),
    step_id           TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('RUNNING','COMPLETED','FAILED')),
    tool              TEXT NOT NULL,
    tool_digest       TEXT NOT NULL,
    args_hash         TEXT NOT NULL,
    args_json         TEXT NOT NULL,
    attempt_count     INTEGER NOT NULL,
    interrupted_count INTEGER NOT NULL DEFAULT 0,
    attempt_token     TEXT,
    outcome           TEXT,
    result_json       TEXT,
    error             TEXT,
    log_tail          TEXT,
    pid               INTEGER,
    pgid              INTEGER,
    proc_start_time   INTEGER,
    started_at        INTEGER NOT NULL,
    finished_at       INTEGER,
    duration_us       INTEGER,
    reused_from       TEXT,
    PRIMARY KEY (run_id, step_id)
) STRICT;

CREATE TABLE events (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id    TEXT NOT NULL REFERENCES workflow_executions(run_id),
    kind      TEXT NOT NULL,
    step_id   TEXT,
    attempt   INTEGER,
    at        INTEGER NOT NULL,
    data_json TEXT NOT NULL DEFAULT '{}'
) STRICT;

CREATE INDEX events_run ON events(run_id, seq);

-- Events are append-only: the database itself refuses to change or delete one.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
