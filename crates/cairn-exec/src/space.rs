//! How much room is left on the filesystems an attempt wrote to, read (`statvfs`) once it ended,
//! so the engine can tell a tool that failed because its output disk was full
//! ([`cairn_core::cause::cause_of`] judges; this only looks). The step agent reads the same facts
//! on a target (`agent_follow.py`, `disk_space`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cairn_core::cause::DiskSpace;

/// The filesystems holding `paths` (each a file or folder, or a path not made yet: its nearest
/// existing folder counts), once each, in the order first met. A path nothing of which can be
/// read is left out: what cannot be seen proves nothing.
pub fn disk_space<P: AsRef<Path>>(paths: &[P]) -> Vec<DiskSpace> {
    let mut seen: Vec<DiskSpace> = Vec::new();
    for path in paths {
        let Some(disk) = existing(path.as_ref()).and_then(|p| space_of(&p)) else { continue };
        if !seen.iter().any(|d| d.path == disk.path) {
            seen.push(disk);
        }
    }
    seen
}

/// `path`, or the nearest folder above it that exists, with its links resolved (a mount point is
/// found by walking up the real path).
fn existing(path: &Path) -> Option<PathBuf> {
    path.ancestors().find_map(|p| std::fs::canonicalize(p).ok())
}

/// The filesystem holding `path` (an existing, canonical path): its mount point and free room.
fn space_of(path: &Path) -> Option<DiskSpace> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    // The libc types are u64 on 64-bit Linux and narrower elsewhere: `as` widens either.
    let frsize = (stat.fragment_size() as u64).max(1);
    let free_bytes = (stat.blocks_available() as u64).saturating_mul(frsize);
    // A filesystem that allocates inodes as it goes (btrfs) reports none at all: it never runs
    // out of them on their own.
    let free_inodes = (stat.files() > 0).then(|| stat.files_available() as u64);
    Some(DiskSpace { path: mount_point(path).display().to_string(), free_bytes, free_inodes })
}

/// The topmost folder above `path` on the same device: the filesystem's mount point, the disk a
/// person frees room on. A folder that cannot be read above it ends the walk there.
fn mount_point(path: &Path) -> PathBuf {
    let Ok(dev) = std::fs::metadata(path).map(|m| m.dev()) else { return path.to_path_buf() };
    let mut top = path;
    while let Some(parent) = top.parent() {
        match std::fs::metadata(parent) {
            Ok(m) if m.dev() == dev => top = parent,
            _ => break,
        }
    }
    top.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_not_made_yet_counts_as_its_nearest_folder_and_each_disk_is_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        let disks = disk_space(&[real.join("steps/a/out.bin"), real.clone(), PathBuf::from("/proc/self")]);
        let here = &disks[0];
        assert!(real.starts_with(&here.path), "{} holds {}", here.path, real.display());
        assert!(here.free_bytes > 0, "{here:?}");
        assert_eq!(disks.iter().filter(|d| d.path == here.path).count(), 1, "{disks:?}");
        assert!(disks.iter().any(|d| d.path == "/proc"), "another filesystem is listed too: {disks:?}");
        assert_eq!(mount_point(Path::new("/")), PathBuf::from("/"));
    }
}
