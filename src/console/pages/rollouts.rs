//! The Rollouts pages: `/rollouts` lists every release with a rollout; `/rollouts/<release>`
//! shows one as a picture — its waves as a grid of Clusters coloured (and labelled) by outcome,
//! each multi-step Cluster's path across Kubernetes minors, the failed Clusters, the failure
//! budget, why it is paused, the maintenance window, the command to pause or resume it, and its
//! history from Events.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use kube::api::DynamicObject;

use super::{Ctx, cluster_ref_link, events_table, facts, time};
use crate::console::html::{E, U};
use crate::console::view::{Snapshot, State, state_of};
use crate::model::window::{self, Verdict};
use crate::status::crd::{ClusterSync, RolloutStatus, StackRelease, WaveStatus};
use crate::targets::kubernetes::topology_class;

/// What became of one Cluster of a rollout, as its cell shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Given up on: the outcome (`LeftAlone`, `RollingBack`, `RolledBack`,
    /// `RollbackImpossible`) and the reason (`ClusterFailed`, `WaveTimeout`, `NoPath`).
    Failed { outcome: String, reason: String },
    /// Not moved yet: none of its maintenance windows is open.
    AwaitingWindow,
    /// Its class edit failed and is tried again.
    Unmoved,
    /// Its wave has not started.
    Pending,
    /// On the target, Ready.
    Done,
    /// Moved, not done yet: on step `k` of `n` of its path, when it has one.
    Moving { step: Option<(usize, usize)> },
}

impl Cell {
    /// The word on the cell (never only a colour).
    pub fn label(&self) -> String {
        match self {
            Cell::Failed { outcome, .. } => format!("failed: {outcome}"),
            Cell::AwaitingWindow => "waits for a window".into(),
            Cell::Unmoved => "not moved yet".into(),
            Cell::Pending => "pending".into(),
            Cell::Done => "done".into(),
            Cell::Moving { step: Some((k, n)) } => format!("upgrading, step {k}/{n}"),
            Cell::Moving { step: None } => "upgrading".into(),
        }
    }

    fn class(&self) -> &'static str {
        match self {
            Cell::Failed { .. } => "c-failed",
            Cell::AwaitingWindow => "c-window",
            Cell::Unmoved => "c-unmoved",
            Cell::Pending => "c-pending",
            Cell::Done => "c-done",
            Cell::Moving { .. } => "c-moving",
        }
    }

    fn mark(&self) -> &'static str {
        match self {
            Cell::Failed { .. } => "✗",
            Cell::AwaitingWindow => "◷",
            Cell::Unmoved => "!",
            Cell::Pending => "·",
            Cell::Done => "✓",
            Cell::Moving { .. } => "↻",
        }
    }
}

/// What the rollout's status and the Cluster's own objects say of one Cluster of `wave`:
/// `class` is its Cluster's class now, `applied` its ClusterSync's applied release.
pub fn cell(
    cluster: &str,
    wave: &WaveStatus,
    rollout: &RolloutStatus,
    target: &str,
    class: Option<&str>,
    applied: Option<&str>,
    state: State,
) -> Cell {
    if let Some(f) = rollout.failed.iter().find(|f| f.cluster == cluster) {
        return Cell::Failed { outcome: f.outcome.clone(), reason: f.reason.clone() };
    }
    let listed = |l: &[String]| l.iter().any(|c| c == cluster);
    if listed(&wave.awaiting_window) {
        return Cell::AwaitingWindow;
    }
    if listed(&wave.unmoved) {
        return Cell::Unmoved;
    }
    if wave.phase == "Done" || (class == Some(target) && applied == Some(target) && state == State::Ready) {
        return Cell::Done;
    }
    if wave.phase == "Pending" {
        return Cell::Pending;
    }
    let step = wave
        .paths
        .iter()
        .find(|p| p.cluster == cluster)
        .and_then(|p| p.steps.iter().position(|s| Some(s.as_str()) == class).map(|i| (i + 1, p.steps.len())));
    Cell::Moving { step }
}

