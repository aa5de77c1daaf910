//! The IO of artifacts on this host: hashing a completed attempt's declared outputs where they
//! lie, checking recorded artifacts against their bytes, and materialising a source run's
//! artifacts into a replay child's directory (a hard link where the filesystem allows, else a
//! copy), checked against the recorded SHA-256. The step agent does the same on a target
//! (`agent_artifacts.py`'s `outputs`, `check` and `materialize`, over `agent_files.py`'s hashing and
//! walk), with the same rules and words.
//!
//! **Invariant:** nothing here follows a symlink. An output, or anything inside an output folder,
//! that is a symlink is refused with a clear error, so a step cannot record (or a replay copy)
//! bytes from outside its own directory.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use cairn_core::artifact::{Artifact, OutputDecl, link_digest, output_path};
use cairn_core::pipeline::JobFile;
use cairn_core::replay::Found;
use sha2::{Digest, Sha256};

/// Why a completed attempt's outputs cannot be recorded. Each is the step's error, as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputFault {
    #[error("declared output {name} ({declared}) was not written")]
    NotWritten { name: String, declared: String },
    #[error(
        "declared output {name} ({declared}) is {found} at {path}: Cairn records only regular files, and a symlink is never followed; write the file itself there"
    )]
    NotAFile { name: String, declared: String, path: String, found: &'static str },
    #[error("declared output {name} ({declared}) is a folder; declare it as `{declared}/` or write a file there")]
    FolderForFile { name: String, declared: String },
    #[error(
        "declared output {name} ({declared}) is a file; declare it without the trailing `/` or write a folder there"
    )]
    FileForFolder { name: String, declared: String },
    #[error("declared output {name} ({declared}): {path} cannot be read: {error}")]
    Unreadable { name: String, declared: String, path: String, error: String },
    #[error("declared output {name} ({declared}): file name {path:?} is not UTF-8; rename it")]
    NotUtf8 { name: String, declared: String, path: String },
}

/// SHA-256 of a file and its size, read in 1 MiB pieces.
pub fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        h.update(&buf[..n]);
    }
    Ok((bytes, hex::encode(h.finalize())))
}

fn kind_of(meta: &fs::Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_symlink() {
        "a symlink"
    } else if ft.is_dir() {
        "a folder"
    } else if ft.is_file() {
        "a file"
    } else {
        "not a regular file (a device, socket or pipe)"
    }
}

/// The first component of `rel` below `root` that is a symlink, if any (`rel` itself included).
pub fn symlinked_component(root: &Path, rel: &str) -> Option<PathBuf> {
    let mut at = root.to_path_buf();
    for part in Path::new(rel).components() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Some(at),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Hashes the declared outputs of `step_id`, as written under `run_dir`: one artifact per file
/// (a folder's files in path order), paths relative to `run_dir`.
pub fn hash_outputs(run_dir: &Path, step_id: &str, decls: &[OutputDecl]) -> Result<Vec<Artifact>, OutputFault> {
    let mut out = Vec::new();
    for decl in decls {
        let (name, declared) = (decl.name.clone(), decl.declared());
        let rel = output_path(step_id, decl);
        let abs = run_dir.join(&rel);
        if let Some(link) = symlinked_component(run_dir, &rel) {
            return Err(OutputFault::NotAFile { name, declared, path: link.display().to_string(), found: "a symlink" });
        }
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(OutputFault::NotWritten { name, declared }),
            Err(e) => {
                return Err(OutputFault::Unreadable {
                    name,
                    declared,
                    path: abs.display().to_string(),
                    error: e.to_string(),
                });
            }
        };
        match (decl.folder, meta.is_dir(), meta.is_file()) {
            (false, true, _) => return Err(OutputFault::FolderForFile { name, declared }),
            (true, false, true) => return Err(OutputFault::FileForFolder { name, declared }),
            (false, _, true) => out.push(hash_one(decl, &abs, rel)?),
            (true, true, _) => {
                let mut files = Vec::new();
                walk(&abs, &rel, &[], false, &mut |child, path, meta| {
                    if !meta.is_file() {
                        let found = kind_of(meta);
                        let path = path.display().to_string();
                        return Err(OutputFault::NotAFile {
                            name: decl.name.clone(),
                            declared: decl.declared(),
                            path,
                            found,
                        });
                    }
                    files.push((path, child));
                    Ok(())
                })
                .map_err(|fault| output_fault(&decl.name, decl.declared(), fault))?;
                // By relative path, byte order (as the agent sorts them on a target).
                files.sort_by(|a, b| a.1.cmp(&b.1));
                for (abs, rel) in files {
                    out.push(hash_one(decl, &abs, rel)?);
                }
            }
            _ => {
                let found = kind_of(&meta);
                return Err(OutputFault::NotAFile { name, declared, path: abs.display().to_string(), found });
            }
        }
    }
    Ok(out)
}

fn hash_one(decl: &OutputDecl, abs: &Path, rel: String) -> Result<Artifact, OutputFault> {
    let (bytes, sha256) = hash_file(abs).map_err(|e| OutputFault::Unreadable {
        name: decl.name.clone(),
        declared: decl.declared(),
        path: abs.display().to_string(),
        error: e.to_string(),
    })?;
    Ok(Artifact { name: decl.name.clone(), path: rel, bytes, sha256, link: None })
}

