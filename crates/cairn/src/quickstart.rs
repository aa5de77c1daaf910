//! `cairn quickstart`: registers the bundled release-validation example (1.0.0, 1.1.0 and 1.2.0)
//! and runs 1.2.0 twice, once READY and once BLOCKED, so a new user sees the whole loop: what
//! the steps found, the evidence report they wrote (an artifact, with its SHA-256), the verdict.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use cairn_engine::Engine;
use rust_embed::RustEmbed;
use serde_json::json;

use crate::Failure;
use crate::follow::submit_and_follow;
use crate::input::read_input;
use crate::output::{print_json, print_run};
use crate::wire::{SubmitRun, to_value};

/// The example's versions, registered in order; the last is the one the quickstart runs.
const VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "1.2.0"];
const RUNS: &str = "1.2.0";

#[derive(RustEmbed)]
#[folder = "../../examples/"]
struct Examples;

/// Writes the bundled examples under `<state>/examples`, replacing an older copy.
fn extract(dest: &Path) -> Result<(), Failure> {
    let io = |p: &Path, e: std::io::Error| Failure::usage(format!("{}: {e}", p.display()));
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(|e| io(dest, e))?;
    }
    for name in Examples::iter() {
        if name.contains("__pycache__") {
            continue;
        }
        let Some(file) = Examples::get(&name) else { continue };
        let to = dest.join(name.as_ref());
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&to, file.data.as_ref()).map_err(|e| io(&to, e))?;
    }
    Ok(())
}

pub fn run(root: &Path, json: bool) -> Result<u8, Failure> {
    let engine = &Engine::open(root)?;
    let dest = engine.state().path().join("examples");
    extract(&dest)?;
    let example = dest.join("release-validation");
    let say = |s: String| {
        if !json {
            eprintln!("{s}");
        }
    };
    say(format!("state root: {}", engine.state().path().display()));
    for version in VERSIONS {
        let added = engine.add_workflow(&crate::input::owner_caller(), &example.join(version))?;
        say(format!(
            "{} release-validation@{version} ({} steps)",
            if added.newly_registered { "registered" } else { "already registered" },
            added.record.spec.steps.len()
        ));
    }
    let mut results = Vec::new();
    for (fixture, expected) in [("ready", "READY"), ("blocked", "BLOCKED")] {
        let input_path = example.join("inputs").join(format!("{fixture}.json"));
        say(format!("\n$ cairn run release-validation@{RUNS} --input {}", input_path.display()));
        let input = read_input(&input_path)?;
        let run = SubmitRun {
            thread_id: "quickstart".into(),
            workflow: Some("release-validation".into()),
            version: Some(RUNS.into()),
            input: Some(input),
            run_id: None,
            replay: None,
            parallel: None,
        };
        let report = submit_and_follow(root, &run, json)?;
        if !json {
            print_run(&report, false);
            for s in &report.run.steps {
                for a in &s.artifacts {
                    eprintln!("  {} wrote {} ({} bytes, sha256 {})", s.step_id, a.path, a.bytes, a.sha256);
                }
            }
        }
        results.push((expected, report));
    }
    let as_expected = results.iter().all(|(expected, r)| r.run.status == *expected);
    if json {
        print_json(&json!({
            "state_root": engine.state().path().display().to_string(),
            "registered": VERSIONS.iter().map(|v| format!("release-validation@{v}")).collect::<Vec<_>>(),
            "runs": results.iter().map(|(_, r)| to_value(&r.run)).collect::<Vec<_>>(),
            "as_expected": as_expected,
        }));
    } else {
        let (ready, blocked) = (&results[0].1.run.run_id, &results[1].1.run.run_id);
        eprintln!("\nNext:");
        eprintln!("  cairn runs                      # every run, newest first");
        eprintln!("  cairn show {blocked}   # the BLOCKED run, its finding and what each step found");
        eprintln!("  cairn artifacts {ready} # the files it wrote, with their SHA-256");
        let evidence = results[0].1.run.steps.iter().flat_map(|s| &s.artifacts).next_back();
        if let Some(a) = evidence {
            let file = Path::new(&results[0].1.run.run_dir).join(&a.path);
            eprintln!("  cairn trace {}   # which run wrote these bytes", file.display());
        }
        eprintln!("  cairn events {ready} # the durable event log");
        eprintln!("  cairn workflow show release-validation@{RUNS}");
        eprintln!("  cairn ui                        # the same runs in the read-only web app");
        let exe = std::env::current_exe().and_then(|e| e.canonicalize());
        if let Some(hint) =
            exe.ok().and_then(|exe| path_hint(&exe, std::env::var_os("PATH").as_deref(), checkout().as_deref()))
        {
            eprintln!("\n{hint}");
        }
    }
    Ok(if as_expected { 0 } else { 3 })
}