/// `/rollouts`: every release that has (or had) a rollout, newest start first.
pub fn list(s: &Snapshot, ctx: &Ctx) -> String {
    let mut out = String::from("<h1>Rollouts</h1>");
    let mut with: Vec<(&StackRelease, &RolloutStatus)> =
        s.releases.iter().filter_map(|r| r.status.as_ref().and_then(|st| st.rollout.as_ref()).map(|ro| (&**r, ro))).collect();
    if with.is_empty() {
        out.push_str("<p class=\"muted\">No rollout: a subscription with <code>rollout:</code> starts one when it offers a newer release (docs/upgrades.md).</p>");
        return out;
    }
    with.sort_by(|a, b| b.1.started.cmp(&a.1.started));
    out.push_str(
        "<table id=\"rollouts\"><thead><tr><th scope=\"col\">Release</th><th scope=\"col\">Subscription</th><th scope=\"col\">Phase</th>\
         <th scope=\"col\">Done</th><th scope=\"col\">Wave</th><th scope=\"col\">Why</th><th scope=\"col\">Started</th></tr></thead><tbody>",
    );
    for (r, ro) in with {
        let name = r.metadata.name.as_deref().unwrap_or_default();
        let _ = write!(
            out,
            "<tr data-release=\"{}\"><td><a href=\"/rollouts/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>",
            E(name),
            U(name),
            E(name),
            E(&r.spec.subscription),
            phase(&ro.phase),
            E(&ro.summary),
            E(&ro.wave_summary),
            E(&ro.reason),
            E(&ro.message)
        );
        time(&mut out, &ro.started, ctx.now);
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
    out
}

fn phase(p: &str) -> String {
    let (class, mark) = match p {
        "Complete" => ("s-ready", "✓"),
        "Paused" | "Stopped" => ("s-failed", "‖"),
        "Progressing" => ("s-progressing", "↻"),
        _ => ("s-paused", "·"),
    };
    format!("<span class=\"state {class}\" data-phase=\"{}\"><span class=\"mark\" aria-hidden=\"true\">{mark}</span> {}</span>", E(p), E(p))
}

/// `/rollouts/<release>`; `None` when there is no such release.
pub fn detail(s: &Snapshot, release: &str, ctx: &Ctx) -> Option<String> {
    let r = s.releases.iter().find(|r| r.metadata.name.as_deref() == Some(release))?;
    let mut out = String::new();
    let _ = write!(out, "<h1>Rollout to <span data-target>{}</span></h1>", E(&r.spec.tag));
    let Some(ro) = r.status.as_ref().and_then(|st| st.rollout.as_ref()) else {
        let _ = write!(out, "<p class=\"muted\">{} has no rollout.</p>", E(release));
        return Some(out);
    };
    let sub = r.spec.subscription.as_str();
    let rollout_config = ctx.config.as_ref().and_then(|c| c.subscriptions.iter().find(|s| s.name == sub)).and_then(|s| s.rollout.clone());
    let mut started = String::new();
    time(&mut started, &ro.started, ctx.now);
    let mut wave_started = String::new();
    if !ro.wave_started.is_empty() {
        time(&mut wave_started, &ro.wave_started, ctx.now);
    }
    facts(
        &mut out,
        &[
            ("Release", format!("<a href=\"/releases#{}\">{}</a>", U(release), E(release))),
            ("Subscription", E(sub).to_string()),
            ("Phase", phase(&ro.phase)),
            ("Clusters done", format!("<span id=\"summary\">{}</span>", E(&ro.summary))),
            ("Wave", format!("<span id=\"wave\">{}</span>", E(&ro.wave_summary))),
            ("Started", started),
            ("Wave started", wave_started),
        ],
    );
    if ro.phase == "Paused" || ro.phase == "Waiting" || ro.phase == "Stopped" {
        let _ = write!(
            out,
            "<div class=\"callout warning\" id=\"pause\" role=\"status\"><b>{} — {}</b><p>{}</p></div>",
            E(&ro.phase),
            E(&ro.reason),
            E(&ro.message)
        );
    }
    window_box(&mut out, ro, rollout_config.as_ref(), ctx);
    budget_box(&mut out, ro, rollout_config.as_ref().map(|c| c.max_failures));
    commands(&mut out, sub, ctx);

    let clusters: HashMap<String, &DynamicObject> = s.clusters.iter().map(|c| (key(&c.metadata), &**c)).collect();
    let syncs: HashMap<String, &ClusterSync> = s.syncs.iter().map(|c| (key(&c.metadata), &**c)).collect();
    out.push_str("<section aria-labelledby=\"waves\"><h2 id=\"waves\">Waves</h2>");
    legend(&mut out);
    let mut paths = String::new();
    for (i, wave) in ro.plan.iter().enumerate() {
        let failed_here = ro.failed.iter().filter(|f| f.wave as usize == i + 1).count();
        let _ = write!(
            out,
            "<section class=\"wave\" data-wave=\"{}\"><h3>Wave {} of {} — {} ({}/{} done{})</h3><ul class=\"cells\">",
            i + 1,
            i + 1,
            ro.plan.len(),
            E(&wave.phase),
            wave.done,
            wave.clusters.len(),
            if failed_here > 0 { format!(", {failed_here} failed") } else { String::new() }
        );
        for c in &wave.clusters {
            let cluster = clusters.get(c).copied();
            let sync = syncs.get(c).copied();
            let class = cluster.and_then(|o| topology_class(&o.data));
            let applied = sync.and_then(|s| s.status.as_ref()).and_then(|s| s.applied_release.as_ref()).map(|a| a.tag.as_str());
            let state = state_of(cluster, sync);
            let cell = cell(c, wave, ro, &r.spec.tag, class.as_deref(), applied, state);
            let _ = write!(out, "<li class=\"cell {}\" data-cluster=\"{}\" data-cell=\"{}\">", cell.class(), E(c), E(&cell.label()));
            let (ns, name) = c.split_once('/').unwrap_or(("", c));
            let mut title = cell.label();
            if let Cell::Failed { reason, .. } = &cell {
                let _ = write!(title, " ({reason})");
            }
            if cell == Cell::AwaitingWindow
                && let (Some(rc), Some(o)) = (&rollout_config, cluster)
            {
                let labels: BTreeMap<String, String> = o.metadata.labels.clone().unwrap_or_default();
                if let Verdict::Closed(Some(next)) = window::verdict(&rc.windows, &labels, ctx.now) {
                    let _ = write!(title, ", next opens {}", next.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                }
            }
            let _ = write!(
                out,
                "<a href=\"/clusters/{}/{}\"><span class=\"mark\" aria-hidden=\"true\">{}</span> <span class=\"name\">{}</span> <span class=\"what\">{}</span></a></li>",
                U(ns),
                U(name),
                cell.mark(),
                E(c),
                E(&title)
            );
            if let Some(p) = wave.paths.iter().find(|p| &p.cluster == c) {
                let from = wave.moved_from.iter().find(|m| &m.cluster == c);
                path(&mut paths, c, from.map(|m| (m.class.as_str(), m.version.as_str())), &p.steps, &cell, class.as_deref());
            }
        }
        out.push_str("</ul></section>");
    }
    out.push_str("</section>");
    if !paths.is_empty() {
        let _ = write!(out, "<section aria-labelledby=\"paths\"><h2 id=\"paths\">Paths across Kubernetes minors</h2>{paths}</section>");
    }
    failed_table(&mut out, ro);
    out.push_str("<section aria-labelledby=\"history\"><h2 id=\"history\">History</h2>");
    let mut events: Vec<&k8s_openapi::api::core::v1::Event> = s
        .events
        .iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("StackRelease") && e.involved_object.name.as_deref() == Some(release))
        .map(|e| &**e)
        .collect();
    events_table(&mut out, &mut events, ctx.now);
    out.push_str("</section>");
    Some(out)
}

fn key(m: &kube::api::ObjectMeta) -> String {
    format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default())
}

