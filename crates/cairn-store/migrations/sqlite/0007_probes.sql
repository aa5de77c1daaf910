-- The last probe of each target (the built-in `local` too): what it observed and when, so a
-- person's view can show a target's facts without contacting it.
CREATE TABLE probes (
    target        TEXT PRIMARY KEY,
    observed_json TEXT NOT NULL,
    probed_at     INTEGER NOT NULL
) STRICT;