/// Why a [`walk`] stopped: a folder or entry that could not be read, a name that is not UTF-8 (a
/// recorded path is text), or what the visitor refused.
enum WalkFault<E> {
    Unreadable(PathBuf, io::Error),
    NotUtf8(PathBuf),
    Refused(E),
}

/// The one walk of a folder: `visit` sees every entry below `top` that is not a folder, with its
/// path relative to the walk's root (`rel` is top's, "" for the root itself), its path and its
/// `symlink_metadata` (a symlink is an entry, never followed), depth first. `exclude` names
/// top-level entries passed over. The first fault ends the walk, unless `lenient`: then what cannot
/// be read, and a name that is not UTF-8, is passed over. The agent's `walk` does the same.
fn walk<E>(
    top: &Path,
    rel: &str,
    exclude: &[&str],
    lenient: bool,
    visit: &mut dyn FnMut(String, PathBuf, &fs::Metadata) -> Result<(), E>,
) -> Result<(), WalkFault<E>> {
    let mut stack = vec![(top.to_path_buf(), rel.to_string())];
    while let Some((dir, rel)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if lenient => continue,
            Err(e) => return Err(WalkFault::Unreadable(dir, e)),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(_) if lenient => continue,
                Err(e) => return Err(WalkFault::Unreadable(dir, e)),
            };
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(String::from) else {
                if lenient {
                    continue;
                }
                return Err(WalkFault::NotUtf8(path));
            };
            if rel.is_empty() && exclude.contains(&name.as_str()) {
                continue;
            }
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(_) if lenient => continue,
                Err(e) => return Err(WalkFault::Unreadable(path, e)),
            };
            if meta.is_dir() {
                stack.push((path, child));
            } else {
                visit(child, path, &meta).map_err(WalkFault::Refused)?;
            }
        }
    }
    Ok(())
}

/// A walk's fault as the output `name` (`declared`) cannot be recorded.
fn output_fault(name: &str, declared: String, fault: WalkFault<OutputFault>) -> OutputFault {
    let name = name.to_string();
    match fault {
        WalkFault::Unreadable(path, e) => {
            OutputFault::Unreadable { name, declared, path: path.display().to_string(), error: e.to_string() }
        }
        WalkFault::NotUtf8(path) => OutputFault::NotUtf8 { name, declared, path: path.display().to_string() },
        WalkFault::Refused(fault) => fault,
    }
}

/// A recorded path is relative to its run directory and stays inside it: no `..`, no root.
pub fn safe_relative(rel: &str) -> bool {
    !rel.is_empty() && Path::new(rel).components().all(|c| matches!(c, Component::Normal(_)))
}

/// What is at a recorded artifact's path under `run_dir` now: `None` when it is the recorded
/// bytes. A symlink (anywhere on the path) is not the recorded file.
pub fn check_artifact(run_dir: &Path, path: &str, sha256: &str) -> Option<Found> {
    if !safe_relative(path) {
        return Some(Found::Missing);
    }
    match symlinked_component(run_dir, path) {
        // The recorded artifact may be the link itself: its target's text is what it holds.
        Some(link) if link == run_dir.join(path) => {
            return match fs::read_link(&link) {
                Ok(target) => {
                    let found = link_digest(&target.to_string_lossy());
                    (found != sha256).then_some(Found::Changed { sha256: found })
                }
                Err(_) => Some(Found::Missing),
            };
        }
        Some(_) => return Some(Found::Missing),
        None => {}
    }
    let abs = run_dir.join(path);
    match fs::symlink_metadata(&abs) {
        Ok(m) if m.is_file() => {}
        _ => return Some(Found::Missing),
    }
    match hash_file(&abs) {
        Ok((_, found)) if found == sha256 => None,
        Ok((_, found)) => Some(Found::Changed { sha256: found }),
        Err(_) => Some(Found::Missing),
    }
}

/// One file to materialise: its path (relative to both run directories) and recorded SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    pub path: String,
    pub sha256: String,
}

/// How a materialisation went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Materialized {
    pub linked: usize,
    pub copied: usize,
    /// Already there with the recorded bytes (a restarted replay).
    pub present: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaterializeError {
    #[error("recorded artifact path `{0}` is not inside its run directory")]
    BadPath(String),
    #[error(
        "artifact {path} of run directory {from} is not the recorded bytes ({found}); plan the replay again, and the step is re-executed"
    )]
    Changed { from: String, path: String, found: String },
    #[error("artifact {path} cannot be materialised into {to}: {error}")]
    Io { to: String, path: String, error: String },
    #[error("{path} cannot be written: {why}")]
    Conflict { path: String, why: String },
}

/// A file given whole: written where it is absent, checked where it is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: String,
    pub content: Vec<u8>,
    pub sha256: String,
}

/// What to put into a directory, from another one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Carry<'a> {
    /// Files by the same relative path in both directories, with their recorded SHA-256.
    pub files: &'a [Carried],
    /// Folders to create (declared folder outputs, which may be empty).
    pub dirs: &'a [String],
    /// Hard-link where the filesystem allows (artifacts); `false` always copies (a working copy
    /// must never share an inode with the registry's snapshot).
    pub link: bool,
    /// A marker, relative to the destination: when it exists the files are there already (and may
    /// have been changed since, by a pipeline) and are left alone; it is written once they are.
    pub once: Option<&'a str>,
    /// Files given whole (a run's configuration).
    pub write: &'a [Written],
}

