-- Configured compute targets (the built-in `local` is not stored).
CREATE TABLE targets (
    name       TEXT PRIMARY KEY,
    spec_json  TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
