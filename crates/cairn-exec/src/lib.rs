//! Cairn's executors, the IO of processes: the tool sandbox (`sandbox`: one attempt as a real
//! process with a scrubbed environment, in its own process group, its JSON arguments on stdin, a
//! timeout — SIGTERM to the group, a grace period, SIGKILL —, bounded stdout holding one JSON
//! value, a bounded stderr tail; the process started by `spawn`), stopping a verified orphan
//! (`reap`: by its recorded pid and start time, or by the attempt nonce in its environment),
//! scratch Jupyter kernels (`kernel`), the SSH transport and the read-only probe (`ssh`), and the
//! step agent on a controller host (`agent`). Process identity is read from `/proc` in one place (`procfs`); the
//! room left on a failed attempt's disks, with `statvfs` (`space`).
//!
//! Nothing here writes the registry or decides what an attempt's end means: the engine does.

// No function over `too-many-lines-threshold` (clippy.toml): a reader finds a concept by its name.
#![warn(clippy::too_many_lines)]

pub mod agent;
pub mod artifacts;
pub mod kernel;
mod procfs;
pub mod reap;
pub mod sandbox;
pub mod space;
mod spawn;
pub mod ssh;

pub use reap::*;
pub use sandbox::*;
pub use space::disk_space;
pub use spawn::{run_this_thread_as_batch, with_normal_policy};