/// Materialises `carry.files` from `from` into `to`, and creates `carry.dirs`. Each file is hard
/// linked (when `carry.link`) where the filesystem allows, else copied, and its bytes are checked
/// against the recorded SHA-256 before it takes its place; one already there with those bytes is
/// left alone.
pub fn materialize(from: &Path, to: &Path, carry: &Carry<'_>) -> Result<Materialized, MaterializeError> {
    let io_err = |path: &str, e: io::Error| io_error(to, path, e);
    let checked = |rel: &str| checked_dest(to, rel);
    let mut done = Materialized::default();
    for dir in carry.dirs {
        fs::create_dir_all(checked(dir)?).map_err(|e| io_err(dir, e))?;
    }
    write_given(to, carry.write, &mut done)?;
    if let Some(marker) = carry.once
        && checked(marker)?.is_file()
    {
        done.present += carry.files.len();
        return Ok(done);
    }
    for f in carry.files {
        let dest = checked(&f.path)?;
        if check_artifact(to, &f.path, &f.sha256).is_none() {
            done.present += 1;
            continue;
        }
        let src = from.join(&f.path);
        if let Some(target) = recorded_link(from, &f.path, &f.sha256) {
            // A recorded symlink: made again with its target's text, never followed.
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent).map_err(|e| io_err(&f.path, e))?;
            }
            place_link(&target, &dest).map_err(|e| io_err(&f.path, e))?;
            done.copied += 1;
            continue;
        }
        if let Some(found) = check_source(from, &f.path) {
            return Err(MaterializeError::Changed {
                from: from.display().to_string(),
                path: f.path.clone(),
                found: found.to_string(),
            });
        }
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err(&f.path, e))?;
        }
        // One name per file: a materialisation killed midway leaves it, and the next one (the
        // replay continued) replaces it.
        let tmp = dest.with_file_name(format!(
            ".{}.cairn-materialize",
            dest.file_name().and_then(|n| n.to_str()).unwrap_or("artifact")
        ));
        let _ = fs::remove_file(&tmp);
        let linked = carry.link && fs::hard_link(&src, &tmp).is_ok();
        if !linked {
            fs::copy(&src, &tmp).map_err(|e| io_err(&f.path, e))?;
        }
        // The bytes taking the file's place are the recorded ones, or nothing takes it.
        match hash_file(&tmp) {
            Ok((_, sha)) if sha == f.sha256 => {}
            Ok((_, sha)) => {
                let _ = fs::remove_file(&tmp);
                return Err(MaterializeError::Changed {
                    from: from.display().to_string(),
                    path: f.path.clone(),
                    found: format!("sha256 {sha}"),
                });
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(io_err(&f.path, e));
            }
        }
        fs::rename(&tmp, &dest).map_err(|e| io_err(&f.path, e))?;
        if linked {
            done.linked += 1;
        } else {
            done.copied += 1;
        }
    }
    if let Some(marker) = carry.once {
        let dest = checked(marker)?;
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err(marker, e))?;
        }
        let tmp = dest.with_extension("tmp");
        let listing: Vec<String> = carry.files.iter().map(|f| format!("{}  {}", f.sha256, f.path)).collect();
        fs::write(&tmp, listing.join("\n") + "\n")
            .and_then(|_| fs::rename(&tmp, &dest))
            .map_err(|e| io_err(marker, e))?;
    }
    Ok(done)
}

/// Files given whole (a run's configuration), into `to`: written where absent (whole or not at
/// all), counted as present where they are already those bytes, refused where other bytes are.
fn write_given(to: &Path, write: &[Written], done: &mut Materialized) -> Result<(), MaterializeError> {
    let io_err = |path: &str, e: io::Error| io_error(to, path, e);
    for w in write {
        let dest = checked_dest(to, &w.path)?;
        if cairn_core::canonical::sha256_hex(&w.content) != w.sha256 {
            return Err(MaterializeError::Conflict {
                path: w.path.clone(),
                why: "its content is not its checksum".into(),
            });
        }
        match check_artifact(to, &w.path, &w.sha256) {
            None => done.present += 1,
            Some(Found::Missing) if !dest.exists() => {
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent).map_err(|e| io_err(&w.path, e))?;
                }
                // Whole or not at all: written beside it, then linked in (which, like a new file,
                // never replaces one), so a kill midway leaves no half file to conflict with.
                let tmp = dest.with_file_name(format!(
                    ".{}.partial",
                    dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                ));
                let written = fs::write(&tmp, &w.content)
                    .and_then(|_| fs::File::open(&tmp)?.sync_all())
                    .and_then(|_| fs::hard_link(&tmp, &dest));
                let _ = fs::remove_file(&tmp);
                written.map_err(|e| io_err(&w.path, e))?;
                done.copied += 1;
            }
            Some(found) => {
                return Err(MaterializeError::Conflict {
                    path: w.path.clone(),
                    why: format!("it is there with other content ({found}), not the approved one"),
                });
            }
        }
    }
    Ok(())
}

fn io_error(to: &Path, path: &str, e: io::Error) -> MaterializeError {
    MaterializeError::Io { to: to.display().to_string(), path: path.to_string(), error: e.to_string() }
}

