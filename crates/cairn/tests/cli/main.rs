//! The boundary tests of the `cairn` binary, in one test crate: every test drives the real binary
//! (its CLI, its daemon's HTTP API, its MCP servers, its web app) with a private state root.
//!
//! One crate, not one per file, so the helpers in [`support`] are compiled and linked once and an
//! unused one shows as a warning. A test `foo` of `replay.rs` runs as `replay::foo` of the `cli`
//! binary (`cargo nextest run -p cairn -E 'test(/^replay::/)'`).

mod support;

mod access;
mod api;
mod bad_input;
mod conformance;
mod controllers;
mod daemon;
mod docs;
mod doctor;
mod evidence;
mod faults;
mod full_disk;
mod guide;
mod install;
mod jobs;
mod jupyter;
mod kernel;
mod layers;
mod limits;
mod load;
mod mcp;
mod outcomes;
mod pipelines;
mod plans;
mod postgres;
mod quotas;
mod recovery;
mod reference;
mod registry;
mod remote;
mod replay;
mod rocrate;
mod scale;
mod scheduling;
mod schemathesis;
mod secrets;
mod snapshots;
mod targets;
mod team;
mod verify;
mod webapp;
