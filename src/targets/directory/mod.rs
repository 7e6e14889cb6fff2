//! The directory target: rendered manifests in `<root>/<namespace>/<cluster>/` and status files
//! in `<root>/status/`, for users who hydrate a Git repository and for a quickstart with no
//! cluster. `pass.rs` is `run --once` (and `fetch`, `render`); `syncers.rs` the daemon (one
//! syncer per subscription beside the controller's pollers); `sync.rs` one subscription's
//! manifests; `clusterstack.rs` cluster stacks and `render --cluster`; `writer.rs` the files;
//! `status.rs` the status files; `diff.rs` `stacksync diff`.

pub mod clusterstack;
pub mod diff;
mod pass;
mod status;
mod sync;
pub mod syncers;
mod writer;

pub use pass::{pass, pass_scoped, render_to};
pub use status::StatusFileError;
pub use writer::DirectoryTarget;