/// The files under `work_dir` that are not the `baseline` (path relative to `work_dir`, SHA-256):
/// created, or changed, by the pipeline that ran there. Each is an artifact named by its path
/// relative to `work_dir`, its path relative to the run directory `prefix/<name>`. The top-level
/// entries `exclude` (the controller's own state) are passed over; a symlink or a special file is
/// refused, naming it.
pub fn changed_files(
    work_dir: &Path,
    prefix: &str,
    baseline: &[Carried],
    exclude: &[&str],
) -> Result<Vec<Artifact>, OutputFault> {
    let fault = |path: &Path, e: io::Error| OutputFault::Unreadable {
        name: "pipeline".into(),
        declared: "its working copy".into(),
        path: path.display().to_string(),
        error: e.to_string(),
    };
    let known: std::collections::HashMap<&str, &str> =
        baseline.iter().map(|c| (c.path.as_str(), c.sha256.as_str())).collect();
    let mut files = Vec::new();
    walk(work_dir, "", exclude, false, &mut |child, path, meta| {
        if !(meta.is_file() || meta.file_type().is_symlink()) {
            let (path, found) = (path.display().to_string(), kind_of(meta));
            return Err(OutputFault::NotAFile {
                name: "pipeline".into(),
                declared: "its working copy".into(),
                path,
                found,
            });
        }
        files.push((child, path));
        Ok(())
    })
    .map_err(|fault| output_fault("pipeline", "its working copy".into(), fault))?;
    files.sort();
    let mut out = Vec::new();
    for (name, abs) in files {
        // A symlink is recorded as what it is, its target's text; never followed, so a link out of
        // the working copy records nothing of what it points at, and one to a file inside it
        // leaves that file to be recorded once, as itself.
        if fs::symlink_metadata(&abs).map_err(|e| fault(&abs, e))?.file_type().is_symlink() {
            let target = fs::read_link(&abs).map_err(|e| fault(&abs, e))?.to_string_lossy().into_owned();
            let sha256 = link_digest(&target);
            out.push(Artifact {
                path: format!("{prefix}/{name}"),
                name,
                bytes: target.len() as u64,
                sha256,
                link: Some(target),
            });
            continue;
        }
        let (bytes, sha256) = hash_file(&abs).map_err(|e| fault(&abs, e))?;
        if known.get(name.as_str()) == Some(&sha256.as_str()) {
            continue;
        }
        out.push(Artifact { path: format!("{prefix}/{name}"), name, bytes, sha256, link: None });
    }
    Ok(out)
}

/// The digest of a controller's own record of its jobs (Snakemake's `.snakemake/metadata`, one
/// file per output it made): SHA-256 over each file's relative path and SHA-256, in path order.
/// `None` when the folder is not there. Recorded with a pipeline step's completion, so a replay
/// carries that record only while it is still those bytes.
pub fn state_digest(dir: &Path) -> io::Result<Option<String>> {
    let files = match plain_files(dir) {
        Ok(files) => files,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut listing = String::new();
    for (name, path) in files {
        let (_, sha) = hash_file(&path)?;
        listing.push_str(&format!("{sha}  {name}\n"));
    }
    Ok(Some(cairn_core::canonical::sha256_hex(listing.as_bytes())))
}

/// The regular files in folder `dir` itself (a symlink is none; a name that is not UTF-8 is
/// passed over), by name, with their paths.
fn plain_files(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = fs::symlink_metadata(entry.path())?;
        if meta.is_file()
            && let Some(name) = entry.file_name().to_str()
        {
            files.push((name.to_string(), entry.path()));
        }
    }
    files.sort();
    Ok(files)
}

/// How a seeded working copy's marker starts: what was carried follows, as JSON, on that line.
pub const SEEDED_MARK: &str = "#seeded ";

/// A pipeline step's working copy seeded from an earlier run's, for a replay that re-executes
/// it: what to carry, from where.
#[derive(Debug, Clone)]
pub struct Seed<'a> {
    /// The earlier run's working copy of the step.
    pub from: &'a Path,
    /// The files that step recorded (its artifacts, by path in the working copy), with their
    /// SHA-256: carried while they are those bytes, left out otherwise (so the controller remakes
    /// them).
    pub files: &'a [Carried],
    /// The controller's own record of its jobs, relative to the working copy
    /// (`.snakemake/metadata`), and the digest recorded for it: carried only whole and unchanged;
    /// without it no output is carried (the controller could not tell what is up to date).
    pub state: Option<(&'a str, &'a str)>,
}

/// How a seeded working copy was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seeded {
    /// Files carried from the earlier run (its outputs and, unchanged, the pipeline's own files).
    pub carried: usize,
    /// Recorded outputs left out, each with why.
    pub left_out: Vec<(String, String)>,
    /// Whether the controller's record of its jobs came along.
    pub state: bool,
    /// Already made (a restarted attempt): nothing was copied.
    pub present: bool,
}

