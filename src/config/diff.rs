//! What changed between two valid configs, in words for the reload log line.

use super::{Config, SourceConfig, Subscription};

/// Describes each change from `old` to `new`; empty when they are equivalent.
pub fn diff(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if old.cache != new.cache {
        out.push(format!("cache.dir changed from {} to {}", old.cache.dir.display(), new.cache.dir.display()));
    }
    if old.templates != new.templates {
        out.push(format!("templates.strict changed from {} to {}", old.templates.strict, new.templates.strict));
    }
    if old.webhooks != new.webhooks {
        out.push("webhooks changed".to_owned());
    }
    if old.target != new.target {
        out.push(format!("target changed from {:?} to {:?}", old.target, new.target));
    }
    named(
        &mut out,
        "source",
        &old.sources,
        &new.sources,
        |s: &SourceConfig| &s.name,
        |o, n| {
            if o.kind != n.kind { vec![format!("{:?} -> {:?}", o.kind, n.kind)] } else { Vec::new() }
        },
    );
    named(&mut out, "subscription", &old.subscriptions, &new.subscriptions, |s: &Subscription| &s.name, subscription_changes);
    out
}

fn named<T>(
    out: &mut Vec<String>,
    what: &str,
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &String,
    changes: impl Fn(&T, &T) -> Vec<String>,
) {
    for o in old {
        if !new.iter().any(|n| name(n) == name(o)) {
            out.push(format!("{what} `{}` removed", name(o)));
        }
    }
    for n in new {
        match old.iter().find(|o| name(o) == name(n)) {
            None => out.push(format!("{what} `{}` added", name(n))),
            Some(o) => {
                for change in changes(o, n) {
                    out.push(format!("{what} `{}`: {change}", name(n)));
                }
            }
        }
    }
}

fn subscription_changes(o: &Subscription, n: &Subscription) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name} changed from {a} to {b}"));
        }
    };
    field("source", o.source.clone(), n.source.clone());
    field("stack", format!("{:?}", o.stack), format!("{:?}", n.stack));
    field("version", format!("`{}`", o.version), format!("`{}`", n.version));
    field("schedule", o.schedule.to_string(), n.schedule.to_string());
    field("autoUpgrade", o.auto_upgrade.to_string(), n.auto_upgrade.to_string());
    field("path", o.path.clone(), n.path.clone());
    field("suspend", o.suspend.to_string(), n.suspend.to_string());
    field("availableReleases", o.available_releases.to_string(), n.available_releases.to_string());
    field("healthTimeout", format!("{:?}", o.health_timeout), format!("{:?}", n.health_timeout));
    field("stageTimeout", format!("{:?}", o.stage_timeout), format!("{:?}", n.stage_timeout));
    field("rollout", rollout_text(o.rollout.as_ref()), rollout_text(n.rollout.as_ref()));
    let labels = |l: &std::collections::BTreeMap<String, String>| {
        if l.is_empty() { "none".to_owned() } else { l.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",") }
    };
    field("adoptedLabels", labels(&o.adopted_labels), labels(&n.adopted_labels));
    for c in &o.clusters {
        match n.clusters.iter().find(|x| x.name == c.name && x.namespace == c.namespace) {
            None => out.push(format!("cluster {}/{} removed", c.namespace, c.name)),
            Some(x) if x.values != c.values => out.push(format!("cluster {}/{}: values changed", c.namespace, c.name)),
            // `cluster`, `controlPlane`, `infraCluster`: what values templates read.
            Some(x) if x.objects != c.objects => out.push(format!("cluster {}/{}: cluster objects changed", c.namespace, c.name)),
            Some(_) => {}
        }
    }
    for c in &n.clusters {
        if !o.clusters.iter().any(|x| x.name == c.name && x.namespace == c.namespace) {
            out.push(format!("cluster {}/{} added", c.namespace, c.name));
        }
    }
    out
}

/// `rollout:` in a reload's log line: `none`, or `waves [1, 25%, 100%], waveTimeout 30m, ...`.
fn rollout_text(r: Option<&super::RolloutConfig>) -> String {
    let Some(r) = r else { return "none".to_owned() };
    let waves: Vec<String> = r
        .waves
        .iter()
        .map(|w| match w {
            super::Wave::Clusters(n) => n.to_string(),
            super::Wave::Percent(p) => format!("{p}%"),
        })
        .collect();
    let canary: Vec<String> = r.canary_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let windows: Vec<String> = r.windows.iter().map(|w| format!("{w:?}")).collect();
    let on_failure = match r.on_failure {
        super::OnFailure::Pause => "pause",
        super::OnFailure::Rollback => "rollback",
    };
    let not_ready = match r.not_ready {
        super::NotReady::Fail => "fail",
        super::NotReady::Skip => "skip",
    };
    format!(
        "waves [{}], canary [{}], waveTimeout {}, checkInterval {}, maxFailures {}, onFailure {on_failure}, notReady {not_ready}, windows [{}]",
        waves.join(", "),
        canary.join(", "),
        crate::model::schedule::format_duration(r.wave_timeout),
        crate::model::schedule::format_duration(r.check_interval),
        r.max_failures,
        windows.join(", ")
    )
}
