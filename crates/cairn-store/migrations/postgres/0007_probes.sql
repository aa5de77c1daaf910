-- The last probe of each target: what it observed and when.
CREATE TABLE probes (
    target        TEXT PRIMARY KEY,
    observed_json TEXT NOT NULL,
    probed_at     BIGINT NOT NULL
);
