//! A tool whose output disk is full: a run directory on a small tmpfs (mounted for the test,
//! unmounted by a guard even when it fails; mounting needs root, which CI has) that the tool fills
//! until its write fails with ENOSPC. The step fails naming ENOSPC and the disk, with a `cause`
//! every surface shows; `retry_on = ["NO_SPACE"]` retries it (once room was freed), the default
//! does not.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::*;

/// Writes 512 KiB to `out.bin` in its step directory. From its second attempt on, when `free` is
/// set, it first deletes `ballast` (what a cleaner, or another job finishing, does between two
/// attempts), so the outcome of every attempt is fixed by the input, not by timing.
const FILL_PY: &str = r#"import json, os, sys
args = json.load(sys.stdin)
attempt = int(os.environ["CAIRN_ATTEMPT"])
with open(args["log"], "a") as f:
    f.write("fill:start:%d\n" % attempt)
if attempt > 1 and args["free"]:
    os.remove(args["ballast"])
with open("out.bin", "wb") as f:
    for _ in range(8):
        f.write(b"x" * 65536)
print(json.dumps({"bytes": os.path.getsize("out.bin")}))
"#;

/// A workflow `name` whose one step, `fill`, runs [`FILL_PY`] with `step_extra` in its table.
fn fill_workflow(c: &Cairn, name: &str, step_extra: &str) {
    let toml = format!(
        r#"
[workflow]
name = "{name}"
version = "1.0.0"

[tools.fill]
command = ["python3", "tools/fill.py"]

[[steps]]
id = "fill"
tool = "fill"
args = {{ ballast = "${{input.ballast}}", free = "${{input.free}}", log = "${{input.log}}" }}
outputs = {{ out = "out.bin" }}
{step_extra}
"#
    );
    c.add(&write_workflow(&c.path(name), &toml, &[("tools/fill.py", FILL_PY)]));
}

/// Run `run_id`'s directory on a 1 MiB tmpfs, 768 KiB of it taken by a ballast file: the tool's
/// 512 KiB cannot fit until the ballast goes. The input the run takes.
fn full_run_dir(c: &Cairn, run_id: &str) -> Option<(Tmpfs, PathBuf, Value)> {
    let run_dir = c.home().join("runs").join(run_id);
    let disk = Tmpfs::mount(&run_dir, "1m")?;
    let ballast = run_dir.join("ballast");
    std::fs::write(&ballast, vec![0u8; 768 << 10]).unwrap();
    let input = json!({"ballast": ballast.display().to_string(), "free": true, "log": c.path_str("log")});
    Some((disk, run_dir, input))
}

#[test]
fn a_tool_that_fills_its_disk_fails_naming_enospc_and_no_space_retries_it() {
    let c = Cairn::new();
    fill_workflow(&c, "fill-once", "");
    fill_workflow(&c, "fill-retry", "max_attempts = 2\nretry_on = [\"NO_SPACE\"]");

    // The default policy (TIMED_OUT): FAILED after one attempt, saying why.
    let Some((_disk, run_dir, input)) = full_run_dir(&c, "full-once") else { return };
    let out = c.run("fill-once", &input, &["--run-id", "full-once"]);
    let ctx = format!("{}\n{}", out.stdout, out.stderr);
    assert_eq!((out.code, str_of(&out.json["status"])), (3, "FAILED"), "{ctx}");
    let fill = out.step("fill");
    assert_eq!((fill["attempts"].clone(), fill["outcome"].clone()), (json!(1), json!("FAILED")), "{ctx}");
    let disk = run_dir.display().to_string();
    let error = str_of(&fill["error"]);
    assert!(
        error.starts_with(&format!(
            "ENOSPC on {disk} (0 bytes free): the tool's output disk is full; it exited with code 1"
        )),
        "{ctx}"
    );
    assert!(str_of(&out.json["error"]).contains(&format!("ENOSPC on {disk}")), "the run's error names it: {ctx}");
    assert!(fill["result"].is_null() && fill["artifacts"] == json!([]), "{ctx}");

    // The cause, machine-readable, on every surface: show, the step's detail, the API, events.
    let shown = c.show("full-once");
    let cause = step(&shown, "fill")["cause"].clone();
    assert_eq!(
        (&cause["kind"], &cause["path"], &cause["free_bytes"], &cause["disk_full"], &cause["in_stderr"]),
        (&json!("NO_SPACE"), &json!(disk), &json!(0), &json!(true), &json!(true)),
        "{shown:#}"
    );
    assert_eq!(fill["cause"], cause, "the run's answer and `cairn show` agree");
    let detail = c.json(&["result", "full-once", "fill"]).expect(0).json;
    assert_eq!(detail["cause"], cause, "{detail:#}");
    let d = c.daemon();
    let api = http("GET", &format!("{}/runs/full-once", d.url), Some(&c.token("viewer")), None, &[]);
    assert_eq!(api.status, 200, "{:#}", api.body);
    assert_eq!(step(&api.body, "fill")["cause"], cause, "{:#}", api.body);
    let events = c.events("full-once");
    let failed = events_of(&events, "step.failed", Some("fill"));
    assert_eq!(failed.len(), 1, "{:?}", kinds(&events));
    assert_eq!(failed[0]["data"]["cause"], cause);
    assert!(events_of(&events, "step.retrying", None).is_empty());
    assert_eq!(count(&log_lines(&c.path("log")), "fill:start:"), 1);

    // NO_SPACE: the failure on a full disk is retried (after its wait), and the second attempt,
    // with room freed, completes.
    let Some((_disk, run_dir, input)) = full_run_dir(&c, "full-retry") else { return };
    let out = c.run("fill-retry", &input, &["--run-id", "full-retry"]);
    let ctx = format!("{}\n{}", out.stdout, out.stderr);
    assert_eq!((out.code, str_of(&out.json["status"])), (0, "READY"), "{ctx}");
    let fill = out.step("fill");
    assert_eq!(fill["attempts"], 2, "{ctx}");
    assert!(fill["error"].is_null() && fill.get("cause").is_none(), "a completed step has no cause: {ctx}");
    assert_eq!(fill["result"], json!({"bytes": 512 << 10}), "{ctx}");
    let events = c.events("full-retry");
    let retrying = events_of(&events, "step.retrying", Some("fill"));
    assert_eq!(retrying.len(), 1, "{:?}", kinds(&events));
    let data = &retrying[0]["data"];
    assert_eq!((data["outcome"].clone(), data["delay_ms"].clone()), (json!("FAILED"), json!(1_000)), "{data:#}");
    assert_eq!((data["cause"]["kind"].clone(), data["cause"]["path"].clone()), (json!("NO_SPACE"), json!(run_dir)));
    assert!(str_of(&data["error"]).starts_with("ENOSPC on "), "{data:#}");
    assert_eq!(events_of(&events, "step.completed", Some("fill"))[0]["attempt"], 2);
    let starts = count(&log_lines(&c.path("log")), "fill:start:");
    assert_eq!(starts, 3, "one attempt of the first run, two of this one");
}
