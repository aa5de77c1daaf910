-- A step supervised by the step agent (on an SSH target, through Slurm, or a local pipeline
-- controller) records how to find its launch again: target, attempt directory, nonce, and the
-- pid or Slurm job id it reported. Written before the launch, completed right after it.
ALTER TABLE tool_calls ADD COLUMN remote_json TEXT;
