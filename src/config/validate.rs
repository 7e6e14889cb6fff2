//! Turns the position-aware YAML tree into a [`Config`], collecting every error instead of
//! stopping at the first.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::yaml::{self, Mark, Node, Value};
use super::{API_VERSION, CacheConfig, ClusterConfig, Config, ConfigError, ConfigErrors, KIND, Subscription};
use crate::model::schedule::{DEFAULT_INTERVAL, Schedule};
use crate::model::version::{Constraint, Version};

pub(super) fn validate(file: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let mut cx = Cx { file: file.to_owned(), errors: Vec::new() };
    let root = match yaml::parse(text) {
        Ok(Some(root)) => root,
        Ok(None) => {
            cx.error(Mark { line: 1, col: 1 }, "", "the file is empty; expected a `kind: Config` document");
            return Err(ConfigErrors(cx.errors));
        }
        Err(e) => {
            cx.error(e.mark, "", format!("invalid YAML: {}", e.message));
            return Err(ConfigErrors(cx.errors));
        }
    };
    // Relative paths in the file are relative to the file, wherever stacksync was started.
    let base = std::path::absolute(file).ok().and_then(|f| f.parent().map(Path::to_path_buf)).unwrap_or_default();
    let config = cx.config(&root, &base);
    if cx.errors.is_empty()
        && let Some(config) = config
    {
        return Ok(config);
    }
    cx.errors.sort_by_key(|e| (e.line, e.col));
    Err(ConfigErrors(cx.errors))
}

pub(super) struct Cx {
    file: PathBuf,
    errors: Vec<ConfigError>,
}

/// Reads a mapping's fields, remembering which were used so the rest are reported as unknown.
pub(super) struct Fields<'n> {
    node: &'n Node,
    entries: &'n [(Node, Node)],
    path: String,
    known: &'static [&'static str],
}

impl<'n> Fields<'n> {
    pub(super) fn get(&self, key: &str) -> Option<&'n Node> {
        debug_assert!(self.known.contains(&key), "field {key} missing from the known list");
        self.entries.iter().find(|(k, _)| k.scalar_text() == Some(key)).map(|(_, v)| v).filter(|v| !v.is_null())
    }

    pub(super) fn path(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_owned() } else { format!("{}.{key}", self.path) }
    }
}

