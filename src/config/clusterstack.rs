//! Validation of the cluster-stack parts of the config: `helm`, a subscription's `format`, and a
//! cluster's `cluster` / `controlPlane` / `infraCluster` objects.

use std::path::Path;
use std::time::Duration;

use super::validate::{Cx, Fields, describe};
use super::yaml::{Node, Value};
use super::{
    Budget, CLUSTER_CLASS_DIR, ClusterObjects, Format, HelmConfig, HelmRenderer, NotReady, OnFailure, RolloutConfig, TemplatesConfig, Wave,
};
use crate::model::schedule::{format_duration, parse_duration};
use crate::model::window::Window;

impl Format {
    /// The release-relative directory read when `path` is not set.
    pub fn default_path(self) -> &'static str {
        match self {
            Format::Manifests => "manifests",
            Format::ClusterStack => ".",
        }
    }
}

impl Cx {
    /// The value of `key`, one of `options` (`(word, value)`); `default` when it is not set, or
    /// (with an error naming the words) when it is none of them.
    fn one_of<T: Copy>(&mut self, f: &super::validate::Fields<'_>, key: &str, default: T, options: &[(&str, T)]) -> T {
        let Some(n) = f.get(key) else { return default };
        if let Some((_, v)) = options.iter().find(|(word, _)| n.scalar_text() == Some(word)) {
            return *v;
        }
        let words: Vec<String> = options.iter().map(|(word, _)| format!("`{word}`")).collect();
        self.error(n.mark, &f.path(key), format!("expected {}, found {}", words.join(" or "), describe(n)));
        default
    }

    pub(super) fn helm(&mut self, node: &Node, base: &Path) -> Option<HelmConfig> {
        let f = self.fields(node, "helm", &["renderer", "rendererPath", "path", "parallelism", "timeout"])?;
        let mut helm = HelmConfig::default();
        helm.renderer =
            self.one_of(&f, "renderer", helm.renderer, &[("library", HelmRenderer::Library), ("process", HelmRenderer::Process)]);
        if let Some(p) = self.string(&f, "rendererPath") {
            helm.renderer_path = Some(base.join(p));
        }
        if let Some(p) = self.string(&f, "path") {
            helm.path = Some(base.join(p));
        }
        if let Some(n) = f.get("parallelism") {
            match n.scalar_text().and_then(|t| t.parse::<usize>().ok()).filter(|n| (1..=64).contains(n)) {
                Some(v) => helm.parallelism = v,
                None => self.error(n.mark, &f.path("parallelism"), format!("expected a number from 1 to 64, found {}", describe(n))),
            }
        }
        if let Some(n) = f.get("timeout") {
            let text = self.string(&f, "timeout").unwrap_or_default();
            match parse_duration(&text) {
                Ok(d) if d.as_secs() >= 1 => helm.timeout = d,
                Ok(d) => self.error(n.mark, &f.path("timeout"), format!("timeout {} is too short; use at least 1s", format_duration(d))),
                Err(e) => self.error(n.mark, &f.path("timeout"), e),
            }
        }
        Some(helm)
    }

    pub(super) fn templates(&mut self, node: &Node) -> Option<TemplatesConfig> {
        let f = self.fields(node, "templates", &["strict"])?;
        Some(TemplatesConfig { strict: self.bool(&f, "strict", false) })
    }

    /// Reads `format`; a cluster-stack release is found by its tag, so it needs `stack`.
    pub(super) fn format(&mut self, f: &Fields<'_>, stack: Option<&String>) -> Format {
        let Some(node) = f.get("format") else { return Format::Manifests };
        let format = match node.scalar_text() {
            Some("manifests") => Format::Manifests,
            Some("clusterstack") => Format::ClusterStack,
            _ => {
                self.error(node.mark, &f.path("format"), format!("expected `manifests` or `clusterstack`, found {}", describe(node)));
                return Format::Manifests;
            }
        };
        if format == Format::ClusterStack && stack.is_none() {
            self.error(
                node.mark,
                &f.path("format"),
                "format `clusterstack` needs `stack` (`<provider>-<name>-<k8s major>-<k8s minor>`): cluster-stack releases are found by their tags",
            );
        }
        format
    }

