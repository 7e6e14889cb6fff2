//! The auto-subscribe config of the daemon under test, built from typed calls and written as
//! YAML: every test that runs the binary writes its config through [`Config`], so the file's
//! shape is in one place (the tests that check how bad YAML is reported write their text by hand).
//!
//! ```ignore
//! let config = Config::new(dir)
//!     .git("stacks", &repo.file_url())
//!     .sub(Sub::new("ferrol", "stacks").clusterstack(STACK).select("stack", "ferrol"))
//!     .kubernetes(&mgmt.kubeconfig())
//!     .write();
//! ```
//!
//! Fields without a method of their own are set with `set(key, json!(…))` on the level they
//! belong to; the YAML keeps a fixed order of the well-known keys (name first, then kind, …).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// A whole config file: `stacksync.yaml` in `dir`, its cache under `dir/cache`.
#[derive(Clone, Debug)]
pub struct Config {
    dir: PathBuf,
    path: PathBuf,
    doc: Map<String, Value>,
}

impl Config {
    /// `apiVersion`, `kind` and `cache.dir: <dir>/cache`; written to `<dir>/stacksync.yaml`.
    pub fn new(dir: &Path) -> Config {
        let mut doc = Map::new();
        doc.insert("apiVersion".into(), "stacksync.io/v1alpha1".into());
        doc.insert("kind".into(), "Config".into());
        doc.insert("cache".into(), json!({"dir": dir.join("cache")}));
        Config { dir: dir.to_path_buf(), path: dir.join("stacksync.yaml"), doc }
    }

    /// Written to `path` instead of `<dir>/stacksync.yaml`.
    pub fn at(mut self, path: &Path) -> Config {
        self.path = path.to_path_buf();
        self
    }

    /// A top-level field (`webhooks`, …), replacing what was there.
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Config {
        self.doc.insert(key.into(), value.into());
        self
    }

    /// `helm.path`: the real helm for cluster-stack and helm renders.
    pub fn helm(self, path: &Path) -> Config {
        self.helm_set("path", json!(path))
    }

    /// A field of `helm:` (`parallelism`, `timeout`, …).
    pub fn helm_set(mut self, key: &str, value: impl Into<Value>) -> Config {
        entry(&mut self.doc, "helm").insert(key.into(), value.into());
        self
    }

    /// A source of `kind` (`git`, `github`, `oci`) with `body` as its settings; it replaces a
    /// source of the same name.
    pub fn source(mut self, name: &str, kind: &str, body: Value) -> Config {
        let sources = list(&mut self.doc, "sources");
        let source = json!({"name": name, kind: body});
        match sources.iter_mut().find(|s| s["name"] == name) {
            Some(old) => *old = source,
            None => sources.push(source),
        }
        self
    }

    /// A Git source.
    pub fn git(self, name: &str, url: &str) -> Config {
        self.source(name, "git", json!({"url": url}))
    }

    /// A GitHub release source of `repo` served at `api_url`.
    pub fn github(self, name: &str, repo: &str, api_url: &str) -> Config {
        self.source(name, "github", json!({"repo": repo, "apiUrl": api_url}))
    }

    /// A field of source `name`'s settings (`allowMovedTags`, `verify`, `auth`, `token`, …).
    pub fn source_set(mut self, name: &str, key: &str, value: impl Into<Value>) -> Config {
        let source = list(&mut self.doc, "sources")
            .iter_mut()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("the config has no source {name}"));
        let kind = source.as_object().and_then(|o| o.keys().find(|k| *k != "name").cloned()).expect("a source kind");
        source[&kind][key] = value.into();
        self
    }

    pub fn sub(mut self, sub: Sub) -> Config {
        list(&mut self.doc, "subscriptions").push(Value::Object(sub.0));
        self
    }

    /// Edits subscription `name`.
    pub fn edit_sub(mut self, name: &str, edit: impl FnOnce(Sub) -> Sub) -> Config {
        let subs = list(&mut self.doc, "subscriptions");
        let at = subs.iter().position(|s| s["name"] == name).unwrap_or_else(|| panic!("the config has no subscription {name}"));
        let Value::Object(map) = std::mem::take(&mut subs[at]) else { unreachable!("a subscription is a map") };
        subs[at] = Value::Object(edit(Sub(map)).0);
        self
    }

    /// `target.directory: <dir>/out`.
    pub fn directory(mut self) -> Config {
        self.doc.insert("target".into(), json!({"directory": self.dir.join("out")}));
        self
    }

    /// `target.kubernetes.kubeconfig`: the management cluster.
    pub fn kubernetes(mut self, kubeconfig: &Path) -> Config {
        self.doc.insert("target".into(), json!({"kubernetes": {"kubeconfig": kubeconfig}}));
        self
    }

    /// A field of the Kubernetes target (`notReadyRetry`, `requestTimeout`, …).
    pub fn kubernetes_set(mut self, key: &str, value: impl Into<Value>) -> Config {
        let target = entry(&mut self.doc, "target");
        let kube = target.entry("kubernetes").or_insert_with(|| json!({}));
        kube[key] = value.into();
        self
    }

    /// The YAML text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        emit_map(&mut out, 0, &self.doc);
        out
    }

    /// Writes the file; its path.
    pub fn write(&self) -> PathBuf {
        std::fs::write(&self.path, self.text()).unwrap_or_else(|e| panic!("write {}: {e}", self.path.display()));
        self.path.clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory the config was made for.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// One subscription: interval `1h` unless set (tests trigger what they wait for).
#[derive(Clone, Debug)]
pub struct Sub(Map<String, Value>);

impl Sub {
    pub fn new(name: &str, source: &str) -> Sub {
        let mut map = Map::new();
        map.insert("name".into(), name.into());
        map.insert("source".into(), source.into());
        map.insert("interval".into(), "1h".into());
        Sub(map)
    }

    /// Any field (`pruneLimit`, `force`, `rollout`, `values`, …).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Sub {
        self.0.insert(key.into(), value.into());
        self
    }

    pub fn version(self, range: &str) -> Sub {
        self.set("version", range)
    }

    pub fn interval(self, every: &str) -> Sub {
        self.set("interval", every)
    }

    /// A cron `schedule:` instead of the interval.
    pub fn schedule(mut self, cron: &str) -> Sub {
        self.0.remove("interval");
        self.set("schedule", cron)
    }

    pub fn health_timeout(self, within: &str) -> Sub {
        self.set("healthTimeout", within)
    }

    /// The stack (a directory of the release) this subscription takes.
    pub fn stack(self, stack: &str) -> Sub {
        self.set("stack", stack)
    }

    /// A cluster stack rendered with helm (`format: clusterstack`).
    pub fn clusterstack(self, stack: &str) -> Sub {
        self.stack(stack).set("format", "clusterstack")
    }

    /// `clusterSelector.matchLabels.<key>: <value>`.
    pub fn select(mut self, key: &str, value: &str) -> Sub {
        let selector = entry(&mut self.0, "clusterSelector");
        let labels = selector.entry("matchLabels").or_insert_with(|| json!({}));
        labels[key] = value.into();
        self
    }

    /// `clusterSelector.matchStackClass: true`.
    pub fn match_stack_class(mut self) -> Sub {
        entry(&mut self.0, "clusterSelector").insert("matchStackClass".into(), true.into());
        self
    }

    /// A Cluster listed by name (the directory target), with its values.
    pub fn cluster(mut self, namespace: &str, name: &str, values: &[(&str, &str)]) -> Sub {
        let mut cluster = json!({"name": name, "namespace": namespace});
        if !values.is_empty() {
            cluster["values"] = values.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect::<Map<_, _>>().into();
        }
        list(&mut self.0, "clusters").push(cluster);
        self
    }
}

