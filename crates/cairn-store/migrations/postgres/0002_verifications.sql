-- Verifications of workflow documents in scratch kernels.
CREATE TABLE verifications (
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY,
    id              TEXT PRIMARY KEY,
    title           TEXT NOT NULL,
    document        TEXT NOT NULL,
    document_sha256 TEXT NOT NULL,
    verdict         TEXT CHECK (verdict IN ('passed','failed','died','timed_out','interrupted')),
    cells_json      TEXT NOT NULL DEFAULT '[]',
    notebook        TEXT,
    draft           TEXT,
    error           TEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT
);

CREATE INDEX verifications_created ON verifications(created_at DESC);
