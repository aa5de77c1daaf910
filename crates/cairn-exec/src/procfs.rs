//! What `/proc/<pid>/stat` says of a process: its state, its process group and its start time.
//! The one reader of that file, for identity (pid and start time), zombies and group membership;
//! and of `/proc/<pid>/environ`, for the attempt nonce a process was started with.

/// The fields of `/proc/<pid>/stat` Cairn reads.
pub(crate) struct Stat {
    /// Field 3: `R`, `S`, `Z` (zombie), `X` (dead), …
    pub state: char,
    /// Field 5: the process group.
    pub pgrp: i32,
    /// Field 22: clock ticks since boot when the process started.
    pub start_time: u64,
}

impl Stat {
    /// A zombie or a dead process: it runs nothing and only waits for its parent to reap it.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// The process's stat, if it exists.
pub(crate) fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (comm) is parenthesised and may itself hold spaces and parentheses: count from the
    // last ')'. The field after it is field 3 (state), so field 5 is the 3rd and field 22 the 20th.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Whether the process's environment (as it was at its exec: `/proc/<pid>/environ`) holds the
/// entry `name=value` exactly. False when it cannot be read: gone, a zombie, or another user's.
pub(crate) fn environ_has(pid: u32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry))
}

/// The pids of every process `/proc` lists.
pub(crate) fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_alive_in_its_own_group() {
        let me = stat(std::process::id()).unwrap();
        assert!(!me.is_dead());
        assert_eq!(me.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(me.start_time > 0);
        assert!(pids().contains(&std::process::id()));
    }

    #[test]
    fn an_environment_entry_is_matched_whole() {
        let child = std::process::Command::new("sleep")
            .arg("5")
            .env_clear()
            .env("CAIRN_ATTEMPT_NONCE", "atn_1")
            .spawn()
            .unwrap();
        let pid = child.id();
        // The environment is the exec's: read it once the child has exec'd.
        let mut seen = false;
        for _ in 0..200 {
            seen = environ_has(pid, b"CAIRN_ATTEMPT_NONCE=atn_1");
            if seen {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(seen);
        assert!(!environ_has(pid, b"CAIRN_ATTEMPT_NONCE=atn_"));
        assert!(!environ_has(pid, b"CAIRN_ATTEMPT_NONCE=atn_12"));
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(!environ_has(pid, b"CAIRN_ATTEMPT_NONCE=atn_1"), "a reaped process carries nothing");
    }
}
