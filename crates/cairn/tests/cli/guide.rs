//! Every shell example of the guide (`docs/src/guide/*.md`) runs here, against the real binary and
//! a real daemon, so a page that lies fails the suite.
//!
//! The convention, which `CONTRIBUTING.md` repeats for authors:
//!
//! - A ```` ```sh ```` fence is an example: it runs, in order with the chapter's other examples, in
//!   one fresh state root per chapter (`CAIRN_HOME` a temporary directory, `cairn` on `PATH` the
//!   binary under test, the working directory a scratch folder holding a copy of the repository's
//!   `examples/`, as a reader at the root of a checkout has it). Each runs under `bash -e`: its
//!   first failing command fails the test, naming the chapter, the block's line, the block and
//!   what it printed. Shell variables, functions and the working directory carry from one block
//!   of a chapter to the next, as in a reader's terminal. `bash`, `shell`, `console` and `zsh`
//!   fences are refused: an example in one would escape the test.
//! - An HTML comment `<!-- guide-test: … -->` right before a fence (invisible in the book) says
//!   more about that fence, in words separated by spaces:
//!   - `file=PATH` on a fence of any language: its text is written to `PATH` (relative to the
//!     chapter's working directory) before the next example runs, so the file a page shows is the
//!     file the example uses;
//!   - `output` on a ```` ```text ```` fence right after an example: each of its non-empty lines
//!     must appear, in order, in what the example printed (stdout and stderr), compared loosely:
//!     trimmed, and `...` inside a line matches anything (a run id, a digest, a time);
//!   - `exit=N`: the example's last command must exit `N` (the block then runs without `-e`);
//!   - `needs=ssh,slurm,postgres,kernel,snakemake`: the services it uses, which the suite provides
//!     (`CAIRN_TEST_SSHD_DIR`, `CAIRN_TEST_SLURM`, `CAIRN_TEST_DATABASE_URL`, the test venv). The
//!     examples read them as `HPC_SSH`, `HPC_KEY`, `HPC_KNOWN_HOSTS`, `HPC_WORKSPACE`,
//!     `HPC_PARTITION` and `DATABASE_URL`. Outside CI a chapter with an example that needs a
//!     missing service is skipped, saying so; under `CI=true` it fails;
//!   - `skip: WHY` (a reason is required): the example is not run. For the rare block that cannot
//!     run here (one that installs, or that stands for a reader's own values).
//!
//! Each chapter is its own test (`guide::first_run`, …), and `every_chapter_is_tested` fails for a
//! page of the guide without one. The README's examples run the same way (`guide::readme_tour`),
//! after the quickstart its set-up runs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use crate::support::*;

/// One example may take this long (a hang, not a verdict): the whole guide runs in about a minute.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(180);

/// The guide's folder in the repository.
fn guide_dir() -> PathBuf {
    repo().join("docs/src/guide")
}

/// A service an example needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Ssh,
    Slurm,
    Postgres,
    Kernel,
    Snakemake,
}

impl Need {
    fn parse(word: &str, at: &str) -> Need {
        match word {
            "ssh" => Need::Ssh,
            "slurm" => Need::Slurm,
            "postgres" => Need::Postgres,
            "kernel" => Need::Kernel,
            "snakemake" => Need::Snakemake,
            other => panic!("{at}: unknown service `{other}` in needs= (ssh, slurm, postgres, kernel, snakemake)"),
        }
    }
}

/// What a `<!-- guide-test: … -->` comment says of the fence after it.
#[derive(Debug, Default, Clone)]
struct Directive {
    file: Option<String>,
    output: bool,
    exit: Option<i32>,
    needs: Vec<Need>,
    skip: Option<String>,
}

impl Directive {
    fn parse(text: &str, at: &str) -> Directive {
        let mut d = Directive::default();
        if let Some(why) = text.strip_prefix("skip:") {
            assert!(!why.trim().is_empty(), "{at}: `skip:` needs a reason");
            d.skip = Some(why.trim().to_string());
            return d;
        }
        for word in text.split_whitespace() {
            match word.split_once('=') {
                Some(("file", path)) => d.file = Some(path.to_string()),
                Some(("exit", n)) => {
                    d.exit = Some(n.parse().unwrap_or_else(|_| panic!("{at}: exit={n} is not a number")))
                }
                Some(("needs", list)) => d.needs.extend(list.split(',').map(|w| Need::parse(w, at))),
                None if word == "output" => d.output = true,
                _ => panic!("{at}: unknown guide-test directive `{word}` (file=, output, exit=, needs=, skip: WHY)"),
            }
        }
        d
    }
}

