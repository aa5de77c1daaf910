//! Boundary tests of `cairn verify`: the real binary, a real ipykernel (the test venv that
//! `scripts/test.sh` creates, found through `CAIRN_TEST_VENV`), one private `CAIRN_HOME` per test.
//!
//! The contract under test (docs/src/design.md, "Verification" and "The CLI contract"):
//! `--json` prints one object `{verdict, cells:[{index, status, duration_ms}], notebook?, draft?,
//! error, verification_id, title}`; exit 0 `passed`, 1 `failed`/`died`/`timed_out`/`interrupted`,
//! 2 an input error (nothing created), 4 the kernel slot is taken under `--no-wait`. A pass is kept
//! under `$CAIRN_HOME/workflows/*.ipynb`, a failure as `workflows/drafts/<slug>.md` and `.ipynb`.
//! After every case no process of the scratch kernel survives (see [`h::assert_no_kernel_left`]).
//! Produced notebooks are checked with the venv's `nbformat.validate`, and passed ones re-run under
//! `jupyter nbconvert --to notebook --execute`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use h::{Verdict, Verify, assert_no_kernel_left, nbconvert, statuses};

use crate::support::*;

/// Test helpers, private to this file.
pub(crate) mod h {
    use std::ffi::OsStr;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Output, Stdio};
    use std::time::{Duration, Instant};

    use serde_json::Value;
    use tempfile::TempDir;

    use crate::support::*;

    /// How long an interrupted cell has to end before its kernel is killed (the engine's grace).
    pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

    /// What a `cairn verify --json` result says.
    pub trait Verdict {
        fn verdict(&self) -> &str;
        fn notebook(&self) -> PathBuf;
        fn draft(&self) -> PathBuf;
    }

    impl Verdict for Out {
        fn verdict(&self) -> &str {
            self.json["verdict"].as_str().unwrap_or("")
        }

        #[track_caller]
        fn notebook(&self) -> PathBuf {
            PathBuf::from(self.json["notebook"].as_str().unwrap_or_else(|| panic!("no notebook in {:#}", self.json)))
        }

        #[track_caller]
        fn draft(&self) -> PathBuf {
            PathBuf::from(self.json["draft"].as_str().unwrap_or_else(|| panic!("no draft in {:#}", self.json)))
        }
    }

    /// Checks the `--json` contract of a verification result, and that the exit code matches it.
    #[track_caller]
    pub fn check_contract(out: &Out) {
        let v = &out.json;
        if out.code == 2 || out.code == 4 {
            assert!(v.is_null() || v.is_object(), "exit {} with stdout {}", out.code, out.stdout);
            return;
        }
        for key in ["verdict", "cells", "error", "verification_id", "title"] {
            assert!(v.get(key).is_some(), "no `{key}` in {v:#}");
        }
        let verdict = out.verdict();
        let expected_code = match verdict {
            "passed" => 0,
            "failed" | "died" | "timed_out" | "interrupted" => 1,
            other => panic!("unknown verdict `{other}` in {v:#}"),
        };
        assert_eq!(out.code, expected_code, "verdict {verdict} must exit {expected_code}\n{}", out.stderr);
        for (i, c) in v["cells"].as_array().unwrap().iter().enumerate() {
            assert_eq!(c["index"], i, "cells are listed in order: {v:#}");
            assert!(c["duration_ms"].is_u64(), "duration_ms is a number: {c}");
            assert!(
                ["passed", "failed", "died", "timed_out", "interrupted", "skipped"]
                    .contains(&c["status"].as_str().unwrap()),
                "unknown cell status in {c}"
            );
        }
        if verdict == "passed" {
            assert!(v["error"].is_null(), "a pass has no error: {v:#}");
            assert!(v.get("draft").is_none(), "a pass has no draft: {v:#}");
            let nb = PathBuf::from(v["notebook"].as_str().expect("a pass names its notebook"));
            assert!(nb.is_file(), "the notebook {} does not exist", nb.display());
        } else {
            assert!(v["error"].is_string(), "a failure says why: {v:#}");
            assert!(v.get("notebook").is_none(), "a failure has no notebook: {v:#}");
            let draft = PathBuf::from(v["draft"].as_str().expect("a failure names its draft"));
            assert!(draft.is_file(), "the draft {} does not exist", draft.display());
        }
    }

    /// A private state root, a scratch directory and an empty `CAIRN_CONFIG` for one test; every
    /// command gets the venv's python.
    pub struct Verify {
        pub c: Cairn,
        pub config: TempDir,
    }

    impl Verify {
        /// A daemon a command starts here keeps no spare kernel: these tests count the kernels a
        /// verification leaves (the spare's own tests use [`Verify::with_spare`]).
        pub fn new() -> Verify {
            Verify::build(false)
        }

        /// As a user has it: a daemon keeps a spare kernel booted.
        pub fn with_spare() -> Verify {
            Verify::build(true)
        }

        fn build(spare: bool) -> Verify {
            let config = tempfile::Builder::new().prefix("cairn-vcfg-").tempdir().unwrap();
            let mut c = Cairn::new().with_env("CAIRN_PYTHON", python()).with_env("CAIRN_CONFIG", config.path());
            if !spare {
                c = c.with_env("CAIRN_NO_SPARE_KERNEL", "1");
            }
            Verify { c, config }
        }

        pub fn home(&self) -> &Path {
            self.c.home.path()
        }

        pub fn path(&self, rel: &str) -> PathBuf {
            self.c.path(rel)
        }

        /// Writes a document into the scratch directory; returns its absolute path.
        pub fn doc(&self, name: &str, text: &str) -> PathBuf {
            let p = self.path(name);
            std::fs::write(&p, text).unwrap();
            p
        }

        /// `cairn verify ARGS --json`, its stdio left to the caller.
        fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
            let mut c = self.c.std_command(&["verify"]);
            c.args(args).arg("--json");
            c
        }

        /// Runs `cairn verify ARGS --json` and checks the contract.
        #[track_caller]
        pub fn verify<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
            self.verify_with(args, |_| {})
        }

        #[track_caller]
        pub fn verify_with<S: AsRef<OsStr>>(&self, args: &[S], tweak: impl FnOnce(&mut Command)) -> Out {
            let mut c = self.command(args);
            tweak(&mut c);
            let started = Instant::now();
            let out = assert_cmd::Command::from_std(c).timeout(CMD_TIMEOUT).output().unwrap();
            let out = to_out(out, started.elapsed());
            check_contract(&out);
            out
        }

        /// Starts `cairn verify ARGS --json` in the background.
        pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Child {
            self.command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        }

        /// Waits (bounded) until a scratch kernel's runtime directory exists under the state root:
        /// the verification holds the kernel slot from then until it ends.
        #[track_caller]
        pub fn wait_for_kernel_dir(&self, timeout: Duration) {
            let dir = self.home().join("kernels");
            let deadline = Instant::now() + timeout;
            loop {
                if std::fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(false) {
                    return;
                }
                assert!(Instant::now() < deadline, "no kernel started under {} in {timeout:?}", dir.display());
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        /// Entries of a directory under the state root (sorted; empty when it does not exist).
        pub fn entries(&self, rel: &str) -> Vec<String> {
            self.c.entries(rel)
        }

        /// Passed notebooks under `workflows/`.
        pub fn passes(&self) -> Vec<String> {
            self.entries("workflows").into_iter().filter(|n| n.ends_with(".ipynb")).collect()
        }

        /// Rows in the store's `verifications` table (0 when there is no database or table yet).
        pub fn verification_rows(&self) -> i64 {
            let db = self.home().join("cairn.db");
            if !db.exists() {
                return 0;
            }
            let script = "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1])\n\
                 t = c.execute(\"select count(*) from sqlite_master where name = 'verifications'\").fetchone()[0]\n\
                 print(c.execute('select count(*) from verifications').fetchone()[0] if t else 0)\n";
            let out = Command::new(python()).arg("-c").arg(script).arg(&db).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        }

        /// An input error creates nothing: no notebook, draft or kernel directory, no record.
        #[track_caller]
        pub fn assert_nothing_created(&self) {
            assert!(self.entries("workflows").is_empty(), "workflows/ holds {:?}", self.entries("workflows"));
            assert!(self.entries("kernels").is_empty(), "kernels/ holds {:?}", self.entries("kernels"));
            assert_eq!(self.verification_rows(), 0, "an input error recorded a verification");
        }
    }

    impl Drop for Verify {
        /// A failing test must not leak kernels into the machine: kill what is left of ours.
        fn drop(&mut self) {
            kill_kernels(self.home());
        }
    }

    /// What a finished `cairn verify --json` printed, the `--json` contract checked.
    #[track_caller]
    pub fn to_out(out: Output, elapsed: Duration) -> Out {
        Out::of_json(out, "verify", elapsed)
    }

    /// No process of a scratch kernel of this state root is alive. `cairn verify` kills its
    /// kernel's whole group and waits for it before it returns; a short poll only absorbs the
    /// scheduler.
    #[track_caller]
    pub fn assert_no_kernel_left(v: &Verify) {
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let left = kernel_processes(v.home());
            if left.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let list: Vec<String> = left.iter().map(|p| describe_pid(*p)).collect();
                panic!("kernel processes survived the verification:\n{}", list.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The cell statuses of a verification result.
    pub fn statuses(v: &Value) -> Vec<String> {
        v["cells"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap().to_string()).collect()
    }

    /// `jupyter nbconvert --to notebook --execute NB` from the venv, with the venv's kernelspec,
    /// `CAIRN_CONFIG` set to `config` and nothing of Cairn in the environment.
    pub fn nbconvert(nb: &Path, out_dir: &Path, config: &Path) -> Output {
        let venv = venv();
        let runtime = out_dir.join("jupyter-runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        let mut c = Command::new(venv.join("bin/jupyter"));
        c.args(["nbconvert", "--to", "notebook", "--execute", "--ExecutePreprocessor.timeout=60", "--output-dir"])
            .arg(out_dir)
            .arg("--output")
            .arg("reexecuted")
            .arg(nb)
            .env_remove("CAIRN_HOME")
            .env_remove("CAIRN_PYTHON")
            .env("CAIRN_CONFIG", config)
            .env("JUPYTER_PATH", venv.join("share/jupyter"))
            .env("JUPYTER_RUNTIME_DIR", &runtime)
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .stdin(Stdio::null());
        assert_cmd::Command::from_std(c).timeout(CMD_TIMEOUT).output().unwrap()
    }

    /// Re-runs a passed notebook under nbconvert (with an empty config) and expects success.
    #[track_caller]
    pub fn reexecutes(v: &Verify, nb: &Path) {
        let out_dir = v.path("nbconvert");
        let out = nbconvert(nb, &out_dir, v.config.path());
        assert!(
            out.status.success(),
            "nbconvert --execute failed on {}:\n{}",
            nb.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out_dir.join("reexecuted.ipynb").is_file());
    }

    /// The text of a cell's stream outputs.
    pub fn stream_text(cell: &Value) -> String {
        cell["outputs"]
            .as_array()
            .map(|outs| {
                outs.iter()
                    .filter(|o| o["output_type"] == "stream")
                    .map(|o| match &o["text"] {
                        Value::String(s) => s.clone(),
                        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                        _ => String::new(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A cell's `source` as one string.
    pub fn source(cell: &Value) -> String {
        match &cell["source"] {
            Value::String(s) => s.clone(),
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => String::new(),
        }
    }

    /// The code cells of a produced notebook that come from the document (not Cairn's bootstrap).
    pub fn doc_code_cells(nb: &Value) -> Vec<&Value> {
        nb["cells"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["cell_type"] == "code" && c["metadata"]["cairn"]["role"] != "bootstrap")
            .collect()
    }
}

const TWO_CELLS: &str = "# Sum\n\nSome *prose*, kept byte for byte.\n\n```python\nx = 21\n```\n\nMore prose.\n\n```python\nprint(x * 2)\n```\n";

// ------------------------------------------------------------------------------------------------
// pass

#[test]
fn a_passing_document_is_kept_as_a_valid_notebook_that_reexecutes() {
    let v = Verify::new();
    let doc = v.doc("sum.md", TWO_CELLS);
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(out.verdict(), "passed");
    assert_eq!(statuses(&out.json), ["passed", "passed"]);
    assert_eq!(out.json["title"], "sum");
    assert!(out.json["verification_id"].as_str().is_some_and(|s| !s.is_empty()));

    let nb_path = out.notebook();
    assert_eq!(nb_path.parent().unwrap(), v.home().join("workflows"), "a pass lives under $CAIRN_HOME/workflows/");
    assert_eq!(nb_path.extension().unwrap(), "ipynb");
    assert_eq!(v.passes().len(), 1);
    assert!(v.entries("workflows/drafts").is_empty(), "a pass writes no draft");

    let nb = validate_notebook(&nb_path);
    assert_eq!((nb["nbformat"].as_i64(), nb["nbformat_minor"].as_i64()), (Some(4), Some(5)));
    let cells = nb["cells"].as_array().unwrap();
    assert_eq!(cells[0]["cell_type"], "markdown", "the provenance cell comes first");
    let prov = h::source(&cells[0]);
    assert!(prov.contains(out.json["document_sha256"].as_str().unwrap_or("")), "provenance states the hash");
    // Prose byte for byte, outputs from the run.
    assert!(
        cells
            .iter()
            .any(|c| c["cell_type"] == "markdown" && h::source(c).contains("Some *prose*, kept byte for byte."))
    );
    let code = h::doc_code_cells(&nb);
    assert_eq!(code.len(), 2);
    assert_eq!(h::stream_text(code[1]), "42\n");
    h::reexecutes(&v, &nb_path);
    assert_no_kernel_left(&v);
}

#[test]
fn nothing_is_pre_bound_and_cairn_state_does_not_leak_into_the_kernel() {
    let v = Verify::new();
    let doc = v.doc(
        "bare.md",
        "```python\nimport os\nnames = sorted(n for n in globals() if not n.startswith('_'))\n\
         assert set(names) <= {'In', 'Out', 'exit', 'quit', 'get_ipython', 'open', 'os'}, names\n\
         assert 'CAIRN_HOME' not in os.environ and 'CAIRN_PYTHON' not in os.environ\n```\n",
    );
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json), ["passed"], "{}", out.json["error"]);
    assert_no_kernel_left(&v);
}

#[test]
fn a_relative_document_path_verifies_from_the_current_directory() {
    // `cairn verify doc.md` in the directory that holds it: the most common invocation.
    let v = Verify::new();
    v.doc("rel.md", TWO_CELLS);
    let out = v.verify(&["rel.md"]);
    assert_eq!(out.code, 0, "`cairn verify rel.md` (cwd = its directory) must pass\nstderr: {}", out.stderr);
    assert_eq!(statuses(&out.json), ["passed", "passed"]);
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// failures

#[test]
fn an_error_in_the_middle_fails_skips_the_rest_and_writes_a_draft() {
    let v = Verify::new();
    let doc = v.doc(
        "mid.md",
        "# Mid\n\n```python\nx = 1\n```\n\n```python\nraise ValueError('boom')\n```\n\n```python\nopen('after.txt', 'w').write('ran')\n```\n",
    );
    let out = v.verify(&[&doc]).expect(1);
    assert_eq!(out.verdict(), "failed");
    assert_eq!(statuses(&out.json), ["passed", "failed", "skipped"]);
    assert!(out.json["error"].as_str().unwrap().contains("ValueError"), "{}", out.json["error"]);
    assert!(!v.path("after.txt").exists(), "a skipped cell was executed");

    let drafts = v.home().join("workflows/drafts");
    assert_eq!(out.draft(), drafts.join("mid.md"));
    assert!(drafts.join("mid.ipynb").is_file(), "the failed notebook sits beside the draft");
    assert!(v.passes().is_empty(), "a failure writes no pass");
    // The draft is the document, editable and verifiable.
    let md = std::fs::read_to_string(out.draft()).unwrap();
    assert!(md.contains("raise ValueError('boom')") && md.contains("x = 1"), "{md}");

    let nb = validate_notebook(&drafts.join("mid.ipynb"));
    let code = h::doc_code_cells(&nb);
    assert_eq!(code[2]["metadata"]["cairn"]["status"], "skipped");
    assert!(
        code[1]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["output_type"] == "error" && o["ename"] == "ValueError")
    );
    assert_no_kernel_left(&v);
}

#[test]
fn a_kernel_killed_by_sigkill_is_died_and_its_group_is_gone() {
    let v = Verify::new();
    // The kernel also starts a child in its process group; it must not survive either.
    let doc = v.doc(
        "kill.md",
        "```python\nimport subprocess\nchild = subprocess.Popen(['sleep', '30'])\n```\n\n\
         ```python\nimport os; os.kill(os.getpid(), 9)\n```\n\n```python\ny = 2\n```\n",
    );
    let out = v.verify(&[&doc]).expect(1);
    assert_eq!(out.verdict(), "died");
    assert_eq!(statuses(&out.json), ["passed", "died", "skipped"]);
    assert!(out.json["error"].as_str().unwrap().contains('9'), "the signal is recorded: {}", out.json["error"]);
    let death_ms = out.json["cells"][1]["duration_ms"].as_u64().unwrap();
    assert!(death_ms < 2000, "SIGKILL → died took {death_ms} ms");
    validate_notebook(&v.home().join("workflows/drafts/kill.ipynb"));
    assert_no_kernel_left(&v);
}

#[test]
fn a_cell_over_the_memory_limit_does_not_pass() {
    // Observed: RLIMIT_AS makes the 2 GB allocation raise MemoryError, so the verdict is `failed`
    // (not `died`); either is accepted here, a pass is not.
    let v = Verify::new();
    let doc = v.doc(
        "mem.md",
        "```python\nb = bytearray(2 * 10**9)\nb[::4096] = b'\\x01' * len(range(0, len(b), 4096))\n```\n\n```python\nprint('unreachable')\n```\n",
    );
    let out = v.verify(&[doc.to_str().unwrap(), "--memory-limit", "400000000"]).expect(1);
    let verdict = out.verdict().to_string();
    assert!(verdict == "failed" || verdict == "died", "verdict {verdict}: {:#}", out.json);
    assert_eq!(statuses(&out.json), [verdict.as_str(), "skipped"]);
    if verdict == "failed" {
        assert!(out.json["error"].as_str().unwrap().contains("MemoryError"), "{}", out.json["error"]);
    }
    validate_notebook(&out.draft().with_extension("ipynb"));
    assert_no_kernel_left(&v);
}

#[test]
fn a_cell_that_ignores_sigint_times_out_and_its_kernel_is_killed() {
    let v = Verify::new();
    let doc = v.doc(
        "stuck.md",
        "```python\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n```\n\n```python\nz = 1\n```\n",
    );
    let out = v.verify(&[doc.to_str().unwrap(), "--timeout", "1"]).expect(1);
    assert_eq!(out.verdict(), "timed_out");
    assert_eq!(statuses(&out.json), ["timed_out", "skipped"]);
    assert!(out.elapsed < Duration::from_secs(10), "a 1 s timeout took {:?} in all", out.elapsed);
    validate_notebook(&v.home().join("workflows/drafts/stuck.ipynb"));
    assert_no_kernel_left(&v);
}

#[test]
fn input_fails_fast_instead_of_hanging() {
    let v = Verify::new();
    let doc = v.doc("ask.md", "```python\nname = input('name? ')\n```\n\n```python\nprint(name)\n```\n");
    let out = v.verify(&[&doc]).expect(1);
    assert_eq!(out.verdict(), "failed");
    assert_eq!(statuses(&out.json), ["failed", "skipped"]);
    assert!(out.elapsed < Duration::from_secs(10), "input() took {:?}", out.elapsed);
    assert!(out.json["cells"][0]["duration_ms"].as_u64().unwrap() < 5000);
    validate_notebook(&v.home().join("workflows/drafts/ask.ipynb"));
    assert_no_kernel_left(&v);
}

#[test]
fn ctrl_c_during_a_cell_interrupts_and_kills_the_kernel() {
    let v = Verify::new();
    // The cell says when it runs (a file), so the signal lands while it runs, not during start-up.
    let doc = v.doc(
        "long.md",
        "```python\nimport time\nopen('running', 'w').close()\ntime.sleep(20)\n```\n\n```python\nx = 1\n```\n",
    );
    let child = v.spawn(&[&doc]);
    let marker = v.path("running");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the cell never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The control for the survivor scan: it sees the live kernel.
    assert!(!kernel_processes(v.home()).is_empty(), "the /proc scan does not see the running kernel");
    let sent = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = h::to_out(child.wait_with_output().unwrap(), sent.elapsed());
    h::check_contract(&out);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(out.verdict(), "interrupted");
    assert_eq!(statuses(&out.json), ["interrupted", "skipped"]);
    assert!(out.elapsed < Duration::from_secs(5), "Ctrl-C took {:?} to end the verification", out.elapsed);
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// outputs and cell kinds

#[test]
fn a_cell_printing_50_mb_passes_with_a_bounded_notebook() {
    let v = Verify::new();
    let doc = v.doc(
        "loud.md",
        "```python\nimport sys\nchunk = 'x' * (1 << 20)\nfor _ in range(50):\n    sys.stdout.write(chunk)\nsys.stdout.flush()\n```\n\n```python\nprint('after')\n```\n",
    );
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json), ["passed", "passed"]);
    let nb_path = out.notebook();
    let size = std::fs::metadata(&nb_path).unwrap().len();
    assert!(size < 20 * 1024 * 1024, "the notebook is {size} bytes");
    let text = std::fs::read_to_string(&nb_path).unwrap();
    assert!(text.contains("output truncated by cairn"), "no visible truncation marker");
    let nb = validate_notebook(&nb_path);
    assert_eq!(h::stream_text(h::doc_code_cells(&nb)[1]), "after\n");
    h::reexecutes(&v, &nb_path);
    assert_no_kernel_left(&v);
}

#[test]
fn many_large_outputs_keep_the_whole_notebook_bounded() {
    // Each cell stays under the per-cell cap, but ten of them would make an 80 MB notebook: the
    // whole notebook is capped too (issue 4: "each output and the whole notebook size-capped").
    let v = Verify::new();
    let cell = "```python\nfrom IPython.display import display, Markdown\nfor i in range(12):\n    display(Markdown(str(i) + 'x' * 10**6))\n```\n\n";
    let doc = v.doc("many.md", &cell.repeat(10));
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json).len(), 10);
    let size = std::fs::metadata(out.notebook()).unwrap().len();
    assert!(size < 20 * 1024 * 1024, "the notebook of 10 cells with 12 MB of output each is {size} bytes");
    assert_no_kernel_left(&v);
}

#[test]
fn a_bash_cell_runs_and_its_output_is_kept() {
    let v = Verify::new();
    let doc = v.doc("sh.md", "```python\n%%bash\necho hello-from-bash\n```\n");
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json), ["passed"]);
    let nb = validate_notebook(&out.notebook());
    let code = h::doc_code_cells(&nb);
    assert_eq!(h::stream_text(code[0]), "hello-from-bash\n");
    h::reexecutes(&v, &out.notebook());
    assert_no_kernel_left(&v);
}

#[test]
fn a_document_without_code_passes_with_zero_cells() {
    let v = Verify::new();
    let doc = v.doc("prose.md", "# Only prose\n\n```bash\necho a bash fence is prose\n```\n");
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(out.json["cells"], serde_json::json!([]));
    let nb = validate_notebook(&out.notebook());
    assert!(h::doc_code_cells(&nb).is_empty());
    h::reexecutes(&v, &out.notebook());
    assert_no_kernel_left(&v);
}

#[test]
fn myst_code_cells_are_code() {
    let v = Verify::new();
    let doc = v.doc("myst.md", "```{code-cell} python\n:tags: [keep]\nprint('myst')\n```\n");
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json), ["passed"]);
    let nb = validate_notebook(&out.notebook());
    assert_eq!(h::stream_text(h::doc_code_cells(&nb)[0]), "myst\n");
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// input errors (exit 2, nothing created)

#[test]
fn an_unclosed_fence_is_an_input_error_naming_file_and_line() {
    let v = Verify::new();
    let doc = v.doc("open.md", "# T\n\ntext\n\n```python\nx = 1\nmore\n");
    let out = v.verify(&[&doc]).expect(2);
    assert!(out.stdout.trim().is_empty() || out.json.is_object());
    assert!(out.stderr.contains(&format!("{}:5", doc.display())), "stderr must name file:line: {}", out.stderr);
    v.assert_nothing_created();
    assert_no_kernel_left(&v);
}

#[test]
fn a_corrupt_notebook_is_an_input_error() {
    let v = Verify::new();
    let doc = v.doc("broken.ipynb", "{\"nbformat\": 4, \"cells\": [");
    let out = v.verify(&[&doc]).expect(2);
    assert!(out.stderr.contains("broken.ipynb"), "stderr must name the file: {}", out.stderr);
    v.assert_nothing_created();
    assert_no_kernel_left(&v);
}

#[test]
fn a_missing_interpreter_is_an_input_error() {
    let v = Verify::new();
    let doc = v.doc("sum.md", TWO_CELLS);
    let out = v.verify_with(&[&doc], |c| {
        c.env("CAIRN_PYTHON", "/nonexistent/bin/python");
    });
    let out = out.expect(2);
    assert!(out.stderr.contains("/nonexistent/bin/python"), "{}", out.stderr);
    v.assert_nothing_created();
}

#[test]
fn an_nbformat_4_4_notebook_without_ids_passes_and_comes_out_4_5_with_ids() {
    let v = Verify::new();
    let doc = v.doc(
        "old.ipynb",
        r##"{"nbformat": 4, "nbformat_minor": 4,
 "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
 "cells": [
  {"cell_type": "markdown", "metadata": {}, "source": ["# Old notebook\n", "prose"]},
  {"cell_type": "code", "metadata": {}, "execution_count": null, "outputs": [], "source": ["a = 20\n", "a + 1"]},
  {"cell_type": "code", "metadata": {}, "execution_count": null, "outputs": [], "source": "print(a * 2)"}
 ]}"##,
    );
    let out = v.verify(&[&doc]).expect(0);
    assert_eq!(statuses(&out.json), ["passed", "passed"]);
    let nb = validate_notebook(&out.notebook());
    assert_eq!((nb["nbformat"].as_i64(), nb["nbformat_minor"].as_i64()), (Some(4), Some(5)));
    let ids: Vec<&str> =
        nb["cells"].as_array().unwrap().iter().map(|c| c["id"].as_str().expect("every cell has an id")).collect();
    let unique: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "cell ids are unique: {ids:?}");
    let code = h::doc_code_cells(&nb);
    assert_eq!(code[0]["outputs"][0]["data"]["text/plain"], "21");
    assert_eq!(h::stream_text(code[1]), "40\n");
    h::reexecutes(&v, &out.notebook());
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// plugins

