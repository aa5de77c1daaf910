-- A registered workflow version's steps in its DAG's deterministic order (derived from its
-- definition, written when it is registered, or the first time a run of an older one is shown):
-- a page of a 100,000-step run is read by position without reading the definition. `pipeline`:
-- the step's tool is a pipeline controller; `layer`: its depth in the DAG (0 for a step that
-- needs none, else one more than the deepest step it needs), what a graph of a huge run is
-- drawn by.
CREATE TABLE workflow_steps (
    workflow TEXT NOT NULL,
    version  TEXT NOT NULL,
    position INTEGER NOT NULL,
    step_id  TEXT NOT NULL,
    pipeline INTEGER NOT NULL,
    layer    INTEGER NOT NULL,
    PRIMARY KEY (workflow, version, position),
    UNIQUE (workflow, version, step_id),
    FOREIGN KEY (workflow, version) REFERENCES workflows(name, version)
) STRICT;

-- A run's counts by status, read from the index alone.
CREATE INDEX tool_calls_status ON tool_calls (run_id, status);
