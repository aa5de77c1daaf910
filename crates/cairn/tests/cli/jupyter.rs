//! `cairn verify` next to `jupyter nbconvert --to notebook --execute` on the edge cases of
//! Jupyter's execution model that the cases of `verify.rs` leave out: the same small notebook goes
//! through both, the verdicts must agree, and what Cairn recorded is compared with what nbconvert
//! kept.
//!
//! One test over a table, not one test a case: every run starts a kernel (about a second each, twice
//! a case). The cases share a state root, each under its own title, and no kernel outlives a case.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};

use crate::support::*;
use crate::verify::h::{self, Verdict, Verify};
use crate::verify::notebook_of;

/// One cell of a case's notebook.
enum Cell {
    Markdown(&'static str),
    Code(&'static str),
}

/// What both runs of a case left, for its check.
struct Seen<'a> {
    case: &'static str,
    /// Cairn's `--json` result.
    result: &'a Value,
    /// The notebook Cairn wrote: the pass, or the draft of a failure.
    ours: &'a Value,
    /// The notebook nbconvert wrote (it writes none when a cell fails).
    theirs: Option<&'a Value>,
    /// nbconvert's stderr, where it reports a failing cell.
    their_stderr: &'a str,
}

struct Case {
    name: &'static str,
    cells: &'static [Cell],
    passes: bool,
    /// Whether Cairn's notebook is re-run under nbconvert too (one case is enough to show the
    /// written notebook is executable; each re-run costs a kernel).
    reexecute: bool,
    check: fn(&Seen),
}

const HTML_LEN: usize = "<p></p>".len() + 1_000_000;
const NON_ASCII: &str = "naïve café — 東京 🚀";
const NON_ASCII_PROSE: &str = "# Prose: naïve café — 東京 🚀";
const NON_ASCII_CODE: &str = "café = 1\nprint('naïve café — 東京 🚀')\nassert café == 1";

const CASES: &[Case] = &[
    // nbclient fails on any SystemExit, whatever its code, and so does Cairn.
    Case {
        name: "sys.exit(1)",
        cells: &[Cell::Code("import sys\nsys.exit(1)")],
        passes: false,
        reexecute: false,
        check: exit_1,
    },
    // Traceback-looking text that is not an `error` reply: a swallowed exception's traceback, a
    // fake one on stderr, and a widget-view bundle (no widget manager behind it) naming an error.
    Case {
        name: "error-looking output",
        cells: &[Cell::Code(
            "import sys, traceback\nfrom IPython.display import display\n\
             try:\n    raise ValueError('swallowed')\nexcept ValueError:\n    traceback.print_exc()\n\
             sys.stderr.write('Traceback (most recent call last):\\n  File \"x\", line 1\\nRuntimeError: not raised\\n')\n\
             display({'application/vnd.jupyter.widget-view+json': {'model_id': 'no-such-model', 'version_major': 2, \
             'version_minor': 0}, 'text/plain': 'Traceback (most recent call last):\\nValueError: in a widget'}, raw=True)",
        )],
        passes: true,
        reexecute: false,
        check: error_looking_output,
    },
    // Children write to the kernel's file descriptors, not to `sys.stdout`: only the kernel's fd
    // capture puts their text in the cell.
    Case {
        name: "child processes",
        cells: &[Cell::Code(
            "import os, subprocess\nsubprocess.run(['echo', 'from child'], check=True)\n\
             os.system('echo from os.system')\nsubprocess.run('echo from child stderr >&2', shell=True, check=True)\n\
             print('from the kernel')",
        )],
        passes: true,
        reexecute: false,
        check: child_processes,
    },
    Case {
        name: "1 MB of HTML",
        cells: &[Cell::Code(
            "from IPython.display import HTML, display\ndisplay(HTML('<p>' + 'x'*1_000_000 + '</p>'))",
        )],
        passes: true,
        reexecute: false,
        check: one_mb_of_html,
    },
    Case {
        name: "non-ASCII text",
        cells: &[Cell::Markdown(NON_ASCII_PROSE), Cell::Code(NON_ASCII_CODE)],
        passes: true,
        // Where an encoding slip in Cairn's writer would stop another executor from reading it.
        reexecute: true,
        check: non_ascii_text,
    },
    Case {
        name: "no code cells",
        cells: &[Cell::Markdown("# Only prose\n\nNothing to run.")],
        passes: true,
        reexecute: false,
        check: no_code_cells,
    },
];

#[test]
fn edge_cases_get_the_verdict_nbconvert_gives_them() {
    let v = Verify::new();
    for (i, case) in CASES.iter().enumerate() {
        // The helpers' own assertions do not know the case; this line in the captured output does.
        eprintln!("case `{}`", case.name);
        let started = Instant::now();
        let nb = v.doc(&format!("case-{i}.ipynb"), &notebook(case.cells));
        let out = v.verify(&[&nb]);
        let out_dir = v.path(&format!("nbconvert-{i}"));
        let theirs = h::nbconvert(&nb, &out_dir, v.config.path());
        let their_stderr = String::from_utf8_lossy(&theirs.stderr);
        let name = case.name;

        let our_pass = out.verdict() == "passed";
        let their_pass = theirs.status.success();
        assert_eq!(
            our_pass, their_pass,
            "case `{name}`: cairn says {}, nbconvert exited {:?}\ncairn: {:#}\nnbconvert: {their_stderr}",
            out.json["verdict"], theirs.status, out.json
        );
        assert_eq!(
            our_pass,
            case.passes,
            "case `{name}`: both {} it: {:#}",
            if our_pass { "pass" } else { "fail" },
            out.json
        );

        let ours_path: PathBuf = if our_pass { out.notebook() } else { out.draft() };
        let ours = validate_notebook(&ours_path);
        let theirs_nb: Option<Value> = their_pass.then(|| {
            let text = std::fs::read_to_string(out_dir.join("reexecuted.ipynb")).unwrap();
            serde_json::from_str(&text).unwrap()
        });
        (case.check)(&Seen {
            case: name,
            result: &out.json,
            ours: &ours,
            theirs: theirs_nb.as_ref(),
            their_stderr: &their_stderr,
        });
        if case.reexecute {
            h::reexecutes(&v, &ours_path);
        }
        h::assert_no_kernel_left(&v);
        eprintln!("case `{name}` took {:?}", started.elapsed());
    }
}

/// A notebook of `cells`, as `notebook_of` makes it, with the markdown cells in their places.
fn notebook(cells: &[Cell]) -> String {
    let code: Vec<(&str, &[&str])> = cells
        .iter()
        .filter_map(|c| match c {
            Cell::Code(s) => Some((*s, &[][..])),
            Cell::Markdown(_) => None,
        })
        .collect();
    let mut nb: Value = serde_json::from_str(&notebook_of(&code, json!({}))).unwrap();
    let mut code_cells = nb["cells"].as_array().unwrap().clone().into_iter();
    let all: Vec<Value> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            Cell::Code(_) => code_cells.next().unwrap(),
            Cell::Markdown(s) => json!({"id": format!("m{i}"), "cell_type": "markdown", "metadata": {}, "source": s}),
        })
        .collect();
    nb["cells"] = Value::Array(all);
    nb.to_string()
}