#[test]
fn a_plugin_binds_at_verification_and_its_absence_fails_where_it_is_used() {
    let v = Verify::new();
    let cfg = v.path("cfg");
    std::fs::create_dir_all(cfg.join("kernel")).unwrap();
    std::fs::write(cfg.join("kernel/helpers.py"), "def double(x): return 2*x\n").unwrap();
    let doc = v.doc(
        "plug.md",
        "```python\nfirst = 1\n```\n\n```python\nanswer = double(21)\nassert answer == 42\nprint(answer)\n```\n",
    );
    let out = v
        .verify_with(&[&doc], |c| {
            c.env("CAIRN_CONFIG", &cfg);
        })
        .expect(0);
    assert_eq!(statuses(&out.json), ["passed", "passed"]);
    let nb_path = out.notebook();
    let nb = validate_notebook(&nb_path);
    let first = &nb["cells"][0];
    assert_eq!(first["cell_type"], "markdown", "the provenance cell is first");
    assert!(h::source(first).contains("helpers.py"), "the provenance lists the plugin:\n{}", h::source(first));

    // The reader has no such plugin: the notebook re-runs, fails open, and fails at `double`.
    let empty = v.path("empty-config");
    std::fs::create_dir_all(&empty).unwrap();
    let rerun = nbconvert(&nb_path, &v.path("nbc-empty"), &empty);
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(!rerun.status.success(), "the plugin-less rerun must fail at the cell using it");
    assert!(err.contains("NameError") && err.contains("double"), "{err}");
    assert!(err.contains("answer = double(21)"), "the failing cell is the one using the plugin:\n{err}");

    // With the plugin present the reader re-runs it cleanly.
    let ok = nbconvert(&nb_path, &v.path("nbc-plugin"), &cfg);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// drafts

const FAILING: &str =
    "# Draft\n\n```python\nx = 1\n```\n\n```python\nraise RuntimeError('fix me')\n```\n\n```python\nprint(x)\n```\n";

#[test]
fn a_retry_by_title_verifies_the_edited_draft() {
    let v = Verify::new();
    let doc = v.doc("orig.md", FAILING);
    let out = v.verify(&[doc.to_str().unwrap(), "--title", "T"]).expect(1);
    let draft = out.draft();
    assert_eq!(draft, v.home().join("workflows/drafts/t.md"));
    let text = std::fs::read_to_string(&draft).unwrap();
    assert!(text.contains("raise RuntimeError('fix me')"), "{text}");
    std::fs::write(&draft, text.replace("raise RuntimeError('fix me')", "y = x + 1")).unwrap();

    let retry = v.verify(&["--title", "T"]).expect(0);
    assert_eq!(retry.verdict(), "passed");
    assert_eq!(statuses(&retry.json), ["passed", "passed", "passed"]);
    assert_eq!(retry.json["title"], "T");
    validate_notebook(&retry.notebook());
    h::reexecutes(&v, &retry.notebook());
    assert_no_kernel_left(&v);
}

#[test]
fn a_retry_by_title_without_a_draft_is_an_input_error() {
    let v = Verify::new();
    let out = v.verify(&["--title", "never-failed"]).expect(2);
    assert!(out.stderr.contains("never-failed"), "{}", out.stderr);
    v.assert_nothing_created();
}

#[test]
fn an_edited_draft_is_preserved_when_the_original_fails_again() {
    let v = Verify::new();
    let doc = v.doc("keep.md", FAILING);
    let first = v.verify(&[&doc]).expect(1);
    let draft = first.draft();
    let edited = format!("{}\nMy careful notes.\n", std::fs::read_to_string(&draft).unwrap());
    std::fs::write(&draft, &edited).unwrap();

    let second = v.verify(&[&doc]).expect(1);
    let kept = PathBuf::from(
        second.json["preserved_edit"].as_str().unwrap_or_else(|| panic!("no preserved_edit in {:#}", second.json)),
    );
    assert_ne!(kept, draft);
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), edited, "the edit is kept as it was");
    // The draft itself is rewritten from the document.
    assert!(!std::fs::read_to_string(&draft).unwrap().contains("My careful notes."));
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// admission slot