/// How to put `cairn` on the PATH, when the binary running is not the `cairn` the PATH finds: the
/// hints above all say `cairn …`, which a checkout's `cargo run -- quickstart` leaves unresolved.
/// `None` when the PATH's `cairn` is this binary. `exe` is canonical; `checkout` is the source
/// checkout a cargo build was built from, if known.
fn path_hint(exe: &Path, path: Option<&OsStr>, checkout: Option<&Path>) -> Option<String> {
    let found = path.and_then(|p| std::env::split_paths(p).map(|d| d.join("cairn")).find(|c| c.is_file()));
    let found = found.map(|f| f.canonicalize().unwrap_or(f));
    if found.as_deref() == Some(exe) {
        return None;
    }
    let not_there = match &found {
        Some(other) => format!("the `cairn` on your PATH is {}, not this one ({})", other.display(), exe.display()),
        None => format!("`cairn` is not on your PATH (this one is {})", exe.display()),
    };
    // A cargo build's folder (target/debug, target/<triple>/release, whatever the target
    // folder's name) holds cargo's fingerprints.
    let cargo_build = exe.parent().is_some_and(|d| d.join(".fingerprint").is_dir());
    Some(if cargo_build {
        let checkout = checkout.map_or("your checkout of Cairn".to_string(), |c| c.display().to_string());
        format!(
            "{not_there}. To put it there, in {checkout}:\n  cargo install --locked --path crates/cairn\n\
             or scripts/install.sh, which adds the shell completions and man pages (docs/src/install.md)."
        )
    } else {
        let dir = exe.parent().unwrap_or(exe).display().to_string();
        format!("{not_there}. To put it there:\n  export PATH=\"{dir}:$PATH\"")
    })
}

/// The source checkout this binary was built from, while it is still there.
fn checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.parent()?;
    root.join("crates/cairn/Cargo.toml").is_file().then(|| root.to_path_buf())
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use super::path_hint;

    /// An executable file named `cairn` at `dir/cairn`, canonical.
    fn binary(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("cairn"), b"").unwrap();
        dir.join("cairn").canonicalize().unwrap()
    }

    /// The same, in a cargo build's folder.
    fn build(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir.join(".fingerprint")).unwrap();
        binary(dir)
    }

    fn path_of(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).unwrap()
    }

    #[test]
    fn a_cargo_build_not_on_the_path_is_told_the_cargo_install_of_its_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let checkout = root.join("cairn");
        let exe = build(&root.join("shared-target/x86_64-unknown-linux-gnu/release"));
        let elsewhere = root.join("bin");
        std::fs::create_dir_all(&elsewhere).unwrap();

        let hint = path_hint(&exe, Some(&path_of(&[&elsewhere])), Some(&checkout)).expect("a hint");
        assert!(hint.starts_with(&format!("`cairn` is not on your PATH (this one is {})", exe.display())), "{hint}");
        let install = format!("in {}:\n  cargo install --locked --path crates/cairn\n", checkout.display());
        assert!(hint.contains(&install), "{hint}");
        assert!(hint.contains("scripts/install.sh"), "{hint}");
        let hint = path_hint(&exe, None, None).unwrap();
        assert!(hint.contains("in your checkout of Cairn:\n  cargo install --locked --path crates/cairn"), "{hint}");

        // Another `cairn` first on the PATH (an older install) is named.
        let old = binary(&root.join("old"));
        let hint = path_hint(&exe, Some(&path_of(&[old.parent().unwrap(), exe.parent().unwrap()])), None).unwrap();
        assert!(hint.starts_with(&format!("the `cairn` on your PATH is {}", old.display())), "{hint}");

        // On the PATH, directly or through a symlink: nothing to say.
        assert_eq!(path_hint(&exe, Some(&path_of(&[&elsewhere, exe.parent().unwrap()])), None), None);
        std::os::unix::fs::symlink(&exe, elsewhere.join("cairn")).unwrap();
        assert_eq!(path_hint(&exe, Some(&path_of(&[&elsewhere])), Some(&checkout)), None);
    }

    #[test]
    fn a_binary_outside_a_build_is_told_to_add_its_folder_to_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let exe = binary(&tmp.path().join("opt/cairn/bin"));
        let hint = path_hint(&exe, None, None).expect("a hint");
        let dir = exe.parent().unwrap().display().to_string();
        assert!(hint.ends_with(&format!("export PATH=\"{dir}:$PATH\"")), "{hint}");
    }
}
