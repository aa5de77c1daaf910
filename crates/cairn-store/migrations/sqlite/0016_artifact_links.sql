-- A pipeline's working copy may hold symlinks (a `directory()` output that is a link to a folder, a
-- relative link beside an output): each is recorded as what it is, a link with its target's text
-- (never followed). NULL for a file. Its `sha256` is cairn_core::artifact::link_digest of the
-- target, and `bytes` the target's length.
ALTER TABLE artifacts ADD COLUMN link TEXT;
