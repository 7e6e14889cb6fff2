//! stacksync keeps Cluster API clusters on the cluster-stack releases they subscribe to.
//!
//! The crate is a pipeline, one module per stage: [`config`] -> [`schedule`] -> [`source`] ->
//! [`cache`] -> [`release`] selection -> [`render`] -> [`apply`] -> [`status`], wired by
//! [`controller`], put in place by one of the [`targets`] (Kubernetes, directory) and run by
//! [`runtime`]. [`model`] is the leaf every stage shares: identities and
//! small enums, no I/O.

pub mod cache;
pub mod config;
pub mod console;
pub mod controller;
pub mod model;
pub mod release;
pub mod render;
pub mod runtime;
pub mod schedule;
pub mod source;
pub mod status;
pub mod targets;
pub mod telemetry;
