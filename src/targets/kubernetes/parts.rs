//! This process's part of each `StackRelease` (`status.shards[]`, keyed by shard name): what its
//! ClusterClass apply gave (written by `stackrelease.rs`) and its Clusters' counts and heartbeat
//! (written by `rollup.rs`), always the whole part at once, with the shard's own field manager,
//! only when it changed or its heartbeat is due.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::status::crd::{ShardStatus, StackRelease, UNSHARDED, shard_manager};
use crate::status::shards::{part_due, stamp};

/// The parts this process wrote, by release; one writer at a time (a part is written whole: two
/// writers at once could each send a part the other had not seen).
#[derive(Default)]
pub(super) struct Parts {
    shard: OnceLock<String>,
    written: tokio::sync::Mutex<HashMap<String, ShardStatus>>,
}

/// The parts as last written, held while one is decided and written.
pub(super) type Written<'a> = tokio::sync::MutexGuard<'a, HashMap<String, ShardStatus>>;

impl Parts {
    /// Names this process's part after its shard (`--shard`); unset, it is [`UNSHARDED`].
    pub(super) fn set_shard(&self, shard: Option<&str>) {
        let _ = self.shard.set(shard.unwrap_or(UNSHARDED).to_owned());
    }

    /// The name of this process's part.
    pub(super) fn name(&self) -> &str {
        self.shard.get().map_or(UNSHARDED, String::as_str)
    }

    pub(super) async fn lock(&self) -> Written<'_> {
        self.written.lock().await
    }

    /// This process's part of `rel` to edit: as it last wrote it, else as `rel` records it (a
    /// restart), else empty.
    pub(super) fn base(&self, written: &Written<'_>, release: &str, rel: Option<&StackRelease>) -> ShardStatus {
        written
            .get(release)
            .or_else(|| rel.and_then(|r| r.status.as_ref()).and_then(|s| s.shards.iter().find(|p| p.name == self.name())))
            .cloned()
            .unwrap_or_else(|| ShardStatus { name: self.name().to_owned(), ..ShardStatus::default() })
    }

    /// Writes `wanted` as this process's part of release `release` when it says something new or
    /// its heartbeat (every `period`) is due, compared with the newer of what this process last
    /// wrote and `stored`, the part as the StackRelease records it (none: it is written, e.g. to
    /// a StackRelease made again). Returns the StackRelease written, if it was.
    ///
    /// # Errors
    /// The management cluster refused the write or did not answer; what was last written stays
    /// the reference, so the next call tries again.
    pub(super) async fn write(
        &self,
        mgmt: &kube::Client,
        written: &mut Written<'_>,
        release: &str,
        stored: Option<&ShardStatus>,
        mut wanted: ShardStatus,
        period: Duration,
    ) -> Result<Option<StackRelease>, kube::Error> {
        let now = chrono::Utc::now();
        let reference = match (written.get(release), stored) {
            (Some(mine), Some(s)) if mine.heartbeat_time >= s.heartbeat_time => Some(mine),
            (_, s) => s,
        };
        if !part_due(reference, &wanted, now, period) {
            return Ok(None);
        }
        stamp(&mut wanted, now, period);
        let body = json!({
            "apiVersion": "stacksync.io/v1alpha1",
            "kind": "StackRelease",
            "metadata": {"name": release},
            "status": {"shards": [&wanted]},
        });
        let api: Api<StackRelease> = Api::all(mgmt.clone());
        let params = PatchParams::apply(&shard_manager(self.name())).force();
        let done = api.patch_status(release, &params, &Patch::Apply(body)).await?;
        written.insert(release.to_owned(), wanted);
        Ok(Some(done))
    }
}

/// How often a shard writes its parts when nothing changed: half the `resync` (as a
/// ClusterSync's `lastSyncTime`), at least a second.
pub(super) fn heartbeat(resync: Duration) -> Duration {
    (resync / 2).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_named_after_the_shard_and_edited_from_what_was_written_last() {
        let parts = Parts::default();
        assert_eq!(parts.name(), UNSHARDED, "no --shard");
        parts.set_shard(Some("east"));
        parts.set_shard(Some("west"));
        assert_eq!(parts.name(), "east", "set once");
        let mut written = parts.written.try_lock().expect("unlocked");
        assert_eq!(parts.base(&written, "r", None), ShardStatus { name: "east".to_owned(), ..ShardStatus::default() }, "nothing yet");
        let stored = StackRelease {
            status: Some(crate::status::crd::StackReleaseStatus {
                shards: vec![ShardStatus { name: "east".to_owned(), synced: 3, ..ShardStatus::default() }],
                ..Default::default()
            }),
            ..StackRelease::new(
                "r",
                crate::status::crd::StackReleaseSpec { subscription: "s".into(), source: "s".into(), tag: "v1".into() },
            )
        };
        assert_eq!(parts.base(&written, "r", Some(&stored)).synced, 3, "after a restart: as recorded");
        written.insert("r".to_owned(), ShardStatus { name: "east".to_owned(), synced: 5, ..ShardStatus::default() });
        assert_eq!(parts.base(&written, "r", Some(&stored)).synced, 5, "as this process wrote it");
    }

    #[test]
    fn the_heartbeat_is_half_the_resync_and_at_least_a_second() {
        assert_eq!(heartbeat(Duration::from_secs(600)), Duration::from_secs(300));
        assert_eq!(heartbeat(Duration::from_millis(500)), Duration::from_secs(1));
    }
}
