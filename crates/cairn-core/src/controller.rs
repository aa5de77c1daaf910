//! Pipeline controllers as tools: a step of a `snakemake` or `nextflow` tool names its pipeline in
//! its args; Cairn, not the workflow author, builds the controller's argv from them.
//!
//! The pipeline runs in a **working copy** of its folder, the step's own directory
//! (`<run_dir>/steps/<step>/`, see [`working_copy`]): Snakemake resolves a pipeline's relative
//! paths against its working directory, so a pipeline whose inputs, `config/` and `resources/`
//! sit beside its Snakefile finds them as in a checkout, and each step has its own `.snakemake`
//! state and outputs. The files the pipeline created or changed there are the step's artifacts.

use serde_json::Value;

use serde::{Deserialize, Serialize};

/// What a tool is: a command (argv, JSON on stdin and stdout), or a built-in pipeline controller
/// whose step args name its pipeline source inside the workflow folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    #[default]
    Process,
    Snakemake,
    Nextflow,
}

impl ToolKind {
    pub fn is_process(&self) -> bool {
        *self == ToolKind::Process
    }

    /// The program a controller kind runs on the target; None for a plain command.
    pub fn program(&self) -> Option<&'static str> {
        match self {
            ToolKind::Process => None,
            ToolKind::Snakemake => Some("snakemake"),
            ToolKind::Nextflow => Some("nextflow"),
        }
    }
}

pub const MAX_CORES: u64 = 1024;

/// Where a step's run configuration (`args.config`) is written, relative to its working copy:
/// hidden, so it is not taken for an output.
pub const RUN_CONFIG: &str = ".cairn/config.json";

/// What a controller leaves in its working copy that is its own state, not the pipeline's
/// outputs: never recorded as artifacts.
pub fn own_state(kind: ToolKind) -> &'static [&'static str] {
    match kind {
        ToolKind::Process => &[],
        ToolKind::Snakemake => &[".snakemake", ".cairn"],
        ToolKind::Nextflow => &[".nextflow", ".nextflow.log", "work", ".cairn"],
    }
}

/// Where a controller keeps its own record of the jobs it ran, relative to its working copy: what
/// it reads to judge which outputs are up to date (Snakemake's metadata: each output's rule,
/// code, params and inputs). A replay that seeds a working copy carries it with the outputs.
pub fn job_record(kind: ToolKind) -> Option<&'static str> {
    match kind {
        ToolKind::Snakemake => Some(".snakemake/metadata"),
        ToolKind::Process | ToolKind::Nextflow => None,
    }
}

/// A step's working copy, relative to its run directory.
pub fn working_copy(step_id: &str) -> String {
    crate::artifact::step_dir(step_id)
}

const SNAKEMAKE_ARGS: &[&str] =
    &["snakefile", "configfile", "config", "cores", "jobs", "targets", "keep_going", "forcerun"];
const NEXTFLOW_ARGS: &[&str] = &["script", "params_file", "config", "cores"];

/// Where a controller sends its pipeline's jobs when its target's executor is Slurm: Snakemake
/// submits each job itself (`--executor slurm`, the `snakemake-executor-plugin-slurm` package on
/// the target), to the target's partition and account. Cairn schedules none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmSubmit {
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// The arguments a controller step may have.
pub fn allowed_args(kind: ToolKind) -> &'static [&'static str] {
    match kind {
        ToolKind::Process => &[],
        ToolKind::Snakemake => SNAKEMAKE_ARGS,
        ToolKind::Nextflow => NEXTFLOW_ARGS,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    #[error("args.{0} is missing; a {1} step names its {2} there, relative to the pipeline's folder")]
    Missing(&'static str, &'static str, &'static str),
    #[error("args.{0} must be a relative path inside the pipeline's folder, without `..` (got `{1}`)")]
    Path(&'static str, String),
    #[error(
        "args.{0} must be a relative path inside the pipeline's folder, or an absolute path on the target taken from the run input (got `{1}`)"
    )]
    File(&'static str, String),
    #[error("args.config must be a JSON object: the run's configuration, merged over the pipeline's own (got {0})")]
    Config(String),
    #[error("args.{0} must be an integer from 1 to {MAX_CORES} (got {1})")]
    Count(&'static str, String),
    #[error("args.{0} must be a list of rule or file names that do not start with `-` (got {1})")]
    Names(&'static str, String),
    #[error("args.keep_going must be true or false (got {0})")]
    KeepGoing(String),
    #[error("args.{0} is not an argument of a {1} step; use {list}", list = allowed_args(*.2).join(", "))]
    Unknown(String, &'static str, ToolKind),
}

fn safe_parts(s: &str) -> bool {
    !s.is_empty() && !s.contains('\0') && s.split('/').all(|p| !p.is_empty() && p != "..")
}

fn rel_path(args: &Value, key: &'static str) -> Result<Option<String>, ControllerError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.starts_with('/') && !s.starts_with('-') && safe_parts(s) => {
            Ok(Some(s.trim_start_matches("./").to_string()))
        }
        Some(other) => Err(ControllerError::Path(key, other.to_string().trim_matches('"').to_string())),
    }
}

/// A file argument: relative to the working copy, or an absolute path on the target (a run
/// input's file, which a plan binds by its checksum).
fn file_arg(args: &Value, key: &'static str, work_dir: &str) -> Result<Option<String>, ControllerError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.starts_with('/') && safe_parts(&s[1..]) => Ok(Some(s.clone())),
        Some(Value::String(s)) if !s.starts_with('-') && safe_parts(s) => {
            Ok(Some(format!("{work_dir}/{}", s.trim_start_matches("./"))))
        }
        Some(other) => Err(ControllerError::File(key, other.to_string().trim_matches('"').to_string())),
    }
}

fn names(args: &Value, key: &'static str) -> Result<Vec<String>, ControllerError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| match t.as_str() {
                Some(s) if !s.is_empty() && !s.starts_with('-') && !s.contains('\0') => Ok(s.to_string()),
                _ => Err(ControllerError::Names(key, t.to_string())),
            })
            .collect(),
        Some(other) => Err(ControllerError::Names(key, other.to_string())),
    }
}