    /// Reads a cluster's `cluster`, `controlPlane` and `infraCluster` objects. A `cluster` object's
    /// `metadata.name` / `metadata.namespace`, when set, must be the cluster's own.
    pub(super) fn cluster_objects(&mut self, f: &Fields<'_>, name: Option<&str>, namespace: Option<&str>) -> ClusterObjects {
        let object = |cx: &mut Cx, key: &str| -> Option<serde_json::Value> {
            let node = f.get(key)?;
            if !matches!(node.value, Value::Map(_)) {
                cx.error(node.mark, &f.path(key), format!("expected a mapping (the object as in Kubernetes), found {}", node.type_name()));
                return None;
            }
            Some(node.to_json())
        };
        let cluster = object(self, "cluster");
        let objects = ClusterObjects { cluster, control_plane: object(self, "controlPlane"), infra_cluster: object(self, "infraCluster") };
        if let (Some(c), Some(node)) = (&objects.cluster, f.get("cluster")) {
            for (field, want) in [("name", name), ("namespace", namespace)] {
                let got = c.get("metadata").and_then(|m| m.get(field)).and_then(serde_json::Value::as_str);
                if let (Some(got), Some(want)) = (got, want)
                    && got != want
                {
                    self.error(
                        node.mark,
                        &f.path(&format!("cluster.metadata.{field}")),
                        format!("`{got}` differs from the cluster's {field} `{want}`; leave it out or make them equal"),
                    );
                }
            }
        }
        objects
    }

    /// Reads a subscription's `rollout:` (`path` is its field path). The waves must end with
    /// `percent: 100` so that every Cluster is moved; percentages may not go down.
    pub(super) fn rollout(&mut self, node: &Node, path: &str, format: Format) -> Option<RolloutConfig> {
        let f = self.fields(
            node,
            path,
            &["waves", "canarySelector", "waveTimeout", "checkInterval", "maxFailures", "onFailure", "notReady", "windows"],
        )?;
        if format != Format::ClusterStack {
            self.error(
                node.mark,
                path,
                "`rollout` needs `format: clusterstack`: a rollout moves Clusters from one release's ClusterClass to the next",
            );
        }
        let waves = self.waves(&f, node);
        let canary_labels = match f.get("canarySelector") {
            Some(c) => self.match_labels(c, &f.path("canarySelector"), "the labels of the canary Clusters"),
            None => std::collections::BTreeMap::new(),
        };
        let wave_timeout = self.positive_duration(&f, "waveTimeout", super::DEFAULT_WAVE_TIMEOUT, Duration::from_secs(1));
        let check_interval = self.positive_duration(&f, "checkInterval", super::DEFAULT_ROLLOUT_CHECK, Duration::from_millis(100));
        let max_failures = f.get("maxFailures").map_or(Budget::None, |n| self.budget(n, &f.path("maxFailures")));
        let on_failure = self.one_of(&f, "onFailure", OnFailure::Pause, &[("pause", OnFailure::Pause), ("rollback", OnFailure::Rollback)]);
        let not_ready = self.one_of(&f, "notReady", NotReady::Fail, &[("fail", NotReady::Fail), ("skip", NotReady::Skip)]);
        let mut windows = Vec::new();
        for (i, w) in self.list(&f, "windows").iter().enumerate() {
            if let Some(w) = self.window(w, &format!("{}[{i}]", f.path("windows"))) {
                windows.push(w);
            }
        }
        Some(RolloutConfig { waves: waves?, canary_labels, wave_timeout, check_interval, max_failures, on_failure, not_ready, windows })
    }

