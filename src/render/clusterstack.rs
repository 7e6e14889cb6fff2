//! Render for SovereignCloudStack cluster-stack releases: the release layout (metadata, the
//! ClusterClass chart, the cluster-addon chart or stages), read and unpacked once per release;
//! then the ClusterClass rendered once per namespace and the addons once per cluster with `helm
//! template`, as the SCS cluster-stack-operator does.
//!
//! Layout, relative to the release root (`path` of the subscription):
//! ```text
//! metadata.yaml
//! <stack>-cluster-class-<clusterStack version>[.tgz]     helm chart (directory or package)
//! <stack>-cluster-addon-<clusterAddon version>[.tgz]     one helm chart, or one chart per stage
//! cluster-addon-values.yaml                              values template (single chart)
//! clusteraddon.yaml                                      stages per hook (multi-stage)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gotemplate::Warning;
use kubeyaml::{self, Node, Value};

use super::cel::{WaitFor, WaitObject};
use super::helm::{Helm, MemoKey};
use super::values::{TemplateOptions, ValuesTemplate};
use super::{Error, Errors, Object, ObjectKey, ObjectProblem, ReadError};
use crate::cache::unpack;
use crate::model::cluster::ClusterConfig;
use crate::model::version::Version;
use crate::release::Release;
use crate::release::metadata::{self, Metadata};

pub const ADDON_CONFIG: &str = "clusteraddon.yaml";
pub const ADDON_VALUES: &str = "cluster-addon-values.yaml";
pub const OVERWRITE: &str = "overwrite.yaml";
/// The hook whose stages install a cluster's addons; what a directory target writes.
pub const INSTALL_HOOK: &str = "AfterControlPlaneInitialized";
/// The namespace and release name the operator renders addons with.
pub const ADDON_NAMESPACE: &str = "kube-system";
pub const ADDON_RELEASE: &str = "cluster-addon";
/// The stage name recorded on ClusterClass objects.
pub const CLUSTER_CLASS_STAGE: &str = "cluster-class";

/// A chart to pass to helm: a directory or a `.tgz` package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// Release-relative name, for messages and status.
    pub name: String,
    pub path: PathBuf,
}

pub use crate::model::StageAction as Action;

/// One step of a hook in `clusteraddon.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRef {
    pub name: String,
    pub action: Action,
    /// `waitForPreCondition`: must hold before the stage runs.
    pub pre: Option<WaitFor>,
    /// `waitForPostCondition`: must hold before the next stage runs.
    pub post: Option<WaitFor>,
}

#[derive(Debug, Clone)]
pub struct StageChart {
    pub chart: Chart,
    pub overwrite: Option<ValuesTemplate>,
}

#[derive(Debug, Clone)]
pub enum Addon {
    /// One helm chart with `cluster-addon-values.yaml` beside it.
    Single { chart: Chart, values: Option<ValuesTemplate> },
    /// One chart per stage; `hooks` in file order, each with its stages in order.
    Staged { hooks: Vec<(String, Vec<StageRef>)>, stages: BTreeMap<String, StageChart> },
}

/// A cluster-stack release, read, validated and unpacked; shared by every cluster rendered.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<provider>-<name>-<k8s major>-<k8s minor>`: the ClusterClass chart's helm release name.
    pub stack: String,
    pub metadata: Metadata,
    pub cluster_class: Chart,
    pub addon: Addon,
    /// Archives unpacked while loading (each once, whatever the number of clusters).
    pub unpacked: Vec<String>,
    /// How values templates run (the config's `templates:`); set after [`Layout::load`].
    pub template_options: TemplateOptions,
    /// What the release is (source, tag, commit, directory): with the arguments and values of a
    /// render, the key of helm's memo — a release's content never changes under its identity.
    pub identity: String,
    /// Where the release's files and its unpacked archives are (`tree/dir`, `work`): written as
    /// `<release>` and `<unpacked>` in memo keys, so a key does not depend on this process's
    /// work directory and the on-disk memo answers after a restart.
    pub roots: [String; 2],
    /// The on-disk memo's group of this release's renders (collected with the release):
    /// [`crate::render::helm::render_group`] of its tag and commit.
    pub render_group: String,
    /// Whether each chart may generate values at render time ([`may_generate`]), found once.
    pub may_generate: Arc<std::sync::Mutex<BTreeMap<PathBuf, bool>>>,
}

/// One rendered stage of a cluster's addons, in apply order. `name` is `None` for a
/// single-chart addon.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedStage {
    pub name: Option<String>,
    pub objects: Vec<Object>,
    /// The fields its chart generates at render time (`genCA`, `randAlphaNum`, a checksum of
    /// either), one `group|kind|namespace|name|pointer` line each: found by rendering twice
    /// ([`Layout::render_chart`]), kept as they are live by every sync.
    pub generated: Vec<String>,
    /// Rendered by a helm [`Helm::with_stand_ins`] as a probe: what the chart generates holds
    /// stand-ins (random text of a key's or certificate's shape) and `generated` is empty
    /// (only one render). Never to be applied where a generated field has no live value.
    pub stand_ins: bool,
}

/// A cluster's rendered addons and what their values templates printed silently.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedAddons {
    pub stages: Vec<RenderedStage>,
    /// Every `<no value>` / `<nil>` the values templates printed (file, line, path; already
    /// logged), in stage order: for the Cluster's status.
    pub warnings: Vec<Warning>,
}