/// A fenced block of a chapter, with the directive before it.
#[derive(Debug, Clone)]
struct Block {
    lang: String,
    text: String,
    line: usize,
    directive: Directive,
}

/// The fenced blocks of a chapter, in order. Refuses a shell fence the test would not run, and a
/// directive that is not right before a fence.
fn blocks(chapter: &str, markdown: &str) -> Vec<Block> {
    let line_of = |offset: usize| markdown[..offset].lines().count() + 1;
    let mut out = Vec::new();
    let mut pending: Option<(Directive, usize)> = None;
    let mut current: Option<Block> = None;
    for (event, range) in Parser::new(markdown).into_offset_iter() {
        let at = format!("{chapter}:{}", line_of(range.start));
        match event {
            Event::Html(html) | Event::InlineHtml(html) if html.trim_start().starts_with("<!-- guide-test:") => {
                assert!(pending.is_none(), "{at}: two guide-test directives before one fence");
                let body = html.trim().trim_start_matches("<!-- guide-test:").trim_end_matches("-->").trim();
                pending = Some((Directive::parse(body, &at), line_of(range.start)));
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let lang = info.split_whitespace().next().unwrap_or("").to_string();
                assert!(
                    !matches!(lang.as_str(), "bash" | "shell" | "console" | "zsh" | "shell-session"),
                    "{at}: a ```{lang} fence escapes the guide's test: write shell examples as ```sh"
                );
                let directive = pending.take().map(|(d, _)| d).unwrap_or_default();
                current = Some(Block { lang, text: String::new(), line: line_of(range.start), directive });
            }
            Event::Text(text) if current.is_some() => current.as_mut().unwrap().text.push_str(&text),
            Event::End(TagEnd::CodeBlock) => out.extend(current.take()),
            Event::Start(Tag::Paragraph | Tag::Heading { .. } | Tag::List(_) | Tag::Table(_)) => {
                if let Some((_, line)) = &pending {
                    panic!("{chapter}:{line}: a guide-test directive must be right before a fenced block");
                }
            }
            _ => {}
        }
    }
    assert!(pending.is_none(), "{chapter}: a guide-test directive at the end of the page");
    out
}

/// The services one chapter's examples get, as the variables the examples read. `None` (after
/// saying so) when one is missing outside CI; under CI a missing service fails.
struct Services {
    env: Vec<(String, String)>,
    /// Kept while the chapter runs: its PostgreSQL schema is dropped with it.
    _schema: Option<cairn_store::testing::TestSchema>,
}

fn services(needs: &[Need], work: &Path) -> Option<Services> {
    let mut env = Vec::new();
    let mut schema = None;
    let venv_bin = || venv_dir().join("bin");
    for need in needs {
        match need {
            Need::Ssh | Need::Slurm => {
                let dir = sshd()?;
                if *need == Need::Slurm && !crate::remote::slurm() {
                    return None;
                }
                env.push(("HPC_SSH".into(), format!("root@127.0.0.1:{}", sshd_port())));
                env.push(("HPC_KEY".into(), dir.join("id_ed25519").display().to_string()));
                env.push(("HPC_KNOWN_HOSTS".into(), dir.join("known_hosts").display().to_string()));
                // The test host is this machine: its workspace is the chapter's scratch folder.
                env.push(("HPC_WORKSPACE".into(), work.display().to_string()));
                env.push(("HPC_PARTITION".into(), "debug".into()));
            }
            Need::Postgres => {
                let s = cairn_store::testing::TestSchema::create()?;
                env.push(("DATABASE_URL".into(), s.url.clone()));
                schema = Some(s);
            }
            Need::Kernel | Need::Snakemake => {
                let bin = if *need == Need::Snakemake { crate::controllers::venv_bin()? } else { venv_bin() };
                if !bin.join("python").exists() {
                    assert!(!ci(), "no test venv at {} (scripts/test.sh creates it)", bin.display());
                    eprintln!("SKIPPED: no test venv at {} (run scripts/test.sh)", bin.display());
                    return None;
                }
                env.push(("CAIRN_PYTHON".into(), bin.join("python").display().to_string()));
            }
        }
    }
    Some(Services { env, _schema: schema })
}

