//! The Cluster page (`/clusters/<namespace>/<name>`): its state, releases and rollout wave,
//! the verification of the release it runs, the upgrade stages and their waits, conditions,
//! every object with synced / health / message, generated fields, and its Events in time order.

use std::fmt::Write;

use super::{Ctx, badge, events_table, facts, time};
use crate::console::html::{E, U};
use crate::console::view::{Snapshot, state_of, waves};
use crate::status::crd::{ClusterSync, ClusterSyncStatus};
use crate::targets::kubernetes::topology_class;

/// Objects listed at most (a Cluster may have thousands; the first are enough to look at, the
/// rest are counted).
const MAX_OBJECTS: usize = 2000;

/// The page's content; `full` is the ClusterSync read just now (with its inventory), else the
/// watched one is used. `None` when neither the Cluster nor a ClusterSync exists.
pub fn content(s: &Snapshot, namespace: &str, name: &str, full: Option<&ClusterSync>, ctx: &Ctx) -> Option<String> {
    let is = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(namespace) && m.name.as_deref() == Some(name);
    let cluster = s.clusters.iter().find(|c| is(&c.metadata)).map(|c| &**c);
    let sync = full.or_else(|| s.syncs.iter().find(|c| is(&c.metadata)).map(|c| &**c));
    if cluster.is_none() && sync.is_none() {
        return None;
    }
    let status = sync.and_then(|s| s.status.as_ref());
    let state = state_of(cluster, sync);
    let mut out = String::new();
    let _ = write!(out, "<h1>{}/{} ", E(namespace), E(name));
    badge(&mut out, state);
    out.push_str("</h1>");
    if cluster.is_none() {
        out.push_str("<p class=\"note warning\">The Cluster is gone; its ClusterSync is still there.</p>");
    }
    let version = cluster.and_then(|c| c.data.pointer("/spec/topology/version")).and_then(|v| v.as_str()).unwrap_or_default();
    let mut last = String::new();
    if let Some(t) = status.and_then(|s| s.last_sync_time.as_deref()) {
        time(&mut last, t, ctx.now);
    }
    let key = format!("{namespace}/{name}");
    let all_waves = waves(&s.releases);
    let wave = all_waves
        .get(key.as_str())
        .map(|w| format!("<a href=\"/rollouts/{}\">{}</a>, wave {} of {}", U(w.release), E(w.release), w.wave, w.waves))
        .unwrap_or_default();
    let tag = |r: Option<&crate::status::crd::ReleaseRefStatus>| {
        r.map(|r| format!("{} <small>{}</small>", E(&r.tag), E(&r.version))).unwrap_or_default()
    };
    facts(
        &mut out,
        &[
            ("Subscription", E(sync.map(|s| s.spec.subscription.as_str()).unwrap_or("none")).to_string()),
            (
                "Class",
                E(&cluster.and_then(|c| topology_class(&c.data)).or_else(|| status.and_then(|s| s.class.clone())).unwrap_or_default())
                    .to_string(),
            ),
            ("Kubernetes", E(version).to_string()),
            ("Selected by", E(status.and_then(|s| s.selected_by.as_deref()).unwrap_or_default()).to_string()),
            ("Wanted release", tag(status.and_then(|s| s.wanted_release.as_ref()))),
            ("Applied release", tag(status.and_then(|s| s.applied_release.as_ref()))),
            ("Newest offered", E(status.and_then(|s| s.newest_available.as_deref()).unwrap_or_default()).to_string()),
            ("Synced", status.map(|s| format!("<span id=\"synced\">{}/{}</span>", s.synced, s.total)).unwrap_or_default()),
            ("Message", E(status.map(|s| s.message.as_str()).unwrap_or_default()).to_string()),
            ("Last sync", last),
            ("Rollout", wave),
            ("Adopted", E(status.and_then(|s| s.adopted.as_deref()).unwrap_or_default()).to_string()),
        ],
    );
    if let Some(st) = status {
        verification(&mut out, s, sync.map(|s| s.spec.subscription.as_str()).unwrap_or_default(), st);
        upgrade(&mut out, st, ctx);
        conditions(&mut out, st, ctx);
        objects(&mut out, st, full.is_some());
        if !st.generated.is_empty() {
            out.push_str("<section aria-labelledby=\"generated\"><h2 id=\"generated\">Generated fields</h2><p class=\"muted\">Kept at their live values by every sync; rotated when a generated certificate is two thirds into its life or by <code>stacksync rotate</code> (docs/clusterstacks.md).</p>");
            if let Some(r) = &st.generated_rotation {
                let when = |v: &Option<String>| v.as_deref().unwrap_or("—").to_owned();
                let _ = write!(
                    out,
                    "<p>Next renewal: {} (expires {}). Last rotation: {} ({}).</p>",
                    E(&when(&r.renew_at)),
                    E(&when(&r.expires_at)),
                    E(&when(&r.last_rotated)),
                    E(&when(&r.last_reason))
                );
            }
            out.push_str("<ul>");
            for g in &st.generated {
                let _ = write!(out, "<li><code>{}</code></li>", E(g));
            }
            out.push_str("</ul></section>");
        }
    }
    out.push_str("<section aria-labelledby=\"events\"><h2 id=\"events\">Events</h2>");
    let mut events: Vec<&k8s_openapi::api::core::v1::Event> = s
        .events
        .iter()
        .filter(|e| {
            let o = &e.involved_object;
            o.namespace.as_deref() == Some(namespace)
                && o.name.as_deref() == Some(name)
                && matches!(o.kind.as_deref(), Some("Cluster" | "ClusterSync"))
        })
        .map(|e| &**e)
        .collect();
    events_table(&mut out, &mut events, ctx.now);
    out.push_str("</section>");
    Some(out)
}

