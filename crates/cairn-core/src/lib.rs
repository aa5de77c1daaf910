//! Cairn's pure domain: the workflow model and its validation, the DAG and its order, canonical
//! hashing, step signatures and run identity, templates and the validator.
//!
//! Nothing here does IO, reads a clock or draws randomness; callers pass those in. Every function
//! fails only on bad input, with an error that says what to fix.

// No function over `too-many-lines-threshold` (clippy.toml): a reader finds a concept by its name.
#![warn(clippy::too_many_lines)]

pub mod access;
pub mod artifact;
pub mod attempt;
pub mod audit;
pub mod canonical;
pub mod cause;
pub mod controller;
pub mod dag;
pub mod docs;
pub mod doctor;
pub mod document;
pub mod event;
pub mod ids;
pub mod job;
pub mod lease;
pub mod parameters;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod quota;
pub mod replay;
pub mod rocrate;
pub mod secret;
pub mod signature;
pub mod status;
pub mod store;
pub mod target;
pub mod template;
pub mod time;
pub mod timeline;
pub mod validator;
pub mod verification;
pub mod waiting;
pub mod workflow;
