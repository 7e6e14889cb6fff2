//! The console's pages, each a pure function of a [`Snapshot`](super::view::Snapshot) (and the
//! few things fetched for it) to HTML: `fleet`, `rollouts`, `cluster`, `releases`, `preview`.
//! What a page's content is also answers the live update of that page (the same function,
//! without the layout).

pub mod cluster;
pub mod fleet;
pub mod preview;
pub mod releases;
pub mod rollouts;

use std::fmt::Write;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event;

use super::html::{E, U};
use super::view::State;
use crate::config::Config;

/// What every page may need besides the snapshot: the clock, and the config if the console was
/// given one (rollout budgets and windows, the exact `rollout pause` command).
pub struct Ctx {
    pub now: DateTime<Utc>,
    pub config: Option<Arc<Config>>,
    /// The config file as given on the command line, for the commands shown.
    pub config_path: Option<String>,
}

/// A state as a badge: its mark and its word, the colour from the class.
pub fn badge(out: &mut String, state: State) {
    let _ = write!(
        out,
        "<span class=\"state s-{}\"><span class=\"mark\" aria-hidden=\"true\">{}</span> {}</span>",
        state.word().to_ascii_lowercase(),
        state.mark(),
        state.word()
    );
}

/// A link to a Cluster's page.
pub fn cluster_link(out: &mut String, namespace: &str, name: &str) {
    let _ = write!(out, "<a href=\"/clusters/{}/{}\">{}/{}</a>", U(namespace), U(name), E(namespace), E(name));
}

/// `ns/name` as a link to its page.
pub fn cluster_ref_link(out: &mut String, cluster: &str) {
    match cluster.split_once('/') {
        Some((ns, name)) => cluster_link(out, ns, name),
        None => {
            let _ = write!(out, "{}", E(cluster));
        }
    }
}

/// An RFC 3339 time as `<time>`, with how long ago (or how far ahead) it is.
pub fn time(out: &mut String, at: &str, now: DateTime<Utc>) {
    let Ok(t) = DateTime::parse_from_rfc3339(at) else {
        let _ = write!(out, "{}", E(at));
        return;
    };
    let secs = (now - t.with_timezone(&Utc)).num_seconds();
    let (n, ahead) = (secs.unsigned_abs(), secs < 0);
    let span = match n {
        0..60 => format!("{n}s"),
        60..3600 => format!("{}m", n / 60),
        3600..86_400 => format!("{}h {}m", n / 3600, n % 3600 / 60),
        _ => format!("{}d {}h", n / 86_400, n % 86_400 / 3600),
    };
    let rel = if ahead { format!("in {span}") } else { format!("{span} ago") };
    let _ = write!(out, "<time datetime=\"{}\" title=\"{}\">{}</time>", E(at), E(at), E(&rel));
}

/// When an Event happened: its last time, else its event time, else its creation.
pub fn event_time(e: &Event) -> String {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()))
        .unwrap_or_default()
}

/// Events (already chosen) as a table, oldest first.
pub fn events_table(out: &mut String, events: &mut [&Event], now: DateTime<Utc>) {
    if events.is_empty() {
        out.push_str("<p class=\"muted\">No Events (the API server keeps them about an hour).</p>");
        return;
    }
    events.sort_by_key(|e| event_time(e));
    out.push_str(
        "<table class=\"events\"><thead><tr><th scope=\"col\">When</th><th scope=\"col\">Type</th><th scope=\"col\">Reason</th>\
         <th scope=\"col\">Object</th><th scope=\"col\">Message</th></tr></thead><tbody>",
    );
    for e in events.iter() {
        out.push_str("<tr><td>");
        time(out, &event_time(e), now);
        let type_ = e.type_.as_deref().unwrap_or("Normal");
        let class = if type_ == "Warning" { "warning" } else { "normal" };
        let _ = write!(
            out,
            "</td><td class=\"{class}\">{}</td><td>{}</td><td>{}/{}</td><td>{}",
            E(type_),
            E(e.reason.as_deref().unwrap_or_default()),
            E(e.involved_object.kind.as_deref().unwrap_or_default()),
            E(e.involved_object.name.as_deref().unwrap_or_default()),
            E(e.message.as_deref().unwrap_or_default())
        );
        if let Some(n) = e.count.filter(|n| *n > 1) {
            let _ = write!(out, " <span class=\"muted\">(×{n})</span>");
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
}

/// A `<dl>` of label/value pairs whose values are already HTML.
pub fn facts(out: &mut String, rows: &[(&str, String)]) {
    out.push_str("<dl class=\"facts\">");
    for (k, v) in rows {
        if !v.is_empty() {
            let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
        }
    }
    out.push_str("</dl>");
}

/// Watch problems and kinds still loading, said at the top of a page.
pub fn notes(out: &mut String, loading: &[&str], problems: &std::collections::BTreeMap<&'static str, String>) {
    if !loading.is_empty() {
        let _ = write!(out, "<p class=\"note\" role=\"status\">Still reading: {}.</p>", E(&loading.join(", ")));
    }
    for (kind, e) in problems {
        let _ = write!(out, "<p class=\"note warning\" role=\"status\">Cannot watch {}: {}</p>", E(kind), E(e));
    }
}
