//! The files a step produces: its declared outputs (`outputs = { report = "report.html", plots =
//! "plots/" }`, relative to the step's directory, a trailing `/` for a folder) and the artifacts
//! recorded of them when an attempt completes (one per file: where it is, how big, its SHA-256).
//!
//! A downstream step's `${steps.X.outputs.NAME}` runs with the output's absolute path, but is
//! signed with the output's content digest ([`output_marker`]), so a step's signature says which
//! bytes it consumed, not where they happened to lie.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A declared output of a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputDecl {
    pub name: String,
    /// Relative to the step's directory, without a trailing `/`.
    pub path: String,
    /// Declared with a trailing `/`: every file below it is an artifact.
    pub folder: bool,
}

/// Why an output declaration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("output name `{0}` is not valid: use 1 to 64 of A-Z a-z 0-9 _ -")]
    Name(String),
    #[error(
        "output `{name}` has path `{path}`: give a path relative to the step's directory, without `..`, `.` or empty parts (a trailing `/` declares a folder)"
    )]
    Path { name: String, path: String },
}

impl OutputDecl {
    /// Parses a declaration as written: `name = "path"`, a trailing `/` for a folder.
    pub fn parse(name: &str, path: &str) -> Result<OutputDecl, OutputError> {
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(OutputError::Name(name.to_string()));
        }
        let folder = path.ends_with('/');
        let trimmed = path.strip_suffix('/').unwrap_or(path);
        let bad = || OutputError::Path { name: name.to_string(), path: path.to_string() };
        if trimmed.is_empty() || trimmed.starts_with('/') || trimmed.contains('\0') || trimmed.contains('\\') {
            return Err(bad());
        }
        if trimmed.split('/').any(|part| matches!(part, "" | "." | "..")) {
            return Err(bad());
        }
        Ok(OutputDecl { name: name.to_string(), path: trimmed.to_string(), folder })
    }

    /// Whether the two cover a common file (the same path, or one inside the other's folder).
    pub fn overlaps(&self, other: &OutputDecl) -> bool {
        let inside = |a: &OutputDecl, b: &OutputDecl| b.folder && a.path.starts_with(&format!("{}/", b.path));
        self.path == other.path || inside(self, other) || inside(other, self)
    }

    /// The path as declared (`plots/` for a folder).
    pub fn declared(&self) -> String {
        if self.folder { format!("{}/", self.path) } else { self.path.clone() }
    }
}

/// A file an attempt produced, hashed where it lies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// The declared output it belongs to.
    pub name: String,
    /// Relative to the run directory (`steps/<step>/report.html`).
    pub path: String,
    pub bytes: u64,
    /// For a file, the SHA-256 of its bytes; for a symlink, [`link_digest`] of its target.
    pub sha256: String,
    /// A symlink's target, as written (never followed): the artifact is the link itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// What a symlink artifact is recorded and checked as: the SHA-256 of its target's text behind a
/// prefix no text file of a pipeline starts with, so a link and a file never pass for each other
/// by accident. `bytes` of a link is its target's length.
pub fn link_digest(target: &str) -> String {
    crate::canonical::sha256_hex(format!("symlink\0{target}").as_bytes())
}

/// An artifact as recorded, with the step and attempt that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub run_id: crate::ids::RunId,
    pub step_id: String,
    /// The attempt that produced the bytes (in the run that produced them).
    pub attempt: u32,
    #[serde(flatten)]
    pub artifact: Artifact,
    /// For a replay child: the run whose attempt produced the bytes (the first of its lineage).
    pub reused_from: Option<crate::ids::RunId>,
    pub recorded_at: i64,
}

/// A step's directory, relative to its run directory.
pub fn step_dir(step_id: &str) -> String {
    format!("steps/{step_id}")
}

/// Where a declared output lies, relative to the run directory (`steps/<step>/plots` for a
/// folder).
pub fn output_path(step_id: &str, decl: &OutputDecl) -> String {
    format!("{}/{}", step_dir(step_id), decl.path)
}

