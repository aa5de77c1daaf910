//! The tool sandbox: runs one tool attempt as a real process with a scrubbed environment, in its own
//! process group, with its JSON arguments on stdin, a timeout (SIGTERM to the group, a grace period,
//! then SIGKILL), bounded stdout that must hold one JSON value, and a bounded stderr tail. The
//! attempt's outcome is classified by `cairn_core::status::classify_exit`.

pub mod agent;
pub mod kernel;
pub mod sandbox;
pub mod ssh;

pub use sandbox::*;
pub mod reap;
pub use reap::*;