impl Layout {
    /// Reads the release at `tree/dir` for `release`; archives that must be opened (a multi-stage
    /// addon package) are unpacked under `work`. Blocking: call from a blocking thread.
    ///
    /// # Errors
    /// Every problem found with the metadata, charts and values templates.
    pub fn load(tree: &Path, dir: &str, release: &Release, work: &Path) -> Result<Layout, Errors> {
        let root = tree.join(dir);
        let prefix = match dir.trim_matches('/') {
            "" | "." => String::new(),
            d => format!("{d}/"),
        };
        // Names of the release's files, relative to the release (chart names already are).
        let rel = |name: &str| format!("{prefix}{name}");
        if !root.is_dir() {
            return Err(Errors(vec![Error::MissingDir { path: dir.to_owned() }]));
        }
        let Version::Scs { stack, .. } = &release.version else {
            return Err(Errors(vec![Error::NotClusterStackTag { file: rel(metadata::FILE), tag: release.tag.clone() }]));
        };
        let text = read(&root, metadata::FILE).map_err(|source| Errors(vec![Error::ReadFile { file: rel(metadata::FILE), source }]))?;
        let metadata = metadata::parse(&rel(metadata::FILE), &text, &release.version)
            .map_err(|errs| Errors(errs.into_iter().map(Error::Metadata).collect()))?;
        let mut errors = Vec::new();
        let mut unpacked = Vec::new();
        let staged = root.join(ADDON_CONFIG).is_file();
        let class_name = format!("{stack}-cluster-class-{}", metadata.cluster_stack);
        let cluster_class = find_chart(&root, &class_name, &prefix, true);
        let addon_name = format!("{stack}-cluster-addon-{}", metadata.cluster_addon);
        let addon_chart = find_chart(&root, &addon_name, &prefix, !staged);
        if cluster_class.is_none() {
            errors.push(Error::MissingChart { file: rel(&class_name), what: "ClusterClass", name: class_name.clone() });
        }
        if addon_chart.is_none() {
            errors.push(Error::MissingChart { file: rel(&addon_name), what: "cluster-addon", name: addon_name.clone() });
        }
        let (Some(cluster_class), Some(addon_chart)) = (cluster_class, addon_chart) else { return Err(Errors(errors)) };

        let addon = if staged {
            let file = rel(ADDON_CONFIG);
            let hooks = read(&root, ADDON_CONFIG)
                .map_err(|source| Error::ReadFile { file: file.clone(), source })
                .and_then(|t| parse_addon_config(&file, &t).map_err(|e| Error::AddonConfig { file: file.clone(), source: Box::new(e) }));
            let hooks = match hooks {
                Ok(h) => h,
                Err(e) => return Err(Errors(vec![e])),
            };
            let stage_root = if addon_chart.path.is_dir() {
                addon_chart.path.clone()
            } else {
                let dest = work.join(&addon_name);
                let file = || addon_chart.name.clone();
                std::fs::create_dir_all(&dest)
                    .map_err(|e| Errors(vec![Error::CreateDir { file: file(), path: dest.clone(), source: Arc::new(e) }]))?;
                refuse_links(&addon_chart.path).map_err(|source| Errors(vec![Error::Archive { file: file(), source }]))?;
                unpack::unpack(&addon_chart.path, &dest, unpack::Limits::default())
                    .map_err(|e| Errors(vec![Error::Unpack { file: file(), source: Arc::new(e) }]))?;
                unpacked.push(addon_chart.name.clone());
                dest
            };
            let mut stages = BTreeMap::new();
            let names: BTreeSet<&str> = hooks.iter().flat_map(|(_, s)| s.iter().map(|s| s.name.as_str())).collect();
            for name in names {
                let dir = stage_root.join(name);
                let chart_name = format!("{}/{name}", addon_chart.name);
                if !dir.join("Chart.yaml").is_file() {
                    errors.push(Error::StageChartMissing { file: chart_name, stage: name.to_owned() });
                    continue;
                }
                let overwrite = optional_template(&dir, OVERWRITE, &format!("{chart_name}/{OVERWRITE}"), &mut errors);
                stages.insert(name.to_owned(), StageChart { chart: Chart { name: chart_name, path: dir }, overwrite });
            }
            Addon::Staged { hooks, stages }
        } else {
            let values = optional_template(&root, ADDON_VALUES, &rel(ADDON_VALUES), &mut errors);
            Addon::Single { chart: addon_chart, values }
        };
        if !errors.is_empty() {
            return Err(Errors(errors));
        }
        let identity = format!("{}\0{}\0{}\0{dir}", release.source, release.tag, release.commit);
        Ok(Layout {
            stack: stack.clone(),
            metadata,
            cluster_class,
            addon,
            unpacked,
            template_options: TemplateOptions::default(),
            identity,
            roots: [root.display().to_string(), work.display().to_string()],
            render_group: crate::render::helm::render_group(&release.tag, &release.commit),
            may_generate: Arc::default(),
        })
    }

    /// The stages a cluster gets installed, in order: the install hook's `apply` stages, or the
    /// single chart.
    pub fn install_stages(&self) -> Vec<Option<&str>> {
        match &self.addon {
            Addon::Single { .. } => vec![None],
            Addon::Staged { hooks, .. } => hooks
                .iter()
                .find(|(h, _)| h == INSTALL_HOOK)
                .map(|(_, stages)| stages.iter().filter(|s| s.action == Action::Apply).map(|s| Some(s.name.as_str())).collect())
                .unwrap_or_default(),
        }
    }

    /// `helm template <stack> <chart> --namespace <namespace>`: the ClusterClass and its templates
    /// for one namespace.
    ///
    /// # Errors
    /// helm fails, or its output holds an invalid or duplicate object.
    pub async fn render_cluster_class(&self, helm: &Helm, namespace: &str) -> Result<Vec<Object>, Errors> {
        let args: Vec<OsString> =
            vec![self.stack.clone().into(), self.cluster_class.path.clone().into(), "--namespace".into(), namespace.into()];
        let out = helm
            .template_memoised(&self.render_group, self.memo_key(&args, None), &self.cluster_class.name, &args)
            .await
            .map_err(|source| Errors(vec![Error::Helm { chart: self.cluster_class.name.clone(), source }]))?;
        objects_of(&out, &self.cluster_class.name, CLUSTER_CLASS_STAGE, namespace)
    }

    /// The addon objects of `cluster`, stage by stage in install order. Values files go under
    /// `work` (unique per cluster). Values-template warnings are logged; use
    /// [`Layout::render_addons_reporting`] to get them too.
    ///
    /// # Errors
    /// Every stage's values-template, helm and object errors (all stages are tried).
    pub async fn render_addons(&self, helm: &Helm, cluster: &ClusterConfig, work: &Path) -> Result<Vec<RenderedStage>, Errors> {
        self.render_addons_reporting(helm, cluster, work).await.map(|r| r.stages)
    }

