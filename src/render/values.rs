//! Values for a cluster's addon charts: the release's values template (`cluster-addon-values.yaml`
//! or a stage's `overwrite.yaml`) executed with the cluster's objects, as the SCS
//! cluster-stack-operator does. Pure: the same template and objects give the same bytes.

use gotemplate::{self, Template, Warning};
use serde_json::{Map, Value, json};

use super::Error;
use crate::model::cluster::ClusterConfig;

/// The Cluster API version of the default `.Cluster` object.
pub const CLUSTER_API_VERSION: &str = "cluster.x-k8s.io/v1beta1";

/// How values templates are executed: the config's `templates:` section.
pub type TemplateOptions = crate::config::TemplatesConfig;

/// The values for one cluster, and what Go would have printed silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedValues {
    /// The helm values file's text.
    pub values: String,
    /// Every `<no value>` / `<nil>` printed (file, line, path). Empty in strict mode.
    pub warnings: Vec<Warning>,
}

/// A values template of a release, parsed once and executed per cluster.
#[derive(Debug, Clone)]
pub struct ValuesTemplate {
    /// Release-relative file name, for messages.
    pub file: String,
    template: Template,
}

impl ValuesTemplate {
    /// # Errors
    /// A syntax error or an unsupported function, with its line.
    pub fn parse(file: &str, text: &str) -> Result<ValuesTemplate, Error> {
        Ok(ValuesTemplate { file: file.to_owned(), template: Template::parse(file, text)? })
    }

    /// The helm values for `cluster`: the template's output, or, when that output is a mapping
    /// with a string `values:` field, that string. A missing key prints `<no value>` as in the
    /// operator; each such print is returned as a warning (and logged), or is an error when
    /// `options.strict` is set.
    ///
    /// # Errors
    /// Template execution errors (failing functions, limits), output that is not YAML, and in
    /// strict mode the first `<no value>` / `<nil>` printed.
    pub fn render(&self, cluster: &ClusterConfig, options: &TemplateOptions) -> Result<RenderedValues, Error> {
        // The operator names the template `cluster-addon-values-<cluster>` (what `{{ template }}`
        // calls the whole file by); messages still name the file.
        let name = format!("cluster-addon-values-{}", cluster.name);
        let out = self.template.execute_as(&name, &template_data(cluster), gotemplate::Limits::default())?;
        if options.strict
            && let Some(w) = out.warnings.first()
        {
            return Err(Error::StrictTemplate { warning: w.clone(), cluster: format!("{}/{}", cluster.namespace, cluster.name) });
        }
        for w in &out.warnings {
            tracing::warn!(cluster = %format!("{}/{}", cluster.namespace, cluster.name), "values template: {w}");
        }
        let text = out.text;
        let parsed = first_document(&text, None).map_err(|e| self.not_yaml("the rendered template", e, &text))?;
        let values = match parsed.get("values") {
            Some(Value::String(inner)) => inner.clone(),
            _ => text,
        };
        let as_yaml = first_document(&values, Some(&self.file)).map_err(|e| self.not_yaml("the rendered `values`", e, &values))?;
        if !matches!(as_yaml, Value::Object(_) | Value::Null) {
            return Err(Error::ValuesNotMapping { file: self.file.clone(), excerpt: excerpt(&values) });
        }
        Ok(RenderedValues { values, warnings: out.warnings })
    }

    fn not_yaml(&self, what: &'static str, source: kubeyaml::SyntaxError, text: &str) -> Error {
        let line = text.lines().nth(source.mark.line.saturating_sub(1)).unwrap_or_default();
        Error::ValuesNotYaml { file: self.file.clone(), what, text: line.trim().to_owned(), source }
    }
}

/// The first YAML document of `text` (null when there is none), read as helm reads a values file
/// ([`kubeyaml`]). The operator and helm (`-f`) read only the first document of a
/// multi-document text, so a trailing `---` or a second document changes nothing.
/// Repeated keys are logged when `file` names the template (helm keeps the last value).
fn first_document(text: &str, file: Option<&str>) -> Result<Value, kubeyaml::SyntaxError> {
    let doc = kubeyaml::parse(text)?;
    for w in doc.warnings.iter().filter(|_| file.is_some()) {
        tracing::warn!(template = file.unwrap_or_default(), line = w.line, "rendered values: {}", w.message);
    }
    doc.root.map_or(Ok(Value::Null), |r| r.to_json())
}