fn verification(out: &mut String, s: &Snapshot, subscription: &str, st: &ClusterSyncStatus) {
    let Some(applied) = &st.applied_release else { return };
    let Some(r) = s.releases.iter().find(|r| r.spec.subscription == subscription && r.spec.tag == applied.tag) else { return };
    let Some(rs) = &r.status else { return };
    let name = r.metadata.name.as_deref().unwrap_or_default();
    out.push_str("<section aria-labelledby=\"verification\"><h2 id=\"verification\">Release verification</h2>");
    facts(
        out,
        &[
            ("Release", format!("<a href=\"/releases#{}\">{}</a>", U(name), E(name))),
            ("Verified", if rs.verified { "yes — every digest checked".into() } else { "<b>no</b>".into() }),
            ("Verified by", format!("<code id=\"verified-by\">{}</code>", E(&rs.verified_by))),
            ("Signed by", E(&rs.signed_by).to_string()),
            ("Refusal", E(&rs.refusal).to_string()),
        ],
    );
    out.push_str("</section>");
}

fn upgrade(out: &mut String, st: &ClusterSyncStatus, ctx: &Ctx) {
    let Some(u) = &st.upgrade else { return };
    out.push_str("<section aria-labelledby=\"upgrade\"><h2 id=\"upgrade\">Upgrade stages</h2>");
    let mut since = String::new();
    time(&mut since, &u.since, ctx.now);
    facts(
        out,
        &[
            ("Hook", E(&u.hook).to_string()),
            ("From → to", format!("{} → {}", E(if u.from.is_empty() { "(first install)" } else { &u.from }), E(&u.to))),
            (
                "Stage",
                format!(
                    "{} of {}{}",
                    (u.stage_index + 1).min(u.stages),
                    u.stages,
                    if u.stage.is_empty() { String::new() } else { format!(" <code>{}</code>", E(&u.stage)) }
                ),
            ),
            ("Phase", E(&u.phase).to_string()),
            ("Since", since),
            ("Waiting for", E(&u.waiting_for).to_string()),
            ("Failure", if u.failure.is_empty() { String::new() } else { format!("<span class=\"warning\">{}</span>", E(&u.failure)) }),
        ],
    );
    out.push_str("<ol class=\"steps\">");
    for i in 0..u.stages {
        let (class, word) = match i.cmp(&u.stage_index) {
            std::cmp::Ordering::Less => ("done", "done"),
            std::cmp::Ordering::Equal if u.phase == "Done" => ("done", "done"),
            std::cmp::Ordering::Equal => ("current", u.phase.as_str()),
            std::cmp::Ordering::Greater => ("next", "to come"),
        };
        let label = if i == u.stage_index && !u.stage.is_empty() { u.stage.clone() } else { format!("stage {}", i + 1) };
        let _ = write!(out, "<li class=\"step {class}\">{} <span class=\"what\">({})</span></li>", E(&label), E(word));
    }
    out.push_str("</ol></section>");
}

