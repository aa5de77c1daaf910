//! Bad workflows and bad run requests: exit 2, a clear message on stderr naming the file and
//! field, and nothing created (no registration, no snapshot, no run row, no run directory).

use serde_json::{Value, json};

use crate::support::*;

const HEADER: &str = "[workflow]\nname = \"bad\"\nversion = \"1.0.0\"\n\n";

/// A step table over the generic tool.
fn steps_toml(body: &str) -> String {
    format!("{HEADER}{}\n{body}", tool_toml("t", ""))
}

/// What must not change when a request is refused.
#[derive(Debug, PartialEq)]
struct Snapshot {
    workflows: Value,
    runs: Vec<Value>,
    registry: Vec<String>,
    run_dirs: Vec<String>,
}

fn state(c: &Cairn) -> Snapshot {
    Snapshot {
        workflows: c.json(&["workflow", "list"]).expect(0).json,
        runs: c.runs(),
        registry: c.entries("registry"),
        run_dirs: c.entries("runs"),
    }
}

#[track_caller]
fn refused(what: &str, out: Out, words: &[&str]) {
    assert_eq!(out.code, 2, "{what}: expected exit 2\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert_error_body(&out.json, what);
    for w in words {
        assert!(out.stderr.contains(w), "{what}: stderr lacks `{w}`:\n{}", out.stderr);
    }
}

/// (name, workflow.toml, files, words stderr must contain)
type WorkflowCase<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, Vec<&'a str>);

/// Invalid workflow folders are refused at `workflow add`, and nothing is registered.
#[test]
fn invalid_workflows_are_refused_at_registration() {
    let c = Cairn::new();
    let before = state(&c);
    let ok_step = "[[steps]]\nid = \"a\"\ntool = \"t\"\n";
    // (name, workflow.toml, files, words stderr must contain); a word `@LINE:text` stands for
    // `workflow.toml:N` where N is the line of the file holding `text`.
    let cases: Vec<WorkflowCase> = vec![
        (
            "malformed TOML",
            steps_toml("[[steps]]\nid = \"a\"\ntool = = \"t\"\n"),
            tool_files(),
            vec!["@LINE:tool = = "],
        ),
        (
            "unknown key in a step",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\ncolour = \"red\"\n"),
            tool_files(),
            vec!["@LINE:colour", "colour"],
        ),
        (
            "wrong type",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nmax_attempts = \"two\"\n"),
            tool_files(),
            vec!["@LINE:\"two\"", "two"],
        ),
        (
            "max_attempts out of range",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nmax_attempts = 0\n"),
            tool_files(),
            vec!["@LINE:max_attempts = 0", "`a`", "max_attempts"],
        ),
        (
            "a cycle",
            steps_toml(
                "[[steps]]\nid = \"a\"\ntool = \"t\"\nneeds = [\"b\"]\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n",
            ),
            tool_files(),
            vec!["workflow.toml", "a -> b -> a"],
        ),
        (
            "a self-dependency",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nneeds = [\"a\"]\n"),
            tool_files(),
            vec!["workflow.toml", "`a`", "needs"],
        ),
        (
            "a missing dependency",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nneeds = [\"ghost\"]\n"),
            tool_files(),
            vec!["workflow.toml", "ghost"],
        ),
        (
            "a duplicate step id",
            steps_toml(&format!("{ok_step}\n{ok_step}")),
            tool_files(),
            vec!["workflow.toml", "`a`"],
        ),
        (
            "unknown tool",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"nope\"\n"),
            tool_files(),
            vec!["@LINE:\"nope\"", "`a`", "unknown tool `nope`"],
        ),
        (
            "template referencing a non-ancestor",
            steps_toml(
                "[[steps]]\nid = \"a\"\ntool = \"t\"\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nargs = { x = \"${steps.a.result}\" }\n",
            ),
            tool_files(),
            vec!["workflow.toml", "`b`", "args", "not an ancestor"],
        ),
        (
            "template referencing an unknown step",
            steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nargs = { x = \"${steps.zz.result}\" }\n"),
            tool_files(),
            vec!["workflow.toml", "`a`", "zz"],
        ),
        (
            "a missing tool file",
            format!(
                "{HEADER}[tools.t]\ncommand = [\"python3\", \"tools/missing.py\"]\n\n[[steps]]\nid = \"a\"\ntool = \"t\"\n"
            ),
            tool_files(),
            vec!["workflow.toml", "tools.t.command", "tools/missing.py"],
        ),
        (
            "an invalid workflow name",
            format!("[workflow]\nname = \"Bad Name\"\nversion = \"1.0.0\"\n\n{}\n{ok_step}", tool_toml("t", "")),
            tool_files(),
            vec!["@LINE:Bad Name", "workflow.name"],
        ),
        (
            "a version that is not semver",
            format!("[workflow]\nname = \"bad\"\nversion = \"one\"\n\n{}\n{ok_step}", tool_toml("t", "")),
            tool_files(),
            vec!["@LINE:\"one\"", "workflow.version"],
        ),
        (
            "an unknown validator op",
            steps_toml(&format!(
                "{ok_step}\n[[validator.rules]]\nid = \"r\"\nstep = \"a\"\npointer = \"/x\"\nop = \"approx\"\nvalue = 1\nfinding = \"f\"\n"
            )),
            tool_files(),
            vec!["workflow.toml", "approx"],
        ),
        ("no workflow.toml", String::new(), vec![("tools/tool.py", TOOL_PY)], vec!["workflow.toml"]),
    ];
    for (i, (what, toml, files, words)) in cases.iter().enumerate() {
        let dir = c.path(&format!("bad-{i}"));
        write_workflow(&dir, toml, files);
        if toml.is_empty() {
            std::fs::remove_file(dir.join("workflow.toml")).unwrap();
        }
        let words: Vec<String> = words
            .iter()
            .map(|w| match w.strip_prefix("@LINE:") {
                Some(text) => {
                    let n = toml.lines().position(|l| l.contains(text)).expect(text) + 1;
                    format!("workflow.toml:{n}:")
                }
                None => w.to_string(),
            })
            .collect();
        let out = c.json(&["workflow", "add", dir.to_str().unwrap()]);
        refused(what, out, &words.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(state(&c), before, "{what}: a refused workflow must leave no trace");
        // The human form says the same.
        let out = c.cmd(&["workflow", "add", dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{what}");
        assert!(out.stdout.is_empty(), "{what}");
    }
    assert!(c.entries("registry").iter().all(|e| !e.starts_with(".tmp")), "no temporary snapshot is left");
}

/// Bad run requests are refused before anything is created.
#[test]
fn bad_run_requests_are_refused_and_create_nothing() {
    let c = Cairn::new();
    let toml = steps_toml(
        "[[steps]]\nid = \"greet\"\ntool = \"t\"\nargs = { who = \"${input.person.name}\", log = \"${input.log}\" }\n",
    )
    .replace("name = \"bad\"", "name = \"needs-input\"");
    c.add(&write_workflow(&c.path("needs-input"), &toml, &tool_files()));
    c.add(&example("1.1.0"));
    let log = c.path_str("log");
    let good = json!({"person": {"name": "ada"}, "log": log});
    let before = state(&c);

    // Binary garbage (deterministic pseudo-random bytes, not UTF-8).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let garbage: Vec<u8> = std::iter::once(0xff)
        .chain((0..4096).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        }))
        .collect();
    let garbage_file = c.path("garbage.bin");
    std::fs::write(&garbage_file, &garbage).unwrap();
    let not_json = c.path("not-json.json");
    std::fs::write(&not_json, "{\"person\": ").unwrap();
    let file_of = |v: &Value| c.input(v).display().to_string();
    let g = garbage_file.display().to_string();
    let nj = not_json.display().to_string();
    let missing_file = c.path_str("does-not-exist.json");
    let good_file = file_of(&good);
    let no_name = file_of(&json!({"person": {}, "log": log}));
    let empty = file_of(&json!({}));
    let big = |n: &str| {
        let p = c.path(&format!("big-{n}.json"));
        std::fs::write(&p, format!("{{\"person\": {{\"name\": \"ada\"}}, \"log\": {}, \"n\": {n}}}", json!(log)))
            .unwrap();
        p.display().to_string()
    };
    let above = big("9007199254740993"); // 2^53 + 1
    let negative = big("-9007199254740993");
    let beyond_u64 = big("1180591620717411303424"); // 2^70
    let nested = {
        let p = c.path("big-nested.json");
        std::fs::write(
            &p,
            format!(
                "{{\"person\": {{\"name\": \"ada\", \"id\": [1, 18446744073709551615]}}, \"log\": {}}}",
                json!(log)
            ),
        )
        .unwrap();
        p.display().to_string()
    };

    // (what, args, words stderr must contain)
    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("binary garbage input", vec!["run", "needs-input", "--input", &g], vec![&g, "UTF-8"]),
        ("input that is not JSON", vec!["run", "needs-input", "--input", &nj], vec![&nj, "JSON"]),
        ("a missing input file", vec!["run", "needs-input", "--input", &missing_file], vec![&missing_file]),
        (
            "input missing a templated field",
            vec!["run", "needs-input", "--input", &no_name],
            vec!["greet", "input.person.name", "name"],
        ),
        (
            "input failing the input schema",
            vec!["run", "release-validation@1.1.0", "--input", &empty],
            vec!["input schema", "input.schema.json", "manifest"],
        ),
        (
            "an invalid run id",
            vec!["run", "needs-input", "--input", &good_file, "--run-id", "a/b"],
            vec!["a/b", "run id"],
        ),
        ("a run id that is `..`", vec!["run", "needs-input", "--input", &good_file, "--run-id", ".."], vec!["run id"]),
        ("an empty run id", vec!["run", "needs-input", "--input", &good_file, "--run-id", ""], vec!["run id"]),
        (
            "unknown workflow",
            vec!["run", "no-such-workflow", "--input", &good_file],
            vec!["no-such-workflow", "not registered"],
        ),
        ("unknown version", vec!["run", "needs-input@9.9.9", "--input", &good_file], vec!["9.9.9", "not registered"]),
        ("an integer above 2^53", vec!["run", "needs-input", "--input", &above], vec!["9007199254740993", "2^53"]),
        ("an integer below -2^53", vec!["run", "needs-input", "--input", &negative], vec!["-9007199254740993", "2^53"]),
        ("a nested integer beyond 2^53", vec!["run", "needs-input", "--input", &nested], vec!["/person/id/1", "2^53"]),
        ("show of an unknown run", vec!["show", "nope"], vec!["nope"]),
        ("events of an unknown run", vec!["events", "nope"], vec!["nope"]),
        ("workflow show of an unknown workflow", vec!["workflow", "show", "nope"], vec!["nope"]),
        ("missing --input", vec!["run", "needs-input"], vec!["--input"]),
        // Last: beyond u64, serde_json reads the integer as a float.
        ("an integer beyond u64", vec!["run", "needs-input", "--input", &beyond_u64], vec!["/n", "2^53"]),
    ];
    for (what, args, words) in &cases {
        let out = c.json(args);
        refused(what, out, words);
        assert_eq!(state(&c), before, "{what}: nothing may be created");
    }
    assert!(log_lines(&c.path("log")).is_empty(), "no tool may have run");

    // The good input works, so the refusals above were about the input.
    let out = c.json(&["run", "needs-input", "--input", &good_file, "--run-id", "fine"]).expect(0);
    assert_eq!(out.json["status"], "READY");
    assert_eq!(c.runs().len(), 1);
    assert_eq!(c.entries("runs"), vec!["fine".to_string()]);
}

