-- The parameters a verification injected (papermill's convention): part of what it proved.
ALTER TABLE verifications ADD COLUMN parameters_json TEXT NOT NULL DEFAULT '{}';
