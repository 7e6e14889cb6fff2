//! What the commands built on a pass print of its [`PassReport`]: `run --once`'s verdict,
//! `fetch`'s table of releases and their assets, `render`'s line per cluster. Plain functions of
//! the report, returning the text, so the binary only prints it.

use std::fmt::Write as _;
use std::path::Path;

use super::PassReport;
use crate::model::verification::{AssetRecord, VerifiedBy};
use crate::release::short;

/// `run --once`: `synced: <summary>`, or `NOT SYNCED: <summary>` and a line per cluster or
/// object that is not.
pub fn verdict(report: &PassReport) -> String {
    let mut out = String::new();
    if report.all_synced() {
        let _ = writeln!(out, "synced: {}", report.summary());
    } else {
        let _ = writeln!(out, "NOT SYNCED: {}", report.summary());
        for line in report.not_synced() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// `fetch`: a table of each subscription's release (source, tag, version, revision, whether it
/// was fetched or cached, how it was verified), then each asset with its digest.
pub fn fetch_table(report: &PassReport) -> String {
    let header = ["SUBSCRIPTION", "SOURCE", "RELEASE", "VERSION", "REVISION", "CACHE", "VERIFIED"].map(str::to_owned);
    let mut rows = vec![header];
    for p in &report.prepared {
        let row = match &p.outcome {
            Ok(r) => [
                p.subscription.clone(),
                p.source.clone(),
                r.release.tag.clone(),
                r.release.version.to_string(),
                short(&r.release.commit).to_owned(),
                if r.fetched { "fetched".into() } else { "cached".into() },
                match &r.signed_by {
                    Some(signer) => format!("{}, signed by {signer}", verified_summary(&r.assets)),
                    None => verified_summary(&r.assets),
                },
            ],
            Err(e) => [p.subscription.clone(), p.source.clone(), "-".into(), "-".into(), "-".into(), "-".into(), format!("ERROR: {e}")],
        };
        rows.push(row);
    }
    let mut out = String::new();
    let widths: Vec<usize> = (0..7).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let assets: Vec<_> =
        report.prepared.iter().filter_map(|p| p.outcome.as_ref().ok().map(|r| (p, r))).filter(|(_, r)| !r.assets.is_empty()).collect();
    if !assets.is_empty() {
        out.push('\n');
        out.push_str("ASSETS\n");
        for (p, r) in assets {
            for a in &r.assets {
                let _ = writeln!(out, "{}  {}  {}  {}  {}", p.subscription, r.release.tag, a.name, a.digest, a.verified_by);
            }
        }
    }
    out
}

/// `git objects` for Git releases (content-addressed objects); otherwise how the assets were
/// verified.
fn verified_summary(assets: &[AssetRecord]) -> String {
    if assets.is_empty() {
        return "git objects".into();
    }
    let unverified = assets.iter().filter(|a| a.verified_by == VerifiedBy::Unverified).count();
    if unverified == 0 {
        format!("yes ({} assets)", assets.len())
    } else {
        format!("NO: {unverified} of {} assets unverified", assets.len())
    }
}

/// `render`: a line per cluster, its objects and the directory they went to (`<out>/<namespace>/<name>`),
/// or why it failed.
pub fn rendered(report: &PassReport, out: &Path) -> String {
    let mut text = String::new();
    for c in &report.clusters {
        let dir = out.join(&c.cluster.namespace).join(&c.cluster.name);
        if c.status.reason == crate::status::Reason::Synced {
            let _ = writeln!(text, "{}/{}: {} objects -> {}", c.cluster.namespace, c.cluster.name, c.status.total, dir.display());
        } else {
            let _ = writeln!(text, "{}/{}: FAILED: {}", c.cluster.namespace, c.cluster.name, c.status.message);
        }
    }
    text
}
