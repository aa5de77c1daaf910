-- The registry: workflows, runs, step records (tool_calls) and the append-only event log.
-- (SQLite's 0001 in PostgreSQL's types. Integers are BIGINT throughout, as SQLite's are 64-bit;
-- `rowid` is an identity column where SQLite's own rowid breaks ties in insertion order.)

CREATE TABLE workflows (
    name          TEXT NOT NULL,
    version       TEXT NOT NULL,
    digest        TEXT NOT NULL,
    path          TEXT NOT NULL,
    spec_json     TEXT NOT NULL,
    registered_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE TABLE workflow_executions (
    rowid         BIGINT GENERATED ALWAYS AS IDENTITY,
    run_id        TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    version       TEXT NOT NULL,
    identity_hash TEXT NOT NULL,
    input_json    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('PENDING','RUNNING','READY','BLOCKED','FAILED','CANCELLED')),
    revision      BIGINT NOT NULL,
    run_dir       TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    finished_at   BIGINT,
    findings_json TEXT NOT NULL DEFAULT '[]',
    error         TEXT,
    source_run_id TEXT REFERENCES workflow_executions(run_id),
    replay_json   TEXT,
    FOREIGN KEY (workflow, version) REFERENCES workflows(name, version)
);

CREATE INDEX workflow_executions_created ON workflow_executions(created_at DESC);

CREATE TABLE tool_calls (
    rowid             BIGINT GENERATED ALWAYS AS IDENTITY,
    run_id            TEXT NOT NULL REFERENCES workflow_executions(run_id),
    step_id           TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('RUNNING','COMPLETED','FAILED')),
    tool              TEXT NOT NULL,
    tool_digest       TEXT NOT NULL,
    args_hash         TEXT NOT NULL,
    args_json         TEXT NOT NULL,
    attempt_count     BIGINT NOT NULL,
    interrupted_count BIGINT NOT NULL DEFAULT 0,
    attempt_token     TEXT,
    outcome           TEXT,
    result_json       TEXT,
    error             TEXT,
    log_tail          TEXT,
    pid               BIGINT,
    pgid              BIGINT,
    proc_start_time   BIGINT,
    started_at        BIGINT NOT NULL,
    finished_at       BIGINT,
    duration_us       BIGINT,
    reused_from       TEXT,
    PRIMARY KEY (run_id, step_id)
);

CREATE TABLE events (
    seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    TEXT NOT NULL REFERENCES workflow_executions(run_id),
    kind      TEXT NOT NULL,
    step_id   TEXT,
    attempt   BIGINT,
    at        BIGINT NOT NULL,
    data_json TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX events_run ON events(run_id, seq);

-- Append-only tables: the database itself refuses to change or delete a row. The message is the
-- trigger's argument.
CREATE FUNCTION cairn_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0];
END
$$;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION cairn_refuse('events are append-only');
CREATE TRIGGER events_no_delete BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION cairn_refuse('events are append-only');
