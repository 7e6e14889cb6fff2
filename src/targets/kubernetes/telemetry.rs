//! What a Cluster's reconcile tells the metrics (`crate::telemetry`): its result and reason,
//! how long it took, and what the applier did per object. Labels are the subscription, the
//! status reason and the object action: bounded, never a Cluster or object name.

use std::time::Duration;

use super::Error;
use super::reconcile::Reconciled;
use crate::model::ClusterKey;
use crate::telemetry::{Outcome, metrics};
use applier::Action;

/// Records one reconcile of `key`. Nothing is recorded for a Cluster no subscription covers.
pub(super) fn reconciled(key: &ClusterKey, result: Result<&Option<Reconciled>, &Error>, elapsed: Duration) {
    let m = metrics();
    let r = match result {
        Ok(Some(r)) => r,
        Ok(None) => {
            m.forget_cluster(key);
            return;
        }
        // The ClusterSync could not be read or written: no subscription at hand for a label.
        Err(e) => {
            m.reconciled(key, "", "", Outcome::Error(e.reason()), elapsed);
            return;
        }
    };
    let sub = r.report.subscription.as_str();
    let status = &r.report.status;
    // A failed sync is written to the ClusterSync like any other state: not ready, with its
    // reason; `error` is kept for reconciles that could not write at all.
    let outcome = if status.ready {
        Outcome::Ready
    } else if r.stalled {
        Outcome::Stalled(status.reason.as_str())
    } else {
        Outcome::NotReady(status.reason.as_str())
    };
    let release = status.wanted_release.as_ref().or(status.applied_release.as_ref()).map_or("", |r| r.tag.as_str());
    m.reconciled(key, sub, release, outcome, elapsed);
    for (action, name) in [
        (Action::Created, "created"),
        (Action::Configured, "configured"),
        (Action::Unchanged, "unchanged"),
        (Action::Pruned, "pruned"),
        (Action::Failed, "failed"),
        (Action::Skipped(applier::SkipReason::Held), "skipped"),
    ] {
        let n = r.report.changes.count(action);
        if n > 0 {
            m.objects(sub, name, n as u64);
        }
    }
}
