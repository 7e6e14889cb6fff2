//! What the console shows, decided purely from the status resources it watches: a Cluster's
//! state, the fleet's rows (a Cluster joined with its ClusterSync and the rollout wave it is
//! in), their filter, sort and page, and the counts. No I/O: the pages and the benchmark call
//! these on a [`Snapshot`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Event;
use kube::api::DynamicObject;

use crate::status::crd::{ClusterSync, Condition, StackRelease};
use crate::targets::kubernetes::{is_paused, topology_class};

/// The status resources as they stand at one instant (the reflectors' stores).
#[derive(Default, Clone)]
pub struct Snapshot {
    pub clusters: Vec<Arc<DynamicObject>>,
    pub syncs: Vec<Arc<ClusterSync>>,
    pub releases: Vec<Arc<StackRelease>>,
    /// Events on ClusterSyncs, StackReleases and Clusters.
    pub events: Vec<Arc<Event>>,
}

/// A Cluster's state, as the fleet counts it. Every state is shown with its word (and a mark),
/// never by colour alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    Failed,
    Unreachable,
    Progressing,
    Paused,
    Suspended,
    Ready,
    /// A Cluster no subscription has recorded (no ClusterSync).
    Unmanaged,
}

impl State {
    pub const ALL: [State; 7] =
        [State::Ready, State::Progressing, State::Failed, State::Unreachable, State::Paused, State::Suspended, State::Unmanaged];

    pub fn word(self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Progressing => "Progressing",
            State::Failed => "Failed",
            State::Unreachable => "Unreachable",
            State::Paused => "Paused",
            State::Suspended => "Suspended",
            State::Unmanaged => "Unmanaged",
        }
    }

    /// The mark beside the word (the word is always there: colour-blind safe).
    pub fn mark(self) -> &'static str {
        match self {
            State::Ready => "✓",
            State::Progressing => "↻",
            State::Failed => "✗",
            State::Unreachable => "⚠",
            State::Paused | State::Suspended => "‖",
            State::Unmanaged => "–",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.word().eq_ignore_ascii_case(s))
    }
}

/// Ready reasons that mean the workload cluster could not be reached.
const UNREACHABLE: [&str; 2] = ["ClusterUnreachable", "KubeconfigMissing"];

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A Cluster's state from its Cluster object (paused) and ClusterSync (conditions).
pub fn state_of(cluster: Option<&DynamicObject>, sync: Option<&ClusterSync>) -> State {
    if cluster.is_some_and(is_paused) {
        return State::Paused;
    }
    let Some(status) = sync.and_then(|s| s.status.as_ref()) else { return State::Unmanaged };
    let is_true = |t: &str| condition(&status.conditions, t).is_some_and(|c| c.status == "True");
    if is_true("Paused") {
        return State::Paused;
    }
    if is_true("Suspended") {
        return State::Suspended;
    }
    let ready = condition(&status.conditions, "Ready");
    if ready.is_some_and(|c| c.status == "True") {
        return State::Ready;
    }
    if ready.is_some_and(|c| UNREACHABLE.contains(&c.reason.as_str())) {
        return State::Unreachable;
    }
    if is_true("Stalled") {
        return State::Failed;
    }
    if is_true("Reconciling") || ready.is_none() || ready.is_some_and(|c| c.reason == "Progressing") {
        return State::Progressing;
    }
    State::Failed
}

/// `1.27` of a `v1.27.3` Kubernetes version.
pub fn minor(version: &str) -> Option<String> {
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    (major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok()).then(|| format!("{major}.{minor}"))
}

/// Where a Cluster is in a running rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveOf<'a> {
    /// The target release's StackRelease.
    pub release: &'a str,
    pub wave: usize,
    pub waves: usize,
}

/// One row of the fleet table.
#[derive(Clone, Debug)]
pub struct Row<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub class: Option<String>,
    pub subscription: Option<&'a str>,
    pub applied: Option<&'a str>,
    pub synced: Option<(u32, u32)>,
    pub state: State,
    pub reason: &'a str,
    pub problem: &'a str,
    pub last_sync: Option<&'a str>,
    pub minor: Option<String>,
    pub wave: Option<WaveOf<'a>>,
}

/// Rollouts still going (`Progressing`, `Paused`, `Waiting`): each planned Cluster
/// (`namespace/name`) with its wave.
pub fn waves(releases: &[Arc<StackRelease>]) -> HashMap<&str, WaveOf<'_>> {
    let mut out = HashMap::new();
    for r in releases {
        let Some(rollout) = r.status.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
        if !matches!(rollout.phase.as_str(), "Progressing" | "Paused" | "Waiting") {
            continue;
        }
        let release = r.metadata.name.as_deref().unwrap_or_default();
        for (i, wave) in rollout.plan.iter().enumerate() {
            for c in &wave.clusters {
                out.insert(c.as_str(), WaveOf { release, wave: i + 1, waves: rollout.plan.len() });
            }
        }
    }
    out
}

