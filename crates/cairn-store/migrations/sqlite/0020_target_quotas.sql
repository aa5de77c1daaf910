-- A target's quota on its steps running at once: a quota may be on a target now, and a step that
-- takes one of its places says so (`slot_target`) while it runs. SQLite cannot change a CHECK, so
-- the quotas table is made again with the wider one.
CREATE TABLE quotas_new (
    subject_kind TEXT NOT NULL CHECK (subject_kind IN ('principal', 'workflow', 'target')),
    subject      TEXT NOT NULL,
    measure      TEXT NOT NULL,
    quota_limit  INTEGER NOT NULL CHECK (quota_limit >= 0),
    queue        INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (subject_kind, subject, measure)
) STRICT;
INSERT INTO quotas_new SELECT subject_kind, subject, measure, quota_limit, queue, updated_at FROM quotas;
DROP TABLE quotas;
ALTER TABLE quotas_new RENAME TO quotas;

ALTER TABLE tool_calls ADD COLUMN slot_target TEXT;
CREATE INDEX tool_calls_slot ON tool_calls (slot_target) WHERE slot_target IS NOT NULL AND status = 'RUNNING';
