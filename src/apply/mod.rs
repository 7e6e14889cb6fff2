//! Apply: puts rendered objects in place on a target and reports what happened per object.
//! Today's target is a directory of manifests (for users who hydrate a Git repository, and for a
//! quickstart without a cluster).

pub mod changeset;
pub mod directory;
pub mod order;
pub mod ssa;

pub use changeset::{Action, ChangeSet, Entry, ObjectRef, SkipReason};
pub use directory::DirectoryTarget;