fn legend(out: &mut String) {
    out.push_str("<ul class=\"legend\" aria-label=\"Legend\">");
    for c in [
        Cell::Done,
        Cell::Moving { step: None },
        Cell::Pending,
        Cell::AwaitingWindow,
        Cell::Unmoved,
        Cell::Failed { outcome: "…".into(), reason: String::new() },
    ] {
        let _ = write!(
            out,
            "<li class=\"cell {}\"><span class=\"mark\" aria-hidden=\"true\">{}</span> {}</li>",
            c.class(),
            c.mark(),
            E(&c.label())
        );
    }
    out.push_str("</ul>");
}

/// One Cluster's path: where it came from, then each step, done, current or to come.
fn path(out: &mut String, cluster: &str, from: Option<(&str, &str)>, steps: &[String], cell: &Cell, class: Option<&str>) {
    let at = steps.iter().position(|s| Some(s.as_str()) == class);
    let _ = write!(out, "<div class=\"path\" data-cluster=\"{}\"><h3>", E(cluster));
    cluster_ref_link(out, cluster);
    out.push_str("</h3><ol class=\"steps\">");
    if let Some((class, version)) = from {
        let _ = write!(
            out,
            "<li class=\"step from\" data-step=\"{}\">{} <small>{}</small> <span class=\"what\">(from)</span></li>",
            E(class),
            E(class),
            E(version)
        );
    }
    for (i, s) in steps.iter().enumerate() {
        let (state, word) = match (cell, at) {
            (Cell::Done, _) => ("done", "done"),
            (_, Some(k)) if i < k => ("done", "done"),
            (_, Some(k)) if i == k => ("current", "current"),
            _ => ("next", "to come"),
        };
        let _ = write!(out, "<li class=\"step {state}\" data-step=\"{}\">{} <span class=\"what\">({word})</span></li>", E(s), E(s));
    }
    out.push_str("</ol></div>");
}