impl Cx {
    /// Records a problem at `mark`. `message` is any error or text: its Display is the message
    /// (a typed error of another module, a schedule or URL check, reads the same).
    pub(super) fn error(&mut self, mark: Mark, field: &str, message: impl std::fmt::Display) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line: mark.line,
            col: mark.col,
            field: field.to_owned(),
            message: message.to_string(),
        });
    }

    /// Opens a mapping and reports unknown and duplicate keys.
    pub(super) fn fields<'n>(&mut self, node: &'n Node, path: &str, known: &'static [&'static str]) -> Option<Fields<'n>> {
        let Value::Map(entries) = &node.value else {
            self.error(node.mark, path, format!("expected a mapping, found {}", node.type_name()));
            return None;
        };
        let mut seen: HashMap<&str, Mark> = HashMap::new();
        for (k, _) in entries {
            let field_path = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
            let Some(key) = k.scalar_text() else {
                self.error(k.mark, path, "expected a field name, found a complex key");
                continue;
            };
            if !known.contains(&key) {
                self.error(k.mark, &field_path(key), format!("unknown field `{key}`, expected one of: {}", known.join(", ")));
            } else if let Some(first) = seen.insert(key, k.mark) {
                self.error(k.mark, &field_path(key), format!("duplicate field `{key}` (first set at line {})", first.line));
            }
        }
        Some(Fields { node, entries, path: path.to_owned(), known })
    }

    pub(super) fn string(&mut self, f: &Fields<'_>, key: &str) -> Option<String> {
        let node = f.get(key)?;
        match &node.value {
            Value::Scalar { text, .. } => Some(text.clone()),
            _ => {
                self.error(node.mark, &f.path(key), format!("expected a string, found {}", node.type_name()));
                None
            }
        }
    }

    pub(super) fn required_string(&mut self, f: &Fields<'_>, key: &str) -> Option<String> {
        if f.get(key).is_none() {
            self.error(f.node.mark, &f.path(key), format!("missing required field `{key}`"));
            return None;
        }
        self.string(f, key)
    }

    pub(super) fn bool(&mut self, f: &Fields<'_>, key: &str, default: bool) -> bool {
        let Some(node) = f.get(key) else { return default };
        match &node.value {
            Value::Scalar { text, quoted: false } if text == "true" => true,
            Value::Scalar { text, quoted: false } if text == "false" => false,
            _ => {
                self.error(node.mark, &f.path(key), format!("expected `true` or `false`, found {}", describe(node)));
                default
            }
        }
    }

    pub(super) fn list<'n>(&mut self, f: &Fields<'n>, key: &str) -> &'n [Node] {
        let Some(node) = f.get(key) else { return &[] };
        match &node.value {
            Value::Seq(items) => items,
            _ => {
                self.error(node.mark, &f.path(key), format!("expected a list, found {}", node.type_name()));
                &[]
            }
        }
    }

    /// A DNS-1123 label: it becomes part of file paths, so nothing else is allowed.
    pub(super) fn name(&mut self, f: &Fields<'_>, key: &str) -> Option<String> {
        let name = self.required_string(f, key)?;
        if !is_dns_label(&name) {
            let node = f.get(key).unwrap_or(f.node);
            self.error(
                node.mark,
                &f.path(key),
                format!(
                    "`{name}` is not a valid name: use 1-63 lowercase letters, digits and `-`, starting and ending with a letter or digit"
                ),
            );
            return None;
        }
        Some(name)
    }

    fn config(&mut self, root: &Node, base: &Path) -> Option<Config> {
        let f =
            self.fields(root, "", &["apiVersion", "kind", "cache", "sources", "subscriptions", "target", "helm", "templates", "webhooks"])?;
        if let Some(v) = self.required_string(&f, "apiVersion")
            && v != API_VERSION
        {
            let mark = f.get("apiVersion").map_or(root.mark, |n| n.mark);
            self.error(mark, "apiVersion", format!("expected `{API_VERSION}`, found `{v}`"));
        }
        if let Some(v) = self.required_string(&f, "kind")
            && v != KIND
        {
            let mark = f.get("kind").map_or(root.mark, |n| n.mark);
            self.error(mark, "kind", format!("expected `{KIND}`, found `{v}`"));
        }
        let cache = match f.get("cache") {
            Some(node) => self.cache(node, base),
            None => {
                self.error(root.mark, "cache", "missing required field `cache`");
                None
            }
        };
        let (sources, source_names) = self.sources(&f, base);
        // When `sources` itself is malformed, "unknown source" errors would only be noise.
        let sources_ok = matches!(f.get("sources").map(|n| &n.value), None | Some(Value::Seq(_)));
        let subscriptions = self.subscriptions(&f, sources_ok.then_some(source_names.as_slice()));
        self.selectors_need_kubernetes(&f);
        let target = match f.get("target") {
            Some(node) => self.target(node, base),
            None => {
                self.error(root.mark, "target", "missing required field `target`");
                None
            }
        };
        let helm = match f.get("helm") {
            Some(node) => self.helm(node, base)?,
            None => super::HelmConfig::default(),
        };
        let templates = match f.get("templates") {
            Some(node) => self.templates(node)?,
            None => super::TemplatesConfig::default(),
        };
        let webhooks = match f.get("webhooks") {
            Some(node) => self.webhooks(node, base)?,
            None => super::WebhooksConfig::default(),
        };
        Some(Config { file: self.file.clone(), helm, templates, webhooks, cache: cache?, sources, subscriptions, target: target? })
    }

    /// The `sources` that are valid (their names unique), and the names of all as written: a
    /// subscription naming a source that is itself invalid does not get a second, misleading
    /// "unknown source" error.
    fn sources(&mut self, f: &Fields<'_>, base: &Path) -> (Vec<super::SourceConfig>, Vec<String>) {
        let source_nodes = self.list(f, "sources");
        let source_names: Vec<String> = source_nodes
            .iter()
            .filter_map(|n| match &n.value {
                Value::Map(e) => e.iter().find(|(k, _)| k.scalar_text() == Some("name")).and_then(|(_, v)| v.scalar_text()),
                _ => None,
            })
            .map(str::to_owned)
            .collect();
        let mut sources = Vec::new();
        let mut seen = HashMap::new();
        for (i, n) in source_nodes.iter().enumerate() {
            let Some(s) = self.source(n, i, base) else { continue };
            if let Some(first) = seen.insert(s.name.clone(), i) {
                self.error(n.mark, &format!("sources[{i}].name"), format!("duplicate source name `{}` (also sources[{first}])", s.name));
            }
            sources.push(s);
        }
        (sources, source_names)
    }

    /// The valid `subscriptions`: names unique, and each cluster subscribed by one only (a
    /// cluster follows one stack).
    fn subscriptions(&mut self, f: &Fields<'_>, source_names: Option<&[String]>) -> Vec<Subscription> {
        let mut subscriptions = Vec::new();
        let mut cluster_owner: HashMap<(String, String), String> = HashMap::new();
        let mut sub_names: HashMap<String, usize> = HashMap::new();
        for (i, node) in self.list(f, "subscriptions").iter().enumerate() {
            let Some(sub) = self.subscription(node, i, source_names) else { continue };
            if let Some(first) = sub_names.insert(sub.name.clone(), i) {
                self.error(
                    node.mark,
                    &format!("subscriptions[{i}].name"),
                    format!("duplicate subscription name `{}` (also subscriptions[{first}])", sub.name),
                );
            }
            for (j, c) in sub.clusters.iter().enumerate() {
                let key = (c.namespace.clone(), c.name.clone());
                if let Some(other) = cluster_owner.insert(key, sub.name.clone()) {
                    self.error(
                        cluster_mark(node, j),
                        &format!("subscriptions[{i}].clusters[{j}]"),
                        format!("cluster `{}/{}` is already subscribed by `{other}`; a cluster follows one stack", c.namespace, c.name),
                    );
                }
            }
            subscriptions.push(sub);
        }
        subscriptions
    }

    /// Cluster API selection needs a management cluster to select from: no `clusterSelector`
    /// with a directory target.
    fn selectors_need_kubernetes(&mut self, f: &Fields<'_>) {
        let directory_target =
            matches!(f.get("target").map(|t| &t.value), Some(Value::Map(e)) if e.iter().any(|(k, _)| k.scalar_text() == Some("directory")));
        if !directory_target {
            return;
        }
        for (i, node) in self.list(f, "subscriptions").iter().enumerate() {
            if let Value::Map(entries) = &node.value
                && let Some((k, _)) = entries.iter().find(|(k, _)| k.scalar_text() == Some("clusterSelector"))
            {
                self.error(
                    k.mark,
                    &format!("subscriptions[{i}].clusterSelector"),
                    "`clusterSelector` needs `target: kubernetes`: with a directory target, list `clusters`",
                );
            }
        }
    }

    fn cache(&mut self, node: &Node, base: &Path) -> Option<CacheConfig> {
        let f = self.fields(node, "cache", &["dir", "keepReleases"])?;
        let keep_releases = match f.get("keepReleases") {
            Some(n) => match n.scalar_text().and_then(|t| t.parse::<usize>().ok()) {
                Some(k) => k,
                None => {
                    self.error(n.mark, "cache.keepReleases", format!("expected a number of releases, found {}", describe(n)));
                    super::DEFAULT_KEEP_RELEASES
                }
            },
            None => super::DEFAULT_KEEP_RELEASES,
        };
        let dir = self.required_string(&f, "dir")?;
        Some(CacheConfig { dir: base.join(dir), keep_releases })
    }

    fn subscription(&mut self, node: &Node, i: usize, sources: Option<&[String]>) -> Option<Subscription> {
        let path = format!("subscriptions[{i}]");
        let f = self.fields(node, &path, SUBSCRIPTION_FIELDS)?;
        let name = self.name(&f, "name");
        let source = self.subscription_source(&f, node, sources);
        let Tags { stack, kubernetes, version, constraint } = self.tags(&f, node);
        let schedule = self.schedule(&f, node);
        let auto_upgrade = self.bool(&f, "autoUpgrade", true);
        let prereleases = self.bool(&f, "prereleases", false);
        let format = self.format(&f, stack.as_ref());
        let sub_path = self.release_path(&f, node, format);
        let defaults = match f.get("values") {
            Some(v) => self.values(v, &f.path("values")),
            None => BTreeMap::new(),
        };
        let cluster_nodes = self.list(&f, "clusters");
        let selector = f.get("clusterSelector").and_then(|n| self.cluster_selector(n, &f.path("clusterSelector")));
        let force = self.bool(&f, "force", false);
        let suspend = self.bool(&f, "suspend", false);
        let available_releases = self.available_releases(&f);
        let health_timeout = self.health_timeout(&f);
        let stage_timeout = self.stage_timeout(&f);
        let rollout = f.get("rollout").and_then(|n| self.rollout(n, &f.path("rollout"), format));
        let adopted_labels = f.get("adoptedLabels").map(|n| self.labels(n, &f.path("adoptedLabels"))).unwrap_or_default();
        let clusters = self.clusters(&f, node, cluster_nodes, &defaults);
        Some(Subscription {
            name: name?,
            source: source?,
            stack,
            kubernetes,
            version,
            constraint: constraint?,
            schedule: schedule?,
            auto_upgrade,
            prereleases,
            path: sub_path,
            format,
            clusters,
            values: defaults,
            selector,
            force,
            suspend,
            available_releases,
            health_timeout,
            stage_timeout,
            rollout,
            adopted_labels,
        })
    }

    /// What tags the subscription follows: `stack` (checked against `kubernetes`, a line or
    /// one cluster stack), `kubernetes`, and `version` as written with its constraint (checked
    /// against `stack`: cluster-stack or semver tags).
    fn tags(&mut self, f: &Fields<'_>, node: &Node) -> Tags {
        let stack = self.string(f, "stack");
        let kubernetes = self.kubernetes_range(f, stack.as_deref());
        if let Some(s) = &stack
            && let Some(problem) = stack_problem(s, kubernetes.is_some())
        {
            let mark = f.get("stack").map_or(node.mark, |n| n.mark);
            self.error(mark, &f.path("stack"), problem);
        }
        let version = self.string(f, "version").unwrap_or_else(|| "*".to_owned());
        let (constraint, problem) = match Constraint::parse(&version) {
            Ok(c) => match constraint_problem(&version, &c, stack.is_some()) {
                None => (Some(c), None),
                problem => (None, problem),
            },
            Err(e) => (None, Some(e.0)),
        };
        if let Some(problem) = problem {
            let mark = f.get("version").map_or(node.mark, |n| n.mark);
            self.error(mark, &f.path("version"), problem);
        }
        Tags { stack, kubernetes, version, constraint }
    }

    /// `path`: the folder of the release the subscription applies (its format's default), inside
    /// the release.
    fn release_path(&mut self, f: &Fields<'_>, node: &Node, format: super::Format) -> String {
        let sub_path = self.string(f, "path").unwrap_or_else(|| format.default_path().to_owned());
        if !is_inside_release(&sub_path) {
            let mark = f.get("path").map_or(node.mark, |n| n.mark);
            self.error(mark, &f.path("path"), format!("`{sub_path}` must be a relative path inside the release, without `..`"));
        }
        sub_path
    }

    /// `clusters` (read as `nodes`), each with the subscription's `defaults` values; required
    /// unless `clusterSelector` selects them.
    fn clusters(&mut self, f: &Fields<'_>, node: &Node, nodes: &[Node], defaults: &BTreeMap<String, String>) -> Vec<ClusterConfig> {
        if f.get("clusters").is_none() && f.get("clusterSelector").is_none() {
            self.error(
                node.mark,
                &f.path("clusters"),
                "missing required field `clusters`: list the clusters that get this stack (or select them with `clusterSelector`)",
            );
        }
        nodes.iter().enumerate().filter_map(|(j, n)| self.cluster(n, &f.path(&format!("clusters[{j}]")), defaults)).collect()
    }

    /// `source`: required, and one of the defined `sources` (when they could be read).
    fn subscription_source(&mut self, f: &Fields<'_>, node: &Node, sources: Option<&[String]>) -> Option<String> {
        let source = self.required_string(f, "source");
        if let (Some(s), Some(sources)) = (&source, sources)
            && !sources.contains(s)
        {
            let known: Vec<&str> = sources.iter().map(String::as_str).collect();
            let mark = f.get("source").map_or(node.mark, |n| n.mark);
            self.error(mark, &f.path("source"), format!("unknown source `{s}`, defined sources: {}", list_or_none(&known)));
        }
        source
    }

    /// `availableReleases`: how many releases are offered, 1 to 100.
    fn available_releases(&mut self, f: &Fields<'_>) -> usize {
        let Some(n) = f.get("availableReleases") else { return super::DEFAULT_AVAILABLE_RELEASES };
        match n.scalar_text().and_then(|t| t.parse::<usize>().ok()).filter(|n| (1..=100).contains(n)) {
            Some(v) => v,
            None => {
                self.error(n.mark, &f.path("availableReleases"), format!("expected a number from 1 to 100, found {}", describe(n)));
                super::DEFAULT_AVAILABLE_RELEASES
            }
        }
    }

    /// `healthTimeout`: a duration; `0s` waits for no health (`None`).
    fn health_timeout(&mut self, f: &Fields<'_>) -> Option<std::time::Duration> {
        let Some(n) = f.get("healthTimeout") else { return Some(super::DEFAULT_HEALTH_TIMEOUT) };
        let text = self.string(f, "healthTimeout").unwrap_or_default();
        match crate::model::schedule::parse_duration(&text) {
            Ok(d) if d.is_zero() => None,
            Ok(d) => Some(d),
            Err(e) => {
                self.error(n.mark, &f.path("healthTimeout"), e);
                Some(super::DEFAULT_HEALTH_TIMEOUT)
            }
        }
    }

    /// `stageTimeout`: a duration longer than 0s.
    fn stage_timeout(&mut self, f: &Fields<'_>) -> std::time::Duration {
        let Some(n) = f.get("stageTimeout") else { return super::DEFAULT_STAGE_TIMEOUT };
        let text = self.string(f, "stageTimeout").unwrap_or_default();
        match crate::model::schedule::parse_duration(&text) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                self.error(n.mark, &f.path("stageTimeout"), "must be longer than 0s (a wait that may not wait never passes)");
                super::DEFAULT_STAGE_TIMEOUT
            }
            Err(e) => {
                self.error(n.mark, &f.path("stageTimeout"), e);
                super::DEFAULT_STAGE_TIMEOUT
            }
        }
    }

    /// `kubernetes`: a range of Kubernetes versions (`">=1.30, <1.33"`) whose families of the line
    /// `stack` the subscription follows.
    fn kubernetes_range(&mut self, f: &Fields<'_>, stack: Option<&str>) -> Option<crate::config::KubernetesRange> {
        let n = f.get("kubernetes")?;
        let text = self.string(f, "kubernetes")?;
        if stack.is_none() {
            self.error(
                n.mark,
                &f.path("kubernetes"),
                "needs `stack`: the line of cluster stacks (`docker-ferrol`) whose Kubernetes minors it ranges over",
            );
            return None;
        }
        let plain: String = text.replace(['v', 'V'], "");
        match semver::VersionReq::parse(&plain) {
            Ok(range) if range.comparators.is_empty() => {
                self.error(n.mark, &f.path("kubernetes"), "expected a range of Kubernetes versions such as `\">=1.30, <1.33\"`");
                None
            }
            Ok(range) => Some(crate::config::KubernetesRange { text, range }),
            Err(e) => {
                self.error(
                    n.mark,
                    &f.path("kubernetes"),
                    format!("`{text}` is not a range of Kubernetes versions (e.g. `\">=1.30, <1.33\"`): {e}"),
                );
                None
            }
        }
    }

    /// A mapping of labels (`key: value` strings), each checked as the API server checks labels.
    fn labels(&mut self, node: &Node, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Value::Map(entries) = &node.value else {
            self.error(node.mark, path, format!("expected a mapping of labels (`key: value`), found {}", describe(node)));
            return out;
        };
        for (k, v) in entries {
            match (k.scalar_text(), v.scalar_text()) {
                (Some(key), Some(value)) => match crate::model::names::check_label(key, value) {
                    Ok(()) => {
                        out.insert(key.to_owned(), value.to_owned());
                    }
                    Err(e) => self.error(k.mark, &format!("{path}.{key}"), e),
                },
                _ => self.error(v.mark, path, "expected `label: value` strings"),
            }
        }
        out
    }

    fn schedule(&mut self, f: &Fields<'_>, node: &Node) -> Option<Schedule> {
        let cron = f.get("schedule");
        let interval = f.get("interval");
        match (cron, interval) {
            (Some(c), Some(_)) => {
                self.error(c.mark, &f.path("schedule"), "set either `schedule` or `interval`, not both");
                None
            }
            (Some(c), None) => {
                let text = self.string(f, "schedule")?;
                Schedule::cron(&text).map_err(|e| self.error(c.mark, &f.path("schedule"), e)).ok()
            }
            (None, Some(i)) => {
                let text = self.string(f, "interval")?;
                Schedule::interval(&text).map_err(|e| self.error(i.mark, &f.path("interval"), e)).ok()
            }
            (None, None) => {
                let _ = node;
                Some(Schedule::Interval(DEFAULT_INTERVAL))
            }
        }
    }

    fn cluster(&mut self, node: &Node, path: &str, defaults: &BTreeMap<String, String>) -> Option<ClusterConfig> {
        let f = self.fields(node, path, &["name", "namespace", "values", "cluster", "controlPlane", "infraCluster"])?;
        let name = self.name(&f, "name");
        if let Some(n) = &name {
            self.reserved_cluster_name(&f, n);
        }
        let mut namespace = if f.get("namespace").is_some() { self.name(&f, "namespace") } else { Some("default".to_owned()) };
        if namespace.as_deref() == Some(super::STATUS_DIR) {
            let mark = f.get("namespace").map_or(node.mark, |n| n.mark);
            self.error(
                mark,
                &f.path("namespace"),
                "namespace `status` is reserved: the directory target keeps status files under `<target>/status/`",
            );
            namespace = None;
        }
        let mut values = defaults.clone();
        if let Some(v) = f.get("values") {
            values.extend(self.values(v, &f.path("values")));
        }
        let objects = self.cluster_objects(&f, name.as_deref(), namespace.as_deref());
        Some(ClusterConfig { name: name?, namespace: namespace?, values, objects })
    }

    /// Flattens a values mapping into dotted keys of scalars.
    fn values(&mut self, node: &Node, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        self.flatten(node, path, "", &mut out);
        out
    }

    fn flatten(&mut self, node: &Node, path: &str, prefix: &str, out: &mut BTreeMap<String, String>) {
        let Value::Map(entries) = &node.value else {
            self.error(node.mark, path, format!("expected a mapping of values, found {}", node.type_name()));
            return;
        };
        let mut seen: HashMap<&str, Mark> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.scalar_text() else { continue };
            let full = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
            let field = format!("{path}.{key}");
            // The last would silently win: say which line set it first.
            if let Some(first) = seen.insert(key, k.mark) {
                self.error(k.mark, &field, format!("duplicate value `{key}` (first set at line {})", first.line));
                continue;
            }
            if prefix.is_empty() && matches!(key, "cluster" | "release") {
                self.error(k.mark, &field, format!("`{key}` is reserved for built-in variables (`${{{key}.name}}`, ...)"));
                continue;
            }
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                self.error(k.mark, &field, format!("value name `{key}` may hold only letters, digits, `_` and `-`"));
                continue;
            }
            match &v.value {
                Value::Map(_) => self.flatten(v, &field, &full, out),
                Value::Seq(_) => self.error(v.mark, &field, "expected a scalar or a mapping, found a list"),
                Value::Scalar { text, .. } => {
                    out.insert(full, text.clone());
                }
            }
        }
    }
}