/// One chapter's state root and scratch folder. Dropping it stops the daemon (and with it every
/// process it started), kills what still runs in the scratch folder and closes the SSH control
/// connections, so a failing chapter leaves nothing behind either.
struct Reader {
    c: Cairn,
    work: PathBuf,
    path: String,
    env: Vec<(String, String)>,
    /// The shell's variables and functions after the last example (its directory beside it).
    state: PathBuf,
    /// Dropped after the daemon stopped (a PostgreSQL schema is dropped with it).
    services: Option<Services>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.c.home().join("daemon.json").exists() {
            let _ = self.c.command(&["daemon", "stop"]).timeout(Duration::from_secs(30)).output();
        }
        for pid in crate::controllers::processes_in(&self.work) {
            kill_group(pid);
        }
        close_ssh_masters(&self.c);
        self.services.take();
    }
}

/// The preamble and epilogue around each example: restore the previous example's variables,
/// functions and directory; save them again however the example ends.
const PRELUDE: &str = r#"__guide_before=" $(compgen -v | tr '\n' ' ') "
[ -f "$GUIDE_STATE" ] && . "$GUIDE_STATE"
cd "$(cat "$GUIDE_STATE.cwd")"
__guide_save() {
  { for __v in $(compgen -v); do
      case "$__guide_before" in *" $__v "*) ;; *) [ "${__v#__guide}" = "$__v" ] && declare -p "$__v" 2>/dev/null ;; esac
    done
    declare -f | grep -v '^__guide' ; } > "$GUIDE_STATE.new" || true
  mv "$GUIDE_STATE.new" "$GUIDE_STATE"; pwd > "$GUIDE_STATE.cwd"
}
trap __guide_save EXIT
"#;

impl Reader {
    /// A reader at a fresh state root, with the services `needs` names; `None` when one is
    /// missing (outside CI).
    fn new(needs: &[Need]) -> Option<Reader> {
        let c = Cairn::new();
        let work = c.work.path().canonicalize().unwrap();
        let services = services(needs, &work)?;
        copy_dir(&repo().join("examples"), &work.join("examples"));
        let bin = Cairn::bin().parent().unwrap().display().to_string();
        let system = std::env::var("PATH").unwrap_or_default();
        let path = match services.env.iter().find(|(k, _)| k == "CAIRN_PYTHON") {
            // The test venv's `bin` (snakemake, jupyter) after cairn's, as an activated venv has it.
            Some((_, python)) => format!("{bin}:{}:{system}", Path::new(python).parent().unwrap().display()),
            None => format!("{bin}:{system}"),
        };
        let config = work.join(".cairn-config");
        std::fs::create_dir_all(&config).unwrap();
        let mut env = services.env.clone();
        // No kernel plugin of the machine's user is loaded into a verification.
        env.push(("CAIRN_CONFIG".into(), config.display().to_string()));
        let state = work.join(".guide-state");
        std::fs::write(work.join(".guide-state.cwd"), work.display().to_string()).unwrap();
        Some(Reader { c, work, path, env, state, services: Some(services) })
    }

    /// Runs one example; its exit code and everything it printed.
    fn run(&self, text: &str, exit: Option<i32>) -> (i32, String) {
        let script = format!("{PRELUDE}{}\n{text}", if exit.is_some() { "" } else { "set -e" });
        let log = self.work.join(".guide-output");
        let out = File::create(&log).unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .current_dir(&self.work)
            .env("CAIRN_HOME", self.c.home.path())
            .env("PATH", &self.path)
            .env("GUIDE_STATE", &self.state)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        for var in ["XDG_STATE_HOME", "CAIRN_TOKEN", "CAIRN_TOKEN_FILE", "CAIRN_URL", "CAIRN_DATABASE_URL", "BROWSER"] {
            cmd.env_remove(var);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().unwrap();
        let started = Instant::now();
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code().unwrap_or(-1);
            }
            if started.elapsed() > BLOCK_TIMEOUT {
                kill_group(child.id() as i32);
                let _ = child.wait();
                break -1;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (code, std::fs::read_to_string(&log).unwrap_or_default())
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Whether each non-empty line of `expected` is in `output`, in order; `...` in a line matches
/// anything. The first line not found, if any.
fn missing_line<'a>(expected: &'a str, output: &str) -> Option<&'a str> {
    let lines: Vec<&str> = output.lines().collect();
    let mut from = 0;
    for want in expected.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = want.split("...").map(str::trim).filter(|p| !p.is_empty()).collect();
        let found = lines[from..].iter().position(|line| {
            let mut rest = *line;
            parts.iter().all(|p| match rest.find(p) {
                Some(i) => {
                    rest = &rest[i + p.len()..];
                    true
                }
                None => false,
            })
        });
        match found {
            Some(i) => from += i + 1,
            None => return Some(want),
        }
    }
    None
}

