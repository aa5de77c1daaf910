-- A step supervised by the step agent records how to find its launch again.
ALTER TABLE tool_calls ADD COLUMN remote_json TEXT;
