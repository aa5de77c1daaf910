//! A small disk that fills: a tmpfs mounted for one test (root only; required in CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ci;

/// A tmpfs mounted on a folder for as long as the guard lives.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as mount(8) takes it) on `dir`, made first. `None` where this
    /// process may not mount (not root), outside CI only.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir: dir.to_path_buf() }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(!ci(), "a tmpfs could not be mounted on {}: {why}", dir.display());
                eprintln!("skipped: a tmpfs could not be mounted on {} (needs root): {why}", dir.display());
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Something still holds it (a test that failed midway): detach it now, gone once freed.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
