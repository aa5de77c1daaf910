-- Plans (the plan itself is the immutable file <state>/plans/<name>.json; this row indexes it and
-- keeps the checksum it had when stored), consumed receipts, and run reservations.
CREATE TABLE plans (
    rowid         BIGINT GENERATED ALWAYS AS IDENTITY,
    plan_name     TEXT PRIMARY KEY,
    plan_id       TEXT NOT NULL UNIQUE,
    plan_checksum TEXT NOT NULL,
    workflow      TEXT NOT NULL,
    version       TEXT NOT NULL,
    target        TEXT NOT NULL,
    run_dir       TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);

-- A receipt is consumed at most once.
CREATE TABLE receipts (
    receipt_id  TEXT PRIMARY KEY,
    plan_id     TEXT NOT NULL,
    run_id      TEXT NOT NULL REFERENCES workflow_executions(run_id),
    consumed_at BIGINT NOT NULL
);

-- One run per target and run_dir, ever.
CREATE TABLE reservations (
    target      TEXT NOT NULL,
    run_dir     TEXT NOT NULL,
    run_id      TEXT NOT NULL REFERENCES workflow_executions(run_id),
    plan_id     TEXT NOT NULL,
    reserved_at BIGINT NOT NULL,
    PRIMARY KEY (target, run_dir)
);

ALTER TABLE workflow_executions ADD COLUMN plan_id TEXT;
