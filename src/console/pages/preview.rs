//! The Preview page (`/preview`): a `stacksync preview -o json` report (docs/preview.md), opened
//! from a file or pasted, shown as the markdown report shows it — the fleet table, the workloads
//! that restart, the upgrade stages, the waves. The report is read as data (every field
//! optional) and every string in it escaped: a report is a file someone sent.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Deserialize;

use super::cluster_ref_link;
use crate::console::html::E;

/// The largest report read.
pub const MAX_REPORT_BYTES: usize = 32 << 20;

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct Report {
    pub api_version: String,
    pub kind: String,
    pub subscription: String,
    pub release: ReleaseInfo,
    pub summary: BTreeMap<String, serde_json::Value>,
    pub clusters: Vec<ClusterPreview>,
    pub waves: Option<Vec<Vec<String>>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct ReleaseInfo {
    pub tag: String,
    pub source: String,
    pub revision: String,
    pub origin: String,
    pub kubernetes: Option<String>,
    pub signed_by: Option<String>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterPreview {
    pub cluster: String,
    pub result: String,
    pub message: Option<String>,
    pub applied: Option<String>,
    pub kubernetes: Option<KubernetesMove>,
    pub stages: Vec<Stage>,
    pub changes: Vec<Change>,
    pub restarts: Vec<String>,
    pub wave: Option<usize>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct KubernetesMove {
    pub from: String,
    pub to: String,
    pub held_by_before_cluster_upgrade: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct Stage {
    pub hook: String,
    pub name: String,
    pub action: String,
    pub waits_before: Option<String>,
    pub waits_after: Option<String>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", default)]
pub struct Change {
    pub object: String,
    pub change: String,
    pub fields: Vec<String>,
    pub restarts: bool,
}

/// Why a text is not a report.
#[derive(Debug, thiserror::Error)]
pub enum NotAReport {
    #[error("not a `stacksync preview -o json` report: {0}")]
    Json(#[source] serde_json::Error),
    #[error("not a `stacksync preview -o json` report: kind is `{0}`, not `FleetPreview`")]
    Kind(String),
}

/// Reads a report.
///
/// # Errors
/// [`NotAReport`]: not JSON, or not a `FleetPreview`; the message says which.
pub fn parse(text: &str) -> Result<Report, NotAReport> {
    let r: Report = serde_json::from_str(text).map_err(NotAReport::Json)?;
    if r.kind != "FleetPreview" {
        return Err(NotAReport::Kind(r.kind));
    }
    Ok(r)
}

/// The form to open a report, and the report (or why it could not be read) below it.
pub fn content(report: Option<Result<&Report, &str>>) -> String {
    let mut out = String::from("<h1>Preview</h1>");
    out.push_str(
        "<form class=\"preview\" method=\"post\" action=\"/preview\"><p>Open a <code>stacksync preview -o json</code> report \
         (docs/preview.md): choose the file, or paste it.</p>\
         <label>File <input type=\"file\" id=\"preview-file\" accept=\".json,application/json\"></label>\
         <label class=\"block\">Report <textarea name=\"report\" id=\"preview-text\" rows=\"6\" spellcheck=\"false\"></textarea></label>\
         <button type=\"submit\">Show</button></form>",
    );
    match report {
        None => {}
        Some(Err(e)) => {
            let _ = write!(out, "<p class=\"note warning\" role=\"alert\">{}</p>", E(e));
        }
        Some(Ok(r)) => report_html(&mut out, r),
    }
    out
}

fn report_html(out: &mut String, r: &Report) {
    let _ = write!(
        out,
        "<section id=\"report\" aria-labelledby=\"report-h\"><h2 id=\"report-h\"><code>{}</code> for subscription <code>{}</code></h2>",
        E(&r.release.tag),
        E(&r.subscription)
    );
    let mut heading = format!("{} from {} ({})", r.release.revision, r.release.source, r.release.origin);
    if let Some(k) = &r.release.kubernetes {
        let _ = write!(heading, ", Kubernetes {k}");
    }
    if let Some(s) = &r.release.signed_by {
        let _ = write!(heading, ", signed by {s}");
    }
    let _ = write!(out, "<p class=\"muted\">{}</p>", E(&heading));
    let n = |k: &str| r.summary.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let _ = write!(
        out,
        "<p id=\"preview-summary\"><b>{}</b> Clusters: <b>{}</b> change, {} unchanged, <b>{}</b> cannot be judged; <b>{}</b> workloads restart; {} Kubernetes upgrades.</p>",
        n("clusters"),
        n("changed"),
        n("unchanged"),
        n("unjudged"),
        n("restarts"),
        n("kubernetesUpgrades")
    );
    let waves = r.waves.is_some();
    out.push_str(
        "<div class=\"scroll\"><table id=\"preview-table\"><thead><tr><th scope=\"col\">Cluster</th><th scope=\"col\">Applied</th><th scope=\"col\">Result</th>\
         <th scope=\"col\">Create</th><th scope=\"col\">Update</th><th scope=\"col\">Prune</th><th scope=\"col\">Delete</th><th scope=\"col\">Restarts</th><th scope=\"col\">Kubernetes</th>",
    );
    out.push_str(if waves { "<th scope=\"col\">Wave</th></tr></thead><tbody>" } else { "</tr></thead><tbody>" });
    let rank = |c: &ClusterPreview| match c.result.as_str() {
        "changes" => 1,
        "unchanged" => 2,
        _ => 0,
    };
    let mut rows: Vec<&ClusterPreview> = r.clusters.iter().collect();
    rows.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cluster.cmp(&b.cluster)));
    for c in rows {
        let count = |what: &str| c.changes.iter().filter(|o| o.change == what).count();
        let k8s = match &c.kubernetes {
            Some(k) if k.held_by_before_cluster_upgrade => format!("{} → {}", k.from, k.to),
            Some(k) => k.from.clone(),
            None => String::new(),
        };
        let class = match c.result.as_str() {
            "changes" => "s-progressing",
            "unchanged" => "s-ready",
            _ => "s-failed",
        };
        let _ = write!(out, "<tr data-cluster=\"{}\"><td>", E(&c.cluster));
        cluster_ref_link(out, &c.cluster);
        let _ = write!(
            out,
            "</td><td>{}</td><td><span class=\"state {class}\">{}</span>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>",
            E(c.applied.as_deref().unwrap_or("-")),
            E(&c.result),
            c.message.as_deref().map(|m| format!("<br><small>{}</small>", E(m))).unwrap_or_default(),
            count("create"),
            count("update"),
            count("prune"),
            count("delete"),
            c.restarts.len(),
            E(&k8s)
        );
        if waves {
            let _ = write!(out, "<td>{}</td>", c.wave.map(|w| w.to_string()).unwrap_or_default());
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");

    let mut restarts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in &r.clusters {
        for w in &c.restarts {
            restarts.entry(w).or_default().push(&c.cluster);
        }
    }
    if !restarts.is_empty() {
        out.push_str("<h3>Workloads that restart</h3><ul id=\"restarts\">");
        for (w, clusters) in &restarts {
            let _ = write!(
                out,
                "<li><code>{}</code> on {} Clusters ({})</li>",
                E(w),
                clusters.len(),
                E(&clusters.iter().take(5).copied().collect::<Vec<_>>().join(", "))
            );
        }
        out.push_str("</ul>");
    }
    let mut stages: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    for c in &r.clusters {
        for s in &c.stages {
            *stages.entry((&s.hook, &s.name, &s.action)).or_default() += 1;
        }
    }
    if !stages.is_empty() {
        out.push_str("<h3>Upgrade stages</h3><ul id=\"stages\">");
        for ((hook, name, action), n) in &stages {
            let _ = write!(out, "<li>{} <code>{}</code> {} — on {n} Clusters</li>", E(hook), E(name), E(action));
        }
        out.push_str("</ul>");
    }
    if let Some(waves) = &r.waves {
        out.push_str("<h3>Waves</h3><ol id=\"preview-waves\">");
        for w in waves {
            let _ = write!(out, "<li>{} Clusters: {}</li>", w.len(), E(&w.join(", ")));
        }
        out.push_str("</ol>");
    }
    out.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_shown_with_every_string_escaped() {
        let text = r#"{"apiVersion":"stacksync.io/v1alpha1","kind":"FleetPreview","subscription":"ferrol",
            "release":{"tag":"v4<script>","source":"stacks","revision":"abc","origin":"source"},
            "summary":{"clusters":2,"changed":1,"unchanged":1,"restarts":1},
            "clusters":[{"cluster":"team-a/alpha","result":"changes","applied":"v3",
                "changes":[{"object":"Deployment/kube-system/x","change":"update","restarts":true}],"restarts":["Deployment/kube-system/x"],"wave":1},
              {"cluster":"team-a/beta","result":"unchanged","changes":[],"wave":2}],
            "waves":[["team-a/alpha"],["team-a/beta"]]}"#;
        let r = parse(text).expect("a report");
        let html = content(Some(Ok(&r)));
        assert!(html.contains("<code>v4&lt;script&gt;</code>"), "{html}");
        assert!(!html.contains("<script>"));
        assert!(html.contains("<b>2</b> Clusters: <b>1</b> change"));
        assert!(html.contains("<code>Deployment/kube-system/x</code> on 1 Clusters (team-a/alpha)"));
        assert!(html.contains("<li>1 Clusters: team-a/beta</li>"));
        assert!(parse("{\"kind\":\"Other\"}").unwrap_err().to_string().contains("not `FleetPreview`"));
        assert!(parse("nope").is_err());
    }
}
