//! Validation of `target` and of how a subscription selects Cluster API clusters.

use std::collections::BTreeMap;
use std::path::Path;

use super::validate::{Cx, describe};
use super::yaml::{Node, Value};
use super::{ClusterSelector, DriftMode, KubernetesTarget, Target};

/// Default for `target.kubernetes.pruneLimit`.
pub const DEFAULT_PRUNE_LIMIT: usize = 50;
/// Default for `target.kubernetes.notReadyRetry`.
pub const DEFAULT_NOT_READY_RETRY: std::time::Duration = std::time::Duration::from_secs(15);
/// Default for `target.kubernetes.resync`.
pub const DEFAULT_RESYNC: std::time::Duration = std::time::Duration::from_secs(600);
/// Default for `target.kubernetes.requestTimeout`.
pub const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Cx {
    pub(super) fn target(&mut self, node: &Node, base: &Path) -> Option<Target> {
        let f = self.fields(node, "target", &["directory", "kubernetes"])?;
        match (f.get("directory"), f.get("kubernetes")) {
            (Some(_), None) => self.string(&f, "directory").map(|dir| Target::Directory(base.join(dir))),
            (None, Some(k)) => self.kubernetes(k, base).map(Target::Kubernetes),
            (Some(_), Some(k)) => {
                self.error(k.mark, "target", "a target has exactly one kind: `directory` or `kubernetes`, not both");
                None
            }
            (None, None) => {
                self.error(node.mark, "target", "a target needs a kind: `directory: PATH` or `kubernetes: {...}`");
                None
            }
        }
    }

    fn kubernetes(&mut self, node: &Node, base: &Path) -> Option<KubernetesTarget> {
        if node.is_null() || matches!(&node.value, Value::Scalar { text, .. } if text.is_empty()) {
            return Some(KubernetesTarget::default());
        }
        let f = self.fields(
            node,
            "target.kubernetes",
            &[
                "kubeconfig",
                "context",
                "driftMode",
                "pruneLimit",
                "allowEmptyPrune",
                "notReadyRetry",
                "resync",
                "takeBackFrom",
                "requestTimeout",
            ],
        )?;
        let kubeconfig = self.string(&f, "kubeconfig").map(|p| base.join(p));
        let context = self.string(&f, "context");
        let drift_mode = match self.string(&f, "driftMode").as_deref() {
            None | Some("correct") => DriftMode::Correct,
            Some("warn") => DriftMode::Warn,
            Some(other) => {
                let mark = f.get("driftMode").map_or(node.mark, |n| n.mark);
                self.error(mark, &f.path("driftMode"), format!("expected `correct` or `warn`, found `{other}`"));
                DriftMode::Correct
            }
        };
        let prune_limit = match f.get("pruneLimit") {
            Some(n) => match n.scalar_text().and_then(|t| t.parse::<usize>().ok()) {
                Some(v) => v,
                None => {
                    self.error(n.mark, &f.path("pruneLimit"), format!("expected a number of objects, found {}", describe(n)));
                    DEFAULT_PRUNE_LIMIT
                }
            },
            None => DEFAULT_PRUNE_LIMIT,
        };
        let allow_empty_prune = self.bool(&f, "allowEmptyPrune", false);
        let not_ready_retry = self.min_duration(&f, "notReadyRetry", DEFAULT_NOT_READY_RETRY);
        let resync = self.min_duration(&f, "resync", DEFAULT_RESYNC);
        let request_timeout = self.min_duration(&f, "requestTimeout", DEFAULT_REQUEST_TIMEOUT);
        let take_back_from = match f.get("takeBackFrom") {
            None => KubernetesTarget::default().take_back_from,
            Some(n) => match &n.value {
                Value::Seq(items) => items
                    .iter()
                    .filter_map(|i| match i.scalar_text() {
                        Some(t) if !t.is_empty() => Some(t.to_owned()),
                        _ => {
                            self.error(i.mark, &f.path("takeBackFrom"), format!("expected a field manager name, found {}", describe(i)));
                            None
                        }
                    })
                    .collect(),
                _ => {
                    self.error(n.mark, &f.path("takeBackFrom"), format!("expected a list of field manager names, found {}", n.type_name()));
                    Vec::new()
                }
            },
        };
        Some(KubernetesTarget {
            kubeconfig,
            context,
            drift_mode,
            prune_limit,
            allow_empty_prune,
            not_ready_retry,
            resync,
            take_back_from,
            request_timeout,
        })
    }

    /// A duration of at least one second; `default` when absent (and after an error).
    fn min_duration(&mut self, f: &super::validate::Fields<'_>, key: &str, default: std::time::Duration) -> std::time::Duration {
        let Some(n) = f.get(key) else { return default };
        let text = self.string(f, key).unwrap_or_default();
        match crate::model::schedule::parse_duration(&text) {
            Ok(d) if d >= std::time::Duration::from_secs(1) => d,
            Ok(_) => {
                self.error(n.mark, &f.path(key), "must be at least 1s");
                default
            }
            Err(e) => {
                self.error(n.mark, &f.path(key), e);
                default
            }
        }
    }

    pub(super) fn cluster_selector(&mut self, node: &Node, path: &str) -> Option<ClusterSelector> {
        let f = self.fields(node, path, &["matchLabels", "matchStackClass"])?;
        let mut labels = BTreeMap::new();
        if let Some(m) = f.get("matchLabels") {
            match &m.value {
                Value::Map(entries) => {
                    for (k, v) in entries {
                        match (k.scalar_text(), v.scalar_text()) {
                            (Some(k), Some(v)) => {
                                labels.insert(k.to_owned(), v.to_owned());
                            }
                            _ => self.error(v.mark, &f.path("matchLabels"), "expected `label: value` strings"),
                        }
                    }
                }
                _ => self.error(m.mark, &f.path("matchLabels"), format!("expected a mapping, found {}", m.type_name())),
            }
        }
        let match_stack_class = self.bool(&f, "matchStackClass", false);
        if labels.is_empty() && !match_stack_class {
            self.error(node.mark, path, "select clusters with `matchLabels` and/or `matchStackClass: true`");
            return None;
        }
        Some(ClusterSelector { match_labels: labels, match_stack_class })
    }
}