/// A list's bound is the engine's rule, so the CLI refuses what the API refuses (422
/// `invalid_field` there, exit 2 here), with the same words.
#[test]
fn a_list_limit_out_of_range_is_refused_by_the_cli_as_by_the_api() {
    let c = Cairn::new();
    for limit in ["0", "1001"] {
        let out = c.json(&["runs", "--limit", limit]);
        refused(&format!("cairn runs --limit {limit}"), out, &["limit must be between 1 and 1000"]);
    }
    let out = c.json(&["runs", "--limit", "1000"]).expect(0);
    assert_eq!(out.json["runs"], json!([]), "{}", out.stdout);
}

/// `cairn runs --status` lists by status as `GET /runs?status=` does, and refuses a status that
/// does not exist with the engine's words (exit 2, `invalid_field` there).
#[test]
fn runs_are_listed_by_status_on_the_cli_as_by_the_api() {
    let c = Cairn::new();
    let toml = steps_toml("[[steps]]\nid = \"a\"\ntool = \"t\"\nargs = { log = \"${input.log}\" }\n")
        .replace("name = \"bad\"", "name = \"fine\"");
    c.add(&write_workflow(&c.path("fine"), &toml, &tool_files()));
    c.run("fine", &json!({"log": c.path_str("log")}), &["--run-id", "done"]).expect(0);
    let ids = |status: &str| {
        let out = c.json(&["runs", "--status", status]).expect(0);
        out.json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("READY"), ["done"]);
    assert!(ids("RUNNING").is_empty());
    let out = c.json(&["runs", "--status", "DONE"]);
    refused(
        "cairn runs --status DONE",
        out,
        &["status: `DONE` is not a run status; expected one of: PENDING, RUNNING, READY"],
    );
}