fn cluster_mark(sub: &Node, j: usize) -> Mark {
    let Value::Map(entries) = &sub.value else { return sub.mark };
    entries
        .iter()
        .find(|(k, _)| k.scalar_text() == Some("clusters"))
        .and_then(|(_, v)| match &v.value {
            Value::Seq(items) => items.get(j).map(|n| n.mark),
            _ => None,
        })
        .unwrap_or(sub.mark)
}

pub(super) fn describe(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, .. } if !node.is_null() => format!("`{text}`"),
        _ => node.type_name().to_owned(),
    }
}

/// What tags a subscription follows, as read (`None`: invalid, said).
struct Tags {
    stack: Option<String>,
    kubernetes: Option<crate::config::KubernetesRange>,
    /// As written (`*` when not).
    version: String,
    constraint: Option<Constraint>,
}

/// The fields of a subscription.
const SUBSCRIPTION_FIELDS: &[&str] = &[
    "name",
    "source",
    "stack",
    "kubernetes",
    "version",
    "schedule",
    "interval",
    "autoUpgrade",
    "prereleases",
    "path",
    "format",
    "values",
    "clusters",
    "clusterSelector",
    "force",
    "suspend",
    "availableReleases",
    "healthTimeout",
    "stageTimeout",
    "rollout",
    "adoptedLabels",
];