    /// The memo key of a render of this release with `args` (paths inside the release and its
    /// unpacked charts, names, versions) and the content of its values file (`None`: none passed).
    fn memo_key(&self, args: &[OsString], values: Option<&str>) -> MemoKey {
        let [release, unpacked] = [&self.roots[0], &self.roots[1]].map(|r| r.as_bytes());
        let args = args.iter().map(|a| {
            let a = a.as_encoded_bytes();
            // Paths inside the release or its unpacked archives, relative to them.
            match (a.strip_prefix(release), a.strip_prefix(unpacked)) {
                (Some(rest), _) if !release.is_empty() => [b"<release>".as_slice(), rest],
                (_, Some(rest)) if !unpacked.is_empty() => [b"<unpacked>".as_slice(), rest],
                _ => [b"".as_slice(), a],
            }
        });
        let args = args.flatten();
        let values: &[&[u8]] = match values {
            Some(v) => &[b"values", v.as_bytes()],
            None => &[b"no values"],
        };
        MemoKey::of(std::iter::once(self.identity.as_bytes()).chain(args).chain(values.iter().copied()))
    }

    /// As [`Layout::render_addons`], with the values templates' `<no value>` / `<nil>` warnings.
    ///
    /// # Errors
    /// As [`Layout::render_addons`] (in strict mode a warning is an error).
    pub async fn render_addons_reporting(&self, helm: &Helm, cluster: &ClusterConfig, work: &Path) -> Result<RenderedAddons, Errors> {
        let dir = work.join("values").join(&cluster.namespace).join(&cluster.name);
        let mut out = Vec::new();
        let mut all_warnings = Vec::new();
        let mut errors = Vec::new();
        for stage in self.install_stages() {
            let (chart, template) = match (&self.addon, stage) {
                (Addon::Single { chart, values }, _) => (chart, values.as_ref()),
                (Addon::Staged { stages, .. }, Some(name)) => match stages.get(name) {
                    Some(s) => (&s.chart, s.overwrite.as_ref()),
                    None => continue,
                },
                (Addon::Staged { .. }, None) => continue,
            };
            match self.render_chart(helm, cluster, &dir, chart, template, stage).await {
                Ok(ChartRender { objects, warnings, generated, stand_ins }) => {
                    out.push(RenderedStage { name: stage.map(str::to_owned), objects, generated, stand_ins });
                    all_warnings.extend(warnings);
                }
                Err(e) => errors.extend(e),
            }
        }
        if errors.is_empty() { Ok(RenderedAddons { stages: out, warnings: all_warnings }) } else { Err(Errors(errors)) }
    }
}

impl Layout {
    /// The stages of `hook` in `clusteraddon.yaml` (none for a single-chart addon).
    pub fn hook_stages(&self, hook: &str) -> &[StageRef] {
        match &self.addon {
            Addon::Staged { hooks, .. } => hooks.iter().find(|(h, _)| h == hook).map(|(_, s)| s.as_slice()).unwrap_or_default(),
            Addon::Single { .. } => &[],
        }
    }

    /// One stage chart of `clusteraddon.yaml` rendered for `cluster` with its `overwrite.yaml`
    /// (what an upgrade stage applies, or deletes).
    ///
    /// # Errors
    /// No such stage, or its values-template, helm and object errors.
    pub async fn render_stage(&self, helm: &Helm, cluster: &ClusterConfig, work: &Path, name: &str) -> Result<Vec<Object>, Errors> {
        let Addon::Staged { stages, .. } = &self.addon else {
            return Err(Errors(vec![Error::NoStages { stage: name.to_owned() }]));
        };
        let Some(stage) = stages.get(name) else {
            return Err(Errors(vec![Error::UnknownStage { stage: name.to_owned() }]));
        };
        let dir = work.join("values").join(&cluster.namespace).join(&cluster.name);
        self.render_chart(helm, cluster, &dir, &stage.chart, stage.overwrite.as_ref(), Some(name)).await.map(|r| r.objects).map_err(Errors)
    }

