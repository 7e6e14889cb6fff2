//! The console's view of the management cluster: a reflector per kind it shows (Clusters,
//! ClusterSyncs, StackReleases, and the Events on them), each fed by a kube-runtime watcher with
//! the user's own credentials, and a feed of what changed for the pages' live updates. Reads
//! only: a watcher lists and watches, nothing else.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;

use super::view::Snapshot;
use crate::model::sync::MutexExt;
use crate::status::crd::{ClusterSync, StackRelease};

/// Changes kept for a page that reads slowly; one further behind is told "everything changed".
const FEED: usize = 1024;

/// One change: the kind (`cluster`, `clustersync`, `stackrelease`, `event`) and
/// `namespace/name` (`name` for a cluster-scoped object; `*` when a whole list was read again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: &'static str,
    pub key: String,
}

/// The kinds watched, in the order [`Stores::ready`] and the problems list them.
pub const KINDS: [&str; 4] = ["cluster", "clustersync", "stackrelease", "event"];

/// The reflectors' stores, whether each has been listed once, the last watch error of each
/// kind (RBAC may forbid one), and the change feed.
pub struct Stores {
    clusters: Store<DynamicObject>,
    syncs: Store<ClusterSync>,
    releases: Store<StackRelease>,
    sync_events: Store<Event>,
    cluster_events: Store<Event>,
    listed: [AtomicBool; 4],
    problems: Mutex<BTreeMap<&'static str, String>>,
    feed: broadcast::Sender<Change>,
}

impl Stores {
    /// Starts the watches on `client` (Cluster API's `Cluster` as `clusters`, when the cluster
    /// serves it) and returns the stores and the tasks feeding them; the tasks run until
    /// aborted, retrying with kube-runtime's backoff after an error.
    pub fn start(client: &kube::Client, clusters: Option<ApiResource>) -> (Arc<Stores>, Vec<tokio::task::JoinHandle<()>>) {
        let cluster_writer = reflector::store::Writer::new(
            clusters
                .clone()
                .unwrap_or_else(|| ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"))),
        );
        let (syncs, sync_writer) = reflector::store();
        let (releases, release_writer) = reflector::store();
        let (sync_events, sync_event_writer) = reflector::store();
        let (cluster_events, cluster_event_writer) = reflector::store();
        let stores = Arc::new(Stores {
            clusters: cluster_writer.as_reader(),
            syncs,
            releases,
            sync_events,
            cluster_events,
            listed: Default::default(),
            problems: Mutex::default(),
            feed: broadcast::channel(FEED).0,
        });
        // The big lists are kept without what no page shows from the store: managed fields, and
        // a ClusterSync's inventory (one line per object: the Cluster page reads it fresh).
        let syncs_stream = watcher(Api::<ClusterSync>::all(client.clone()), watcher::Config::default())
            .modify(|cs: &mut ClusterSync| {
                cs.metadata.managed_fields = None;
                if let Some(s) = cs.status.as_mut() {
                    s.inventory = Vec::new();
                }
            })
            .default_backoff();
        let releases_stream = watcher(Api::<StackRelease>::all(client.clone()), watcher::Config::default())
            .modify(|r: &mut StackRelease| {
                r.metadata.managed_fields = None;
                if let Some(s) = r.status.as_mut() {
                    s.class_inventory = Vec::new();
                }
            })
            .default_backoff();
        let events = |selector: &str| {
            watcher(Api::<Event>::all(client.clone()), watcher::Config::default().fields(selector))
                .modify(|e: &mut Event| e.metadata.managed_fields = None)
                .default_backoff()
        };
        let mut tasks = vec![
            tokio::spawn(follow(stores.clone(), 1, reflector::reflector(sync_writer, syncs_stream))),
            tokio::spawn(follow(stores.clone(), 2, reflector::reflector(release_writer, releases_stream))),
            tokio::spawn(follow(
                stores.clone(),
                3,
                reflector::reflector(sync_event_writer, events("involvedObject.apiVersion=stacksync.io/v1alpha1")),
            )),
            tokio::spawn(follow(stores.clone(), 3, reflector::reflector(cluster_event_writer, events("involvedObject.kind=Cluster")))),
        ];
        match clusters {
            Some(ar) => {
                let stream = watcher(Api::<DynamicObject>::all_with(client.clone(), &ar), watcher::Config::default())
                    .modify(|c: &mut DynamicObject| c.metadata.managed_fields = None)
                    .default_backoff();
                tasks.push(tokio::spawn(follow(stores.clone(), 0, reflector::reflector(cluster_writer, stream))));
            }
            None => {
                stores.problems.locked().insert("cluster", "the management cluster serves no cluster.x-k8s.io Cluster".into());
            }
        }
        (stores, tasks)
    }

    /// What the stores hold now.
    pub fn snapshot(&self) -> Snapshot {
        let mut events = self.sync_events.state();
        events.extend(self.cluster_events.state());
        Snapshot { clusters: self.clusters.state(), syncs: self.syncs.state(), releases: self.releases.state(), events }
    }

    /// The kinds not listed yet.
    pub fn loading(&self) -> Vec<&'static str> {
        KINDS.iter().zip(&self.listed).filter(|(_, l)| !l.load(Ordering::Relaxed)).map(|(k, _)| *k).collect()
    }

    /// The last error of each kind's watch, while it lasts (`forbidden` when RBAC says no).
    pub fn problems(&self) -> BTreeMap<&'static str, String> {
        self.problems.locked().clone()
    }

    /// A receiver of every change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.feed.subscribe()
    }

    fn publish(&self, kind: &'static str, key: String) {
        // Nobody listening is fine: no page is open.
        let _ = self.feed.send(Change { kind, key });
    }
}

/// Drives one reflector: records each change in the feed, and the watch's errors.
async fn follow<K>(stores: Arc<Stores>, kind: usize, stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>)
where
    K: kube::Resource + Clone,
{
    let name = KINDS[kind];
    let key = |o: &K| match o.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", o.meta().name.as_deref().unwrap_or_default()),
        None => o.meta().name.clone().unwrap_or_default(),
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => stores.publish(name, key(&o)),
            Ok(watcher::Event::InitDone) => {
                stores.listed[kind].store(true, Ordering::Relaxed);
                stores.problems.locked().remove(name);
                stores.publish(name, "*".into());
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(e) => {
                tracing::debug!(kind = name, error = %e, "console: watch failed; retrying with backoff");
                stores.problems.locked().insert(name, e.to_string());
                stores.publish(name, "*".into());
            }
        }
    }
}
