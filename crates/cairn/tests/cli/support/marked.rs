//! The unrecorded-tool crash tests' workflow: one step whose tool leaves a mark per attempt (its
//! pid, and whether the previous attempt's tool was still alive when it started) and appends its
//! attempt to its declared output, so a second execution beside the first shows in both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Cairn, alive, read_json, sha256_hex, step, try_read_json, wait_until, write_workflow};

/// How long the first attempt's tool sleeps after leaving its mark: long enough to outlive the
/// process that started it and to be seen running beside a second attempt if nothing stops it.
pub const FIRST_ATTEMPT_SLEEP_SECS: u64 = 4;

/// The tool: marks `attempt-N.json` in `args.marks` (its pid, whether the previous attempt's tool
/// is alive now, the nonce in its environment), sleeps on attempt 1, then appends `attempt N` to
/// its output `out.txt`, marks `attempt-N.done` and prints `{attempt}`.
const MARKED_PY: &str = r#"import json, os, sys, time
args = json.loads(sys.stdin.read())
attempt = int(os.environ["CAIRN_ATTEMPT"])
marks = args["marks"]

def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")

previous = os.path.join(marks, "attempt-%d.json" % (attempt - 1))
previous_alive = None
if os.path.exists(previous):
    with open(previous) as f:
        previous_alive = alive(json.load(f)["pid"])
mark = {"pid": os.getpid(), "previous_alive": previous_alive, "nonce": os.environ.get("CAIRN_ATTEMPT_NONCE")}
staged = os.path.join(marks, ".attempt-%d.json" % attempt)
with open(staged, "w") as f:
    json.dump(mark, f)
os.rename(staged, os.path.join(marks, "attempt-%d.json" % attempt))
if attempt == 1:
    time.sleep(float(args["sleep"]))
with open("out.txt", "a") as f:
    f.write("attempt %d\n" % attempt)
open(os.path.join(marks, "attempt-%d.done" % attempt), "w").close()
print(json.dumps({"attempt": attempt}))
"#;

/// Registers the one-step workflow `name` (step `s`, output `out` = `out.txt`).
pub fn marked_workflow(c: &Cairn, name: &str) {
    let toml = format!(
        r#"
[workflow]
name = "{name}"
version = "1.0.0"

[tools.marked]
command = ["python3", "tools/marked.py"]

[[steps]]
id = "s"
tool = "marked"
args = {{ marks = "${{input.marks}}", sleep = "${{input.sleep}}" }}
outputs = {{ out = "out.txt" }}
"#
    );
    c.add(&write_workflow(&c.path(name), &toml, &[("tools/marked.py", MARKED_PY)]));
}

/// The marks' folder (created) and the run input naming it.
pub fn marked_input(c: &Cairn) -> (PathBuf, Value) {
    let marks = c.path("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let input = json!({"marks": marks, "sleep": FIRST_ATTEMPT_SLEEP_SECS});
    (marks, input)
}

/// Attempt `n`'s mark, once its tool has left it (panics after 15 s).
#[track_caller]
pub fn wait_for_mark(marks: &Path, n: u32) -> Value {
    let path = marks.join(format!("attempt-{n}.json"));
    assert!(wait_until(Duration::from_secs(15), || try_read_json(&path).is_some()), "attempt {n}'s tool never started");
    read_json(&path)
}

/// The run ended READY with step `s` executed by exactly one tool: attempt 1's tool (`first`,
/// its pid) was stopped before attempt 2's tool started, never finished (given the time it
/// needed), and the recorded output is attempt 2's alone, byte for byte.
#[track_caller]
pub fn assert_one_execution(run: &Value, marks: &Path, first: i32, started: std::time::Instant) {
    assert_eq!(run["status"], "READY", "{run:#}");
    let s = step(run, "s");
    assert_eq!((s["status"].as_str(), s["attempts"].as_u64()), (Some("COMPLETED"), Some(2)), "{run:#}");
    let second = read_json(&marks.join("attempt-2.json"));
    assert_eq!(
        second["previous_alive"], false,
        "attempt 2's tool started while attempt 1's (pid {first}) still ran: {second}"
    );
    assert!(!alive(first), "attempt 1's tool (pid {first}) outlived the recovery");
    // Given the time attempt 1 needed to finish had it been left running, it never did.
    std::thread::sleep(Duration::from_secs(FIRST_ATTEMPT_SLEEP_SECS + 1).saturating_sub(started.elapsed()));
    assert!(!marks.join("attempt-1.done").exists(), "attempt 1's tool finished beside attempt 2's");
    let run_dir = PathBuf::from(run["run_dir"].as_str().unwrap());
    let out = std::fs::read(run_dir.join("steps/s/out.txt")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "attempt 2\n", "the output holds more than one execution");
    let artifacts = s["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1, "{run:#}");
    assert_eq!(artifacts[0]["sha256"], sha256_hex(&out), "{run:#}");
}
