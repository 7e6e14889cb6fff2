//! A [`FleetPreview`] for people: `-o text` (every Cluster, its changed objects and fields) and
//! `-o markdown` (comment-sized, for a release repository's pull request: the fleet table, the
//! first changed objects of each kind, every restart).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{ClusterPreview, FleetPreview, Judged, ObjectChange};

/// Clusters listed in the markdown table before it says how many more there are.
const TABLE_ROWS: usize = 50;
/// Clusters named beside one restarting workload in markdown.
const NAMED_CLUSTERS: usize = 5;

fn heading(p: &FleetPreview) -> String {
    let r = &p.release;
    let from = match &r.path {
        Some(path) => format!("local {path}, {}", short(&r.revision)),
        None => format!("source {}, {}", r.source, short(&r.revision)),
    };
    let k8s = r.kubernetes.as_ref().map(|k| format!("; Kubernetes {k}")).unwrap_or_default();
    let signed = r.signed_by.as_ref().map(|s| format!("; signed by {s}")).unwrap_or_default();
    format!("release {} ({from}{k8s}{signed}) for subscription {}", r.tag, p.subscription)
}

fn short(revision: &str) -> &str {
    let hex = revision.strip_prefix("sha256:").unwrap_or(revision);
    &revision[..(revision.len() - hex.len() + hex.len().min(12))]
}

fn summary_line(p: &FleetPreview) -> String {
    let s = &p.summary;
    format!(
        "{} Clusters: {} change, {} unchanged, {} cannot be judged ({} unreachable, {} not ready, {} errors); objects: {} create, {} update, {} prune, {} delete; {} workloads restart; {} Kubernetes upgrades",
        s.clusters,
        s.changed,
        s.unchanged,
        s.unjudged,
        s.unreachable,
        s.not_ready,
        s.errors,
        s.create,
        s.update,
        s.prune,
        s.delete,
        s.restarts,
        s.kubernetes_upgrades
    )
}

fn change_line(c: &ObjectChange) -> String {
    let mut line = format!("{} {}", c.change, c.object);
    if !c.fields.is_empty() {
        let _ = write!(line, ": {}", c.fields.join(", "));
    }
    if c.restarts {
        line.push_str("  [restarts pods]");
    }
    if c.client_side {
        line.push_str("  [judged without a dry-run]");
    }
    line
}

fn result_word(r: Judged) -> &'static str {
    match r {
        Judged::Changes => "changes",
        Judged::Unchanged => "no changes",
        Judged::Unreachable => "UNREACHABLE",
        Judged::NotReady => "NOT READY",
        Judged::Error => "ERROR",
    }
}

fn cluster_head(c: &ClusterPreview, tag: &str) -> String {
    let release = match &c.applied {
        Some(a) if a != tag => format!(" ({a} -> {tag})"),
        Some(_) => format!(" ({tag})"),
        None => format!(" (none -> {tag})"),
    };
    let what = match c.result {
        Judged::Changes => {
            let restarts = match c.restarts.len() {
                0 => String::new(),
                1 => ", 1 restart".to_owned(),
                n => format!(", {n} restarts"),
            };
            format!("{} changes{restarts}", c.changes.len())
        }
        other => result_word(other).to_owned(),
    };
    let message = c.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default();
    let wave = c.wave.map(|w| format!(" [wave {w}]")).unwrap_or_default();
    format!("{}{release}{wave}: {what}{message}", c.cluster)
}