/// Runs every example of `docs/src/guide/<name>.md` in order, in one fresh state root.
fn chapter(name: &str) {
    page(&guide_dir().join(format!("{name}.md")), &format!("{name}.md"), None);
}

/// Runs every example of the page at `path` (named `file` in messages) in order, in one fresh
/// state root, after `preamble` if any (a command the page says the reader ran before).
fn page(path: &Path, file: &str, preamble: Option<&str>) {
    let markdown = std::fs::read_to_string(path).unwrap();
    let blocks = blocks(file, &markdown);
    let examples = blocks.iter().filter(|b| b.lang == "sh" && b.directive.skip.is_none()).count();
    assert!(examples > 0, "{file}: the chapter has no example to run");
    let mut needs: Vec<Need> = Vec::new();
    for need in blocks.iter().flat_map(|b| b.directive.needs.iter()) {
        if !needs.contains(need) {
            needs.push(*need);
        }
    }
    let Some(reader) = Reader::new(&needs) else {
        eprintln!("SKIPPED: {file} needs a service this machine does not run");
        return;
    };
    if let Some(command) = preamble {
        let (code, output) = reader.run(command, None);
        assert_eq!(code, 0, "{file}: `{command}`, which the page says was run first, exited {code}:\n{output}");
    }
    let mut last: Option<(usize, String)> = None;
    for b in &blocks {
        let at = format!("{file}:{}", b.line);
        if b.directive.skip.is_some() {
            continue;
        }
        if let Some(rel) = &b.directive.file {
            let cwd = std::fs::read_to_string(reader.state.with_extension("cwd")).unwrap();
            let path = Path::new(cwd.trim()).join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &b.text).unwrap();
        }
        if b.directive.output {
            let (line, output) =
                last.as_ref().unwrap_or_else(|| panic!("{at}: an `output` block with no example before it"));
            if let Some(want) = missing_line(&b.text, output) {
                panic!("{at}: the example at line {line} did not print `{want}`; it printed:\n{output}");
            }
            continue;
        }
        if b.lang != "sh" {
            continue;
        }
        let (code, output) = reader.run(&b.text, b.directive.exit);
        let want = b.directive.exit.unwrap_or(0);
        assert_eq!(
            code,
            want,
            "{at}: the example exited {code}, not {want}\n--- the example:\n{}--- what it printed:\n{output}\n--- the daemon's log:\n{}",
            b.text,
            reader.c.daemon_log()
        );
        last = Some((b.line, output));
    }
}

/// The chapters, each a test named after its page.
macro_rules! chapters {
    ($($test:ident => $page:literal),* $(,)?) => {
        $( #[test] fn $test() { chapter($page) } )*
        const PAGES: &[&str] = &[$($page),*];
    };
}

chapters! {
    first_run => "first-run",
    writing_a_workflow => "writing-a-workflow",
    results_artifacts_trace => "results-artifacts-trace",
    replay_and_explain => "replay-and-explain",
    verifying_notebooks => "verifying-notebooks",
    plans_and_targets => "plans-and-targets",
    snakemake => "snakemake",
    agents_mcp => "agents-mcp",
    team_postgres => "team-postgres",
    recovery => "recovery",
}

/// The README's tour, after its set-up (the quickstart, run here with the binary under test).
#[test]
fn readme_tour() {
    page(&repo().join("README.md"), "README.md", Some("cairn quickstart"));
}

#[test]
fn every_chapter_is_tested() {
    let mut pages: Vec<String> = std::fs::read_dir(guide_dir())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".md").map(String::from))
        .collect();
    pages.sort();
    let mut tested: Vec<String> = PAGES.iter().map(|p| p.to_string()).collect();
    tested.sort();
    assert_eq!(pages, tested, "every page of docs/src/guide/ is a test of guide.rs (the `chapters!` list)");
}

#[test]
fn the_loose_output_match_finds_lines_in_order_and_nothing_else() {
    let output = "run run_01ab  release-validation@1.2.0\nREADY: every validator rule holds\n";
    assert_eq!(missing_line("run run_... release-validation@1.2.0\nREADY", output), None);
    assert_eq!(missing_line("READY\nrun run_", output), Some("run run_"));
    assert_eq!(missing_line("BLOCKED", output), Some("BLOCKED"));
    let blocks = blocks("t.md", "<!-- guide-test: exit=1 -->\n```sh\nfalse\n```\n\n```toml\nx = 1\n```\n");
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].directive.exit, Some(1));
    assert_eq!(blocks[1].lang, "toml");
}