    /// `helm template` of one addon chart with its values template rendered into `dir`.
    ///
    /// A chart that may generate is rendered twice the first time its inputs are seen — with the
    /// library renderer, once for real and once as a probe (the costly generators replaced by
    /// cheap stand-ins: renderer/probe.go); with helm processes, twice for real. Fields that
    /// differ between the two renders are generated at render time (`generated.rs` of the applier keeps them
    /// as they are live). A render that generates nothing is memoised for every Cluster with
    /// the same inputs; one that does is memoised for this Cluster alone (its identity in the
    /// key, the shared key holding only the generated fields' pointers), so no two Clusters
    /// ever get the same certificate, key or password from the memo.
    async fn render_chart(
        &self,
        helm: &Helm,
        cluster: &ClusterConfig,
        dir: &Path,
        chart: &Chart,
        template: Option<&ValuesTemplate>,
        stage: Option<&str>,
    ) -> Result<ChartRender, Vec<Error>> {
        let (values_file, warnings) = match template.map(|t| t.render(cluster, &self.template_options)).transpose() {
            Ok(Some(v)) => (Some(v.values), v.warnings),
            Ok(None) => (None, Vec::new()),
            Err(e) => return Err(vec![e]),
        };
        let mut args: Vec<OsString> = vec![
            "--include-crds".into(),
            "--kube-version".into(),
            self.metadata.kubernetes.clone().into(),
            ADDON_RELEASE.into(),
            chart.path.clone().into(),
            "--namespace".into(),
            ADDON_NAMESPACE.into(),
        ];
        let stage_name = stage.unwrap_or(ADDON_RELEASE);
        let parse = |text: &str| {
            let mut objects = objects_of(text, &chart.name, stage_name, ADDON_NAMESPACE).map_err(|e| e.0)?;
            if stage.is_none() {
                objects.iter_mut().for_each(|o| o.stage = None);
            }
            Ok::<_, Vec<Error>>(objects)
        };
        // The values file's path differs per cluster, its content decides the output.
        let shared = self.memo_key(&args, Some(values_file.as_deref().unwrap_or_default()));
        let own = shared.with(cluster_identity(cluster).as_bytes());
        let recalled = match helm.recall(&self.render_group, &shared) {
            Some(text) => match generated_of_marker(&text) {
                None => Some((text, Vec::new())),
                Some(generated) => helm.recall(&self.render_group, &own).map(|text| (text, generated)),
            },
            None => None,
        };
        if let Some((text, generated)) = recalled {
            return Ok(ChartRender { objects: parse(&text)?, warnings, generated, stand_ins: false });
        }
        let twice = self.chart_may_generate(&chart.path) || values_file.as_deref().is_some_and(names_a_generator);
        if twice && helm.renders_stand_ins() {
            // No real render of it is kept: one probe (no key generated), to be checked against
            // what the Cluster's ClusterSync recorded (`Helm::with_stand_ins`).
            if let Some(text) = helm.recall_stand_in(&self.render_group, &own) {
                return Ok(ChartRender { objects: parse(&text)?, warnings, generated: Vec::new(), stand_ins: true });
            }
        }
        if let Some(values) = &values_file {
            let path = dir.join(format!("{stage_name}.yaml"));
            let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, values));
            if let Err(e) = written {
                return Err(vec![Error::WriteValues { path, source: Arc::new(e) }]);
            }
            args.push("-f".into());
            args.push(path.into());
        }
        let failed = |source| vec![Error::Helm { chart: chart.name.clone(), source }];
        let group = &self.render_group;
        if twice && helm.renders_stand_ins() {
            // A probe the chart cannot run (it reads a generated key back) is rendered for real below.
            if let Some(Ok(text)) = helm.probe_in(group, &chart.name, &args).await {
                let text: Arc<str> = text.into();
                let objects = parse(&text)?;
                helm.remember_stand_in(group, &own, &text);
                return Ok(ChartRender { objects, warnings, generated: Vec::new(), stand_ins: true });
            }
        }
        let (first, second) = if twice && helm.probes() {
            // The real render and a probe (no key generation): what differs is generated. A probe
            // that fails where the real render does not (a template that reads a generated key
            // back) is told by a second real render instead.
            let (first, probe) = tokio::join!(helm.template_in(group, &chart.name, &args), helm.probe_in(group, &chart.name, &args));
            let first = first.map_err(failed)?;
            let second = match probe {
                Some(Ok(probe)) => probe,
                _ => helm.template_in(group, &chart.name, &args).await.map_err(failed)?,
            };
            (first.into(), Some(second))
        } else if twice {
            let (first, second) = tokio::join!(helm.template_in(group, &chart.name, &args), helm.template_in(group, &chart.name, &args));
            (first.map_err(failed)?.into(), Some(second.map_err(failed)?))
        } else {
            (Arc::<str>::from(helm.template_in(&self.render_group, &chart.name, &args).await.map_err(failed)?), None)
        };
        let objects = parse(&first)?;
        let generated = match second {
            Some(second) if *first != *second => match differing_documents(&first, &second) {
                // Only the documents that differ are parsed again (most of a chart is the same).
                Some((a, b)) => generated_between(&parse(&a)?, &parse(&b)?),
                None => generated_between(&objects, &parse(&second)?),
            },
            _ => Vec::new(),
        };
        if generated.is_empty() {
            helm.remember(&self.render_group, &shared, &first);
        } else {
            helm.remember(&self.render_group, &shared, &marker_of(&generated));
            helm.remember(&self.render_group, &own, &first);
        }
        Ok(ChartRender { objects, warnings, generated, stand_ins: false })
    }
}

impl Layout {
    /// [`may_generate`] of the chart at `path`, looked at once per release.
    fn chart_may_generate(&self, path: &Path) -> bool {
        if let Some(known) = self.may_generate.lock().ok().and_then(|m| m.get(path).copied()) {
            return known;
        }
        let found = may_generate(path);
        if let Ok(mut m) = self.may_generate.lock() {
            m.insert(path.to_owned(), found);
        }
        found
    }
}

/// The template functions whose output differs from one render to the next (Masterminds sprig
/// as helm has it: key and certificate generation, random strings and numbers, UUIDs, the
/// time, salted hashes, random IVs). A chart that names none of them (in any file: `tpl` renders
/// values too) renders the same twice, so it is rendered once. Matched as whole words: a word
/// that merely is one (a comment saying "now") costs a second render, never a missed value.
const GENERATORS: [&str; 20] = [
    "genCA",
    "genCAWithKey",
    "genPrivateKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "randAlphaNum",
    "randAlpha",
    "randNumeric",
    "randAscii",
    "randBytes",
    "randInt",
    "uuidv4",
    "shuffle",
    "now",
    "ago",
    "htpasswd",
    "bcrypt",
    "encryptAES",
];

/// Bytes of a chart's files read to tell whether it may generate; past it, it is assumed to.
const GENERATOR_SCAN_BYTES: u64 = 64 * 1024 * 1024;

fn names_a_generator(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|word| GENERATORS.contains(&word))
}

/// Whether the chart at `path` may generate values at render time: any of its files (its
/// subcharts' too) names one of [`GENERATORS`], or it cannot be told (a packed chart or
/// subchart, an unreadable file, more than [`GENERATOR_SCAN_BYTES`]).
fn may_generate(path: &Path) -> bool {
    if !path.is_dir() {
        return true;
    }
    let mut budget = GENERATOR_SCAN_BYTES;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { return true };
        for e in entries {
            let Ok(e) = e else { return true };
            let Ok(kind) = e.file_type() else { return true };
            let p = e.path();
            if kind.is_dir() {
                dirs.push(p);
                continue;
            }
            if p.extension().is_some_and(|x| x == "tgz" || x == "gz" || x == "tar") {
                return true;
            }
            let Ok(meta) = e.metadata() else { return true };
            if meta.len() > budget {
                return true;
            }
            budget -= meta.len();
            match std::fs::read(&p) {
                Ok(bytes) if names_a_generator(&String::from_utf8_lossy(&bytes)) => return true,
                Ok(_) => {}
                Err(_) => return true,
            }
        }
    }
    false
}

/// One addon chart rendered for one Cluster.
struct ChartRender {
    objects: Vec<Object>,
    warnings: Vec<Warning>,
    generated: Vec<String>,
    stand_ins: bool,
}