/// Every Cluster (and every ClusterSync whose Cluster is gone) as a row, in no order.
pub fn rows(s: &Snapshot) -> Vec<Row<'_>> {
    let mut syncs: HashMap<(&str, &str), &ClusterSync> = HashMap::with_capacity(s.syncs.len());
    for cs in &s.syncs {
        syncs.insert((cs.metadata.namespace.as_deref().unwrap_or_default(), cs.metadata.name.as_deref().unwrap_or_default()), cs);
    }
    let waves = waves(&s.releases);
    let mut out = Vec::with_capacity(s.clusters.len().max(s.syncs.len()));
    let mut seen = std::collections::HashSet::with_capacity(s.clusters.len());
    for c in &s.clusters {
        let key = (c.metadata.namespace.as_deref().unwrap_or_default(), c.metadata.name.as_deref().unwrap_or_default());
        seen.insert(key);
        out.push(row(key, Some(c), syncs.get(&key).copied(), &waves));
    }
    for (key, cs) in &syncs {
        if !seen.contains(key) {
            out.push(row(*key, None, Some(cs), &waves));
        }
    }
    out
}

fn row<'a>(
    (namespace, name): (&'a str, &'a str),
    cluster: Option<&'a DynamicObject>,
    sync: Option<&'a ClusterSync>,
    waves: &HashMap<&str, WaveOf<'a>>,
) -> Row<'a> {
    let status = sync.and_then(|s| s.status.as_ref());
    let ready = status.and_then(|s| condition(&s.conditions, "Ready"));
    let class = cluster.and_then(|c| topology_class(&c.data)).or_else(|| status.and_then(|s| s.class.clone()));
    let version = cluster.and_then(|c| c.data.pointer("/spec/topology/version")).and_then(|v| v.as_str());
    Row {
        namespace,
        name,
        class,
        subscription: sync.map(|s| s.spec.subscription.as_str()),
        applied: status.and_then(|s| s.applied_release.as_ref()).map(|r| r.tag.as_str()),
        synced: status.map(|s| (s.synced, s.total)),
        state: state_of(cluster, sync),
        reason: ready.map(|c| c.reason.as_str()).unwrap_or_default(),
        problem: match ready {
            Some(c) if c.status != "True" => first_line(if status.is_some_and(|s| !s.message.is_empty()) {
                status.map(|s| s.message.as_str()).unwrap_or_default()
            } else {
                &c.message
            }),
            _ => "",
        },
        last_sync: status.and_then(|s| s.last_sync_time.as_deref()),
        minor: version.and_then(minor),
        wave: waves.get(format!("{namespace}/{name}").as_str()).cloned(),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// What the fleet table's query parameters ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Words that must all appear in the namespace, name, class, release, reason or problem.
    pub text: String,
    pub state: Option<State>,
    pub namespace: Option<String>,
    pub release: Option<String>,
    pub minor: Option<String>,
    pub subscription: Option<String>,
    pub sort: Sort,
    pub descending: bool,
    /// 1-based.
    pub page: usize,
    pub per_page: usize,
}

/// Rows per page unless `per` says otherwise, and the most it may say.
pub const PER_PAGE: usize = 100;
const MAX_PER_PAGE: usize = 1000;

impl Default for Query {
    fn default() -> Query {
        Query {
            text: String::new(),
            state: None,
            namespace: None,
            release: None,
            minor: None,
            subscription: None,
            sort: Sort::State,
            descending: false,
            page: 1,
            per_page: PER_PAGE,
        }
    }
}

/// The fleet table's sort keys (the column headers' links).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    Name,
    State,
    Class,
    Release,
    Synced,
    LastSync,
    Wave,
}

impl Sort {
    pub const ALL: [(Sort, &'static str); 7] = [
        (Sort::Name, "name"),
        (Sort::State, "state"),
        (Sort::Class, "class"),
        (Sort::Release, "release"),
        (Sort::Synced, "synced"),
        (Sort::LastSync, "lastsync"),
        (Sort::Wave, "wave"),
    ];

    pub fn key(self) -> &'static str {
        Sort::ALL.iter().find(|(s, _)| *s == self).map(|(_, k)| *k).unwrap_or("state")
    }
}

