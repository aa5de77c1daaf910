//! The generic scripted tool, [`TOOL_PY`], the writers of workflow folders, and readers of what
//! tools leave behind: their logs and a run's attempt directories.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The generic tool. It reads its arguments (canonical JSON) from stdin and acts on
/// `plan[attempt - 1]` (the last entry repeats):
///
/// * `ok`                  print the result: `args.result` if given, else `{step, attempt, pid}`
/// * `exit:N`              exit with code N, printing nothing
/// * `badjson`             print text that is not JSON, exit 0
/// * `empty`               print nothing, exit 0
/// * `sleep:S`             sleep S seconds, then behave as `ok`
/// * `sleep_if_flag:S`     sleep S seconds if the file `args.flag` exists (logging
///   `<step>:sleeping:<attempt>` first), then `ok`
/// * `wait`                wait (at most 30 s) until the file `args.release` exists, then `ok`
/// * `big`                 write 100 MB to stdout
///
/// Log lines (to `args.log`, when given): `<step>:start:<attempt>:<pid>` first, and
/// `<step>:end:<attempt>` right before printing a result.
pub const TOOL_PY: &str = r#"import json, os, sys, time
raw = sys.stdin.read()
args = json.loads(raw) if raw.strip() else {}
step = os.environ.get("CAIRN_STEP_ID", "?")
attempt = int(os.environ.get("CAIRN_ATTEMPT", "0"))
log = args.get("log")

def note(line):
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

note("%s:start:%d:%d" % (step, attempt, os.getpid()))
plan = args.get("plan") or ["ok"]
mode = plan[min(max(attempt, 1), len(plan)) - 1]
kind, _, param = mode.partition(":")

def done(result=None):
    note("%s:end:%d" % (step, attempt))
    if result is None:
        result = args.get("result", {"step": step, "attempt": attempt, "pid": os.getpid()})
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    sys.exit(0)

if kind == "ok":
    done()
elif kind == "exit":
    sys.exit(int(param))
elif kind == "badjson":
    note("%s:end:%d" % (step, attempt))
    print("this is { not json")
    sys.exit(0)
elif kind == "empty":
    note("%s:end:%d" % (step, attempt))
    sys.exit(0)
elif kind == "sleep":
    time.sleep(float(param))
    done()
elif kind == "sleep_if_flag":
    if os.path.exists(args["flag"]):
        note("%s:sleeping:%d" % (step, attempt))
        time.sleep(float(param))
    done()
elif kind == "wait":
    deadline = time.time() + 30
    while not os.path.exists(args["release"]) and time.time() < deadline:
        time.sleep(0.05)
    done()
elif kind == "big":
    chunk = b"x" * (1 << 20)
    for _ in range(100):
        sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    sys.exit(0)
else:
    sys.stderr.write("unknown mode %r\n" % mode)
    sys.exit(2)
"#;

/// A `[tools.NAME]` table running [`TOOL_PY`] (written as `tools/tool.py` by [`tool_files`]).
pub fn tool_toml(name: &str, extra: &str) -> String {
    format!("[tools.{name}]\ncommand = [\"python3\", \"tools/tool.py\"]\n{extra}\n")
}

/// The files every workflow built on [`TOOL_PY`] needs.
pub fn tool_files() -> Vec<(&'static str, &'static str)> {
    vec![("tools/tool.py", TOOL_PY)]
}

/// Writes a workflow folder: `workflow.toml` plus `files` (relative paths, parents created,
/// mode 0755 so shell tools can be run directly).
pub fn write_workflow(dir: &Path, toml: &str, files: &[(&str, &str)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    for (name, content) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.to_path_buf()
}

/// Copies a folder, recursively (a fixture or an example, to change it or register a copy).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Appends text to a file.
pub fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// The lines of a tool log (empty when the file does not exist yet).
pub fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
}

/// How many log lines start with `prefix`.
pub fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

/// The pid a tool logged in its `<step>:start:<attempt>:<pid>` line.
pub fn logged_pid(lines: &[String], step: &str, attempt: u32) -> Option<i32> {
    let prefix = format!("{step}:start:{attempt}:");
    lines.iter().find_map(|l| l.strip_prefix(&prefix).and_then(|p| p.parse().ok()))
}

/// The attempt directory of `step`'s attempt `n` in a run directory (the supervisor's records:
/// `pid.json`, `exit.json`, the tool's stdout and stderr).
pub fn attempt_dir(run_dir: &Path, step: &str, n: u32) -> PathBuf {
    run_dir.join("steps").join(step).join(".cairn").join(format!("attempt-{n}"))
}

/// A JSON file, parsed.
#[track_caller]
pub fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON file, parsed; `None` while it is missing or not (yet) whole JSON.
pub fn try_read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}