/// What tells one Cluster's render from another's in the memo: namespace, name and (when the
/// Cluster object is known) its uid, so a Cluster deleted and made again gets values of its own.
fn cluster_identity(cluster: &ClusterConfig) -> String {
    let uid = cluster.objects.cluster.as_ref().and_then(|c| c.pointer("/metadata/uid")).and_then(serde_json::Value::as_str);
    format!("{}/{}/{}", cluster.namespace, cluster.name, uid.unwrap_or_default())
}

/// The first line of a memo entry that holds a generating chart's pointers instead of a render.
const GENERATING: &str = "# stacksync: this chart generates values; renders are per Cluster\n";

/// The memo entry recording that a render generates `generated` (one line each after the mark).
fn marker_of(generated: &[String]) -> Arc<str> {
    let mut text = GENERATING.to_owned();
    for line in generated {
        text.push_str("# ");
        text.push_str(line);
        text.push('\n');
    }
    text.into()
}

/// The generated fields a memo entry records, when it is such a mark (helm's output never
/// starts with it: helm starts every document with `---`).
fn generated_of_marker(text: &str) -> Option<Vec<String>> {
    let rest = text.strip_prefix(GENERATING)?;
    Some(rest.lines().filter_map(|l| l.strip_prefix("# ")).map(str::to_owned).collect())
}

