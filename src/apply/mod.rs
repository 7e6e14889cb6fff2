//! Apply: puts rendered objects in place and reports what happened per object: the server-side
//! applier (`ssa/`), the apply order, the change set and health. The directory target's writer
//! is `crate::targets::directory`.

pub mod changeset;
pub mod health;
pub mod order;
pub mod ssa;

pub use changeset::{Action, ChangeSet, Entry, ObjectRef, SkipReason};