/// What is wrong with `stack` as a subscription names it, if anything: with `kubernetes` (a
/// `line`) it names a line of cluster stacks without its Kubernetes version (`docker-ferrol`),
/// otherwise one cluster stack with it (`docker-ferrol-1-27`).
fn stack_problem(stack: &str, line: bool) -> Option<String> {
    let scs = |tag: String| matches!(Version::from_tag(&tag), Some(Version::Scs { .. }));
    if !line {
        return (!scs(format!("{stack}-v1"))).then(|| {
            format!(
                "`{stack}` is not a cluster-stack name; expected `<provider>-<name>-<k8s major>-<k8s minor>` such as `docker-ferrol-1-27`"
            )
        });
    }
    if crate::model::version::family_parts(stack).is_some() {
        return Some(format!("with `kubernetes`, `stack` names the line without its Kubernetes version (`docker-ferrol`, not `{stack}`)"));
    }
    (!scs(format!("{stack}-1-30-v1")))
        .then(|| format!("`{stack}` is not a cluster-stack line; expected `<provider>-<name>` such as `docker-ferrol`"))
}

/// What is wrong with `constraint` (`version` as written), if anything: it must select the kind
/// of tags the subscription follows, cluster-stack tags with a `stack`, semver tags without.
fn constraint_problem(version: &str, constraint: &Constraint, stack: bool) -> Option<String> {
    match (stack, constraint.is_scs_or_any()) {
        (true, false) => {
            Some(format!("`{version}` is a semver range, but `stack` selects cluster-stack tags: use a constraint such as `>=v2`"))
        }
        (false, true) if !matches!(constraint, Constraint::Any) => {
            Some(format!("`{version}` is a cluster-stack constraint; set `stack` too, or use a semver range for semver tags"))
        }
        _ => None,
    }
}