    /// `waves`: required, at least one, each [`Cx::wave`], percentages never going down, the
    /// last `{percent: 100}`. `None` when any of that is wrong (said).
    fn waves(&mut self, f: &Fields<'_>, node: &Node) -> Option<Vec<Wave>> {
        let mut ok = true;
        let mut waves = Vec::new();
        if f.get("waves").is_none() {
            self.error(
                node.mark,
                &f.path("waves"),
                "missing required field `waves`, e.g. `[{clusters: 1}, {percent: 25}, {percent: 100}]`",
            );
            ok = false;
        }
        let nodes = self.list(f, "waves");
        if f.get("waves").is_some() && nodes.is_empty() {
            self.error(node.mark, &f.path("waves"), "needs at least one wave; the last one must be `{percent: 100}`");
            ok = false;
        }
        let mut last_percent = 0;
        for (i, w) in nodes.iter().enumerate() {
            let wpath = format!("{}[{i}]", f.path("waves"));
            let wave = self.wave(w, &wpath);
            match wave {
                Some(Wave::Percent(p)) if p < last_percent => {
                    self.error(
                        w.mark,
                        &format!("{wpath}.percent"),
                        format!("{p} is less than the {last_percent} of an earlier wave; percentages count every Cluster so far"),
                    );
                    ok = false;
                }
                Some(wave) => {
                    if let Wave::Percent(p) = wave {
                        last_percent = p;
                    }
                    waves.push(wave);
                }
                None => ok = false,
            }
        }
        if ok && waves.last() != Some(&Wave::Percent(100)) {
            let mark = nodes.last().map_or(node.mark, |n| n.mark);
            self.error(
                mark,
                &format!("{}[{}]", f.path("waves"), nodes.len().saturating_sub(1)),
                "the last wave must be `{percent: 100}`: every Cluster of the subscription is moved by the end",
            );
            ok = false;
        }
        ok.then_some(waves)
    }

    /// One wave: exactly one of `clusters` (how many more Clusters, 1 to 100,000) or `percent`
    /// (of all, in total, 1 to 100).
    fn wave(&mut self, w: &Node, wpath: &str) -> Option<Wave> {
        let wf = self.fields(w, wpath, &["clusters", "percent"])?;
        let number = |cx: &mut Cx, key: &str, range: std::ops::RangeInclusive<u32>| -> Option<u32> {
            let n = wf.get(key)?;
            let v = n.scalar_text().and_then(|t| t.parse::<u32>().ok()).filter(|v| range.contains(v));
            if v.is_none() {
                cx.error(
                    n.mark,
                    &wf.path(key),
                    format!("expected a number from {} to {}, found {}", range.start(), range.end(), describe(n)),
                );
            }
            v
        };
        match (wf.get("clusters").is_some(), wf.get("percent").is_some()) {
            (true, false) => number(self, "clusters", 1..=100_000).map(Wave::Clusters),
            (false, true) => number(self, "percent", 1..=100).map(Wave::Percent),
            _ => {
                self.error(w.mark, wpath, "set exactly one of `clusters` (how many more Clusters) or `percent` (of all, in total)");
                None
            }
        }
    }

    /// A label selector of the form `{matchLabels: {k: v, ...}}` (`path` is its field path;
    /// `what` says what the labels select, for the error of a missing `matchLabels`).
    fn match_labels(&mut self, node: &Node, path: &str, what: &str) -> std::collections::BTreeMap<String, String> {
        let mut labels = std::collections::BTreeMap::new();
        let Some(cf) = self.fields(node, path, &["matchLabels"]) else { return labels };
        match cf.get("matchLabels").map(|m| (m, &m.value)) {
            Some((_, Value::Map(entries))) if !entries.is_empty() => {
                for (k, v) in entries {
                    match (k.scalar_text(), v.scalar_text()) {
                        (Some(k), Some(v)) => {
                            labels.insert(k.to_owned(), v.to_owned());
                        }
                        _ => self.error(v.mark, &cf.path("matchLabels"), "expected `label: value` strings"),
                    }
                }
            }
            Some((m, _)) => {
                self.error(m.mark, &cf.path("matchLabels"), format!("expected a non-empty mapping of labels, found {}", describe(m)));
            }
            None => self.error(node.mark, &cf.path("matchLabels"), format!("missing required field `matchLabels` ({what})")),
        }
        labels
    }

