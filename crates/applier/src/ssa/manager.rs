//! Whose writes these are: the field manager an [`super::Applier`] applies as and the prefix of
//! the label and annotations it writes and reads (fluxcd/pkg's `ssa.Owner`), and which other
//! field managers' fields it takes over. The crate names no product: its user passes both
//! ([`super::ApplyOptions::new`]).

use std::sync::Arc;

/// Who applies: the field manager of every write, and the prefix of the owner label and the
/// per-object annotations. Cheap to clone (the names are made once, by [`Manager::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager(Arc<Names>);

#[derive(Debug, PartialEq, Eq)]
struct Names {
    field_manager: String,
    prefix: String,
    owner_label: String,
    policy_annotation: String,
    force_annotation: String,
    recreate_annotation: String,
}

impl Manager {
    /// Applies as `field_manager`; `prefix` (a DNS subdomain, e.g. `example.com`) names the
    /// owner label `<prefix>/owner` and the annotations `<prefix>/policy`, `<prefix>/force` and
    /// `<prefix>/recreate-on-immutable`.
    pub fn new(field_manager: impl Into<String>, prefix: impl Into<String>) -> Manager {
        let prefix = prefix.into();
        Manager(Arc::new(Names {
            field_manager: field_manager.into(),
            owner_label: format!("{prefix}/owner"),
            policy_annotation: format!("{prefix}/policy"),
            force_annotation: format!("{prefix}/force"),
            recreate_annotation: format!("{prefix}/recreate-on-immutable"),
            prefix,
        }))
    }

    /// The field manager of every apply.
    pub fn field_manager(&self) -> &str {
        &self.0.field_manager
    }

    /// The prefix of the label and the annotations.
    pub fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// `<prefix>/owner`: the label on every applied object; its value is
    /// [`super::owner_label_value`] of the sync's owner. Only objects carrying ours are ever
    /// deleted.
    pub fn owner_label(&self) -> &str {
        &self.0.owner_label
    }

    /// `<prefix>/policy`: per-object policy, `apply` (default), `apply-once` (create if absent,
    /// then leave it) or `ignore`.
    pub fn policy_annotation(&self) -> &str {
        &self.0.policy_annotation
    }

    /// `<prefix>/force`: `"true"` takes ownership of conflicting fields for this object.
    pub fn force_annotation(&self) -> &str {
        &self.0.force_annotation
    }

    /// `<prefix>/recreate-on-immutable`: `"true"` deletes and re-creates this object when the
    /// server refuses a change as immutable.
    pub fn recreate_annotation(&self) -> &str {
        &self.0.recreate_annotation
    }
}

/// Which other field managers' fields an apply takes over without being forced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptionPolicy {
    /// Field managers whose changes to our fields are taken back (people with kubectl); a
    /// conflict with any other manager is reported. Taking whole objects over from another
    /// tool is [`super::Applier::adopt`], which names that tool's manager.
    pub take_back_from: Vec<String>,
}

impl AdoptionPolicy {
    /// Takes back what a person changed with kubectl ([`crate::HAND_MANAGERS`]): the default.
    pub fn hand_edits() -> AdoptionPolicy {
        AdoptionPolicy { take_back_from: crate::HAND_MANAGERS.iter().map(|m| (*m).to_owned()).collect() }
    }

    /// Whether a conflict naming only `managers` is taken back (none named: no).
    pub fn takes_back(&self, managers: &[String]) -> bool {
        !managers.is_empty() && managers.iter().all(|m| self.take_back_from.iter().any(|t| t == m))
    }
}

impl Default for AdoptionPolicy {
    fn default() -> AdoptionPolicy {
        AdoptionPolicy::hand_edits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_names_the_label_and_the_annotations() {
        let m = Manager::new("example-applier", "apply.example.com");
        assert_eq!(
            (m.field_manager(), m.prefix(), m.owner_label(), m.policy_annotation(), m.force_annotation(), m.recreate_annotation()),
            (
                "example-applier",
                "apply.example.com",
                "apply.example.com/owner",
                "apply.example.com/policy",
                "apply.example.com/force",
                "apply.example.com/recreate-on-immutable"
            )
        );
    }

    #[test]
    fn a_conflict_is_taken_back_only_when_every_manager_it_names_is_listed() {
        let policy = AdoptionPolicy { take_back_from: vec!["kubectl-edit".into(), "kubectl".into()] };
        let cases: &[(&[&str], bool)] = &[
            (&[], false),
            (&["kubectl-edit"], true),
            (&["kubectl-edit", "kubectl"], true),
            (&["kubectl-edit", "helm"], false),
            (&["helm"], false),
        ];
        for (managers, taken) in cases {
            let managers: Vec<String> = managers.iter().map(|m| (*m).to_owned()).collect();
            assert_eq!(policy.takes_back(&managers), *taken, "{managers:?}");
        }
        assert!(!AdoptionPolicy { take_back_from: Vec::new() }.takes_back(&["kubectl".into()]));
        assert!(AdoptionPolicy::default().takes_back(&["kubectl-edit".into()]));
    }
}