fn window_box(out: &mut String, ro: &RolloutStatus, config: Option<&crate::config::RolloutConfig>, ctx: &Ctx) {
    let waiting = ro.reason == "OutsideWindow" || !ro.next_window.is_empty();
    let configured = config.is_some_and(|c| !c.windows.is_empty());
    if !waiting && !configured {
        return;
    }
    out.push_str("<div class=\"callout\" id=\"window\" role=\"status\"><b>Maintenance window</b>");
    if waiting {
        out.push_str("<p>Clusters wait outside their windows");
        if !ro.next_window.is_empty() {
            let _ = write!(out, "; the next window opens at <span id=\"next-window\">{}</span> (", E(&ro.next_window));
            time(out, &ro.next_window, ctx.now);
            out.push(')');
        }
        out.push_str(".</p>");
    }
    if let Some(c) = config.filter(|c| !c.windows.is_empty()) {
        out.push_str("<ul>");
        for w in &c.windows {
            let now = match (w.open_until(ctx.now), w.next_open(ctx.now)) {
                (Some(until), _) => format!("open now, until {}", until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                (None, Some(next)) => format!("closed now, opens {}", next.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                (None, None) => "closed now, never opens again".into(),
            };
            let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let only = if labels.is_empty() { String::new() } else { format!(" for Clusters labelled {}", labels.join(", ")) };
            let _ = write!(
                out,
                "<li><code>{}</code> {} ({}){}: <b>{}</b></li>",
                E(&w.expr),
                E(&crate::model::schedule::format_duration(w.duration)),
                E(&w.zone),
                E(&only),
                E(&now)
            );
        }
        out.push_str("</ul>");
    } else if ctx.config.is_none() {
        out.push_str("<p class=\"muted\">Start the console with <code>--config</code> to see each window now.</p>");
    }
    out.push_str("</div>");
}

fn budget_box(out: &mut String, ro: &RolloutStatus, budget: Option<crate::config::Budget>) {
    out.push_str("<div class=\"callout\" id=\"budget\" role=\"status\"><b>Failure budget</b>");
    let wave = ro.wave.max(1) as usize;
    let size = ro.plan.get(wave - 1).map_or(0, |w| w.clusters.len());
    let failed_now = ro.failed.iter().filter(|f| f.wave as usize == wave).count();
    match budget {
        Some(b) => {
            let _ = write!(
                out,
                "<p><span id=\"budget-used\">{failed_now} of {} used</span> in wave {wave} (maxFailures {b} of {size} Clusters); {} failed in all.</p>",
                b.of(size),
                ro.failed.len()
            );
        }
        None => {
            let _ = write!(
                out,
                "<p><span id=\"budget-used\">{failed_now} failed</span> in wave {wave}, {} in all. <span class=\"muted\">maxFailures is in the config: start the console with <code>--config</code> to see how much is left.</span></p>",
                ro.failed.len()
            );
        }
    }
    out.push_str("</div>");
}

fn commands(out: &mut String, sub: &str, ctx: &Ctx) {
    let config = ctx.config_path.as_deref().unwrap_or("stacksync.yaml");
    out.push_str("<div class=\"callout\" id=\"commands\"><b>Pause or resume</b> <span class=\"muted\">(the console only reads: run these yourself)</span>");
    for action in ["pause", "resume"] {
        let cmd = format!("stacksync rollout {action} --config {config} {sub}");
        let _ = write!(
            out,
            "<p><code id=\"cmd-{action}\">{}</code> <button type=\"button\" class=\"copy\" data-copy=\"cmd-{action}\">Copy</button></p>",
            E(&cmd)
        );
    }
    out.push_str("</div>");
}

fn failed_table(out: &mut String, ro: &RolloutStatus) {
    if ro.failed.is_empty() {
        return;
    }
    out.push_str(
        "<section aria-labelledby=\"failed\"><h2 id=\"failed\">Failed Clusters</h2><table id=\"failed-clusters\"><thead><tr>\
         <th scope=\"col\">Cluster</th><th scope=\"col\">Wave</th><th scope=\"col\">Reason</th><th scope=\"col\">Outcome</th>\
         <th scope=\"col\">Message</th></tr></thead><tbody>",
    );
    for f in &ro.failed {
        let _ = write!(out, "<tr data-cluster=\"{}\"><td>", E(&f.cluster));
        cluster_ref_link(out, &f.cluster);
        let _ = write!(out, "</td><td>{}</td><td>{}</td><td>", f.wave, E(&f.reason));
        let state = if f.outcome == "RolledBack" { State::Paused } else { State::Failed };
        let _ = write!(out, "<span class=\"state s-{}\">{}</span>", state.word().to_ascii_lowercase(), E(&f.outcome));
        let _ = write!(out, "</td><td>{}", E(&f.message));
        if !f.detail.is_empty() {
            let _ = write!(out, "<br><small>{}</small>", E(&f.detail));
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::crd::{ClusterPath, FailedCluster};

    #[test]
    fn a_cell_says_what_became_of_its_cluster() {
        let wave = WaveStatus {
            clusters: vec!["a/done".into(), "a/win".into(), "a/edit".into(), "a/fail".into(), "a/step".into(), "a/new".into()],
            phase: "Progressing".into(),
            awaiting_window: vec!["a/win".into()],
            unmoved: vec!["a/edit".into()],
            paths: vec![ClusterPath { cluster: "a/step".into(), steps: vec!["k-1-34-v1".into(), "k-1-35-v2".into()] }],
            ..Default::default()
        };
        let ro = RolloutStatus {
            failed: vec![FailedCluster {
                cluster: "a/fail".into(),
                wave: 1,
                reason: "ClusterFailed".into(),
                outcome: "RolledBack".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = "k-1-35-v2";
        let c = |name: &str, class: Option<&str>, applied: Option<&str>, state: State| cell(name, &wave, &ro, t, class, applied, state);
        assert_eq!(c("a/done", Some(t), Some(t), State::Ready), Cell::Done);
        assert_eq!(c("a/win", None, None, State::Ready), Cell::AwaitingWindow);
        assert_eq!(c("a/edit", None, None, State::Ready), Cell::Unmoved);
        assert_eq!(
            c("a/fail", Some(t), None, State::Failed),
            Cell::Failed { outcome: "RolledBack".into(), reason: "ClusterFailed".into() }
        );
        assert_eq!(c("a/step", Some("k-1-34-v1"), None, State::Progressing), Cell::Moving { step: Some((1, 2)) });
        assert_eq!(c("a/step", Some(t), Some("k-1-34-v1"), State::Progressing), Cell::Moving { step: Some((2, 2)) });
        assert_eq!(c("a/new", Some(t), Some(t), State::Progressing), Cell::Moving { step: None }, "on the target, not Ready yet");
        let pending = WaveStatus { phase: "Pending".into(), ..wave.clone() };
        assert_eq!(cell("a/new", &pending, &ro, t, None, None, State::Ready), Cell::Pending);
        let done = WaveStatus { phase: "Done".into(), ..wave };
        assert_eq!(cell("a/new", &done, &ro, t, None, None, State::Ready), Cell::Done);
        assert_eq!(Cell::Moving { step: Some((2, 3)) }.label(), "upgrading, step 2/3");
    }
}