/// Whether a subscription's `path` stays inside the release: relative, without `..`.
fn is_inside_release(path: &str) -> bool {
    !path.starts_with('/') && !path.split('/').any(|c| c == "..")
}

fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() { "none".to_owned() } else { items.join(", ") }
}

pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A leaf check's refusal, in words: the caller always turns it into a [`ConfigError`](super::ConfigError)
/// at the node's line and field (a config error is permanent: the file must change).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Invalid(pub(super) String);

pub(super) fn check_git_url(url: &str) -> Result<(), Invalid> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Invalid(format!(
            "`{url}` is not a URL; expected file://, git://, http://, https:// or a local path starting with `./`, `../` or `/`"
        )));
    };
    if !matches!(scheme, "file" | "git" | "http" | "https") {
        return Err(Invalid(format!("unsupported scheme `{scheme}`; expected file, git, http or https")));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(Invalid("credentials must not be written into the URL: they would end up in logs and status".to_owned()));
    }
    if rest.is_empty() || (scheme != "file" && authority.is_empty()) {
        return Err(Invalid(format!("`{url}` has no host or path")));
    }
    Ok(())
}

/// `c.yaml`: one subscription `a` with `sub_extra` as its last fields (line 12 on).
#[cfg(test)]
fn parse_with_subscription_fields(sub_extra: &str) -> Result<crate::config::Config, crate::config::ConfigErrors> {
    let text = format!(
        "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {{dir: c}}\nsources:\n  - name: s\n    git: {{url: https://example.test/s.git}}\nsubscriptions:\n  - name: a\n    source: s\n    interval: 1h\n    clusters: [{{name: x, namespace: y}}]\n{sub_extra}target: {{directory: out}}\n"
    );
    crate::config::Config::parse(std::path::Path::new("c.yaml"), &text)
}

