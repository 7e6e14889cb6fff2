//! The Kubernetes target's settings (`target: kubernetes:` of the config in force, defaults for a
//! directory target), read through the config rather than copied: a reconcile reads them a few
//! dozen times.

use std::sync::Arc;

use crate::config::{Config, KubernetesTarget, Target};

/// The Kubernetes target of a config (defaults for a directory target).
pub(super) fn target(config: &Config) -> KubernetesTarget {
    settings(config).clone()
}

/// [`target`] by reference.
fn settings(config: &Config) -> &KubernetesTarget {
    static DEFAULTS: std::sync::OnceLock<KubernetesTarget> = std::sync::OnceLock::new();
    match &config.target {
        Target::Kubernetes(k) => k,
        Target::Directory(_) => DEFAULTS.get_or_init(KubernetesTarget::default),
    }
}

/// The Kubernetes target's settings of one config, read through it.
pub(super) struct Settings(pub(super) Arc<Config>);

impl std::ops::Deref for Settings {
    type Target = KubernetesTarget;

    fn deref(&self) -> &KubernetesTarget {
        settings(&self.0)
    }
}