/// `--json` holds on every path: a failure is the one object on stdout, the API's error body with
/// the engine's code (a refusal of the command line too), beside its sentence on stderr; an
/// environment that failed exits 5, apart from a usage error.
#[test]
fn a_failure_under_json_is_one_error_object_and_the_environment_has_its_own_exit_code() {
    let c = Cairn::new();
    let out = c.json(&["show", "nope"]).expect(2);
    assert_eq!(out.json["error"]["code"], "run_not_found", "{}", out.stdout);
    assert!(out.stderr.contains("run `nope` was not found"), "{}", out.stderr);
    assert_eq!(out.json["error"]["message"], out.stderr.trim().trim_start_matches("error: "), "the same words");

    // clap's refusal of the command line.
    let out = c.json(&["runs", "--limit", "many"]).expect(2);
    assert_eq!(out.json["error"]["code"], "usage", "{}", out.stdout);
    assert!(str_of(&out.json["error"]["message"]).contains("many"), "{}", out.stdout);

    // Without --json, stdout stays empty.
    let plain = c.cmd(&["show", "nope"]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(plain.stdout.is_empty(), "{}", String::from_utf8_lossy(&plain.stdout));

    // A target nothing answers at: the environment, exit 5, named as such.
    let keys = c.work.path().join("id_none");
    std::fs::write(&keys, "").unwrap();
    let known = c.work.path().join("known_none");
    std::fs::write(&known, "").unwrap();
    let added = c.add_target("closed", "root@127.0.0.1:1", &keys, &known, "/tmp", &[]);
    added.expect(0);
    let out = c.json(&["target", "probe", "closed"]).expect(5);
    assert_eq!(out.json["error"]["code"], "target_unreachable", "{}", out.stdout);
    assert!(out.stderr.contains("cannot reach"), "{}", out.stderr);
}

/// A reader that closes the pipe early (`cairn runs | head -0`, `cairn events RUN | head`): the
/// command ends as a Unix tool does, status 141 (SIGPIPE's), without a panic's message.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let c = Cairn::new();
    c.add(&example("1.1.0"));
    c.run("release-validation", &read_json(&example("inputs/ready.json")), &["--run-id", "P", "--in-process"])
        .expect(0);
    for args in [&["runs"][..], &["events", "P"], &["man"]] {
        let mut child = c
            .std_command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The read end closes before the command prints anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "cairn {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "cairn {args:?}: {stderr}");
    }
}
