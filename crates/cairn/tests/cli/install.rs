//! Getting `cairn` onto a person's PATH: the shell completions and man pages it prints (checked
//! by the real shells and the real man tools), and the quickstart's hint when the binary running
//! is a checkout's build the PATH does not find. The installs themselves (cargo install, the
//! wheel, scripts/install.sh) are run by scripts/test-install.sh, which CI calls.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

use crate::support::*;

/// `cairn ARGS` with nothing of Cairn set up: no CAIRN_HOME, no XDG_STATE_HOME, and a HOME that
/// must stay empty (an installer runs these before any state root exists).
fn bare(home: &Path, args: &[&str]) -> Out {
    let out = Command::new(Cairn::bin())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .output()
        .unwrap();
    let out = Out::of(out, &args.join(" "), std::time::Duration::ZERO);
    let left: Vec<_> = std::fs::read_dir(home).unwrap().collect();
    assert!(left.is_empty(), "`cairn {}` wrote into HOME: {left:?}", args.join(" "));
    out
}

/// Runs `shell ARGS`, failing the test with what it printed unless it exits 0; its stdout.
#[track_caller]
fn shell(shell: &str, args: &[&str]) -> String {
    let out = Command::new(shell).args(args).output().unwrap_or_else(|e| panic!("{shell}: {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{shell} {args:?}: {:?}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    stdout.into_owned()
}

/// Whether `program` is on the PATH; under CI it must be (scripts/test-install.sh installs the
/// shells), elsewhere a missing one only skips its check.
fn present(program: &str) -> bool {
    let found = Command::new("sh").args(["-c", &format!("command -v {program}")]).output().unwrap().status.success();
    assert!(found || !ci(), "{program} is not installed; scripts/test-install.sh installs it under CI");
    if !found {
        eprintln!("{program} is not installed: its check is skipped");
    }
    found
}

/// What bash completes at the end of the words `line` given to cairn's completion function.
fn bash_completes(script: &Path, line: &[&str]) -> Vec<String> {
    let words = line.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
    let prev = line.len().checked_sub(2).map_or("", |i| line[i]);
    let program = format!(
        "source '{}' && COMP_WORDS=({words}) && COMP_CWORD={} && _cairn cairn '{}' '{prev}' \
         && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        line.len() - 1,
        line.last().unwrap(),
    );
    shell("bash", &["-c", &program]).lines().map(str::to_string).collect()
}

#[test]
fn bash_completion_parses_registers_cairn_and_completes_its_commands() {
    let home = tempfile::tempdir().unwrap();
    let out = bare(home.path(), &["completions", "bash"]).expect(0);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("cairn");
    std::fs::write(&script, &out.stdout).unwrap();

    shell("bash", &["-n", &script.display().to_string()]);
    let registered = shell("bash", &["-c", &format!("source '{}' && complete -p cairn", script.display())]);
    assert!(registered.contains("-F _cairn") && registered.trim_end().ends_with(" cairn"), "{registered}");

    let commands = bash_completes(&script, &["cairn", "wor"]);
    assert_eq!(commands, ["workflow"]);
    let mut daemon = bash_completes(&script, &["cairn", "daemon", "st"]);
    daemon.sort();
    assert_eq!(daemon, ["start", "status", "stop"]);
    let flags = bash_completes(&script, &["cairn", "run", "--in"]);
    assert!(flags.contains(&"--input".to_string()) && flags.contains(&"--in-process".to_string()), "{flags:?}");
    let shells = bash_completes(&script, &["cairn", "completions", "f"]);
    assert_eq!(shells, ["fish"]);
}

#[test]
fn zsh_and_fish_completions_are_scripts_their_shell_accepts() {
    let home = tempfile::tempdir().unwrap();
    let zsh = bare(home.path(), &["completions", "zsh"]).expect(0).stdout;
    assert!(zsh.starts_with("#compdef cairn\n"), "{}", &zsh[..zsh.len().min(200)]);
    let fish = bare(home.path(), &["completions", "fish"]).expect(0).stdout;
    assert!(fish.contains("complete -c cairn "), "{}", &fish[..fish.len().min(200)]);

    let dir = tempfile::tempdir().unwrap();
    let (zsh_file, fish_file) = (dir.path().join("_cairn"), dir.path().join("cairn.fish"));
    std::fs::write(&zsh_file, &zsh).unwrap();
    std::fs::write(&fish_file, &fish).unwrap();
    if present("zsh") {
        shell("zsh", &["-n", &zsh_file.display().to_string()]);
        // Loaded by compinit from the folder an installer puts it in, it is the function for cairn.
        let program = format!(
            "fpath=('{}' $fpath) && autoload -U compinit && compinit -u -d '{}/zcompdump' && print -r -- $_comps[cairn]",
            dir.path().display(),
            dir.path().display()
        );
        assert_eq!(shell("zsh", &["-f", "-c", &program]).trim(), "_cairn");
    }
    if present("fish") {
        shell("fish", &["--no-execute", &fish_file.display().to_string()]);
        let program = format!("source '{}'; complete -C 'cairn daemon st'", fish_file.display());
        let completed = shell("fish", &["--no-config", "-c", &program]);
        let mut words: Vec<&str> = completed.lines().map(|l| l.split('\t').next().unwrap_or(l)).collect();
        words.sort_unstable();
        assert_eq!(words, ["start", "status", "stop"], "{completed}");
    }
}

#[test]
fn a_shell_cairn_has_no_completion_for_is_a_usage_error_naming_the_ones_it_has() {
    let home = tempfile::tempdir().unwrap();
    let out = bare(home.path(), &["completions", "tcsh"]).expect(2);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("invalid value 'tcsh'"), "{}", out.stderr);
    assert!(out.stderr.contains("[possible values: bash, elvish, fish, powershell, zsh]"), "{}", out.stderr);
    let out = bare(home.path(), &["completions"]).expect(2);
    assert!(out.stderr.contains("<SHELL>"), "{}", out.stderr);
}

/// `groff -man -Tutf8` of a page, with every warning on: the rendered text, its lines long enough
/// that none is broken or justified and its spaces collapsed; a warning fails.
#[track_caller]
fn render(page: &Path) -> String {
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-rLL=1000n"])
        .arg(page)
        .output()
        .expect("groff (groff-base)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "groff on {}: {stderr}", page.display());
    // Bold and underline are overstrikes in groff's tty output ("c\bc"); the text without them.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut plain = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    let plain = plain.replace(['\u{2010}', '\u{2212}'], "-");
    plain.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_man_page_renders_with_every_command() {
    let home = tempfile::tempdir().unwrap();
    let out = bare(home.path(), &["man"]).expect(0);
    assert!(out.stdout.contains(".TH cairn 1 "), "{}", &out.stdout[..out.stdout.len().min(300)]);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("cairn.1");
    std::fs::write(&page, &out.stdout).unwrap();

    // In ASCII, the help's other characters escaped, so plain groff (no preconv) reads them.
    assert!(out.stdout.is_ascii(), "{}", out.stdout);
    let text = render(&page);
    assert!(text.contains("(workflow snapshots, plans, \u{2026})"), "{text}");
    assert!(text.contains("cairn - Durable, approved, reproducible workflow runs"), "{text}");
    let commands: Vec<String> =
        cairn::cli::Cli::command().get_subcommands().map(|s| format!("cairn-{}(1)", s.get_name())).collect();
    assert!(commands.len() > 30, "{commands:?}");
    for c in &commands {
        assert!(text.contains(c.as_str()), "the page lists no {c}:\n{text}");
    }
    assert!(text.contains("CAIRN_HOME"), "{text}");

    // man itself reads it too (man-db), as `cairn man | man -l -` does.
    let out = Command::new("man").arg("-l").arg(&page).env("MANPAGER", "cat").env("MANWIDTH", "100").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUBCOMMANDS"));
}

/// Every command's full name as its man page is called (`cairn-workflow-add`), at any depth.
fn page_names(cmd: &clap::Command, prefix: &str, names: &mut Vec<String>) {
    let name = format!("{prefix}{}", cmd.get_name());
    names.push(format!("{name}.1"));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        page_names(sub, &format!("{name}-"), names);
    }
}

#[test]
fn man_out_writes_a_page_for_each_command_at_any_depth() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("share/man/man1");
    let out = bare(home.path(), &["man", "--out", out_dir.to_str().unwrap()]).expect(0);

    let mut expected = Vec::new();
    page_names(&cairn::cli::Cli::command(), "", &mut expected);
    let mut listed: Vec<String> =
        out.stdout.lines().map(|l| Path::new(l).file_name().unwrap().to_string_lossy().into_owned()).collect();
    let mut written: Vec<String> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    for v in [&mut expected, &mut listed, &mut written] {
        v.sort();
    }
    assert_eq!(written, expected);
    assert_eq!(listed, expected, "stdout lists the pages written");
    assert!(out.stderr.contains(&format!("wrote {} man pages into", expected.len())), "{}", out.stderr);

    let run = render(&out_dir.join("cairn-run.1"));
    assert!(run.contains("cairn-run - Run a registered workflow"), "{run}");
    assert!(run.contains("--resume-interrupted"), "{run}");
    let man = render(&out_dir.join("cairn-man.1"));
    assert!(man.contains("(cairn-run.1, cairn-workflow-add.1, \u{2026}) into DIR"), "{man}");
    let add = render(&out_dir.join("cairn-workflow-add.1"));
    assert!(add.contains("The folder holding workflow.toml"), "{add}");

    // A folder it cannot make is a usage error naming it.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"").unwrap();
    let out = bare(home.path(), &["man", "--out", blocker.join("man1").to_str().unwrap()]).expect(2);
    assert!(out.stderr.contains(&blocker.join("man1").display().to_string()), "{}", out.stderr);
}

/// The PATH of this test process without any folder holding a `cairn`, so the binary under test
/// is not on it (python3 and the rest the example's tools need stay).
fn path_without_cairn() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).filter(|d| !d.join("cairn").exists()).collect();
    std::env::join_paths(dirs).unwrap()
}

