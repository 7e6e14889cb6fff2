//! The Kubernetes target's one-shot commands, apart from the reconcile they reuse: `diff.rs`
//! (`stacksync diff`), `render.rs` (`stacksync render` against the management cluster),
//! `preview/` (`stacksync preview`) and `adopt.rs` (`stacksync adopt cso`). Each renders a
//! Cluster with the reconcile's own code and reaches the management and workload clusters
//! through `management.rs`, a narrow interface over the controller's context: what a command
//! reads, renders and dry-runs, never the caches a running controller keeps between reconciles.
//! Each command's output for people (text, markdown, JSON) is written beside it.

pub mod adopt;
pub mod diff;
mod management;
pub mod preview;
pub mod render;
