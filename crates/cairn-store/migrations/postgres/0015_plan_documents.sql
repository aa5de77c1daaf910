-- A plan's document (the JSON its checksum covers) kept with its index row, and the state root
-- that made it, so the daemon of another state root sharing the registry can approve it (its
-- file is in the state root that made it; there a missing file is an alteration, refused).
ALTER TABLE plans ADD COLUMN plan_json TEXT;
ALTER TABLE plans ADD COLUMN made_in TEXT;
