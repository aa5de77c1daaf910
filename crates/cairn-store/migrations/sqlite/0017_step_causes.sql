-- What made a step's last attempt fail, when Cairn could tell (a full disk, ENOSPC): the JSON of
-- cairn_core::cause::Cause, `{"kind": "NO_SPACE", …}`. NULL for any other step, and for one that
-- failed before causes were recorded.
ALTER TABLE tool_calls ADD COLUMN cause_json TEXT;
