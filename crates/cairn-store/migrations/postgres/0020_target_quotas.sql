-- A target's quota on its steps running at once: a quota may be on a target now, and a step that
-- takes one of its places says so (`slot_target`) while it runs.
ALTER TABLE quotas DROP CONSTRAINT quotas_subject_kind_check;
ALTER TABLE quotas ADD CONSTRAINT quotas_subject_kind_check CHECK (subject_kind IN ('principal', 'workflow', 'target'));

ALTER TABLE tool_calls ADD COLUMN slot_target TEXT;
CREATE INDEX tool_calls_slot ON tool_calls (slot_target) WHERE slot_target IS NOT NULL AND status = 'RUNNING';