impl Sub {
    /// A Cluster listed with the part of its Cluster API object that cluster-stack templates
    /// read: the control plane endpoint `host` and the pods' CIDR.
    pub fn stack_cluster(self, namespace: &str, name: &str, host: &str, pods_cidr: &str) -> Sub {
        self.cluster_entry(stack_cluster(namespace, name, host, pods_cidr))
    }

    /// A Cluster entry as written (`name`, `namespace`, `values`, `cluster`, `controlPlane`, …).
    pub fn cluster_entry(mut self, entry: Value) -> Sub {
        list(&mut self.0, "clusters").push(entry);
        self
    }
}

/// The entry of [`Sub::stack_cluster`], to add to.
pub fn stack_cluster(namespace: &str, name: &str, host: &str, pods_cidr: &str) -> Value {
    let spec = json!({"controlPlaneEndpoint": {"host": host, "port": 6443}, "clusterNetwork": {"pods": {"cidrBlocks": [pods_cidr]}}});
    json!({"name": name, "namespace": namespace, "cluster": {"spec": spec}})
}

impl Sub {}

fn entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = map.entry(key).or_insert_with(|| json!({}));
    v.as_object_mut().unwrap_or_else(|| panic!("{key} is not a map"))
}

fn list<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let v = map.entry(key).or_insert_with(|| json!([]));
    v.as_array_mut().unwrap_or_else(|| panic!("{key} is not a list"))
}

/// Well-known keys first, in the order the docs write them; the rest alphabetically.
const ORDER: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "namespace",
    "cache",
    "helm",
    "webhooks",
    "sources",
    "source",
    "stack",
    "format",
    "version",
    "interval",
    "subscriptions",
    "target",
];

fn rank(key: &str) -> usize {
    ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len())
}

fn emit_map(out: &mut String, indent: usize, map: &Map<String, Value>) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| (rank(k), k.as_str()));
    for (i, key) in keys.into_iter().enumerate() {
        // The first key of a list item shares the `- ` line.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&scalar(&Value::from(key.as_str())));
        emit_value(out, indent, &map[key]);
    }
}

fn emit_value(out: &mut String, indent: usize, value: &Value) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push_str(":\n");
            emit_map(out, indent + 2, m);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push_str(":\n");
            emit_list(out, indent + 2, a);
        }
        v => {
            out.push_str(": ");
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
}

fn emit_list(out: &mut String, indent: usize, items: &[Value]) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => emit_map(out, indent + 2, m),
            v => {
                out.push_str(&scalar(v));
                out.push('\n');
            }
        }
    }
}

/// A plain scalar where YAML reads it back as the same string, else JSON's quoting (valid YAML).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-:@+=~".contains(c))
                && !s.starts_with(['-', ':', '@', '~'])
                && !s.contains(": ")
                && !s.ends_with(':')
                && s.parse::<f64>().is_err()
                && !["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&s.to_ascii_lowercase().as_str())
                && !s.starts_with("0x")
                && !s.starts_with("0o")
                && !s.starts_with('.');
            if plain { s.clone() } else { Value::from(s.as_str()).to_string() }
        }
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        v => v.to_string(),
    }
}

/// The tree a config stands for, to compare with what its YAML reads back as.
pub fn tree(config: &Config) -> Value {
    Value::Object(config.doc.clone())
}