#[cfg(test)]
mod stage_timeout_tests {
    use super::parse_with_subscription_fields as parse;

    #[test]
    fn stage_timeout_defaults_to_ten_minutes_and_zero_is_refused_with_its_line() {
        assert_eq!(parse("").expect("valid").subscriptions[0].stage_timeout, super::super::DEFAULT_STAGE_TIMEOUT);
        assert_eq!(parse("    stageTimeout: 90s\n").expect("valid").subscriptions[0].stage_timeout.as_secs(), 90);
        let e = parse("    stageTimeout: 0s\n").unwrap_err().to_string();
        assert!(e.contains("c.yaml:12:") && e.contains("subscriptions[0].stageTimeout: must be longer than 0s"), "{e}");
    }
}

#[cfg(test)]
mod adopted_labels_tests {
    use super::parse_with_subscription_fields as parse;

    #[test]
    fn adopted_labels_are_label_checked_with_their_line() {
        assert!(parse("").expect("valid").subscriptions[0].adopted_labels.is_empty());
        let c = parse("    adoptedLabels:\n      clusterstack.x-k8s.io/instance: owned\n").expect("valid");
        assert_eq!(c.subscriptions[0].adopted_labels["clusterstack.x-k8s.io/instance"], "owned");
        let e = parse("    adoptedLabels:\n      Bad_Prefix/x: owned\n      ok: \"-no\"\n").unwrap_err().to_string();
        assert!(
            e.contains("c.yaml:13:") && e.contains("subscriptions[0].adoptedLabels.Bad_Prefix/x: `Bad_Prefix/x` is not a label key"),
            "{e}"
        );
        assert!(e.contains("c.yaml:14:") && e.contains("`-no` is not a label value"), "{e}");
        let e = parse("    adoptedLabels: [a]\n").unwrap_err().to_string();
        assert!(e.contains("subscriptions[0].adoptedLabels: expected a mapping of labels"), "{e}");
    }
}

