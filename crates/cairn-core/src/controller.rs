//! Pipeline controllers as tools: a step of a `snakemake` or `nextflow` tool names its pipeline
//! source in its args; Cairn, not the workflow author, builds the controller's argv from them.
//! Outputs stay under `<run_dir>/results` on the target.

use serde_json::Value;

use crate::workflow::ToolKind;

pub const MAX_CORES: u64 = 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    #[error("args.{0} is missing; a {1} step names its {2} there, relative to the workflow folder")]
    Missing(&'static str, &'static str, &'static str),
    #[error("args.{0} must be a relative path inside the workflow folder, without `..` (got `{1}`)")]
    Path(&'static str, String),
    #[error("args.cores must be an integer from 1 to {MAX_CORES} (got {0})")]
    Cores(String),
    #[error("args.targets must be a list of rule or file names that do not start with `-` (got {0})")]
    Targets(String),
    #[error("args.{0} is not an argument of a {1} step; use {2}")]
    Unknown(String, &'static str, &'static str),
}

fn rel_path(args: &Value, key: &'static str) -> Result<Option<String>, ControllerError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && !s.starts_with('/')
                && !s.starts_with('-')
                && !s.contains('\0')
                && s.split('/').all(|p| !p.is_empty() && p != "..") =>
        {
            Ok(Some(s.trim_start_matches("./").to_string()))
        }
        Some(other) => Err(ControllerError::Path(key, other.to_string().trim_matches('"').to_string())),
    }
}

fn check_keys(args: &Value, allowed: &[&str], kind: &'static str, list: &'static str) -> Result<(), ControllerError> {
    if let Some(map) = args.as_object()
        && let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str()))
    {
        return Err(ControllerError::Unknown(k.clone(), kind, list));
    }
    Ok(())
}

/// The controller's argv for a step's resolved args. `source` is the pipeline's folder on the
/// controller host (the deployed workflow), `run_dir` the run's directory there.
pub fn controller_argv(
    kind: ToolKind,
    args: &Value,
    source: &str,
    run_dir: &str,
) -> Result<Vec<String>, ControllerError> {
    let cores = match args.get("cores") {
        None | Some(Value::Null) => 1,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_CORES).contains(&n) => n,
            _ => return Err(ControllerError::Cores(v.to_string())),
        },
    };
    match kind {
        ToolKind::Process => Ok(Vec::new()),
        ToolKind::Snakemake => {
            check_keys(
                args,
                &["snakefile", "configfile", "cores", "targets"],
                "snakemake",
                "snakefile, configfile, cores, targets",
            )?;
            let snakefile =
                rel_path(args, "snakefile")?.ok_or(ControllerError::Missing("snakefile", "snakemake", "Snakefile"))?;
            // Targets come first: `--configfile` takes several values and would swallow them.
            let mut argv = vec!["snakemake".to_string()];
            match args.get("targets") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for t in items {
                        match t.as_str() {
                            Some(s) if !s.is_empty() && !s.starts_with('-') && !s.contains('\0') => {
                                argv.push(s.to_string())
                            }
                            _ => return Err(ControllerError::Targets(t.to_string())),
                        }
                    }
                }
                Some(other) => return Err(ControllerError::Targets(other.to_string())),
            }
            argv.extend([
                "--snakefile".into(),
                format!("{source}/{snakefile}"),
                "--directory".into(),
                run_dir.to_string(),
                "--cores".into(),
                cores.to_string(),
                "--nocolor".into(),
            ]);
            if let Some(config) = rel_path(args, "configfile")? {
                argv.push("--configfile".into());
                argv.push(format!("{source}/{config}"));
            }
            Ok(argv)
        }
        ToolKind::Nextflow => {
            check_keys(args, &["script", "params_file", "cores"], "nextflow", "script, params_file, cores")?;
            let script =
                rel_path(args, "script")?.ok_or(ControllerError::Missing("script", "nextflow", "main script"))?;
            let mut argv = vec![
                "nextflow".to_string(),
                "-log".into(),
                format!("{run_dir}/.nextflow.log"),
                "run".into(),
                format!("{source}/{script}"),
                "-work-dir".into(),
                format!("{run_dir}/work"),
                "-offline".into(),
            ];
            if let Some(p) = rel_path(args, "params_file")? {
                argv.push("-params-file".into());
                argv.push(format!("{source}/{p}"));
            }
            argv.push("--outdir".into());
            argv.push(format!("{run_dir}/results"));
            Ok(argv)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snakemake_argv_is_built_from_args_only() {
        let argv = controller_argv(
            ToolKind::Snakemake,
            &json!({"snakefile": "Snakefile", "configfile": "./config.yaml", "cores": 2, "targets": ["all"]}),
            "/r/workflow",
            "/r",
        )
        .unwrap();
        assert_eq!(
            argv,
            [
                "snakemake",
                "all",
                "--snakefile",
                "/r/workflow/Snakefile",
                "--directory",
                "/r",
                "--cores",
                "2",
                "--nocolor",
                "--configfile",
                "/r/workflow/config.yaml",
            ]
        );
    }

    #[test]
    fn bad_args_are_named() {
        let bad = [
            (json!({}), "args.snakefile is missing"),
            (json!({"snakefile": "../x"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "/etc/passwd"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "--forceall"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "S", "cores": 0}), "args.cores must be"),
            (json!({"snakefile": "S", "targets": ["--delete-all-output"]}), "args.targets"),
            (json!({"snakefile": "S", "shell": "rm"}), "args.shell is not an argument"),
        ];
        for (args, want) in bad {
            let e = controller_argv(ToolKind::Snakemake, &args, "/s", "/r").unwrap_err().to_string();
            assert!(e.contains(want), "{args}: {e}");
        }
    }
}