#[test]
fn quickstart_from_a_checkout_ends_saying_how_to_put_cairn_on_the_path() {
    let c = Cairn::new();
    let out = Out::of(
        c.command(&["quickstart"]).env("PATH", path_without_cairn()).output().unwrap(),
        "quickstart",
        std::time::Duration::ZERO,
    )
    .expect(0);
    let bin = Cairn::bin().canonicalize().unwrap();
    let hint = out.stderr.rsplit("\n\n").next().unwrap();
    assert!(
        hint.starts_with(&format!("`cairn` is not on your PATH (this one is {})", bin.display())),
        "{}",
        out.stderr
    );
    // The checkout named is the one this build came from.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().parent().unwrap().canonicalize().unwrap();
    let install = format!(" in {}:\n  cargo install --locked --path crates/cairn\n", checkout.display());
    assert!(hint.contains(&install), "{hint}");
    assert!(hint.contains("scripts/install.sh"), "{hint}");
    // The rest stays: the runs, then what to try next.
    assert!(out.stderr.contains("release-validation@1.2.0"), "{}", out.stderr);
    assert!(out.stderr.contains("\nNext:\n  cairn runs"), "{}", out.stderr);

    // Run as the `cairn` the PATH finds, it has nothing to add.
    let mut path = vec![bin.parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(&path_without_cairn()));
    let out = Out::of(
        c.command(&["quickstart"]).env("PATH", std::env::join_paths(path).unwrap()).output().unwrap(),
        "quickstart",
        std::time::Duration::ZERO,
    )
    .expect(0);
    assert!(!out.stderr.contains("PATH"), "{}", out.stderr);
    assert!(out.stderr.trim_end().ends_with("# the same runs in the read-only web app"), "{}", out.stderr);
}