/// `.Cluster`, `.ControlPlane` and `.InfraCluster` for `cluster`. Objects not configured are left
/// out (a template using them fails), except `.Cluster`, which defaults to a minimal Cluster.
pub fn template_data(cluster: &ClusterConfig) -> Value {
    let mut data = Map::new();
    let mut c = cluster.objects.cluster.clone().unwrap_or_else(|| json!({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster"}));
    if let Value::Object(m) = &mut c {
        // A Cluster read from the API server always has these; a configured one may leave them out.
        m.entry("apiVersion").or_insert_with(|| Value::String(CLUSTER_API_VERSION.to_owned()));
        m.entry("kind").or_insert_with(|| Value::String("Cluster".to_owned()));
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.entry("name").or_insert_with(|| Value::String(cluster.name.clone()));
            meta.entry("namespace").or_insert_with(|| Value::String(cluster.namespace.clone()));
        }
    }
    data.insert("Cluster".into(), c);
    if let Some(cp) = &cluster.objects.control_plane {
        data.insert("ControlPlane".into(), cp.clone());
    }
    if let Some(ic) = &cluster.objects.infra_cluster {
        data.insert("InfraCluster".into(), ic.clone());
    }
    Value::Object(data)
}

fn excerpt(text: &str) -> String {
    let first: String = text.lines().take(3).collect::<Vec<_>>().join(" | ");
    if first.len() > 200 { format!("{}...", &first[..first.char_indices().nth(200).map_or(first.len(), |(i, _)| i)]) } else { first }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cluster::ClusterObjects;

    fn cluster(host: Option<&str>) -> ClusterConfig {
        ClusterConfig {
            name: "alpha".into(),
            namespace: "team-a".into(),
            values: Default::default(),
            objects: ClusterObjects {
                cluster: host.map(|h| json!({"spec": {"controlPlaneEndpoint": {"host": h, "port": 6443}}})),
                ..Default::default()
            },
        }
    }

    fn render(t: &ValuesTemplate, c: &ClusterConfig) -> Result<String, Error> {
        t.render(c, &TemplateOptions::default()).map(|r| r.values)
    }

    #[test]
    fn values_field_is_unwrapped_and_cluster_defaults_apply() {
        let t = ValuesTemplate::parse(
            "cluster-addon-values.yaml",
            "values: |\n  ms:\n    domain: \"{{ .Cluster.spec.controlPlaneEndpoint.host }}\"\n    name: {{ .Cluster.metadata.name }}\n",
        )
        .unwrap();
        assert_eq!(render(&t, &cluster(Some("10.0.0.1"))).unwrap(), "ms:\n  domain: \"10.0.0.1\"\n  name: alpha\n");
        let plain = ValuesTemplate::parse("overwrite.yaml", "ns: {{ .Cluster.metadata.namespace }}\n").unwrap();
        assert_eq!(render(&plain, &cluster(None)).unwrap(), "ns: team-a\n");
    }

    #[test]
    fn a_missing_key_prints_no_value_as_the_operator_does_and_is_a_warning() {
        let t = ValuesTemplate::parse("v.yaml", "values: |\n  a: 1\n  host: {{ .Cluster.spec.controlPlaneEndpoint.host }}\n").unwrap();
        let out = t.render(&cluster(None), &TemplateOptions::default()).unwrap();
        assert_eq!(out.values, "a: 1\nhost: <no value>\n");
        assert_eq!(out.warnings.len(), 1);
        let w = &out.warnings[0];
        assert_eq!((w.file.as_str(), w.line, w.path.as_str(), w.printed), ("v.yaml", 3, ".Cluster.spec", "<no value>"), "{w}");
    }

    #[test]
    fn strict_templates_turn_a_missing_key_into_an_error_naming_file_line_and_path() {
        let t = ValuesTemplate::parse("v.yaml", "values: |\n  a: 1\n  host: {{ .Cluster.spec.controlPlaneEndpoint.host }}\n").unwrap();
        let e = t.render(&cluster(None), &TemplateOptions { strict: true }).unwrap_err().to_string();
        assert!(e.starts_with("v.yaml:3: `.Cluster.spec` would print <no value> (missing or nil in cluster team-a/alpha)"), "{e}");
    }

    #[test]
    fn bad_output_is_an_error() {
        let t = ValuesTemplate::parse("v.yaml", "- {{ .Cluster.metadata.name }}\n").unwrap();
        let e = render(&t, &cluster(None)).unwrap_err().to_string();
        assert!(e.contains("not a YAML mapping"), "{e}");
        let t = ValuesTemplate::parse("v.yaml", "values: |\n  a: [{{ .Cluster.metadata.name }}\n").unwrap();
        let e = render(&t, &cluster(None)).unwrap_err().to_string();
        assert!(e.contains("the rendered `values` is not valid YAML"), "{e}");
    }

    #[test]
    fn a_values_template_with_more_documents_uses_the_first_as_the_operator_does() {
        let t = ValuesTemplate::parse("v.yaml", "---\nvalues: |\n  name: {{ .Cluster.metadata.name }}\n---\nvalues: other\n").unwrap();
        assert_eq!(render(&t, &cluster(None)).unwrap(), "name: alpha\n");
        let t = ValuesTemplate::parse("v.yaml", "name: {{ .Cluster.metadata.name }}\n---\n").unwrap();
        assert_eq!(render(&t, &cluster(None)).unwrap(), "name: alpha\n---\n");
    }

    #[test]
    fn the_whole_template_is_named_as_the_operator_names_it() {
        let t = ValuesTemplate::parse(
            "v.yaml",
            "{{ define \"n\" }}{{ if . }}{{ . }}{{ else }}{{ template \"cluster-addon-values-alpha\" 1 }}{{ end }}{{ end }}a: {{ template \"n\" .missing }}\n",
        )
        .unwrap();
        // The recursive call renders the whole file again with `.` = 1, whose `.missing` fails.
        let e = render(&t, &cluster(None)).unwrap_err().to_string();
        assert!(e.contains("can't evaluate field missing in type int"), "{e}");
    }

    #[test]
    fn a_configured_cluster_without_api_version_and_kind_still_has_them() {
        let t = ValuesTemplate::parse("v.yaml", "k: {{ .Cluster.kind }}\na: {{ .Cluster.apiVersion }}\n").unwrap();
        assert_eq!(render(&t, &cluster(Some("h"))).unwrap(), "k: Cluster\na: cluster.x-k8s.io/v1beta1\n");
    }
}
