//! Fleet rollouts: a cluster-stack subscription with `rollout:` moves its Clusters to the
//! newest release it offers, wave by wave, by editing each Cluster's `spec.topology.class`
//! (and `spec.topology.version` when the release's Kubernetes version differs). The per-Cluster
//! reconciler then runs the release's upgrade stages and applies its addons, and Cluster API
//! upgrades the control plane; a wave is done when each of its Clusters is there and healthy.
//!
//! The state lives in the target release's `StackRelease` (`status.rollout`, its own field
//! manager), so a restart resumes where it stopped. `plan/` decides, pure (the waves, which
//! Cluster is done, waiting or failed, when a wave times out, what a round does next, with
//! `now` passed in); `driver.rs` reads the fleet, acts on the decisions and writes the status,
//! when releases change and every `checkInterval`, and carries `stacksync rollout
//! pause|resume`; `error.rs` is what the driver can fail at.
//!
//! The Cluster is written with a JSON merge patch carrying its `resourceVersion`, not with
//! server-side apply: users and GitOps tools own `spec.topology` (they created the Cluster),
//! and an SSA field manager of ours would become a co-owner that their next apply conflicts
//! with (or silently takes over with `force`). The merge patch changes the values once, fails
//! if someone wrote the Cluster in between (re-read at the next check), and leaves ownership
//! where it was. A Cluster whose class is changed back during its wave pauses the rollout
//! (`ClassChanged`) instead of fighting over it.

mod driver;
mod error;
mod plan;
mod versions;

pub(super) use driver::run;
pub use driver::{PlanReport, plan_report, request};
pub use error::Error;
pub use plan::{Health, judge, plan};
pub(super) use versions::KubernetesVersions;

/// Field manager of `status.rollout`, and of the Cluster edits.
pub const ROLLOUT_MANAGER: &str = "stacksync-rollout";