/// The documents of two renders of the same chart and inputs that differ, each side as one
/// text: two renders print the same documents in the same order, each with its `# Source:`
/// header, so a document whose text is the same in both holds nothing generated. `None` when
/// the two do not line up document by document (a template that prints a random number of
/// documents): then every document is compared.
fn differing_documents(first: &str, second: &str) -> Option<(String, String)> {
    let (a, b) = (kubeyaml::split(first).ok()?, kubeyaml::split(second).ok()?);
    if a.len() != b.len() {
        return None;
    }
    let (mut left, mut right) = (String::new(), String::new());
    for ((_, x), (_, y)) in a.iter().zip(&b) {
        if x != y {
            for (out, doc) in [(&mut left, x), (&mut right, y)] {
                out.push_str("---\n");
                out.push_str(doc);
                if !doc.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
    }
    Some((left, right))
}

/// The `group|kind|namespace|name|pointer` lines of the fields that differ between two renders
/// of the same chart and inputs (objects matched by identity; one only in either is not a
/// field, and is left alone).
fn generated_between(first: &[Object], second: &[Object]) -> Vec<String> {
    let key = |o: &Object| format!("{}|{}|{}|{}", o.group(), o.kind, o.namespace.as_deref().unwrap_or(ADDON_NAMESPACE), o.name);
    let again: BTreeMap<String, &Object> = second.iter().map(|o| (key(o), o)).collect();
    let mut out = Vec::new();
    for o in first {
        let k = key(o);
        if let Some(other) = again.get(&k) {
            out.extend(applier::ssa::generated_fields(&o.body, &other.body).into_iter().map(|p| format!("{k}|{p}")));
        }
    }
    out
}

/// Splits helm's output into objects, each remembering its chart, stage and template file.
/// `namespace` is the one helm rendered for: an object without one lands there, so it is the same
/// object as one that names it.
fn objects_of(text: &str, chart: &str, stage: &str, namespace: &str) -> Result<Vec<Object>, Errors> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    // helm writes `---\n# Source: <file>` before each template's output, and a template that
    // starts with (or holds more) `---` gives documents without a header of their own: they
    // belong to the last `# Source:` seen.
    let mut source = chart.to_owned();
    let docs = kubeyaml::split(text).map_err(|source| Errors(vec![Error::Split { file: chart.to_owned(), source }]))?;
    for (line, doc) in docs {
        // Only the comment lines a document starts with: a `# Source:` inside a block scalar is data.
        let header = doc.lines().map(str::trim).take_while(|l| l.is_empty() || l.starts_with('#'));
        if let Some(s) = header.filter_map(|l| l.strip_prefix("# Source: ")).next() {
            s.clone_into(&mut source);
        }
        match super::parse_object(&source, Some(chart), line, doc) {
            Ok(Some(mut o)) => {
                o.chart = Some(chart.to_owned());
                o.stage = Some(stage.to_owned());
                objects.push(o);
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let mut seen: BTreeMap<ObjectKey<'_>, &str> = BTreeMap::new();
    for o in &objects {
        // A kind is either namespaced or not, so defaulting the namespace never merges a
        // cluster-scoped object with a namespaced one.
        let ns = Some(o.namespace.as_deref().unwrap_or(namespace));
        if let Some(first) = seen.insert((o.group(), o.kind.as_str(), ns, o.name.as_str()), &o.file) {
            errors.push(Error::Object {
                file: o.file.clone(),
                line: o.line,
                problem: ObjectProblem::DefinedTwice { object: o.to_string(), also: format!("in {first}") },
            });
        }
    }
    if errors.is_empty() { Ok(objects) } else { Err(Errors(errors)) }
}

/// `<name>/` or `<name>.tgz` in `root`. With `must_be_chart`, a directory counts only when it is a
/// chart (`Chart.yaml`) or, failing a `.tgz`, an unpacked helm package whose one directory is
/// (GitHub sources unpack every `.tgz` asset beside it).
fn find_chart(root: &Path, name: &str, prefix: &str, must_be_chart: bool) -> Option<Chart> {
    let dir = root.join(name);
    if dir.is_dir() && (!must_be_chart || dir.join("Chart.yaml").is_file()) {
        return Some(Chart { name: format!("{prefix}{name}"), path: dir });
    }
    let tgz = root.join(format!("{name}.tgz"));
    if tgz.is_file() {
        return Some(Chart { name: format!("{prefix}{name}.tgz"), path: tgz });
    }
    let subdirs: Vec<PathBuf> = std::fs::read_dir(&dir).ok()?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    match subdirs.as_slice() {
        [only] if only.join("Chart.yaml").is_file() => {
            let sub = only.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Some(Chart { name: format!("{prefix}{name}/{sub}"), path: only.clone() })
        }
        _ => None,
    }
}

/// Fails on a link entry in a staged addon archive. The safe unpacker skips links (with a
/// warning), which would leave a stage chart without a file and helm rendering it anyway; the
/// operator refuses such an archive ("unsupported type"), and so does stacksync.
fn refuse_links(archive: &Path) -> Result<(), ArchiveError> {
    use std::io::Read;
    let open = || std::fs::File::open(archive).map_err(|e| ArchiveError::Open(Arc::new(e)));
    let mut magic = [0u8; 2];
    let gz = open()?.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let reader: Box<dyn Read> = if gz { Box::new(flate2::read::GzDecoder::new(open()?)) } else { Box::new(open()?) };
    let mut tar = tar::Archive::new(reader);
    // Unreadable archives are left to the unpacker, which names the problem.
    let Ok(entries) = tar.entries() else { return Ok(()) };
    for entry in entries {
        let Ok(entry) = entry else { return Ok(()) };
        if matches!(entry.header().entry_type(), tar::EntryType::Symlink | tar::EntryType::Link) {
            return Err(ArchiveError::Link { entry: String::from_utf8_lossy(&entry.path_bytes()).into_owned() });
        }
    }
    Ok(())
}

fn read(dir: &Path, name: &str) -> Result<String, ReadError> {
    read_optional(dir, name)?.ok_or(ReadError::Missing)
}

/// Reads and parses an optional values template (`overwrite.yaml`, `cluster-addon-values.yaml`);
/// `file` (release-relative) names it in errors, which are collected.
fn optional_template(dir: &Path, name: &str, file: &str, errors: &mut Vec<Error>) -> Option<ValuesTemplate> {
    match read_optional(dir, name) {
        Ok(Some(text)) => ValuesTemplate::parse(file, &text).map_err(|e| errors.push(e)).ok(),
        Ok(None) => None,
        Err(source) => {
            errors.push(Error::ReadFile { file: file.to_owned(), source });
            None
        }
    }
}

fn read_optional(dir: &Path, name: &str) -> Result<Option<String>, ReadError> {
    let path = dir.join(name);
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::io(e)),
        Ok(m) if m.len() > super::MAX_FILE_BYTES => return Err(ReadError::TooLarge { limit: super::MAX_FILE_BYTES }),
        Ok(_) => {}
    }
    std::fs::read_to_string(&path).map(Some).map_err(ReadError::io)
}

/// What is wrong with a `clusteraddon.yaml`; `at` is `file:line:col`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AddonConfigError {
    #[error("line {}: invalid YAML: {}", .0.mark.line, .0.message)]
    Yaml(#[source] kubeyaml::SyntaxError),
    #[error("the file is empty")]
    Empty,
    #[error("expected a mapping")]
    NotAMapping,
    #[error("missing `addonStages`")]
    NoAddonStages,
    #[error("{at}: `addonStages` must map hooks to stage lists")]
    StagesNotAMapping { at: String },
    #[error("{at}: `addonStages.{hook}` must be a list")]
    HookNotAList { at: String, hook: String },
    #[error("{at}: each stage needs a `name` (a chart directory)")]
    StageName { at: String },
    #[error("{at}: stage `{stage}`: action must be `apply` or `delete`, found {found:?}")]
    Action { at: String, stage: String, found: Option<String> },
    /// `what` names the stage and the condition (`stage \`cni\` of <hook>: waitForPreCondition`).
    #[error("{at}: {what} must be a mapping with `objects` and `conditions`")]
    WaitNotAMapping { at: String, what: String },
    #[error("{at}: {what}.objects must be a list")]
    WaitObjectsNotAList { at: String, what: String },
    #[error("{at}: {what}.objects[{index}]: missing `{field}`")]
    WaitObjectField { at: String, what: String, index: usize, field: &'static str },
    #[error("{at}: {what}: `objects` are listed but `conditions` (a CEL expression) is missing")]
    WaitConditionsMissing { at: String, what: String },
    #[error("{at}: {what}: {source}")]
    WaitConditions {
        at: String,
        what: String,
        #[source]
        source: super::cel::Error,
    },
    #[error("no `{INSTALL_HOOK}` stages: stacksync installs a cluster's addons from that hook")]
    NoInstallHook,
}

/// What is wrong with a staged cluster-addon archive before it is unpacked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot open: {0}")]
    Open(#[source] Arc<std::io::Error>),
    #[error("entry {entry:?} is a link; a cluster-addon archive must hold plain files (the operator refuses links too)")]
    Link { entry: String },
}

impl ArchiveError {
    /// Opening it is I/O on the cache volume; a link stays a link.
    pub fn is_transient(&self) -> bool {
        matches!(self, ArchiveError::Open(_))
    }
}

/// Reads `clusteraddon.yaml`: `addonStages: {<hook>: [{name, action}]}`, hooks in file order.
///
/// # Errors
/// Invalid YAML, a malformed hook, stage or wait condition, no install hook.
pub fn parse_addon_config(file: &str, text: &str) -> Result<Vec<(String, Vec<StageRef>)>, AddonConfigError> {
    let at = |n: &Node| format!("{file}:{}:{}", n.mark.line, n.mark.col);
    let doc = kubeyaml::parse(text).map_err(AddonConfigError::Yaml)?;
    for w in &doc.warnings {
        tracing::warn!(file, line = w.line, "{}", w.message);
    }
    let root = doc.root.ok_or(AddonConfigError::Empty)?;
    if !matches!(root.value, Value::Map(_)) {
        return Err(AddonConfigError::NotAMapping);
    }
    let stages = root.get("addonStages").ok_or(AddonConfigError::NoAddonStages)?;
    let Value::Map(hooks) = &stages.value else { return Err(AddonConfigError::StagesNotAMapping { at: at(stages) }) };
    let mut out = Vec::new();
    for (hook, list) in hooks {
        let hook_name = hook.scalar_text().unwrap_or_default().to_owned();
        let Value::Seq(items) = &list.value else { return Err(AddonConfigError::HookNotAList { at: at(list), hook: hook_name }) };
        let mut refs = Vec::new();
        for item in items {
            let field = |k: &str| item.get(k).and_then(Node::scalar_text);
            let name = field("name").filter(|n| is_stage_name(n));
            let Some(name) = name else { return Err(AddonConfigError::StageName { at: at(item) }) };
            let action = match field("action") {
                Some("apply") => Action::Apply,
                Some("delete") => Action::Delete,
                other => {
                    return Err(AddonConfigError::Action { at: at(item), stage: name.to_owned(), found: other.map(str::to_owned) });
                }
            };
            let what = format!("stage `{name}` of {hook_name}");
            let pre =
                item.get("waitForPreCondition").map(|n| wait_for(n, &format!("{what}: waitForPreCondition"), &at)).transpose()?.flatten();
            let post =
                item.get("waitForPostCondition").map(|n| wait_for(n, &format!("{what}: waitForPostCondition"), &at)).transpose()?.flatten();
            refs.push(StageRef { name: name.to_owned(), action, pre, post });
        }
        out.push((hook_name, refs));
    }
    if !out.iter().any(|(h, _)| h == INSTALL_HOOK) {
        return Err(AddonConfigError::NoInstallHook);
    }
    Ok(out)
}

/// A stage's wait: `{objects: [{key, apiVersion, kind, name, namespace}], conditions: <CEL>}`.
/// Empty (no objects, no conditions) is no wait, as for the operator. The expression must
/// compile and read only the listed keys.
fn wait_for(node: &Node, what: &str, at: &dyn Fn(&Node) -> String) -> Result<Option<WaitFor>, AddonConfigError> {
    if node.is_null() {
        return Ok(None);
    }
    if !matches!(node.value, Value::Map(_)) {
        return Err(AddonConfigError::WaitNotAMapping { at: at(node), what: what.to_owned() });
    }
    let mut objects = Vec::new();
    if let Some(list) = node.get("objects") {
        let items = match &list.value {
            Value::Seq(items) => items.as_slice(),
            _ if list.is_null() => &[],
            _ => return Err(AddonConfigError::WaitObjectsNotAList { at: at(list), what: what.to_owned() }),
        };
        for (i, item) in items.iter().enumerate() {
            let field = |k: &str| item.get(k).and_then(Node::scalar_text).unwrap_or_default().to_owned();
            let o = WaitObject {
                key: field("key"),
                api_version: field("apiVersion"),
                kind: field("kind"),
                name: field("name"),
                namespace: field("namespace"),
            };
            for (f, v) in [("key", &o.key), ("apiVersion", &o.api_version), ("kind", &o.kind), ("name", &o.name)] {
                if v.is_empty() {
                    return Err(AddonConfigError::WaitObjectField { at: at(item), what: what.to_owned(), index: i, field: f });
                }
            }
            objects.push(o);
        }
    }
    let conditions = node.get("conditions").and_then(Node::scalar_text).unwrap_or_default().trim().to_owned();
    if conditions.is_empty() {
        if objects.is_empty() {
            return Ok(None);
        }
        return Err(AddonConfigError::WaitConditionsMissing { at: at(node), what: what.to_owned() });
    }
    let keys: Vec<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    super::cel::check(&conditions, &keys).map_err(|source| AddonConfigError::WaitConditions {
        at: at(node),
        what: what.to_owned(),
        source,
    })?;
    Ok(Some(WaitFor { objects, conditions }))
}

/// Stage names are directory names inside the addon package.
fn is_stage_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 63 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') && !n.starts_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_documents_that_differ_are_compared_again() {
        let doc = |source: &str, body: &str| format!("---\n# Source: c/templates/{source}\n{body}\n");
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\ndata:\n  a: b";
        let secret = |v: &str| format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata:\n  key: {v}");
        let first = format!("{}{}", doc("cm.yaml", cm), doc("s.yaml", &secret("AAA")));
        let second = format!("{}{}", doc("cm.yaml", cm), doc("s.yaml", &secret("BBB")));
        let (a, b) = differing_documents(&first, &second).expect("they line up");
        assert!(!a.contains("ConfigMap") && !b.contains("ConfigMap"), "{a}");
        let parse = |t: &str| objects_of(t, "c", "addons", ADDON_NAMESPACE).expect("parse");
        let found = generated_between(&parse(&a), &parse(&b));
        assert_eq!(found, generated_between(&parse(&first), &parse(&second)));
        assert_eq!(found, vec![format!("|Secret|{ADDON_NAMESPACE}|s|/data/key")]);
        // A render that prints another number of documents is compared whole.
        assert_eq!(differing_documents(&first, &doc("cm.yaml", cm)), None);
    }

    #[test]
    fn addon_config_keeps_hook_and_stage_order() {
        let text = "apiVersion: clusteraddonconfig.x-k8s.io/v1alpha1\naddonStages:\n  AfterControlPlaneInitialized:\n    - name: cni\n      action: apply\n    - name: old-csi\n      action: delete\n    - name: metrics\n      action: apply\n  BeforeClusterUpgrade:\n    - {name: cni, action: apply}\n";
        let hooks = parse_addon_config("clusteraddon.yaml", text).unwrap();
        assert_eq!(hooks[0].0, INSTALL_HOOK);
        let names: Vec<(&str, Action)> = hooks[0].1.iter().map(|s| (s.name.as_str(), s.action)).collect();
        assert_eq!(names, [("cni", Action::Apply), ("old-csi", Action::Delete), ("metrics", Action::Apply)]);
        let e = parse_addon_config("c.yaml", "addonStages:\n  X:\n    - {name: a, action: upsert}\n").unwrap_err().to_string();
        assert!(e.starts_with("c.yaml:3:7: stage `a`: action must be"), "{e}");
        let e = parse_addon_config("c.yaml", "addonStages:\n  BeforeClusterUpgrade: []\n").unwrap_err().to_string();
        assert!(e.contains("no `AfterControlPlaneInitialized` stages"), "{e}");
    }

    #[test]
    fn stage_waits_are_read_and_a_bad_expression_names_the_stage() {
        let text = "addonStages:\n  AfterControlPlaneInitialized:\n    - {name: cni, action: apply}\n  BeforeClusterUpgrade:\n    - name: cni\n      action: apply\n      waitForPreCondition: {}\n      waitForPostCondition:\n        objects:\n          - {key: ds, apiVersion: apps/v1, kind: DaemonSet, name: cilium, namespace: kube-system}\n        conditions: ds.status.numberReady == ds.status.desiredNumberScheduled\n";
        let hooks = parse_addon_config("clusteraddon.yaml", text).unwrap();
        let cni = &hooks[1].1[0];
        assert_eq!(cni.pre, None);
        let post = cni.post.as_ref().expect("post condition");
        assert_eq!((post.objects[0].key.as_str(), post.objects[0].to_string()), ("ds", "DaemonSet/kube-system/cilium".to_owned()));
        let bad = text.replace("ds.status.numberReady ==", "ds.status.numberReady == ==");
        let e = parse_addon_config("clusteraddon.yaml", &bad).unwrap_err().to_string();
        assert!(e.starts_with("clusteraddon.yaml:9:9: stage `cni` of BeforeClusterUpgrade: waitForPostCondition: CEL expression"), "{e}");
        let unknown = text.replace("ds.status.numberReady ==", "cm.status.numberReady ==");
        let e = parse_addon_config("clusteraddon.yaml", &unknown).unwrap_err().to_string();
        assert!(e.contains("undeclared reference to `cm`"), "{e}");
    }

    #[test]
    fn helm_output_becomes_objects_with_origin() {
        let out = "---\n# Source: cc/templates/a.yaml\napiVersion: cluster.x-k8s.io/v1beta1\nkind: ClusterClass\nmetadata:\n  name: x-v1\n---\n# Source: cc/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n";
        let objs = objects_of(out, "cc-v1.tgz", "cluster-class", "team-a").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].file, "cc/templates/a.yaml");
        assert_eq!((objs[1].chart.as_deref(), objs[1].stage.as_deref()), (Some("cc-v1.tgz"), Some("cluster-class")));
        let dup = format!("{out}---\n# Source: cc/templates/c.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n");
        let e = objects_of(&dup, "cc", "s", "team-a").unwrap_err().to_string();
        assert!(e.contains("ConfigMap/b is defined twice (also in cc/templates/b.yaml)"), "{e}");
    }

    #[test]
    fn a_template_starting_with_a_separator_keeps_its_source_file() {
        // What helm 4 prints for a template `---\n---\n<ConfigMap>\n---\n# trailing\n`.
        let out = "---\n# Source: c/templates/multi.yaml\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# Source: c/templates/comment.yaml\n# only a comment\n---\n# Source: c/templates/multi.yaml\n# trailing\n---\n# Source: c/templates/b.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n";
        let objs = objects_of(out, "c", "s", "ns").unwrap();
        let files: Vec<(&str, &str)> = objs.iter().map(|o| (o.kind.as_str(), o.file.as_str())).collect();
        assert_eq!(files, [("ConfigMap", "c/templates/multi.yaml"), ("Secret", "c/templates/b.yaml")]);
        let data = "---\n# Source: c/templates/d.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\ndata:\n  s: |\n    # Source: not/a/header.yaml\n";
        assert_eq!(objects_of(data, "c", "s", "ns").unwrap()[0].file, "c/templates/d.yaml");
    }

    #[test]
    fn helm_output_with_repeated_keys_renders_and_a_refused_text_names_template_and_line() {
        // Published SCS charts: a ClusterRole repeating `metadata.name`, a description continued
        // at column 0. The old reader refused both ("duplicate mapping key", "invalid indentation").
        let out = "---\n# Source: a/templates/role.yaml\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\n  name: r\n---\n# Source: a/templates/crd.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: w.example.com\nspec:\n  d:\n    description: \"one\ntwo\"\n";
        let objs = objects_of(out, "a", "s", "kube-system").unwrap();
        assert_eq!(objs[1].body["spec"]["d"]["description"], "one two");
        let bad = "---\n# Source: a/templates/ok.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n---\n# Source: a/templates/bad.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: bad\n";
        let e = objects_of(bad, "a-v1.tgz", "s", "ns").unwrap_err().to_string();
        assert!(e.starts_with("a/templates/bad.yaml:12: invalid YAML"), "{e}");
        let e = objects_of("---\nkind: A\n--- junk\n", "a-v1.tgz", "s", "ns").unwrap_err().to_string();
        assert!(e.starts_with("a-v1.tgz:3: invalid document separator"), "{e}");
    }

    #[test]
    fn an_object_without_a_namespace_duplicates_one_in_the_release_namespace() {
        let out = "---\n# Source: a/templates/a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n---\n# Source: a/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: kube-system\n";
        let e = objects_of(out, "a", "s", "kube-system").unwrap_err().to_string();
        assert!(e.contains("ConfigMap/kube-system/b is defined twice (also in a/templates/a.yaml)"), "{e}");
        assert_eq!(objects_of(out, "a", "s", "other").map(|o| o.len()).ok(), Some(2));
    }

    #[test]
    fn a_generating_render_is_remembered_as_its_fields_and_a_chart_naming_no_generator_renders_once() {
        let lines = vec!["|Secret|kube-system|ca|/data/tls.crt".to_owned(), "apps|Deployment|kube-system|d|/x".to_owned()];
        let marker = marker_of(&lines);
        assert_eq!(generated_of_marker(&marker), Some(lines));
        assert_eq!(generated_of_marker("---\n# Source: a/templates/b.yaml\n"), None, "helm's output is no mark");

        let dir = tempfile::tempdir().expect("tempdir");
        let chart = dir.path().join("chart");
        std::fs::create_dir_all(chart.join("templates")).expect("dirs");
        std::fs::write(chart.join("Chart.yaml"), "apiVersion: v2\nname: c\nversion: 1.0.0\n").expect("chart");
        std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap\ndata: {a: {{ .Values.a | quote }}} # unknown, brand\n")
            .expect("t");
        assert!(!may_generate(&chart), "words that contain a generator's name are not one");
        // `tpl` renders values too: a generator named in values.yaml counts.
        std::fs::write(chart.join("values.yaml"), "password: '{{ randAlphaNum 8 }}'\n").expect("values");
        assert!(may_generate(&chart));
        std::fs::remove_file(chart.join("values.yaml")).expect("rm");
        std::fs::create_dir_all(chart.join("charts")).expect("charts");
        std::fs::write(chart.join("charts/sub-1.0.0.tgz"), b"packed").expect("tgz");
        assert!(may_generate(&chart), "a packed subchart cannot be told");
        assert!(may_generate(&dir.path().join("chart.tgz")), "nor can a packed chart");
    }
}
