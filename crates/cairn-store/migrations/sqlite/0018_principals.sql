-- A team's registry: principals (their tokens kept only as SHA-256 hashes), custom roles, grants
-- of a role to a principal (everywhere: workflow and target ''; or scoped to either or both),
-- per-workflow policies, and the audit of every mutating action (never changed or deleted).
CREATE TABLE principals (
    name         TEXT PRIMARY KEY,
    role         TEXT NOT NULL,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    created_by   TEXT NOT NULL,
    rotated_at   INTEGER,
    revoked_at   INTEGER
) STRICT;

CREATE TABLE roles (
    name        TEXT PRIMARY KEY,
    permissions TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE grants (
    principal  TEXT NOT NULL REFERENCES principals(name),
    role       TEXT NOT NULL,
    workflow   TEXT NOT NULL DEFAULT '',
    target     TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    PRIMARY KEY (principal, role, workflow, target)
) STRICT;

CREATE TABLE workflow_policies (
    workflow   TEXT PRIMARY KEY,
    two_person INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE audit (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    principal   TEXT NOT NULL,
    channel     TEXT NOT NULL,
    action      TEXT NOT NULL,
    object      TEXT NOT NULL,
    detail_json TEXT NOT NULL
) STRICT;
CREATE INDEX audit_by_principal ON audit (principal, seq);
CREATE INDEX audit_by_object ON audit (object, seq);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'the audit is never changed'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'the audit is never deleted'); END;

-- Who submitted (or executed the plan of) a run, and who cancelled it; who made a plan and who
-- approved it. NULL for what was done before principals were recorded.
ALTER TABLE workflow_executions ADD COLUMN submitted_by TEXT;
ALTER TABLE workflow_executions ADD COLUMN cancelled_by TEXT;
ALTER TABLE plans ADD COLUMN planned_by TEXT;
ALTER TABLE receipts ADD COLUMN approved_by TEXT;