/// The keys of a controller step's args, checked before anything else (at registration, even
/// when the values are templates).
pub fn check_keys(kind: ToolKind, args: &Value) -> Result<(), ControllerError> {
    let name = kind.program().unwrap_or("process");
    if let Some(map) = args.as_object()
        && let Some(k) = map.keys().find(|k| !allowed_args(kind).contains(&k.as_str()))
    {
        return Err(ControllerError::Unknown(k.clone(), name, kind));
    }
    Ok(())
}

/// The run configuration a step's args carry (`args.config`), checked.
pub fn run_config(args: &Value) -> Result<Option<&Value>, ControllerError> {
    match args.get("config") {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(other) => Err(ControllerError::Config(other.to_string())),
    }
}

/// The controller's argv for a step's resolved args. `work_dir` is the step's working copy on
/// the controller host (`<run_dir>/steps/<step>`), which holds the pipeline's folder.
///
/// `slurm`: the step's target runs Slurm, and Snakemake submits the pipeline's jobs there, at
/// most `jobs` at once (default: `cores`).
pub fn controller_argv(
    kind: ToolKind,
    args: &Value,
    work_dir: &str,
    slurm: Option<&SlurmSubmit>,
) -> Result<Vec<String>, ControllerError> {
    check_keys(kind, args)?;
    let count = |key: &'static str| match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_CORES).contains(&n) => Ok(Some(n)),
            _ => Err(ControllerError::Count(key, v.to_string())),
        },
    };
    let cores = count("cores")?.unwrap_or(1);
    let jobs = count("jobs")?.unwrap_or(cores);
    let config = run_config(args)?.map(|_| format!("{work_dir}/{RUN_CONFIG}"));
    match kind {
        ToolKind::Process => Ok(Vec::new()),
        ToolKind::Snakemake => {
            let snakefile =
                rel_path(args, "snakefile")?.ok_or(ControllerError::Missing("snakefile", "snakemake", "Snakefile"))?;
            let keep_going = match args.get("keep_going") {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(Value::Bool(true)) => true,
                Some(other) => return Err(ControllerError::KeepGoing(other.to_string())),
            };
            // Targets come first: the options that take several values would swallow them.
            let mut argv = vec!["snakemake".to_string()];
            argv.extend(names(args, "targets")?);
            argv.extend([
                "--snakefile".into(),
                format!("{work_dir}/{snakefile}"),
                "--directory".into(),
                work_dir.to_string(),
                "--cores".into(),
                cores.to_string(),
                "--nocolor".into(),
                // A pipeline whose snakemake was killed resumes from its completed jobs.
                "--rerun-incomplete".into(),
            ]);
            if keep_going {
                argv.push("--keep-going".into());
            }
            if let Some(slurm) = slurm {
                argv.extend(["--executor".into(), "slurm".into(), "--jobs".into(), jobs.to_string()]);
                // Added to Snakemake's own defaults (mem_mb, disk_mb, …), which stay.
                let resources: Vec<String> = [("slurm_partition", &slurm.partition), ("slurm_account", &slurm.account)]
                    .into_iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
                    .collect();
                if !resources.is_empty() {
                    argv.push("--default-resources".into());
                    argv.extend(resources);
                }
            }
            let forcerun = names(args, "forcerun")?;
            if !forcerun.is_empty() {
                argv.push("--forcerun".into());
                argv.extend(forcerun);
            }
            // The pipeline's file first, then the run's: a later one overrides an earlier one.
            let files: Vec<String> = [file_arg(args, "configfile", work_dir)?, config].into_iter().flatten().collect();
            if !files.is_empty() {
                argv.push("--configfile".into());
                argv.extend(files);
            }
            Ok(argv)
        }
        ToolKind::Nextflow => {
            let script =
                rel_path(args, "script")?.ok_or(ControllerError::Missing("script", "nextflow", "main script"))?;
            let mut argv = vec![
                "nextflow".to_string(),
                "-log".into(),
                format!("{work_dir}/.nextflow.log"),
                "run".into(),
                format!("{work_dir}/{script}"),
                "-work-dir".into(),
                format!("{work_dir}/work"),
                "-offline".into(),
            ];
            // Nextflow takes one params file: the run's configuration wins over the pipeline's.
            if let Some(p) = config.or(file_arg(args, "params_file", work_dir)?) {
                argv.push("-params-file".into());
                argv.push(p);
            }
            argv.push("--outdir".into());
            argv.push(format!("{work_dir}/results"));
            Ok(argv)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snakemake_argv_is_built_from_args_only_and_runs_in_the_working_copy() {
        let argv = controller_argv(
            ToolKind::Snakemake,
            &json!({"snakefile": "workflow/Snakefile", "configfile": "./config/config.yaml", "cores": 2,
                    "targets": ["all"], "keep_going": true, "forcerun": ["summary"], "config": {"n": 1}}),
            "/r/steps/p",
            None,
        )
        .unwrap();
        assert_eq!(
            argv.join(" "),
            "snakemake all --snakefile /r/steps/p/workflow/Snakefile --directory /r/steps/p --cores 2 --nocolor \
             --rerun-incomplete --keep-going --forcerun summary \
             --configfile /r/steps/p/config/config.yaml /r/steps/p/.cairn/config.json"
        );
        let argv = controller_argv(
            ToolKind::Snakemake,
            &json!({"snakefile": "Snakefile", "configfile": "/data/run-7/config.yaml"}),
            "/w",
            None,
        )
        .unwrap();
        assert_eq!(argv[argv.len() - 2..], ["--configfile", "/data/run-7/config.yaml"], "an absolute file stays");
        // On a Slurm target, Snakemake submits the jobs: to the target's partition and account.
        let slurm = SlurmSubmit { partition: Some("debug".into()), account: Some("lab".into()) };
        let on_slurm = |args: Value| controller_argv(ToolKind::Snakemake, &args, "/w", Some(&slurm)).unwrap().join(" ");
        assert!(
            on_slurm(json!({"snakefile": "S", "cores": 2})).ends_with(
                "--rerun-incomplete --executor slurm --jobs 2 --default-resources slurm_partition=debug slurm_account=lab"
            ),
            "{}",
            on_slurm(json!({"snakefile": "S", "cores": 2}))
        );
        assert!(on_slurm(json!({"snakefile": "S", "jobs": 40})).contains("--executor slurm --jobs 40 "));
        let bare =
            controller_argv(ToolKind::Snakemake, &json!({"snakefile": "S"}), "/w", Some(&SlurmSubmit::default()));
        assert!(bare.unwrap().join(" ").ends_with("--executor slurm --jobs 1"), "no partition, no resources");
    }

    #[test]
    fn bad_args_are_named() {
        let bad = [
            (json!({}), "args.snakefile is missing"),
            (json!({"snakefile": "../x"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "/etc/passwd"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "--forceall"}), "args.snakefile must be a relative path"),
            (json!({"snakefile": "S", "cores": 0}), "args.cores must be"),
            (json!({"snakefile": "S", "jobs": "many"}), "args.jobs must be an integer from 1 to 1024"),
            (json!({"snakefile": "S", "targets": ["--delete-all-output"]}), "args.targets"),
            (json!({"snakefile": "S", "forcerun": "all"}), "args.forcerun must be a list"),
            (json!({"snakefile": "S", "keep_going": "yes"}), "args.keep_going must be true or false"),
            (json!({"snakefile": "S", "config": [1]}), "args.config must be a JSON object"),
            (json!({"snakefile": "S", "configfile": "/a/../etc"}), "args.configfile must be a relative path"),
            (
                json!({"snakefile": "S", "shell": "rm"}),
                "args.shell is not an argument of a snakemake step; use snakefile, configfile, config, cores, jobs, targets, keep_going, forcerun",
            ),
        ];
        for (args, want) in bad {
            let e = controller_argv(ToolKind::Snakemake, &args, "/w", None).unwrap_err().to_string();
            assert!(e.contains(want), "{args}: {e}");
        }
    }

    #[test]
    fn nextflow_takes_the_same_model() {
        let argv = controller_argv(
            ToolKind::Nextflow,
            &json!({"script": "main.nf", "config": {"reads": "/d/r.fq"}}),
            "/w",
            None,
        )
        .unwrap();
        assert_eq!(
            argv.join(" "),
            "nextflow -log /w/.nextflow.log run /w/main.nf -work-dir /w/work -offline -params-file /w/.cairn/config.json --outdir /w/results"
        );
    }
}
