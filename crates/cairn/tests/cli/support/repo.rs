//! What the tests use from the repository around the crate: the bundled example workflow and the
//! test venv (ipykernel, nbformat, the MCP SDK, Snakemake, schemathesis) that scripts/test.sh
//! creates.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::ci;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A path under the bundled example, `examples/release-validation` (`1.1.0`, `inputs/ready.json`…).
pub fn example(rel: &str) -> PathBuf {
    repo().join("examples/release-validation").join(rel)
}

/// The bundled example's steps, in execution order.
pub const EXAMPLE_STEPS: [&str; 6] = [
    "load_manifest",
    "inspect_artifacts",
    "run_unit_tests",
    "run_compatibility",
    "inspect_deployment",
    "generate_evidence",
];

/// Where the test venv is: `CAIRN_TEST_VENV`, else `<repo>/.venv`. Whether it must exist is up to
/// each caller (some tests skip without it outside CI).
pub fn venv_dir() -> PathBuf {
    std::env::var_os("CAIRN_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| repo().join(".venv"))
}

/// The test venv, which must exist: a missing one fails the test, it never skips.
#[track_caller]
pub fn venv() -> PathBuf {
    let v = venv_dir();
    assert!(
        v.join("bin/python").exists(),
        "no test venv at {} (run scripts/test.sh, which creates it, or set CAIRN_TEST_VENV){}",
        v.display(),
        if ci() { "; CI requires it" } else { "" }
    );
    v
}

/// The test venv's python (see [`venv`]).
#[track_caller]
pub fn python() -> PathBuf {
    venv().join("bin/python")
}

/// Validates a notebook with the test venv's `nbformat` (as written, no conversion) and returns
/// it.
#[track_caller]
pub fn validate_notebook(nb: &Path) -> Value {
    let script = "import nbformat, sys\n\
         nb = nbformat.read(sys.argv[1], as_version=nbformat.NO_CONVERT)\n\
         nbformat.validate(nb)\n\
         print(nb.nbformat, nb.nbformat_minor)\n";
    let out = Command::new(python()).arg("-c").arg(script).arg(nb).output().unwrap();
    assert!(
        out.status.success(),
        "{} does not validate with nbformat:\n{}",
        nb.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(nb).unwrap()).unwrap()
}
