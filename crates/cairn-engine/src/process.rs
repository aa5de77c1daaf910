//! Who a process is, as the engine's callers need it: the owner of a run (a daemon, or a CLI
//! executing in-process) and whether a recorded owner is still alive. Identity is the pid and
//! the start time from `/proc`, so a later process that reuses the pid is never mistaken for it.

pub use cairn_core::ids::Owner;

/// This process, as the owner of what it executes.
pub fn this_process() -> Owner {
    let pid = std::process::id();
    Owner { pid, start_time: cairn_exec::process_start_time(pid).unwrap_or(0) }
}

/// Whether `owner` is still that very process (same pid and start time, and not a zombie).
pub fn is_alive(owner: &Owner) -> bool {
    cairn_exec::is_same_process(&cairn_exec::ProcessIdentity {
        pid: owner.pid,
        pgid: owner.pid,
        start_time: Some(owner.start_time),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_start_time_is_not() {
        let me = this_process();
        assert!(is_alive(&me));
        assert!(!is_alive(&Owner { start_time: me.start_time + 1, ..me }));
    }
}