fn conditions(out: &mut String, st: &ClusterSyncStatus, ctx: &Ctx) {
    out.push_str(
        "<section aria-labelledby=\"conditions\"><h2 id=\"conditions\">Conditions</h2><table id=\"conditions-table\"><thead><tr>\
         <th scope=\"col\">Type</th><th scope=\"col\">Status</th><th scope=\"col\">Reason</th><th scope=\"col\">Message</th>\
         <th scope=\"col\">Since</th></tr></thead><tbody>",
    );
    for c in &st.conditions {
        let _ = write!(
            out,
            "<tr data-condition=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>",
            E(&c.type_),
            E(&c.type_),
            E(&c.status),
            E(&c.reason),
            E(&c.message)
        );
        time(out, &c.last_transition_time, ctx.now);
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table></section>");
}

fn objects(out: &mut String, st: &ClusterSyncStatus, fresh: bool) {
    out.push_str("<section aria-labelledby=\"objects\"><h2 id=\"objects\">Objects</h2>");
    out.push_str(
        "<table id=\"objects-table\"><thead><tr><th scope=\"col\">Kind</th><th scope=\"col\">Namespace</th><th scope=\"col\">Name</th>\
         <th scope=\"col\">Synced</th><th scope=\"col\">Health</th><th scope=\"col\">Message</th></tr></thead><tbody>",
    );
    let mut listed = std::collections::HashSet::new();
    for e in &st.entries {
        listed.insert((e.kind.as_str(), e.namespace.as_str(), e.name.as_str()));
        let synced = if e.synced {
            "<span class=\"state s-ready\">✓ synced</span>"
        } else {
            "<span class=\"state s-failed\">✗ not synced</span>"
        };
        let health = if e.health.is_empty() { "healthy".to_owned() } else { E(&e.health).to_string() };
        let _ = write!(
            out,
            "<tr class=\"problem\"><td>{}</td><td>{}</td><td>{}</td><td>{synced}</td><td>{health}</td><td>{} {}</td></tr>",
            E(&e.kind),
            E(&e.namespace),
            E(&e.name),
            E(&e.action),
            E(&e.message)
        );
    }
    let mut shown = st.entries.len();
    for line in &st.inventory {
        let mut f = line.split('|');
        let (_group, kind, ns, name) =
            (f.next().unwrap_or_default(), f.next().unwrap_or_default(), f.next().unwrap_or_default(), f.next().unwrap_or_default());
        if listed.contains(&(kind, ns, name)) {
            continue;
        }
        if shown == MAX_OBJECTS {
            break;
        }
        shown += 1;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><span class=\"state s-ready\">✓ synced</span></td><td>healthy</td><td></td></tr>",
            E(kind),
            E(ns),
            E(name)
        );
    }
    out.push_str("</tbody></table>");
    if st.entries_truncated > 0 {
        let _ = write!(out, "<p class=\"muted\">{} more objects not synced are counted, not listed.</p>", st.entries_truncated);
    }
    if st.inventory.len() + st.entries.len() > MAX_OBJECTS {
        let _ = write!(out, "<p class=\"muted\">The first {MAX_OBJECTS} objects are shown.</p>");
    }
    if !fresh {
        out.push_str("<p class=\"muted\">Objects that are synced could not be read (the ClusterSync's inventory): only those with a problem are listed.</p>");
    }
    out.push_str("</section>");
}