/// Makes a pipeline's working copy `to` from its snapshot `snapshot` (the files `baseline`, with
/// the run's `write` files, as [`materialize`] does) seeded from `seed`: a baseline file still
/// those bytes in the earlier copy, each recorded output still its recorded bytes, and the
/// controller's record are copied from there with their modification times, so the controller
/// judges them as it would have in place; anything else comes from the snapshot or is left out.
/// Every copy is a copy (`fs::copy`: a reflink where the filesystem offers one), never a link
/// into the earlier run, and is checked before it takes its place. Made once: `marker` says so.
pub fn seed_working_copy(
    snapshot: &Path,
    to: &Path,
    baseline: &[Carried],
    write: &[Written],
    marker: &str,
    seed: &Seed<'_>,
) -> Result<Seeded, MaterializeError> {
    let io_err = |path: &str, e: io::Error| io_error(to, path, e);
    if !safe_relative(marker) {
        return Err(MaterializeError::BadPath(marker.to_string()));
    }
    if to.join(marker).is_file() {
        return Ok(Seeded { present: true, ..Seeded::default() });
    }
    let mut done = Seeded::default();
    // The controller's record first: without it, no output is carried.
    let mut state_files: Vec<String> = Vec::new();
    if let Some((dir, recorded)) = seed.state
        && safe_relative(dir)
        && symlinked_component(seed.from, dir).is_none()
    {
        match state_digest(&seed.from.join(dir)) {
            Ok(Some(found)) if found == recorded => {
                let files = plain_files(&seed.from.join(dir)).unwrap_or_default();
                state_files = files.into_iter().map(|(name, _)| format!("{dir}/{name}")).collect();
                done.state = true;
            }
            Ok(_) => {}
            Err(e) => return Err(io_err(dir, e)),
        }
    }
    let mut copied: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for f in baseline {
        let dest = checked_dest(to, &f.path)?;
        let from_earlier = done.state && check_artifact(seed.from, &f.path, &f.sha256).is_none();
        let src = if from_earlier { seed.from } else { snapshot };
        copy_checked(&src.join(&f.path), &dest, Some(&f.sha256), from_earlier).map_err(|e| match e {
            CopyFault::Io(e) => io_err(&f.path, e),
            CopyFault::Changed(found) => MaterializeError::Changed {
                from: snapshot.display().to_string(),
                path: f.path.clone(),
                found: format!("sha256 {found}"),
            },
        })?;
        if from_earlier {
            done.carried += 1;
        }
        copied.insert(f.path.as_str());
    }
    for f in seed.files {
        if copied.contains(f.path.as_str()) {
            continue;
        }
        if !done.state {
            done.left_out.push((f.path.clone(), "the pipeline's record of its jobs changed or is missing".into()));
            continue;
        }
        let why = match check_artifact(seed.from, &f.path, &f.sha256) {
            None => None,
            Some(Found::Missing) => Some("missing, or reached through a symlink".to_string()),
            Some(Found::Changed { sha256 }) => {
                Some(format!("its bytes changed (sha256 {})", cairn_core::canonical::short_hash(&sha256)))
            }
            Some(other) => Some(other.to_string()),
        };
        if let Some(why) = why {
            done.left_out.push((f.path.clone(), why));
            continue;
        }
        let dest = checked_dest(to, &f.path)?;
        match copy_checked(&seed.from.join(&f.path), &dest, Some(&f.sha256), true) {
            Ok(()) => done.carried += 1,
            // Changed between the check and the copy: left out like any changed file.
            Err(CopyFault::Changed(found)) => done.left_out.push((
                f.path.clone(),
                format!("its bytes changed (sha256 {})", cairn_core::canonical::short_hash(&found)),
            )),
            Err(CopyFault::Io(e)) => return Err(io_err(&f.path, e)),
        }
    }
    for rel in &state_files {
        let dest = checked_dest(to, rel)?;
        copy_checked(&seed.from.join(rel), &dest, None, true).map_err(|e| match e {
            CopyFault::Io(e) => io_err(rel, e),
            CopyFault::Changed(_) => {
                MaterializeError::Conflict { path: rel.clone(), why: "it changed while it was copied".into() }
            }
        })?;
        done.carried += 1;
    }
    // The run's own files (its configuration), then the marker: the copy is made.
    let carry = Carry { write, ..Carry::default() };
    materialize(snapshot, to, &carry)?;
    let dest = checked_dest(to, marker)?;
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| io_err(marker, e))?;
    }
    let tmp = dest.with_extension("tmp");
    let counts =
        serde_json::json!({"carried": done.carried, "left_out": done.left_out, "state": done.state, "present": false});
    let mut listing = vec![format!("{SEEDED_MARK}{counts}")];
    listing.extend(baseline.iter().map(|f| format!("{}  {}", f.sha256, f.path)));
    fs::write(&tmp, listing.join("\n") + "\n").and_then(|_| fs::rename(&tmp, &dest)).map_err(|e| io_err(marker, e))?;
    Ok(done)
}

fn checked_dest(to: &Path, rel: &str) -> Result<PathBuf, MaterializeError> {
    if !safe_relative(rel) || symlinked_component(to, rel).is_some() {
        return Err(MaterializeError::BadPath(rel.to_string()));
    }
    Ok(to.join(rel))
}

enum CopyFault {
    Io(io::Error),
    /// The copy is not the expected bytes: its SHA-256.
    Changed(String),
}