impl Query {
    /// From a URL's query string; unknown or malformed parameters are ignored.
    pub fn parse(query: &str) -> Query {
        let mut q = Query::default();
        let some = |v: String| Some(v).filter(|v| !v.is_empty());
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let v = v.into_owned();
            match k.as_ref() {
                "q" => q.text = v,
                "state" => q.state = State::parse(&v),
                "ns" => q.namespace = some(v),
                "release" => q.release = some(v),
                "minor" => q.minor = some(v),
                "sub" => q.subscription = some(v),
                "sort" => q.sort = Sort::ALL.iter().find(|(_, key)| *key == v).map_or(q.sort, |(s, _)| *s),
                "desc" => q.descending = v == "1",
                "page" => q.page = v.parse().unwrap_or(1).max(1),
                "per" => q.per_page = v.parse().unwrap_or(PER_PAGE).clamp(1, MAX_PER_PAGE),
                _ => {}
            }
        }
        q
    }

    /// Back to a query string, with `edit` applied (links to another page, sort or filter).
    pub fn to_query(&self, edit: impl FnOnce(&mut Query)) -> String {
        let mut q = self.clone();
        edit(&mut q);
        let mut out = form_urlencoded::Serializer::new(String::new());
        if !q.text.is_empty() {
            out.append_pair("q", &q.text);
        }
        if let Some(s) = q.state {
            out.append_pair("state", s.word());
        }
        for (k, v) in [("ns", &q.namespace), ("release", &q.release), ("minor", &q.minor), ("sub", &q.subscription)] {
            if let Some(v) = v {
                out.append_pair(k, v);
            }
        }
        if q.sort != Sort::State {
            out.append_pair("sort", q.sort.key());
        }
        if q.descending {
            out.append_pair("desc", "1");
        }
        if q.page > 1 {
            out.append_pair("page", &q.page.to_string());
        }
        if q.per_page != PER_PAGE {
            out.append_pair("per", &q.per_page.to_string());
        }
        out.finish()
    }

    fn keeps(&self, r: &Row<'_>) -> bool {
        let eq = |want: &Option<String>, have: Option<&str>| want.as_deref().is_none_or(|w| have == Some(w));
        self.state.is_none_or(|s| s == r.state)
            && eq(&self.namespace, Some(r.namespace))
            && eq(&self.release, Some(r.applied.unwrap_or("none")))
            && eq(&self.minor, Some(r.minor.as_deref().unwrap_or("unknown")))
            && eq(&self.subscription, Some(r.subscription.unwrap_or("none")))
            && self.text.split_whitespace().all(|word| {
                let word = word.to_lowercase();
                [r.namespace, r.name, r.class.as_deref().unwrap_or_default(), r.applied.unwrap_or_default(), r.reason, r.problem]
                    .iter()
                    .any(|f| f.to_lowercase().contains(&word))
            })
    }
}

/// The fleet's counts: by state, by subscription, by release applied, by Kubernetes minor.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: usize,
    pub by_state: BTreeMap<State, usize>,
    pub by_subscription: BTreeMap<String, usize>,
    pub by_release: BTreeMap<String, usize>,
    pub by_minor: BTreeMap<String, usize>,
}

/// One page of the fleet table: the counts of the whole fleet, how many rows the filter keeps,
/// and the rows of the page asked for, sorted.
pub struct Page<'a> {
    pub counts: Counts,
    pub matching: usize,
    pub rows: Vec<Row<'a>>,
}

/// Counts `rows`, keeps those `q` asks for, sorts them and cuts the page. Only the rows kept are
/// sorted, and only the page's are returned: the work is a pass over the fleet and a sort.
pub fn page<'a>(rows: Vec<Row<'a>>, q: &Query) -> Page<'a> {
    let mut counts = Counts { total: rows.len(), ..Counts::default() };
    for r in &rows {
        *counts.by_state.entry(r.state).or_default() += 1;
        *counts.by_subscription.entry(r.subscription.unwrap_or("none").to_owned()).or_default() += 1;
        *counts.by_release.entry(r.applied.unwrap_or("none").to_owned()).or_default() += 1;
        *counts.by_minor.entry(r.minor.clone().unwrap_or_else(|| "unknown".into())).or_default() += 1;
    }
    let mut kept: Vec<Row<'a>> = rows.into_iter().filter(|r| q.keeps(r)).collect();
    let matching = kept.len();
    kept.sort_unstable_by(|a, b| {
        let by = match q.sort {
            Sort::Name => std::cmp::Ordering::Equal,
            Sort::State => a.state.cmp(&b.state),
            Sort::Class => a.class.cmp(&b.class),
            Sort::Release => a.applied.cmp(&b.applied),
            Sort::Synced => a.synced.map(|(s, t)| (t - s.min(t), t)).cmp(&b.synced.map(|(s, t)| (t - s.min(t), t))).reverse(),
            Sort::LastSync => a.last_sync.cmp(&b.last_sync),
            Sort::Wave => a.wave.as_ref().map(|w| (w.release, w.wave)).cmp(&b.wave.as_ref().map(|w| (w.release, w.wave))),
        };
        let by = by.then_with(|| (a.namespace, a.name).cmp(&(b.namespace, b.name)));
        if q.descending { by.reverse() } else { by }
    });
    let start = (q.page - 1).saturating_mul(q.per_page).min(kept.len());
    let end = start.saturating_add(q.per_page).min(kept.len());
    kept.truncate(end);
    let rows = kept.split_off(start);
    Page { counts, matching, rows }
}

#[cfg(test)]
mod tests;