const SLEEP_3: &str = "```python\nimport time\ntime.sleep(3)\n```\n";

#[test]
fn a_second_verification_waits_for_the_slot_and_both_pass() {
    let v = Verify::new();
    let doc = v.doc("sleepy.md", SLEEP_3);
    let t0 = Instant::now();
    let a = v.spawn(&[&doc]);
    v.wait_for_kernel_dir(Duration::from_secs(15)); // A holds the slot
    let b = v.spawn(&[&doc]);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(move || {
            let o = a.wait_with_output().unwrap();
            (o, t0.elapsed())
        });
        let b = s.spawn(move || {
            let o = b.wait_with_output().unwrap();
            (o, t0.elapsed())
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    let (a_end, b_end) = (a.1, b.1);
    let a = h::to_out(a.0, a_end);
    let b = h::to_out(b.0, b_end);
    h::check_contract(&a);
    h::check_contract(&b);
    assert_eq!((a.code, b.code), (0, 0), "A: {}\nB: {}", a.stderr, b.stderr);
    assert!(
        b_end >= a_end + Duration::from_millis(2500),
        "B ended {:?} after A: it did not wait for the slot (its 3 s cell ran alongside A's)",
        b_end.saturating_sub(a_end)
    );
    assert_eq!(v.passes().len(), 2);
    assert_no_kernel_left(&v);
}

#[test]
fn with_no_wait_a_second_verification_is_refused_with_exit_4() {
    let v = Verify::new();
    let doc = v.doc("sleepy.md", SLEEP_3);
    let other = v.doc("other.md", "```python\nopen('other-ran.txt', 'w').write('x')\n```\n");
    let a = v.spawn(&[&doc]);
    v.wait_for_kernel_dir(Duration::from_secs(15));
    assert!(
        wait_until(Duration::from_secs(10), || !kernel_processes(v.home()).is_empty()),
        "the /proc scan does not see A's kernel"
    );
    let b = v.verify(&[other.to_str().unwrap(), "--no-wait"]);
    let a = h::to_out(a.wait_with_output().unwrap(), Duration::ZERO);
    h::check_contract(&a);
    assert_eq!(a.code, 0, "{}", a.stderr);
    let b = b.expect(4);
    assert!(b.elapsed < Duration::from_secs(3), "--no-wait waited {:?}", b.elapsed);
    assert!(!b.stderr.trim().is_empty(), "the refusal says why");
    assert!(!v.path("other-ran.txt").exists(), "the refused document ran");
    assert_eq!(v.passes().len(), 1, "only A produced a notebook");
    assert!(v.entries("workflows/drafts").is_empty());
    assert_no_kernel_left(&v);
}

#[test]
fn ctrl_c_while_waiting_for_the_slot_stops_the_verification() {
    // B waits for the slot A holds; Ctrl-C on B must end it, not let it run once the slot frees.
    let v = Verify::new();
    let doc = v.doc("sleepy.md", SLEEP_3);
    let other = v.doc("other.md", "```python\nopen('other-ran.txt', 'w').write('x')\n```\n");
    let a = v.spawn(&[&doc]);
    v.wait_for_kernel_dir(Duration::from_secs(15));
    let b = v.spawn(&[&other]);
    std::thread::sleep(Duration::from_millis(1000)); // B is waiting for the slot
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(b.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let b = b.wait_with_output().unwrap();
    let a = h::to_out(a.wait_with_output().unwrap(), Duration::ZERO);
    assert_eq!(a.code, 0, "{}", a.stderr);
    let b_code = b.status.code();
    let b_stdout = String::from_utf8_lossy(&b.stdout).into_owned();
    assert!(
        !v.path("other-ran.txt").exists(),
        "Ctrl-C while waiting for the slot was ignored: B ran its cell once A released the slot (exit {b_code:?})\n{b_stdout}"
    );
    assert_ne!(b_code, Some(0), "an interrupted verification must not exit 0:\n{b_stdout}");
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// Jupyter's conventions: cell tags, the notebook's timeout, errors an agent can act on, drafts in
// the document's format

/// An nbformat 4.5 notebook of code cells, each `(source, tags)`, with notebook `metadata`.
pub(crate) fn notebook_of(cells: &[(&str, &[&str])], metadata: serde_json::Value) -> String {
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .enumerate()
        .map(|(i, (source, tags))| {
            serde_json::json!({"id": format!("c{i}"), "cell_type": "code", "execution_count": null, "outputs": [],
                               "metadata": {"tags": tags}, "source": source})
        })
        .collect();
    let mut meta =
        serde_json::json!({"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}});
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), metadata.as_object()) {
        m.extend(extra.clone());
    }
    serde_json::json!({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells}).to_string()
}

/// What nbclient's tags mean: an expected error, a cell not run.
const TAGGED: &[(&str, &[&str])] = &[
    ("x = 20", &[]),
    ("1/0", &["raises-exception"]),
    ("raise SystemExit(3)", &["skip-execution"]),
    ("print(x + 22)", &[]),
];

const TAGGED_MYST: &str = "# Tagged\n\n```{code-cell} python\nx = 20\n```\n\n\
```{code-cell} python\n:tags: [raises-exception]\n1/0\n```\n\n\
```{code-cell} python\n---\ntags: [skip-execution]\n---\nraise SystemExit(3)\n```\n\n\
```python tags=[\"other\"]\nprint(x + 22)\n```\n";

/// `raises-exception` and `skip-execution` mean here what they mean to nbclient: a notebook
/// and a MyST document that pass under `jupyter nbconvert --execute` pass here, the expected
/// error recorded with its cell, the skipped cell listed as not proved; the notebook written
/// keeps the tags, so it re-runs under nbconvert the same way.
#[test]
fn cell_tags_mean_what_they_mean_to_nbclient() {
    let v = Verify::new();
    let nb = v.doc("tagged.ipynb", &notebook_of(TAGGED, serde_json::json!({})));
    let theirs = nbconvert(&nb, &v.path("nbconvert-src"), v.config.path());
    assert!(theirs.status.success(), "nbconvert: {}", String::from_utf8_lossy(&theirs.stderr));
    let md = v.doc("tagged.md", TAGGED_MYST);
    for (doc, tags) in [
        (&nb, vec![vec!["raises-exception"], vec!["skip-execution"], vec![]]),
        (&md, vec![vec!["raises-exception"], vec!["skip-execution"], vec!["other"]]),
    ] {
        let out = v.verify(&[doc]).expect(0);
        assert_eq!(statuses(&out.json), ["passed", "passed", "skipped", "passed"], "{:#}", out.json);
        let cells = out.json["cells"].as_array().unwrap();
        assert_eq!(cells[1]["error"]["ename"], "ZeroDivisionError", "{:#}", cells[1]);
        assert_eq!(cells[1]["error_expected"], true);
        assert_eq!(cells[2]["reason"], "tag");
        let got: Vec<Vec<&str>> = cells[1..]
            .iter()
            .map(|c| c["tags"].as_array().map(|t| t.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default())
            .collect();
        assert_eq!(got, tags);
        let path = out.notebook();
        let written = validate_notebook(&path);
        let prov = h::source(&written["cells"][0]);
        assert!(prov.contains("3 of the 4 code cells"), "{prov}");
        assert!(prov.contains("cell 1 raised ZeroDivisionError, as its `raises-exception` tag expects"), "{prov}");
        assert!(prov.contains("cell 2, which was not run (tagged `skip-execution`)"), "{prov}");
        let code = h::doc_code_cells(&written);
        assert_eq!(code[2]["metadata"]["tags"], serde_json::json!(["skip-execution"]));
        assert_eq!(code[2]["metadata"]["cairn"]["reason"], "tag");
        assert_eq!(h::stream_text(code[3]), "42\n");
        h::reexecutes(&v, &path);
    }
    // Untagged, the same cells fail where nbconvert fails: at 1/0.
    let plain: Vec<(&str, &[&str])> = TAGGED.iter().map(|(s, _)| (*s, &[][..])).collect();
    let nb = v.doc("plain.ipynb", &notebook_of(&plain, serde_json::json!({})));
    let out = v.verify(&[&nb]).expect(1);
    assert_eq!(statuses(&out.json), ["passed", "failed", "skipped", "skipped"]);
    assert_eq!(out.json["cells"][2]["reason"], "after_failure");
    assert!(!nbconvert(&nb, &v.path("nbconvert-plain"), v.config.path()).status.success());
    assert_no_kernel_left(&v);
}

/// A failed cell says what an agent needs: the exception's name and value and its traceback,
/// without terminal colours; `sys.exit(0)` fails as under nbconvert; a line magic's UsageError,
/// which IPython only prints, is named too.
#[test]
fn a_failed_cells_error_has_its_name_value_and_traceback() {
    let v = Verify::new();
    let doc =
        v.doc("errors.md", "```python\ndef parse(s):\n    return int(s)\n```\n\n```python\nparse('twelve')\n```\n");
    let out = v.verify(&[&doc]).expect(1);
    let e = &out.json["cells"][1]["error"];
    assert_eq!(e["ename"], "ValueError", "{:#}", out.json);
    assert_eq!(e["evalue"], "invalid literal for int() with base 10: 'twelve'");
    let tb: Vec<&str> = e["traceback"].as_array().unwrap().iter().filter_map(|l| l.as_str()).collect();
    assert!(tb.iter().any(|l| l.contains("parse(s)") || l.contains("in parse")), "{tb:#?}");
    assert!(tb.iter().all(|l| !l.contains('\u{1b}')), "ANSI codes are stripped: {tb:#?}");
    assert!(out.json["error"].as_str().unwrap().starts_with("cell 1 (line 6): ValueError: invalid literal"));

    for (code, ename) in [("import sys\nsys.exit(0)", "SystemExit"), ("%no_such_magic", "UsageError")] {
        let doc = v.doc("one.md", &format!("```python\n{code}\n```\n"));
        let out = v.verify(&[&doc]).expect(1);
        assert_eq!(out.json["cells"][0]["error"]["ename"], ename, "{code}: {:#}", out.json);
        let nb = v.doc("one.ipynb", &notebook_of(&[(code, &[])], serde_json::json!({})));
        assert!(!nbconvert(&nb, &v.path("nbconvert-one"), v.config.path()).status.success(), "{code} passes nbconvert");
    }
    assert_no_kernel_left(&v);
}

/// `metadata.execution.timeout` (jupyter-book, MyST-NB) applies when `--timeout` is not given,
/// and the result says which one won.
#[test]
fn the_notebooks_timeout_applies_unless_the_request_gives_one() {
    let v = Verify::new();
    let slow = notebook_of(&[("import time\ntime.sleep(30)", &[])], serde_json::json!({"execution": {"timeout": 1}}));
    let nb = v.doc("slow.ipynb", &slow);
    let started = Instant::now();
    let out = v.verify(&[&nb]).expect(1);
    assert_eq!(out.verdict(), "timed_out", "{:#}", out.json);
    assert_eq!(out.json["timeout"], serde_json::json!({"secs": 1, "source": "document"}));
    assert!(started.elapsed() < Duration::from_secs(25), "the document's 1 s applied: {:?}", started.elapsed());
    let fast = notebook_of(&[("x = 1", &[])], serde_json::json!({"execution": {"timeout": 1}}));
    let nb = v.doc("fast.ipynb", &fast);
    let out = v.verify(&[nb.to_str().unwrap(), "--timeout", "90"]).expect(0);
    assert_eq!(out.json["timeout"], serde_json::json!({"secs": 90, "source": "request"}));
    let prov = h::source(&validate_notebook(&out.notebook())["cells"][0]);
    assert!(prov.contains("| cell timeout | 90 s (the request's) |"), "{prov}");
    let md = v.doc("plain.md", "```python\nx = 1\n```\n");
    assert_eq!(v.verify(&[&md]).expect(0).json["timeout"], serde_json::json!({"secs": 600, "source": "default"}));
    let bad =
        v.doc("bad.ipynb", &notebook_of(&[("x = 1", &[])], serde_json::json!({"execution": {"timeout": "soon"}})));
    let out = v.verify(&[&bad]).expect(2);
    assert!(out.stderr.contains("metadata execution.timeout must be a number of seconds"), "{}", out.stderr);
    assert_no_kernel_left(&v);
}

/// A failed notebook's draft is a notebook (the cells that ran with their outputs, the failure
/// shown); `--title` retries it, and an edited one is never overwritten.
#[test]
fn a_failed_notebook_is_kept_as_a_notebook_draft() {
    let v = Verify::new();
    let nb = v.doc(
        "nb.ipynb",
        &notebook_of(
            &[("x = 1\nprint('ran')", &[]), ("raise RuntimeError('fix me')", &[]), ("y = x", &[])],
            serde_json::json!({}),
        ),
    );
    let out = v.verify(&[nb.to_str().unwrap(), "--title", "NB"]).expect(1);
    let draft = out.draft();
    assert_eq!(draft, v.home().join("workflows/drafts/nb.ipynb"));
    assert!(!v.home().join("workflows/drafts/nb.md").exists(), "no markdown draft of a notebook");
    let written = validate_notebook(&draft);
    let code = h::doc_code_cells(&written);
    assert_eq!(code.len(), 3, "Cairn's own cells are not counted: {written:#}");
    assert_eq!(h::stream_text(code[0]), "ran\n");
    assert_eq!(code[1]["outputs"][0]["output_type"], "error", "the failure is shown");

    // Fixed in the draft (a person edits the notebook): retried by title, it passes.
    let fixed = std::fs::read_to_string(&draft).unwrap().replace("raise RuntimeError('fix me')", "z = 2");
    std::fs::write(&draft, &fixed).unwrap();
    let retry = v.verify(&["--title", "NB"]).expect(0);
    assert_eq!(statuses(&retry.json), ["passed", "passed", "passed"], "{:#}", retry.json);
    h::reexecutes(&v, &retry.notebook());

    // An edited draft is set aside when the original fails again, never overwritten.
    let again = v.verify(&[nb.to_str().unwrap(), "--title", "NB2"]).expect(1);
    let mut edited = std::fs::read_to_string(again.draft()).unwrap();
    edited = edited.replace("fix me", "fix me later");
    std::fs::write(again.draft(), &edited).unwrap();
    let third = v.verify(&[nb.to_str().unwrap(), "--title", "NB2"]).expect(1);
    let kept = PathBuf::from(third.json["preserved_edit"].as_str().unwrap_or_else(|| panic!("{:#}", third.json)));
    assert_eq!(std::fs::read_to_string(kept).unwrap(), edited);
    assert_no_kernel_left(&v);
}

/// Parameters as papermill users know them: `-p NAME VALUE` (typed as papermill types it) and a
/// YAML file are injected as a cell tagged `injected-parameters` after the cell tagged
/// `parameters`; the notebook says which values were proved, and re-runs with them under plain
/// papermill and under plain nbconvert, with the same output papermill gives on the document.
#[test]
fn parameters_are_injected_as_papermill_injects_them() {
    let v = Verify::new();
    let nb = v.doc(
        "params.ipynb",
        &notebook_of(
            &[
                ("import json", &[]),
                ("alpha = 1\nname = 'default'\nflags = []", &["parameters"]),
                ("print(json.dumps([alpha * 2, name, flags]))", &[]),
            ],
            serde_json::json!({}),
        ),
    );
    std::fs::write(v.path("more.yaml"), "flags: [fast, 'x y']\nname: from-file\n").unwrap();
    let out = v
        .verify(&[nb.to_str().unwrap(), "--parameters", "more.yaml", "-p", "alpha", "21", "-p", "name", "Ada"])
        .expect(0);
    let want = serde_json::json!({"flags": ["fast", "x y"], "name": "Ada", "alpha": 21});
    assert_eq!(out.json["parameters"], want, "-p wins over the file: {:#}", out.json);
    assert_eq!(statuses(&out.json), ["passed", "passed", "passed", "passed"]);
    assert_eq!(out.json["cells"][2]["tags"], serde_json::json!(["injected-parameters"]));
    let path = out.notebook();
    let written = validate_notebook(&path);
    assert_eq!(written["metadata"]["cairn"]["parameters"], want);
    let prov = h::source(&written["cells"][0]);
    assert!(prov.contains("| parameters | `flags = [\"fast\", \"x y\"]`, `name = \"Ada\"`, `alpha = 21` |"), "{prov}");
    let code = h::doc_code_cells(&written);
    assert_eq!(h::source(code[2]), "# Parameters\nflags = [\"fast\", \"x y\"]\nname = \"Ada\"\nalpha = 21");
    let ours = h::stream_text(code[3]);
    assert_eq!(ours, "[42, \"Ada\", [\"fast\", \"x y\"]]\n");

    // Plain papermill on the document, and on the notebook Cairn wrote, with the same values.
    let papermill = |input: &std::path::Path, output: &str| {
        let out = std::process::Command::new(venv().join("bin/papermill"))
            .arg(input)
            .arg(v.path(output))
            .args(["-f", v.path("more.yaml").to_str().unwrap(), "-p", "alpha", "21", "-p", "name", "Ada"])
            .args(["--cwd", v.path("").to_str().unwrap()])
            .env("JUPYTER_PATH", venv().join("share/jupyter"))
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "papermill {}: {}", input.display(), String::from_utf8_lossy(&out.stderr));
        let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(v.path(output)).unwrap()).unwrap();
        let printed = h::doc_code_cells(&nb).into_iter().map(h::stream_text).find(|t| t.starts_with('['));
        printed.unwrap_or_default()
    };
    assert_eq!(papermill(&nb, "pm-doc.ipynb"), ours, "papermill on the document prints what Cairn's run printed");
    assert_eq!(papermill(&path, "pm-ours.ipynb"), ours, "Cairn's notebook re-runs under papermill");
    h::reexecutes(&v, &path);

    // A bad name or file is an input error naming it, and nothing is created.
    let fresh = Verify::new();
    let nb = fresh.doc("p.ipynb", &notebook_of(&[("x = 1", &["parameters"])], serde_json::json!({})));
    let out = fresh.verify(&[nb.to_str().unwrap(), "-p", "1x", "2"]).expect(2);
    assert!(out.stderr.contains("parameter `1x` is not a Python name"), "{}", out.stderr);
    let out = fresh.verify(&[nb.to_str().unwrap(), "--parameters", "missing.yaml"]).expect(2);
    assert!(out.stderr.contains("missing.yaml: cannot read the parameters file"), "{}", out.stderr);
    fresh.assert_nothing_created();
    assert_no_kernel_left(&v);
}

// ------------------------------------------------------------------------------------------------
// a verification is a job a person can see and stop

/// Starts `doc` verifying in the background and waits until its first cell wrote `marker`.
fn verifying_in_background(v: &Verify, doc: &std::path::Path, marker: &str) -> std::process::Child {
    let child = v.spawn(&[doc]);
    assert!(wait_until(Duration::from_secs(60), || v.path(marker).exists()), "the verification's first cell never ran");
    child
}

/// The verification job rows of `cairn kernel jobs --json`.
fn verification_rows(v: &Verify) -> Vec<serde_json::Value> {
    let list = v.c.json(&["kernel", "jobs"]).expect(0).json;
    list["jobs"].as_array().unwrap().iter().filter(|j| j["kind"] == "verification").cloned().collect()
}

/// A verification run by `cairn verify` is a job of the state root's kernel list while it runs
/// (its id, title, cells done of total), `cairn kernel poll` follows it by its id, and
/// `cairn kernel interrupt` stops it: no further cell, the running one interrupted (and killed
/// after the grace when it ignores SIGINT), verdict `interrupted`; `cairn kernel restart` kills it
/// at once.
#[test]
fn a_running_verification_is_a_job_a_person_can_see_and_stop() {
    let v = Verify::new();
    let slow = |name: &str, middle: &str| {
        v.doc(
            name,
            &format!(
                "```python\nopen('{name}.started', 'w').write('1')\n```\n\n```python\n{middle}\n```\n\n\
                 ```python\nopen('{name}.after', 'w').write('ran')\n```\n"
            ),
        )
    };
    let cases = [
        ("obeys.md", "import time\ntime.sleep(60)", "interrupt"),
        (
            "ignores.md",
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            "interrupt",
        ),
        ("restarted.md", "import time\ntime.sleep(60)", "restart"),
    ];
    for (name, middle, how) in cases {
        let doc = slow(name, middle);
        let mut child = verifying_in_background(&v, &doc, &format!("{name}.started"));
        let mut rows = Vec::new();
        assert!(
            wait_until(Duration::from_secs(10), || {
                rows = verification_rows(&v);
                rows.first().is_some_and(|r| r["cells_done"] == 1)
            }),
            "{name}: no running verification listed: {rows:#?}"
        );
        let row = &rows[0];
        assert_eq!((row["status"].as_str(), row["cells_total"].as_u64()), (Some("running"), Some(3)), "{row:#}");
        assert_eq!(row["title"], name.trim_end_matches(".md"));
        let id = row["job_id"].as_str().unwrap().to_string();
        let polled = v.c.json(&["kernel", "poll", &id]).expect(0).json;
        assert_eq!((polled["kind"].as_str(), polled["status"].as_str()), (Some("verification"), Some("running")));

        let asked = Instant::now();
        let out = v.c.json(&["kernel", how]).expect(0).json;
        assert_eq!(out["verifications"], serde_json::json!([id]), "{how}: {out:#}");
        let status = child.wait().unwrap();
        let took = asked.elapsed();
        let mut stdout = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let result: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(status.code(), Some(1), "{name}: {result:#}");
        assert_eq!(result["verdict"], "interrupted", "{name}: {result:#}");
        assert_eq!(statuses(&result), ["passed", "interrupted", "skipped"], "{name}: {result:#}");
        assert!(!v.path(&format!("{name}.after")).exists(), "{name}: a cell ran after the stop");
        let bound = h::INTERRUPT_GRACE + Duration::from_secs(5);
        assert!(took < bound, "{name}: {how} took {took:?} to stop the verification");
        // Finished, it is no longer listed; polled by its id, its verdict and record.
        assert!(verification_rows(&v).is_empty());
        let polled = v.c.json(&["kernel", "poll", &id]).expect(0).json;
        assert_eq!(polled["status"], "interrupted", "{polled:#}");
        assert_eq!(polled["verification"]["verdict"], "interrupted");
        assert_no_kernel_left(&v);
    }
    v.c.stop_daemon();
}

/// `cairn verify` killed (SIGKILL) mid-cell: its kernel leads its own process group and outlives
/// it, so whoever takes the kernel slot next (here the next verification) stops that kernel,
/// records the verification `died` and removes its directory; it is never listed as running.
#[test]
fn a_verification_whose_process_is_killed_is_settled_by_the_next_one() {
    let v = Verify::new();
    let doc =
        v.doc("killed.md", "```python\nopen('killed.started', 'w').write('1')\nimport time\ntime.sleep(120)\n```\n");
    let mut child = verifying_in_background(&v, &doc, "killed.started");
    let mut rows = Vec::new();
    assert!(wait_until(Duration::from_secs(10), || {
        rows = verification_rows(&v);
        !rows.is_empty()
    }));
    let id = rows[0]["job_id"].as_str().unwrap().to_string();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert!(!kernel_processes(v.home()).is_empty(), "the kernel outlives its killed verifier (else nothing to test)");
    assert!(verification_rows(&v).is_empty(), "a verification whose process died is not listed as running");

    let next = v.doc("next.md", "```python\nx = 1\n```\n");
    v.verify(&[&next]).expect(0);
    assert_no_kernel_left(&v);
    assert!(!v.home().join("kernels").join(&id).exists(), "the killed verification's directory is gone");
    let polled = v.c.json(&["kernel", "poll", &id]).expect(0).json;
    assert_eq!((polled["status"].as_str(), polled["verification"]["verdict"].as_str()), (Some("died"), Some("died")));
    assert!(polled["verification"]["error"].as_str().is_some_and(|e| e.contains("was killed")), "{polled:#}");
    v.c.stop_daemon();
}

// ------------------------------------------------------------------------------------------------
// the daemon's spare kernel

/// The daemon's `GET /kernel/spare` once it says `state` (bounded wait).
#[track_caller]
fn spare_when(v: &Verify, state: &str) -> serde_json::Value {
    let url = format!("{}/kernel/spare", v.c.daemon().url);
    let token = v.c.token("viewer");
    let mut last = serde_json::Value::Null;
    let reached = wait_until(Duration::from_secs(60), || {
        let r = http("GET", &url, Some(&token), None, &[]);
        assert_eq!(r.status, 200, "{:#}", r.body);
        last = r.body;
        last["state"] == state
    });
    assert!(reached, "the spare never became {state}: {last:#}");
    last
}

/// A notebook without what may differ between two runs of the same document: the timings, and
/// how its kernel started (the provenance's `kernel` row and `metadata.cairn.kernel`).
fn but_for_timings(nb: &std::path::Path) -> serde_json::Value {
    let mut nb: serde_json::Value = serde_json::from_slice(&std::fs::read(nb).unwrap()).unwrap();
    nb["metadata"]["cairn"].as_object_mut().unwrap().remove("kernel");
    for cell in nb["cells"].as_array_mut().unwrap() {
        if let Some(c) = cell["metadata"].get_mut("cairn").and_then(|c| c.as_object_mut()) {
            c.remove("duration_ms");
        }
        if let Some(lines) = cell["source"].as_array_mut() {
            lines.retain(|l| !l.as_str().is_some_and(|l| l.starts_with("| kernel |")));
        }
    }
    nb
}

/// A verification through the daemon runs on its spare kernel, booted ahead and never used, and
/// gives the notebook a cold start gives, but for timings: the same working directory, import
/// path (a module beside the document imports), IPython state, namespace and execution counts.
/// The provenance says the kernel was pre-started and how long it waited; the environment hash
/// the spare was checked against is the one its bootstrap reports; the next spare boots after.
#[test]
fn a_verification_on_the_daemons_spare_gives_the_cold_starts_notebook() {
    let v = Verify::with_spare();
    std::fs::write(v.path("helper.py"), "ANSWER = 42\n").unwrap();
    let doc = v.doc(
        "warm.md",
        "# Warm\n\n```python\nimport os, sys\nimport helper\nprint(os.getcwd(), helper.ANSWER)\n\
         print([p for p in sys.path if p == '' or p.startswith(os.getcwd())])\n\
         print(sorted(k for k in get_ipython().user_ns if not k.startswith('_')))\n\
         print(_dh, get_ipython().starting_dir, get_ipython().execution_count, len(In))\n```\n\n\
         Some prose.\n\n```python tags=[\"raises-exception\"]\n1 / 0\n```\n\n```python\nx = 2\nx * 21\n```\n",
    );
    v.c.start_daemon();
    let spare = spare_when(&v, "ready");
    assert_eq!(spare["python"], python().display().to_string(), "{spare:#}");

    let warm = v.verify(&[&doc]);
    assert_eq!(warm.verdict(), "passed", "{}", warm.stderr);
    assert_eq!(warm.json["kernel"]["start"], "pre_started", "{:#}", warm.json);
    assert!(warm.json["kernel"]["idle_ms"].as_u64().is_some(), "{:#}", warm.json);
    let nb: serde_json::Value = serde_json::from_slice(&std::fs::read(warm.notebook()).unwrap()).unwrap();
    assert_eq!(
        nb["metadata"]["cairn"]["environment_sha256"], spare["environment_sha256"],
        "the spare was checked against what its bootstrap reports"
    );
    assert!(
        h::source(&nb["cells"][0]).contains("| kernel | pre-started by the daemon; it had run nothing"),
        "{}",
        h::source(&nb["cells"][0])
    );
    let first = h::stream_text(h::doc_code_cells(&nb)[0]);
    assert!(first.contains(&format!("{} 42", v.path("").canonicalize().unwrap().display())), "{first}");

    let cold = v.verify(&[doc.as_os_str(), "--no-spare".as_ref()]);
    assert_eq!(cold.json["kernel"]["start"], "cold", "{:#}", cold.json);
    assert_eq!(but_for_timings(&warm.notebook()), but_for_timings(&cold.notebook()));

    // Used once: the next one boots after the verification, in another directory.
    let next = spare_when(&v, "ready");
    let dirs = v.entries("kernels");
    assert_eq!(dirs.len(), 1, "one spare is kept: {dirs:?}");
    assert_ne!(Some(dirs[0].as_str()), warm.json["verification_id"].as_str(), "{next:#}");
    v.c.stop_daemon();
    assert_no_kernel_left(&v);
}

/// A spare is used only for what a cold start would have given: under a memory limit, or with
/// `--no-spare`, the kernel starts for the verification; a kernel plugin added since the spare
/// booted discards it (and the plugin binds, read as always by the bootstrap); a daemon run with
/// `--no-spare-kernel` keeps none.
#[test]
fn a_spare_that_does_not_fit_is_not_used() {
    let v = Verify::with_spare();
    let doc = v.doc("fit.md", "```python\nprint('hello')\n```\n");
    v.c.start_daemon();
    spare_when(&v, "ready");
    let limited = v.verify(&[doc.as_os_str(), "--memory-limit".as_ref(), "4000000000".as_ref()]);
    assert_eq!(
        (limited.verdict(), limited.json["kernel"]["start"].as_str()),
        ("passed", Some("cold")),
        "{:#}",
        limited.json
    );

    std::fs::create_dir_all(v.config.path().join("kernel")).unwrap();
    std::fs::write(v.config.path().join("kernel").join("greet.py"), "GREETING = 'hi'\n").unwrap();
    let with_plugin = v.doc("plugin.md", "```python\nprint(GREETING)\n```\n");
    let out = v.verify(&[&with_plugin]);
    assert_eq!(
        (out.verdict(), out.json["kernel"]["start"].as_str()),
        ("passed", Some("cold")),
        "a spare booted before the plugin is discarded: {:#}",
        out.json
    );
    spare_when(&v, "ready");
    let out = v.verify(&[&with_plugin]);
    assert_eq!(
        (out.verdict(), out.json["kernel"]["start"].as_str()),
        ("passed", Some("pre_started")),
        "{:#}",
        out.json
    );
    v.c.stop_daemon();
    assert_no_kernel_left(&v);

    v.c.json(&["daemon", "start", "--no-spare-kernel"]).expect(0);
    let off = spare_when(&v, "off");
    assert_eq!(off["enabled"], false, "{off:#}");
    let out = v.verify(&[&doc]);
    assert_eq!(out.json["kernel"]["start"], "cold", "{:#}", out.json);
    v.c.stop_daemon();
    assert_no_kernel_left(&v);
}

/// Ctrl-C on `cairn verify` running on the daemon's spare cancels it in the daemon as it
/// cancels one run here: the running cell `interrupted`, the rest skipped, exit 1, its kernel
/// gone; the progress lines come from the daemon.
#[test]
fn ctrl_c_on_a_verification_in_the_daemon_interrupts_it() {
    let v = Verify::with_spare();
    let doc = v.doc(
        "long.md",
        "```python\nprint('first')\n```\n\n```python\nimport os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(30)\n```\n\n```python\nx = 1\n```\n",
    );
    v.c.start_daemon();
    spare_when(&v, "ready");
    let mut cmd = v.c.std_command(&["verify"]);
    cmd.arg(&doc)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    assert!(wait_until(Duration::from_secs(30), || v.path("pid").exists()), "the cell never started");
    let kernel: i32 = wait_for_text(&v.path("pid")).parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("long: interrupted (3 cells, 1 skipped)"), "{stdout}");
    assert!(stdout.contains("kernel: the daemon's spare"), "{stdout}");
    assert!(stderr.contains("cell   0/3   … passed"), "the daemon's progress is shown: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        wait_until(Duration::from_secs(5), || !std::path::Path::new(&format!("/proc/{kernel}")).exists()),
        "the kernel still runs"
    );
    v.c.stop_daemon();
    assert_no_kernel_left(&v);
}

/// A daemon killed (SIGKILL) with its spare booted leaves that kernel running, in its own
/// process group; the next daemon stops it (the same process: pid and start time) and removes
/// its directory before it boots its own. So it does for a daemon killed while its spare boots.
#[test]
fn a_spare_left_by_a_killed_daemon_is_stopped_by_the_next() {
    let v = Verify::with_spare();
    let daemon = v.c.start_daemon();
    spare_when(&v, "ready");
    let dirs = v.entries("kernels");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.home().join("kernels").join(&dirs[0]).join("spare.json")).unwrap())
            .unwrap();
    let kernel = record["kernel_pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || v.c.json(&["daemon", "status"]).json["running"] == false));
    assert!(
        std::path::Path::new(&format!("/proc/{kernel}")).exists(),
        "the spare outlives its killed daemon (else nothing to test)"
    );

    v.c.start_daemon();
    assert!(
        !std::path::Path::new(&format!("/proc/{kernel}")).exists() || is_zombie(kernel),
        "the old spare still runs"
    );
    assert!(!v.home().join("kernels").join(&dirs[0]).exists(), "the old spare's directory is gone");
    spare_when(&v, "ready");
    v.c.stop_daemon();
    assert_no_kernel_left(&v);

    // Killed while the spare boots (its record written, its kernel's pid not yet): the next
    // daemon finds that kernel by its connection file. Kill points across the boot.
    for delay_ms in [0, 50, 150, 300, 450, 600] {
        let daemon = v.c.start_daemon();
        std::thread::sleep(Duration::from_millis(delay_ms));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.pid), nix::sys::signal::Signal::SIGKILL).unwrap();
        assert!(wait_until(Duration::from_secs(5), || v.c.json(&["daemon", "status"]).json["running"] == false));
        let second = v.c.json(&["daemon", "start"]).expect(0).json;
        let stopped = v.c.json(&["daemon", "stop"]).expect(0).json;
        assert_no_kernel_left(&v);
        let left = v.entries("kernels");
        let inside: Vec<Vec<String>> = left.iter().map(|d| v.entries(&format!("kernels/{d}"))).collect();
        assert!(
            left.is_empty(),
            "killed at {delay_ms} ms: {left:?} holding {inside:?}; {second} {stopped}; the daemon's log:\n{}",
            std::fs::read_to_string(v.home().join("daemon.log")).unwrap_or_default()
        );
    }
}

fn wait_for_text(p: &std::path::Path) -> String {
    let mut text = String::new();
    wait_until(Duration::from_secs(5), || {
        text = std::fs::read_to_string(p).unwrap_or_default();
        !text.is_empty()
    });
    text
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}