/// Copies `src` to `dest` through a file beside it (a kill midway leaves no half file in its
/// place), checked against `sha256` when given, keeping `src`'s modification time when
/// `keep_time`. A file already at `dest` with those bytes is left alone.
fn copy_checked(src: &Path, dest: &Path, sha256: Option<&str>, keep_time: bool) -> Result<(), CopyFault> {
    let meta = fs::symlink_metadata(src).map_err(CopyFault::Io)?;
    if meta.file_type().is_symlink() {
        // A recorded symlink: made again with its target's text (and its time), never followed.
        let target = fs::read_link(src).map_err(CopyFault::Io)?.to_string_lossy().into_owned();
        let found = link_digest(&target);
        if sha256.is_some_and(|sha| sha != found) {
            return Err(CopyFault::Changed(found));
        }
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(CopyFault::Io)?;
        }
        place_link(&target, dest).map_err(CopyFault::Io)?;
        if keep_time {
            let t = |s: i64, ns: i64| nix::sys::time::TimeSpec::new(s, ns);
            use std::os::unix::fs::MetadataExt;
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                dest,
                &t(meta.atime(), meta.atime_nsec()),
                &t(meta.mtime(), meta.mtime_nsec()),
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .map_err(|e| CopyFault::Io(e.into()))?;
        }
        return Ok(());
    }
    if let Some(sha) = sha256
        && fs::symlink_metadata(dest).is_ok_and(|m| m.is_file())
        && hash_file(dest).is_ok_and(|(_, found)| found == sha)
    {
        return Ok(());
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(CopyFault::Io)?;
    }
    if !meta.is_file() {
        return Err(CopyFault::Io(io::Error::other(format!("{} is not a regular file", src.display()))));
    }
    let tmp =
        dest.with_file_name(format!(".{}.cairn-seed", dest.file_name().and_then(|n| n.to_str()).unwrap_or("file")));
    let _ = fs::remove_file(&tmp);
    fs::copy(src, &tmp).map_err(CopyFault::Io)?;
    if let Some(sha) = sha256 {
        match hash_file(&tmp) {
            Ok((_, found)) if found == sha => {}
            Ok((_, found)) => {
                let _ = fs::remove_file(&tmp);
                return Err(CopyFault::Changed(found));
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(CopyFault::Io(e));
            }
        }
    }
    if keep_time {
        let times = fs::FileTimes::new().set_modified(meta.modified().map_err(CopyFault::Io)?);
        fs::File::open(&tmp).and_then(|f| f.set_times(times)).map_err(CopyFault::Io)?;
    }
    fs::rename(&tmp, dest).map_err(CopyFault::Io)
}

/// What a finished pipeline job's outputs hold now, under its working directory `work_dir`:
/// each file's size and SHA-256, a symlink's target text (never followed), a folder's files one
/// by one (in path order), and a path that is not there (a `temp()` output removed already, or
/// one reached through a symlinked folder) with nothing. The agent's `files` does the same on a
/// target.
pub fn job_files(work_dir: &Path, paths: &[String]) -> Vec<JobFile> {
    let bare = |path: &str| JobFile { path: path.to_string(), bytes: None, sha256: None, link: None };
    let mut out = Vec::new();
    for rel in paths {
        let rel = rel.trim_end_matches('/');
        if !safe_relative(rel) {
            out.push(bare(rel));
            continue;
        }
        if let Some(link) = symlinked_component(work_dir, rel) {
            if link == work_dir.join(rel) {
                let target = fs::read_link(&link).ok().map(|t| t.to_string_lossy().into_owned());
                out.push(JobFile { link: target, ..bare(rel) });
            } else {
                out.push(bare(rel));
            }
            continue;
        }
        let abs = work_dir.join(rel);
        match fs::symlink_metadata(&abs) {
            Ok(m) if m.is_file() => out.push(file_entry(&abs, rel)),
            Ok(m) if m.is_dir() => {
                let mut found = Vec::new();
                // What cannot be read (gone already) is passed over; other kinds are not files.
                let _ = walk(&abs, rel, &[], true, &mut |child, path, meta| {
                    if meta.file_type().is_symlink() {
                        let link = fs::read_link(&path).ok().map(|t| t.to_string_lossy().into_owned());
                        found.push(JobFile { path: child, bytes: None, sha256: None, link });
                    } else if meta.is_file() {
                        found.push(file_entry(&path, &child));
                    }
                    Ok::<(), std::convert::Infallible>(())
                });
                found.sort_by(|a, b| a.path.cmp(&b.path));
                out.extend(found);
            }
            _ => out.push(bare(rel)),
        }
    }
    out
}

fn file_entry(abs: &Path, rel: &str) -> JobFile {
    match hash_file(abs) {
        Ok((bytes, sha256)) => JobFile { path: rel.to_string(), bytes: Some(bytes), sha256: Some(sha256), link: None },
        Err(_) => JobFile { path: rel.to_string(), bytes: None, sha256: None, link: None },
    }
}

/// The target of the symlink at `root/rel` when it is the recorded one: `rel` itself a link
/// (reached through no other) whose [`link_digest`] is `sha256`.
fn recorded_link(root: &Path, rel: &str, sha256: &str) -> Option<String> {
    let at = root.join(rel);
    if symlinked_component(root, rel)? != at {
        return None;
    }
    let target = fs::read_link(&at).ok()?.to_string_lossy().into_owned();
    (link_digest(&target) == sha256).then_some(target)
}

/// Makes the symlink `dest` → `target` through a link beside it, renamed into place, so a kill
/// midway leaves no half-made entry in its place.
fn place_link(target: &str, dest: &Path) -> io::Result<()> {
    let tmp =
        dest.with_file_name(format!(".{}.cairn-link", dest.file_name().and_then(|n| n.to_str()).unwrap_or("link")));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    fs::rename(&tmp, dest)
}