/// The content digest of one output, from the step's artifacts (those of other outputs are
/// ignored): its file's SHA-256, or for a folder the SHA-256 over its files' relative paths and
/// digests (an empty folder has one too).
pub fn output_digest(decl: &OutputDecl, step_id: &str, artifacts: &[Artifact]) -> String {
    let mine = artifacts.iter().filter(|a| a.name == decl.name);
    if !decl.folder
        && let Some(a) = mine.clone().next()
    {
        return a.sha256.clone();
    }
    let base = format!("{}/", output_path(step_id, decl));
    let mut files: Vec<(&str, &str)> =
        mine.map(|a| (a.path.strip_prefix(&base).unwrap_or(&a.path), a.sha256.as_str())).collect();
    files.sort();
    let mut h = Sha256::new();
    for (path, sha) in files {
        h.update(path.as_bytes());
        h.update([0]);
        h.update(sha.as_bytes());
        h.update([b'\n']);
    }
    hex::encode(h.finalize())
}

/// What `${steps.X.outputs.NAME}` stands for in a step's signature: the output's content digest.
pub fn output_marker(digest: &str) -> Value {
    Value::String(format!("sha256:{digest}"))
}

/// What `${steps.X.outputs.NAME}` signs as: the content digest of step X's output `NAME`, from the
/// artifacts recorded of it (`None` when X declares no such output).
pub fn signed_output(decls: &[OutputDecl], step_id: &str, name: &str, artifacts: &[Artifact]) -> Option<Value> {
    let decl = decls.iter().find(|d| d.name == name)?;
    Some(output_marker(&output_digest(decl, step_id, artifacts)))
}

/// What `${steps.X.outputs.NAME}` runs with: the output's absolute path under `run_dir` (a string;
/// a folder's without its trailing `/`).
pub fn output_argument(decls: &[OutputDecl], run_dir: &str, step_id: &str, name: &str) -> Option<Value> {
    let decl = decls.iter().find(|d| d.name == name)?;
    Some(Value::String(format!("{}/{}", run_dir.trim_end_matches('/'), output_path(step_id, decl))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_relative_and_a_trailing_slash_is_a_folder() {
        assert_eq!(
            OutputDecl::parse("plots", "plots/").unwrap(),
            OutputDecl { name: "plots".into(), path: "plots".into(), folder: true }
        );
        let report = OutputDecl::parse("report", "out/report.html").unwrap();
        assert!(!report.folder);
        assert_eq!(report.declared(), "out/report.html");
        for bad in ["", "/", "/abs", "../up", "a/../b", "a//b", "./a", "a\\b"] {
            assert!(OutputDecl::parse("x", bad).is_err(), "{bad:?}");
        }
        assert!(matches!(OutputDecl::parse("bad name", "x"), Err(OutputError::Name(_))));
    }

    #[test]
    fn a_folder_digest_covers_its_files_names_and_bytes() {
        let decl = OutputDecl::parse("plots", "plots/").unwrap();
        let a = |p: &str, sha: &str| Artifact {
            name: "plots".into(),
            path: format!("steps/s/plots/{p}"),
            bytes: 1,
            sha256: sha.into(),
            link: None,
        };
        let (x, y) = (a("x.png", "11"), a("y.png", "22"));
        let d = output_digest(&decl, "s", &[x.clone(), y.clone()]);
        assert_eq!(d, output_digest(&decl, "s", &[y.clone(), x.clone()]), "order does not matter");
        assert_ne!(d, output_digest(&decl, "s", std::slice::from_ref(&x)));
        assert_ne!(d, output_digest(&decl, "s", &[x.clone(), a("z.png", "22")]), "names matter");
        assert_ne!(output_digest(&decl, "s", &[]), d);
        let file = OutputDecl::parse("report", "r.html").unwrap();
        let r = Artifact {
            name: "report".into(),
            path: "steps/s/r.html".into(),
            bytes: 1,
            sha256: "ab".into(),
            link: None,
        };
        assert_eq!(output_digest(&file, "s", &[x.clone(), r]), "ab", "only the output's own artifacts count");
        assert_eq!(output_digest(&decl, "s", &[x.clone(), y.clone()]), output_digest(&decl, "s", &[x, y]));
    }
}