#[cfg(test)]
mod rollout_tests {
    use crate::config::{Budget, Config, OnFailure, Wave};

    fn parse(sub_extra: &str) -> Result<Config, crate::config::ConfigErrors> {
        let text = format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {{dir: c}}\nsources:\n  - name: s\n    git: {{url: https://example.test/s.git}}\nsubscriptions:\n  - name: a\n    source: s\n    stack: docker-ferrol-1-27\n    format: clusterstack\n    interval: 1h\n    clusters: [{{name: x, namespace: y}}]\n{sub_extra}target: {{directory: out}}\n"
        );
        Config::parse(std::path::Path::new("c.yaml"), &text)
    }

    #[test]
    fn no_rollout_is_none_and_a_full_one_is_read_with_defaults() {
        assert_eq!(parse("").expect("valid").subscriptions[0].rollout, None);
        let c = parse("    rollout:\n      waves: [{clusters: 1}, {percent: 25}, {percent: 100}]\n      canarySelector: {matchLabels: {canary: \"true\"}}\n")
            .expect("valid");
        let r = c.subscriptions[0].rollout.clone().expect("rollout");
        assert_eq!(r.waves, [Wave::Clusters(1), Wave::Percent(25), Wave::Percent(100)]);
        assert_eq!(r.canary_labels["canary"], "true");
        assert_eq!(r.wave_timeout, crate::config::DEFAULT_WAVE_TIMEOUT);
        let r = parse("    rollout:\n      waves: [{percent: 100}]\n      waveTimeout: 2s\n      checkInterval: 200ms\n").expect("valid");
        let r = r.subscriptions[0].rollout.clone().expect("rollout");
        assert_eq!((r.wave_timeout.as_millis(), r.check_interval.as_millis()), (2000, 200));
        assert_eq!((r.max_failures, r.on_failure, r.windows.len()), (Budget::None, OnFailure::Pause, 0), "the defaults: as before");
    }

    #[test]
    fn failure_budgets_rollback_and_windows_are_read() {
        let c = parse(
            "    rollout:\n      waves: [{percent: 100}]\n      maxFailures: \"20%\"\n      onFailure: rollback\n      windows:\n        - schedule: \"0 22 * * 1-5\"\n          duration: 4h\n          timeZone: Europe/Berlin\n        - {schedule: \"0 10 * * 2\", duration: 1h, clusterSelector: {matchLabels: {canary: \"true\"}}}\n",
        )
        .expect("valid");
        let r = c.subscriptions[0].rollout.clone().expect("rollout");
        assert_eq!((r.max_failures, r.on_failure), (Budget::Percent(20), OnFailure::Rollback));
        assert_eq!(
            (r.windows[0].zone.as_str(), r.windows[0].duration.as_secs(), r.windows[1].zone.as_str()),
            ("Europe/Berlin", 4 * 3600, "UTC")
        );
        assert_eq!(r.windows[1].labels["canary"], "true");
        assert_eq!((Budget::Percent(20).of(9), Budget::Clusters(2).of(1), Budget::None.of(100)), (1, 2, 0));
        let r =
            parse("    rollout:\n      waves: [{percent: 100}]\n      maxFailures: 3\n").expect("valid").subscriptions[0].rollout.clone();
        assert_eq!(r.expect("rollout").max_failures, Budget::Clusters(3));
    }

    #[test]
    fn bad_rollouts_are_refused_naming_line_and_field() {
        let table = [
            ("    rollout:\n      waveTimeout: 1m\n", "c.yaml:15:", "subscriptions[0].rollout.waves: missing required field `waves`"),
            (
                "    rollout:\n      waves: [{clusters: 1}, {percent: 50}]\n",
                "c.yaml:15:",
                "subscriptions[0].rollout.waves[1]: the last wave must be `{percent: 100}`",
            ),
            (
                "    rollout:\n      waves: [{percent: 50}, {percent: 20}, {percent: 100}]\n",
                "c.yaml:15:",
                "waves[1].percent: 20 is less than the 50",
            ),
            (
                "    rollout:\n      waves: [{clusters: 1, percent: 5}, {percent: 100}]\n",
                "c.yaml:15:",
                "waves[0]: set exactly one of `clusters`",
            ),
            (
                "    rollout:\n      waves: [{percent: 0}, {percent: 100}]\n",
                "c.yaml:15:",
                "waves[0].percent: expected a number from 1 to 100, found `0`",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      waveTimeout: 0s\n",
                "c.yaml:16:",
                "rollout.waveTimeout: 0s is too short; use at least 1s",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      canarySelector: {matchLabels: {}}\n",
                "c.yaml:16:",
                "canarySelector.matchLabels: expected a non-empty mapping",
            ),
            ("    rollout:\n      waves: [{percent: 100}]\n      wave: 1\n", "c.yaml:16:", "rollout.wave: unknown field `wave`"),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      maxFailures: \"120%\"\n",
                "c.yaml:16:",
                "rollout.maxFailures: expected a count of Clusters (`2`) or a percentage of the wave",
            ),
            ("    rollout:\n      waves: [{percent: 100}]\n      maxFailures: -1\n", "c.yaml:16:", "found `-1`"),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      onFailure: revert\n",
                "c.yaml:16:",
                "rollout.onFailure: expected `pause` or `rollback`",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      windows:\n        - {schedule: \"0 22 * * 1-5\", duration: 4h, timeZone: Mars/Olympus}\n",
                "c.yaml:17:",
                "rollout.windows[0].timeZone: unknown time zone `Mars/Olympus`",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      windows:\n        - {schedule: \"0 22 * *\", duration: 4h}\n",
                "c.yaml:17:",
                "rollout.windows[0].schedule: expected a cron expression with 5 fields",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      windows:\n        - {schedule: \"0 22 * * *\"}\n",
                "c.yaml:17:",
                "rollout.windows[0].duration: missing required field `duration`",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      windows:\n        - {schedule: \"0 22 * * *\", duration: 30s}\n",
                "c.yaml:17:",
                "rollout.windows[0].duration: 30s is too short; use at least 1m",
            ),
            (
                "    rollout:\n      waves: [{percent: 100}]\n      windows:\n        - {schedule: \"0 22 * * *\", duration: 1h, clusterSelector: {}}\n",
                "c.yaml:17:",
                "windows[0].clusterSelector.matchLabels: missing required field `matchLabels`",
            ),
        ];
        for (extra, at, want) in table {
            let e = parse(extra).unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(want), "{extra}\n=> {e}");
        }
    }
}

#[cfg(test)]
mod merge_key_tests {
    use crate::config::Config;

    /// Regression: a config sharing subscription settings with YAML's merge key was refused.
    #[test]
    fn subscriptions_may_share_settings_through_a_merge_key() {
        let text = "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: c}\nsources:\n  - name: s\n    git: {url: https://example.test/s.git}\nsubscriptions:\n  - &common\n    name: a\n    source: s\n    interval: 1h\n    clusters: [{name: x, namespace: y}]\n  - <<: *common\n    name: b\n    clusters: [{name: z, namespace: y}]\ntarget: {directory: out}\n";
        let c = Config::parse(std::path::Path::new("c.yaml"), text).expect("valid");
        assert_eq!(c.subscriptions.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((c.subscriptions[1].source.as_str(), c.subscriptions[1].clusters[0].name.as_str()), ("s", "z"));
    }
}

#[cfg(test)]
mod subscription_tests {
    use super::{Constraint, constraint_problem, is_inside_release, stack_problem};

    #[test]
    fn a_stack_names_one_cluster_stack_or_with_kubernetes_a_line() {
        // (stack, with `kubernetes`, the problem's start)
        let cases: [(&str, bool, Option<&str>); 6] = [
            ("docker-ferrol-1-27", false, None),
            ("docker-ferrol", false, Some("`docker-ferrol` is not a cluster-stack name")),
            ("nonsense", false, Some("`nonsense` is not a cluster-stack name")),
            ("docker-ferrol", true, None),
            ("docker-ferrol-1-27", true, Some("with `kubernetes`, `stack` names the line without its Kubernetes version")),
            ("nonsense", true, Some("`nonsense` is not a cluster-stack line")),
        ];
        for (stack, line, want) in cases {
            let got = stack_problem(stack, line);
            assert_eq!(got.is_some(), want.is_some(), "{stack} line {line}: {got:?}");
            if let (Some(got), Some(want)) = (&got, want) {
                assert!(got.starts_with(want), "{stack} line {line}: {got}");
            }
        }
    }

    #[test]
    fn a_version_constraint_fits_the_tags_the_subscription_follows() {
        // (version, with `stack`, the problem's start)
        let cases = [
            ("*", false, None),
            ("*", true, None),
            (">=v2", true, None),
            (">=v2", false, Some("`>=v2` is a cluster-stack constraint; set `stack` too")),
            (">=1.2.0", false, None),
            (">=1.2.0", true, Some("`>=1.2.0` is a semver range, but `stack` selects cluster-stack tags")),
        ];
        for (version, stack, want) in cases {
            let c = Constraint::parse(version).expect("a constraint");
            match (constraint_problem(version, &c, stack), want) {
                (None, None) => {}
                (Some(got), Some(want)) => assert!(got.starts_with(want), "{version} stack {stack}: {got}"),
                (got, want) => panic!("{version} stack {stack}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_subscription_path_stays_inside_the_release() {
        for (path, inside) in [("manifests", true), ("a/b/c", true), ("a..b", true), ("/etc", false), ("../x", false), ("a/../b", false)] {
            assert_eq!(is_inside_release(path), inside, "{path}");
        }
    }
}