/// Whether the source file can be carried: a regular file reached without a symlink.
fn check_source(from: &Path, rel: &str) -> Option<&'static str> {
    if symlinked_component(from, rel).is_some() {
        return Some("a symlink");
    }
    match fs::symlink_metadata(from.join(rel)) {
        Ok(m) if m.is_file() => None,
        Ok(_) => Some("not a regular file"),
        Err(_) => Some("missing"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(name: &str, path: &str) -> OutputDecl {
        OutputDecl::parse(name, path).unwrap()
    }

    #[test]
    fn outputs_of_every_kind_are_hashed_or_refused_with_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let step = run.join("steps/s");
        fs::create_dir_all(step.join("plots/sub")).unwrap();
        fs::create_dir_all(step.join("empty")).unwrap();
        fs::write(step.join("report.html"), b"<h1>ok</h1>").unwrap();
        fs::write(step.join("plots/b.png"), b"b").unwrap();
        fs::write(step.join("plots/sub/a.png"), b"a").unwrap();
        let got =
            hash_outputs(run, "s", &[decl("report", "report.html"), decl("plots", "plots/"), decl("empty", "empty/")])
                .unwrap();
        let paths: Vec<&str> = got.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(paths, ["steps/s/report.html", "steps/s/plots/b.png", "steps/s/plots/sub/a.png"]);
        assert_eq!(got[0].bytes, 11);
        assert_eq!(got[0].sha256, cairn_core::canonical::sha256_hex(b"<h1>ok</h1>"));

        let err = |d: OutputDecl| hash_outputs(run, "s", &[d]).unwrap_err().to_string();
        assert_eq!(err(decl("missing", "missing.txt")), "declared output missing (missing.txt) was not written");
        assert!(err(decl("report", "report.html/")).contains("is a file"));
        assert!(err(decl("plots", "plots")).contains("is a folder"));
        std::os::unix::fs::symlink("/etc/passwd", step.join("plots/escape.png")).unwrap();
        let e = err(decl("plots", "plots/"));
        assert!(e.contains("is a symlink at") && e.contains("escape.png"), "{e}");
        std::os::unix::fs::symlink("/etc", step.join("linked")).unwrap();
        assert!(err(decl("passwd", "linked/passwd")).contains("is a symlink"), "a symlinked parent is refused too");
    }

    #[test]
    fn materialising_links_or_copies_checked_bytes_and_refuses_changed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("src"), dir.path().join("child"));
        fs::create_dir_all(from.join("steps/s")).unwrap();
        fs::write(from.join("steps/s/r.txt"), b"evidence").unwrap();
        let sha = cairn_core::canonical::sha256_hex(b"evidence");
        let files = [Carried { path: "steps/s/r.txt".into(), sha256: sha.clone() }];
        let dirs = ["steps/s/plots".to_string()];
        let done =
            materialize(&from, &to, &Carry { files: &files, dirs: &dirs, link: true, ..Carry::default() }).unwrap();
        assert_eq!((done.linked, done.copied, done.present), (1, 0, 0));
        assert!(to.join("steps/s/plots").is_dir());
        assert_eq!(fs::read(to.join("steps/s/r.txt")).unwrap(), b"evidence");
        // Again (a restarted replay): nothing to do.
        let carry = Carry { files: &files, link: true, ..Carry::default() };
        assert_eq!(materialize(&from, &to, &carry).unwrap().present, 1);
        assert_eq!(check_artifact(&to, "steps/s/r.txt", &sha), None);

        let other = dir.path().join("other");
        fs::write(from.join("steps/s/r.txt"), b"edited").unwrap();
        let e = materialize(&from, &other, &carry).unwrap_err();
        assert!(matches!(e, MaterializeError::Changed { .. }), "{e}");
        assert!(!other.join("steps/s/r.txt").exists(), "changed bytes never take the artifact's place");
        assert!(matches!(check_artifact(&from, "steps/s/r.txt", &sha), Some(Found::Changed { .. })));
        fs::remove_file(from.join("steps/s/r.txt")).unwrap();
        assert_eq!(check_artifact(&from, "steps/s/r.txt", &sha), Some(Found::Missing));
        let bad = [Carried { path: "../r.txt".into(), sha256: sha }];
        let bad = Carry { files: &bad, ..Carry::default() };
        assert!(matches!(materialize(&from, &other, &bad), Err(MaterializeError::BadPath(_))));
    }

    #[test]
    fn a_finished_jobs_outputs_are_hashed_links_kept_as_links_and_folders_walked() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path();
        fs::create_dir_all(work.join("out/dir/sub")).unwrap();
        fs::write(work.join("out/a.txt"), "abc").unwrap();
        fs::write(work.join("out/dir/sub/b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("a.txt", work.join("out/a.link")).unwrap();
        std::os::unix::fs::symlink("/etc", work.join("escape")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", work.join("out/dir/outside")).unwrap();
        let paths: Vec<String> =
            ["out/a.txt", "out/a.link", "out/dir/", "gone.tmp", "escape/passwd", "../up"].map(String::from).into();
        let found = job_files(work, &paths);
        let words: Vec<String> = found
            .iter()
            .map(|f| format!("{} {:?} {:?} {:?}", f.path, f.bytes, f.sha256.as_deref().map(|s| &s[..8]), f.link))
            .collect();
        assert_eq!(
            words,
            [
                r#"out/a.txt Some(3) Some("ba7816bf") None"#,
                r#"out/a.link None None Some("a.txt")"#,
                r#"out/dir/outside None None Some("/etc/hostname")"#,
                r#"out/dir/sub/b.txt Some(1) Some("3e23e816") None"#,
                "gone.tmp None None None",
                "escape/passwd None None None",
                "../up None None None",
            ]
        );
    }

    #[test]
    fn a_working_copy_is_copied_once_with_its_run_config_and_its_changes_are_the_outputs() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (snap, work) = (dir.path().join("snapshot"), dir.path().join("run/steps/p"));
        fs::create_dir_all(snap.join("config")).unwrap();
        fs::write(snap.join("Snakefile"), b"rule all: pass").unwrap();
        fs::write(snap.join("config/config.yaml"), b"n: 1").unwrap();
        let files: Vec<Carried> = ["Snakefile", "config/config.yaml"]
            .iter()
            .map(|p| Carried { path: p.to_string(), sha256: hash_file(&snap.join(p)).unwrap().1 })
            .collect();
        let config = b"{\"n\":2}".to_vec();
        let write = [Written {
            path: ".cairn/config.json".into(),
            sha256: cairn_core::canonical::sha256_hex(&config),
            content: config,
        }];
        let carry =
            Carry { files: &files, link: false, once: Some(".cairn/working-copy"), write: &write, ..Carry::default() };
        let done = materialize(&snap, &work, &carry).unwrap();
        assert_eq!((done.linked, done.copied), (0, 3), "copied, never linked to the snapshot");
        assert_ne!(
            fs::metadata(snap.join("Snakefile")).unwrap().ino(),
            fs::metadata(work.join("Snakefile")).unwrap().ino()
        );
        // The pipeline changes its config and writes results; a later attempt keeps the copy.
        fs::write(work.join("config/config.yaml"), b"n: 3").unwrap();
        fs::create_dir_all(work.join("results")).unwrap();
        fs::write(work.join("results/out.txt"), b"out").unwrap();
        fs::create_dir_all(work.join(".snakemake/log")).unwrap();
        fs::write(work.join(".snakemake/log/x.log"), b"log").unwrap();
        assert_eq!(materialize(&snap, &work, &carry).unwrap().present, 3);
        assert_eq!(fs::read(work.join("config/config.yaml")).unwrap(), b"n: 3", "the working copy is kept");
        let changed = changed_files(&work, "steps/p", &files, &[".snakemake", ".cairn"]).unwrap();
        let names: Vec<(&str, &str)> = changed.iter().map(|a| (a.name.as_str(), a.path.as_str())).collect();
        assert_eq!(
            names,
            [("config/config.yaml", "steps/p/config/config.yaml"), ("results/out.txt", "steps/p/results/out.txt")]
        );
        // Another run config than the approved one is refused.
        let other = [Written {
            path: ".cairn/config.json".into(),
            sha256: cairn_core::canonical::sha256_hex(b"{}"),
            content: b"{}".to_vec(),
        }];
        let e = materialize(&snap, &work, &Carry { write: &other, ..carry }).unwrap_err();
        assert!(matches!(e, MaterializeError::Conflict { .. }), "{e}");
        // Symlinks are recorded as links, never followed: one out of the copy records nothing of
        // what it points at, one to a folder inside it leaves that folder's files recorded once;
        // a special file is still refused.
        std::os::unix::fs::symlink("/etc/passwd", work.join("results/link")).unwrap();
        std::os::unix::fs::symlink("../config", work.join("results/config-link")).unwrap();
        let changed = changed_files(&work, "steps/p", &files, &[".snakemake", ".cairn"]).unwrap();
        let names: Vec<(&str, Option<&str>, u64)> =
            changed.iter().map(|a| (a.name.as_str(), a.link.as_deref(), a.bytes)).collect();
        assert_eq!(
            names,
            [
                ("config/config.yaml", None, 4),
                ("results/config-link", Some("../config"), 9),
                ("results/link", Some("/etc/passwd"), 11),
                ("results/out.txt", None, 3)
            ]
        );
        assert_eq!(changed[2].sha256, link_digest("/etc/passwd"));
        // A recorded link is checked by its target's text, and carried as a link.
        assert_eq!(check_artifact(&work, "results/link", &link_digest("/etc/passwd")), None);
        assert!(check_artifact(&work, "results/link", &link_digest("/etc/shadow")).is_some());
        assert!(
            check_artifact(&work, "results/config-link/config.yaml", &changed[0].sha256).is_some(),
            "not through a link"
        );
        let child = dir.path().join("child");
        let carried = [Carried { path: "results/link".into(), sha256: link_digest("/etc/passwd") }];
        let done = materialize(&work, &child, &Carry { files: &carried, ..Carry::default() }).unwrap();
        assert_eq!(done.copied, 1);
        assert_eq!(fs::read_link(child.join("results/link")).unwrap(), Path::new("/etc/passwd"));
        let forged = [Carried { path: "results/link".into(), sha256: link_digest("/etc/shadow") }];
        assert!(materialize(&work, &dir.path().join("forged"), &Carry { files: &forged, ..Carry::default() }).is_err());
        let fifo = work.join("results/fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = changed_files(&work, "steps/p", &files, &[".snakemake", ".cairn"]).unwrap_err().to_string();
        assert!(e.contains("device, socket or pipe") && e.contains("results/fifo"), "{e}");
    }
}