/// `-o text`: every Cluster with what would happen to it; with `diffs`, each change's unified
/// diff too.
pub fn text(p: &FleetPreview, diffs: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", heading(p));
    for ns in &p.management {
        let _ = writeln!(
            out,
            "management cluster, namespace {}: {}",
            ns.namespace,
            match &ns.error {
                Some(e) => format!("ERROR: {e}"),
                None if ns.changes.is_empty() && ns.failures.is_empty() => "no changes".into(),
                None => format!("{} changes", ns.changes.len()),
            }
        );
        for c in &ns.changes {
            let _ = writeln!(out, "  {}", change_line(c));
            if diffs {
                out.push_str(&c.diff);
            }
        }
        for f in &ns.failures {
            let _ = writeln!(out, "  ERROR {}: {}", f.object, f.message);
        }
    }
    for c in &p.clusters {
        let _ = writeln!(out, "{}", cluster_head(c, &p.release.tag));
        if let Some(k) = &c.kubernetes
            && k.held_by_before_cluster_upgrade
        {
            let _ = writeln!(out, "  Kubernetes {} -> {}: held by BeforeClusterUpgrade until its stages are done", k.from, k.to);
        }
        for s in &c.stages {
            let _ = write!(out, "  stage {} {} ({})", s.hook, s.name, s.action);
            if let Some(w) = &s.waits_before {
                let _ = write!(out, ", first waits for {w}");
            }
            if let Some(w) = &s.waits_after {
                let _ = write!(out, ", then waits for {w}");
            }
            out.push('\n');
        }
        for ch in &c.changes {
            let _ = writeln!(out, "  {}", change_line(ch));
            if diffs {
                out.push_str(&ch.diff);
            }
        }
        for f in &c.failures {
            let _ = writeln!(out, "  ERROR {}: {}", f.object, f.message);
        }
    }
    let _ = writeln!(out, "fleet: {}", summary_line(p));
    if let Some(waves) = &p.waves {
        let list: Vec<String> = waves.iter().enumerate().map(|(i, w)| format!("{}: {}", i + 1, w.join(", "))).collect();
        let _ = writeln!(out, "waves: {}", list.join("; "));
    }
    out
}

