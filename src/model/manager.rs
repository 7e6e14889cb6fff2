//! stacksync as a writer to Kubernetes (the shared vocabulary): the field manager of its writes
//! and the prefix of its labels and annotations, the applier crate's `Manager` made of them.

use std::sync::LazyLock;

use applier::ssa::Manager;

/// The field manager of every write, objects and status alike.
pub const FIELD_MANAGER: &str = "stacksync";
/// The prefix of the label and annotations on applied objects (`stacksync.io/owner`,
/// `stacksync.io/policy`, `stacksync.io/force`, `stacksync.io/recreate-on-immutable`).
pub const LABEL_PREFIX: &str = "stacksync.io";
/// The owner label on every applied object (what [`manager`] names it).
pub const OWNER_LABEL: &str = "stacksync.io/owner";

static MANAGER: LazyLock<Manager> = LazyLock::new(|| Manager::new(FIELD_MANAGER, LABEL_PREFIX));

/// stacksync as the applier's [`Manager`]: made once, a clone shares it (no allocation per
/// apply).
pub fn manager() -> Manager {
    MANAGER.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacksync_writes_as_it_always_did() {
        let m = manager();
        assert_eq!(
            (m.field_manager(), m.owner_label(), m.policy_annotation(), m.force_annotation(), m.recreate_annotation()),
            ("stacksync", OWNER_LABEL, "stacksync.io/policy", "stacksync.io/force", "stacksync.io/recreate-on-immutable")
        );
    }
}
