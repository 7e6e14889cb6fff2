//! The Releases page (`/releases`): per subscription, every release it has seen (its
//! StackReleases), with phase, verification and signer, and how many Clusters run each.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::Ctx;
use crate::console::html::{E, U};
use crate::console::view::Snapshot;
use crate::status::crd::StackRelease;

pub fn content(s: &Snapshot, _ctx: &Ctx) -> String {
    let mut running: HashMap<(&str, &str), usize> = HashMap::new();
    for cs in &s.syncs {
        if let Some(applied) = cs.status.as_ref().and_then(|st| st.applied_release.as_ref()) {
            *running.entry((cs.spec.subscription.as_str(), applied.tag.as_str())).or_default() += 1;
        }
    }
    let mut by_sub: BTreeMap<&str, Vec<&StackRelease>> = BTreeMap::new();
    for r in &s.releases {
        by_sub.entry(r.spec.subscription.as_str()).or_default().push(r);
    }
    let mut out = String::from("<h1>Releases</h1>");
    if by_sub.is_empty() {
        out.push_str("<p class=\"muted\">No StackRelease yet.</p>");
    }
    for (sub, mut releases) in by_sub {
        releases.sort_by(|a, b| b.spec.tag.cmp(&a.spec.tag));
        let _ = write!(
            out,
            "<section aria-labelledby=\"sub-{}\"><h2 id=\"sub-{}\">Subscription {}</h2><table class=\"releases\"><thead><tr>\
             <th scope=\"col\">Release</th><th scope=\"col\">Source</th><th scope=\"col\">Phase</th><th scope=\"col\">Verified by</th>\
             <th scope=\"col\">Signed by</th><th scope=\"col\">Clusters running it</th><th scope=\"col\">Ready</th><th scope=\"col\">Rollout</th></tr></thead><tbody>",
            U(sub),
            U(sub),
            E(sub)
        );
        for r in releases {
            let name = r.metadata.name.as_deref().unwrap_or_default();
            let st = r.status.clone().unwrap_or_default();
            let verified = if st.verified {
                E(&st.verified_by).to_string()
            } else {
                format!("<span class=\"warning\">✗ not verified</span> {}", E(&st.verified_by))
            };
            let n = running.get(&(sub, r.spec.tag.as_str())).copied().unwrap_or(0);
            let _ = write!(
                out,
                "<tr id=\"{}\" data-release=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{verified}</td><td><code>{}</code></td><td class=\"num\" data-running>{n}</td><td>{}</td><td>",
                U(name),
                E(name),
                E(&r.spec.tag),
                E(&r.spec.source),
                E(&st.phase),
                E(&st.signed_by),
                E(st.clusters.as_ref().map(|c| c.summary.as_str()).unwrap_or_default())
            );
            if let Some(ro) = &st.rollout {
                let _ = write!(out, "<a href=\"/rollouts/{}\">{} {}</a>", U(name), E(&ro.phase), E(&ro.summary));
            }
            out.push_str("</td></tr>");
        }
        out.push_str("</tbody></table></section>");
    }
    out
}