/// Text from the fleet, fit for a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `-o markdown`: a pull-request comment. The fleet table (the first [`TABLE_ROWS`] Clusters,
/// those that change or cannot be judged first), every restarting workload with how many
/// Clusters, the first `per_kind` changed objects of each kind, and what could not be judged.
pub fn markdown(p: &FleetPreview, per_kind: usize) -> String {
    let mut out = String::new();
    let s = &p.summary;
    let _ = writeln!(out, "### stacksync preview: `{}` for subscription `{}`\n", p.release.tag, p.subscription);
    let _ = writeln!(out, "{}\n", cell(&heading(p)));
    let _ = writeln!(
        out,
        "**{}** Clusters: **{}** change, {} unchanged, **{}** cannot be judged; **{}** workloads restart; {} Kubernetes upgrades.\n",
        s.clusters, s.changed, s.unchanged, s.unjudged, s.restarts, s.kubernetes_upgrades
    );
    let mut rows: Vec<&ClusterPreview> = p.clusters.iter().collect();
    let rank = |c: &ClusterPreview| match c.result {
        Judged::Unreachable | Judged::NotReady | Judged::Error => 0,
        Judged::Changes => 1,
        Judged::Unchanged => 2,
    };
    rows.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cluster.cmp(&b.cluster)));
    let waves = p.waves.is_some();
    out.push_str("| Cluster | Applied | Result | Create | Update | Prune | Delete | Restarts | Kubernetes |");
    out.push_str(if waves { " Wave |\n" } else { "\n" });
    out.push_str("|---|---|---|---|---|---|---|---|---|");
    out.push_str(if waves { "---|\n" } else { "\n" });
    for c in rows.iter().take(TABLE_ROWS) {
        let count = |what: &str| c.changes.iter().filter(|o| o.change == what).count();
        let k8s = match &c.kubernetes {
            Some(k) if k.held_by_before_cluster_upgrade => format!("{} → {}", k.from, k.to),
            Some(k) => k.from.clone(),
            None => String::new(),
        };
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&c.cluster),
            cell(c.applied.as_deref().unwrap_or("-")),
            result_word(c.result),
            count("create"),
            count("update"),
            count("prune"),
            count("delete"),
            c.restarts.len(),
            k8s
        );
        if waves {
            let _ = write!(out, " {} |", c.wave.map(|w| w.to_string()).unwrap_or_default());
        }
        out.push('\n');
    }
    if rows.len() > TABLE_ROWS {
        let _ = writeln!(out, "\n… and {} more Clusters (`-o json` has every one).", rows.len() - TABLE_ROWS);
    }

    let mut restarts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in &p.clusters {
        for w in &c.restarts {
            restarts.entry(w).or_default().push(&c.cluster);
        }
    }
    if !restarts.is_empty() {
        out.push_str("\n#### Workloads that restart\n\n");
        for (w, clusters) in &restarts {
            let named: Vec<&str> = clusters.iter().take(NAMED_CLUSTERS).copied().collect();
            let more =
                if clusters.len() > NAMED_CLUSTERS { format!(", … {} more", clusters.len() - NAMED_CLUSTERS) } else { String::new() };
            let _ = writeln!(out, "- `{}` on {} Clusters ({}{more})", cell(w), clusters.len(), cell(&named.join(", ")));
        }
    }

    // Changed objects by kind: each distinct (change, object, fields) once, with its Clusters.
    let mut by_kind: BTreeMap<String, BTreeMap<(String, String, String), usize>> = BTreeMap::new();
    for c in &p.clusters {
        for o in &c.changes {
            let kind = o.object.split('/').next().unwrap_or_default().to_owned();
            *by_kind.entry(kind).or_default().entry((o.change.clone(), o.object.clone(), o.fields.join(", "))).or_default() += 1;
        }
    }
    if !by_kind.is_empty() {
        out.push_str("\n#### Changed objects in workload clusters\n\n");
        for (kind, objects) in &by_kind {
            let _ = writeln!(out, "- **{}** ({} distinct changes)", cell(kind), objects.len());
            for ((change, object, fields), n) in objects.iter().take(per_kind) {
                let fields = if fields.is_empty() { String::new() } else { format!(": `{}`", cell(fields)) };
                let _ = writeln!(out, "  - {change} `{}`{fields} on {n} Clusters", cell(object));
            }
            if objects.len() > per_kind {
                let _ = writeln!(out, "  - … {} more", objects.len() - per_kind);
            }
        }
    }
    let management: Vec<String> = p
        .management
        .iter()
        .flat_map(|ns| ns.changes.iter().map(move |c| format!("- {} `{}` (namespace {})", c.change, cell(&c.object), ns.namespace)))
        .collect();
    if !management.is_empty() {
        out.push_str("\n#### Management cluster\n\n");
        for line in management.iter().take(per_kind * 4) {
            let _ = writeln!(out, "{line}");
        }
        if management.len() > per_kind * 4 {
            let _ = writeln!(out, "- … {} more", management.len() - per_kind * 4);
        }
    }
    let unjudged: Vec<&ClusterPreview> = p.clusters.iter().filter(|c| !c.result.judged() || !c.failures.is_empty()).collect();
    let errors: Vec<String> =
        p.management.iter().filter_map(|n| n.error.as_ref().map(|e| format!("namespace {}: {e}", n.namespace))).collect();
    if !unjudged.is_empty() || !errors.is_empty() {
        out.push_str("\n#### Cannot be judged\n\n");
        for e in &errors {
            let _ = writeln!(out, "- {}", cell(e));
        }
        for c in unjudged.iter().take(TABLE_ROWS) {
            let why = c.message.clone().unwrap_or_else(|| format!("{} objects could not be previewed", c.failures.len()));
            let _ = writeln!(out, "- {}: {} — {}", cell(&c.cluster), result_word(c.result), cell(&why));
        }
        if unjudged.len() > TABLE_ROWS {
            let _ = writeln!(out, "- … {} more", unjudged.len() - TABLE_ROWS);
        }
    }
    out
}