/// The outputs of a notebook's only code cell.
#[track_caller]
fn only_outputs<'a>(case: &str, nb: &'a Value) -> &'a [Value] {
    let cells = h::doc_code_cells(nb);
    assert_eq!(cells.len(), 1, "case `{case}`: one code cell expected, not {}", cells.len());
    cells[0]["outputs"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A multiline string of a notebook (a list of lines or one string) as one string.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// The lines each stream (`stdout`, `stderr`) of a cell received, sorted: a child's output reaches
/// the kernel through its fd capture thread, so its order against the kernel's own prints is a race
/// in both executors.
fn stream_lines(cell: &Value) -> BTreeMap<String, Vec<String>> {
    let mut streams: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in cell["outputs"].as_array().into_iter().flatten().filter(|o| o["output_type"] == "stream") {
        let lines = streams.entry(o["name"].as_str().unwrap_or("").to_string()).or_default();
        lines.extend(text(&o["text"]).lines().map(str::to_string));
    }
    for lines in streams.values_mut() {
        lines.sort();
    }
    streams
}

#[track_caller]
fn passed_cells(s: &Seen, n: usize) {
    let statuses = h::statuses(s.result);
    assert_eq!(statuses, vec!["passed"; n], "case `{}`: {:#}", s.case, s.result);
    for c in s.result["cells"].as_array().unwrap() {
        assert!(c.get("error").is_none(), "case `{}`: a passed cell has no error: {c:#}", s.case);
    }
}

fn exit_1(s: &Seen) {
    assert_eq!(s.result["verdict"], "failed", "case `{}`: {:#}", s.case, s.result);
    assert_eq!(h::statuses(s.result), ["failed"], "case `{}`", s.case);
    let e = &s.result["cells"][0]["error"];
    assert_eq!(e["ename"], "SystemExit", "case `{}`: {:#}", s.case, s.result);
    assert_eq!(e["evalue"], "1", "case `{}`: {e:#}", s.case);
    assert!(s.their_stderr.contains("SystemExit"), "case `{}`: nbconvert failed otherwise: {}", s.case, s.their_stderr);
    let outs = only_outputs(s.case, s.ours);
    assert!(
        outs.iter().any(|o| o["output_type"] == "error" && o["ename"] == "SystemExit"),
        "case `{}`: the draft shows the failure: {outs:#?}",
        s.case
    );
}

fn error_looking_output(s: &Seen) {
    passed_cells(s, 1);
    let theirs = s.theirs.expect("nbconvert passed");
    for (who, nb) in [("cairn", s.ours), ("nbconvert", theirs)] {
        let outs = only_outputs(s.case, nb);
        assert!(
            outs.iter().all(|o| o["output_type"] != "error"),
            "case `{}`: {who} kept an error output: {outs:#?}",
            s.case
        );
        let widget = outs
            .iter()
            .find(|o| o["output_type"] == "display_data")
            .unwrap_or_else(|| panic!("case `{}`: {who} kept no display_data: {outs:#?}", s.case));
        assert_eq!(widget["data"]["application/vnd.jupyter.widget-view+json"]["model_id"], "no-such-model", "{who}");
        assert!(text(&widget["data"]["text/plain"]).contains("ValueError: in a widget"), "{who}: {widget:#}");
    }
    let ours = stream_lines(h::doc_code_cells(s.ours)[0]);
    let stderr = ours.get("stderr").map(Vec::as_slice).unwrap_or_default();
    for line in ["ValueError: swallowed", "RuntimeError: not raised"] {
        assert!(stderr.iter().any(|l| l == line), "case `{}`: cairn's stderr lacks `{line}`: {stderr:#?}", s.case);
    }
    // The swallowed traceback names a file per kernel (`/tmp/ipykernel_PID/…`): only its shape is
    // the same in both.
    let theirs = stream_lines(h::doc_code_cells(theirs)[0]);
    let shape = |m: &BTreeMap<String, Vec<String>>| m.get("stderr").map(Vec::len);
    assert_eq!(shape(&ours), shape(&theirs), "case `{}`: cairn {ours:#?}\nnbconvert {theirs:#?}", s.case);
}

fn child_processes(s: &Seen) {
    passed_cells(s, 1);
    let ours = stream_lines(h::doc_code_cells(s.ours)[0]);
    let theirs = stream_lines(h::doc_code_cells(s.theirs.expect("nbconvert passed"))[0]);
    assert_eq!(ours, theirs, "case `{}`: the cell kept other streams than under nbconvert", s.case);
    let want = BTreeMap::from([
        ("stderr".to_string(), vec!["from child stderr".to_string()]),
        ("stdout".to_string(), ["from child", "from os.system", "from the kernel"].map(str::to_string).to_vec()),
    ]);
    assert_eq!(ours, want, "case `{}`: a child's output belongs to the cell that ran it", s.case);
}

fn one_mb_of_html(s: &Seen) {
    passed_cells(s, 1);
    let html = |who: &str, nb: &Value| -> String {
        let outs = only_outputs(s.case, nb);
        let shown: Vec<&Value> = outs.iter().filter(|o| o["output_type"] == "display_data").collect();
        assert_eq!(shown.len(), 1, "case `{}`: {who} kept {} display_data outputs", s.case, shown.len());
        text(&shown[0]["data"]["text/html"])
    };
    let ours = html("cairn", s.ours);
    assert_eq!(ours.len(), HTML_LEN, "case `{}`: cairn kept {} bytes of the HTML", s.case, ours.len());
    assert!(ours.starts_with("<p>xxx") && ours.ends_with("xxx</p>"), "case `{}`: the HTML was altered", s.case);
    // Not `assert_eq!`: a mismatch would print two megabytes.
    assert!(ours == html("nbconvert", s.theirs.expect("nbconvert passed")), "case `{}`: the HTML differs", s.case);
}

fn non_ascii_text(s: &Seen) {
    passed_cells(s, 1);
    let want = format!("{NON_ASCII}\n");
    let theirs = s.theirs.expect("nbconvert passed");
    for (who, nb) in [("cairn", s.ours), ("nbconvert", theirs)] {
        let cells = h::doc_code_cells(nb);
        assert_eq!(h::stream_text(cells[0]), want, "case `{}`: {who}'s output", s.case);
        assert_eq!(h::source(cells[0]), NON_ASCII_CODE, "case `{}`: {who}'s source", s.case);
    }
    let kept = s.ours["cells"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["cell_type"] == "markdown" && h::source(c) == NON_ASCII_PROSE);
    assert!(kept, "case `{}`: cairn's notebook lost the prose `{NON_ASCII_PROSE}`: {:#}", s.case, s.ours);
}

fn no_code_cells(s: &Seen) {
    assert_eq!(s.result["cells"], json!([]), "case `{}`: {:#}", s.case, s.result);
    assert!(h::doc_code_cells(s.ours).is_empty(), "case `{}`: {:#}", s.case, s.ours);
    assert!(h::doc_code_cells(s.theirs.expect("nbconvert passed")).is_empty());
    let prose = |nb: &Value| nb["cells"].as_array().unwrap().iter().any(|c| h::source(c).contains("Nothing to run."));
    assert!(prose(s.ours), "case `{}`: cairn's notebook lost the prose: {:#}", s.case, s.ours);
}