    /// `rollout.maxFailures`: a count (`2`) or a percentage of the wave (`"20%"`).
    fn budget(&mut self, n: &Node, path: &str) -> Budget {
        let text = n.scalar_text().unwrap_or_default();
        let parsed = match text.strip_suffix('%') {
            Some(p) => p.trim().parse::<u32>().ok().filter(|p| *p <= 100).map(Budget::Percent),
            None => text.parse::<u32>().ok().filter(|c| *c <= 100_000).map(Budget::Clusters),
        };
        match parsed {
            Some(Budget::Clusters(0) | Budget::Percent(0)) => Budget::None,
            Some(b) => b,
            None => {
                self.error(
                    n.mark,
                    path,
                    format!(
                        "expected a count of Clusters (`2`) or a percentage of the wave (`\"20%\"`, at most 100), found {}",
                        describe(n)
                    ),
                );
                Budget::None
            }
        }
    }

    /// One of `rollout.windows`: `{schedule, duration, timeZone?, clusterSelector?}`.
    fn window(&mut self, node: &Node, path: &str) -> Option<Window> {
        let f = self.fields(node, path, &["schedule", "duration", "timeZone", "clusterSelector"])?;
        let mut ok = true;
        for key in ["schedule", "duration"] {
            if f.get(key).is_none() {
                let example =
                    if key == "schedule" { "a cron expression such as `0 22 * * 1-5`" } else { "how long it stays open, e.g. `4h`" };
                self.error(node.mark, &f.path(key), format!("missing required field `{key}`: {example}"));
                ok = false;
            }
        }
        let duration = self.positive_duration(&f, "duration", Duration::from_secs(3600), Duration::from_secs(60));
        let labels = match f.get("clusterSelector") {
            Some(c) => self.match_labels(c, &f.path("clusterSelector"), "the labels of the Clusters this window is for"),
            None => std::collections::BTreeMap::new(),
        };
        let zone = self.string(&f, "timeZone").unwrap_or_else(|| "UTC".to_owned());
        let expr = self.string(&f, "schedule")?;
        if !ok {
            return None;
        }
        match Window::new(&expr, duration, &zone, labels) {
            Ok(w) => Some(w),
            Err(e) => {
                let (key, mark) = match e {
                    crate::model::window::Error::Zone { .. } => ("timeZone", f.get("timeZone").map_or(node.mark, |n| n.mark)),
                    crate::model::window::Error::Schedule(_) => ("schedule", f.get("schedule").map_or(node.mark, |n| n.mark)),
                };
                self.error(mark, &f.path(key), e);
                None
            }
        }
    }

    /// A duration field of at least `min`; `default` when absent (or wrong, with an error).
    pub(super) fn positive_duration(&mut self, f: &Fields<'_>, key: &str, default: Duration, min: Duration) -> Duration {
        let Some(n) = f.get(key) else { return default };
        let text = self.string(f, key).unwrap_or_default();
        match parse_duration(&text) {
            Ok(d) if d >= min => d,
            Ok(d) => {
                self.error(n.mark, &f.path(key), format!("{} is too short; use at least {}", format_duration(d), format_duration(min)));
                default
            }
            Err(e) => {
                self.error(n.mark, &f.path(key), e);
                default
            }
        }
    }

    pub(super) fn reserved_cluster_name(&mut self, f: &Fields<'_>, name: &str) {
        if name == CLUSTER_CLASS_DIR {
            let mark = f.get("name").map(|n| n.mark).unwrap_or_default();
            self.error(
                mark,
                &f.path("name"),
                "cluster name `cluster-class` is reserved: the directory target writes a namespace's ClusterClass objects to `<target>/<namespace>/cluster-class/`",
            );
        }
    }
}
