//! A Go `text/template` engine for the subset SovereignCloudStack values templates use
//! (`cluster-addon-values.yaml`, `overwrite.yaml`): field access, variables, pipelines,
//! `if` / `else if` / `with` / `range` (with `break` / `continue`), Go's builtins and the sprig
//! functions in [`funcs::SUPPORTED`].
//!
//! Differences from Go, all in the direction of refusing rather than guessing:
//! - an unknown function, `define` / `template` / `block` and any syntax outside the subset are
//!   parse errors naming the file and line;
//! - a missing map key behaves like Go's default (`missingkey=default`, as the SCS
//!   cluster-stack-operator runs it): it is "no value", false in conditions and replaced by
//!   `default`; but *printing* it (Go would write `<no value>`) or passing it to a function that
//!   is not a test is an error naming the field.

mod exec;
pub mod funcs;
mod parse;

use std::fmt;

use serde_json::Value;

/// A template problem at a 1-based line of its file (0 when no line applies).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}

/// A parsed template, ready to execute any number of times.
#[derive(Debug, Clone)]
pub struct Template {
    file: String,
    root: parse::List,
}

impl Template {
    /// Parses `text`, read from `file` (used in error messages).
    ///
    /// # Errors
    /// The first syntax error, unknown function or unsupported construct.
    pub fn parse(file: &str, text: &str) -> Result<Template, Error> {
        Ok(Template { file: file.to_owned(), root: parse::parse(file, text)? })
    }

    /// Executes the template with `data` as `.` and `$`. Pure: the same data gives the same text.
    ///
    /// # Errors
    /// The first execution error (missing field printed, bad function argument, `fail`, ...).
    pub fn execute(&self, data: &Value) -> Result<String, Error> {
        exec::Exec::run(&self.file, &self.root, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data() -> Value {
        json!({
            "Cluster": {
                "metadata": {"name": "alpha", "namespace": "team-a", "labels": {"env": "prod", "tier": "1"}},
                "spec": {
                    "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                    "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16", "10.1.0.0/16"]}},
                    "empty": "",
                    "ha": true,
                    "replicas": 3,
                    "ratio": 1.5,
                    "nothing": null
                }
            }
        })
    }

    fn run(text: &str) -> Result<String, Error> {
        Template::parse("values.yaml", text)?.execute(&data())
    }

    #[test]
    fn renders_the_supported_subset() {
        let table: &[(&str, &str)] = &[
            ("name: {{ .Cluster.metadata.name }}", "name: alpha"),
            (
                "host: \"{{ .Cluster.spec.controlPlaneEndpoint.host }}:{{ .Cluster.spec.controlPlaneEndpoint.port }}\"",
                "host: \"10.0.0.1:6443\"",
            ),
            ("{{ index .Cluster.spec.clusterNetwork.pods.cidrBlocks 0 }}", "192.168.0.0/16"),
            ("{{ index .Cluster.metadata.labels \"env\" }}", "prod"),
            ("{{ .Cluster.metadata.name | quote }}", "\"alpha\""),
            ("{{ .Cluster.spec.missing | default \"x\" }}", "x"),
            ("{{ .Cluster.spec.empty | default \"x\" | upper }}", "X"),
            ("{{ default \"d\" .Cluster.metadata.name }}", "alpha"),
            ("{{ if .Cluster.spec.ha }}ha{{ else }}single{{ end }}", "ha"),
            ("{{ if .Cluster.spec.missing }}a{{ else if eq .Cluster.metadata.name \"alpha\" }}b{{ else }}c{{ end }}", "b"),
            ("{{ with .Cluster.spec.controlPlaneEndpoint }}{{ .host }}{{ end }}", "10.0.0.1"),
            ("{{ with .Cluster.spec.missing }}x{{ else }}none{{ end }}", "none"),
            (
                "{{ range $i, $c := .Cluster.spec.clusterNetwork.pods.cidrBlocks }}{{ $i }}={{ $c }};{{ end }}",
                "0=192.168.0.0/16;1=10.1.0.0/16;",
            ),
            ("{{ range $k, $v := .Cluster.metadata.labels }}{{ $k }}:{{ $v }} {{ end }}", "env:prod tier:1 "),
            ("{{ range .Cluster.spec.missing }}x{{ else }}empty{{ end }}", "empty"),
            ("{{ range .Cluster.spec.clusterNetwork.pods.cidrBlocks }}{{ . }}{{ break }}{{ end }}", "192.168.0.0/16"),
            ("a\n  {{- .Cluster.metadata.name -}}  \nb", "aalphab"),
            ("{{/* a comment */}}x{{- /* trimmed */ -}} y", "xy"),
            ("{{ $n := .Cluster.metadata.name }}{{ $n }}-{{ $.Cluster.metadata.namespace }}", "alpha-team-a"),
            ("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", "2"),
            ("{{ printf \"%s-%d\" .Cluster.metadata.name .Cluster.spec.replicas }}", "alpha-3"),
            ("{{ .Cluster.spec.ratio }} {{ .Cluster.spec.replicas }} {{ .Cluster.spec.ha }}", "1.5 3 true"),
            ("{{ .Cluster.metadata.labels | toYaml | nindent 2 }}", "\n  env: prod\n  tier: \"1\""),
            ("{{ .Cluster.spec.controlPlaneEndpoint | toJson }}", "{\"host\":\"10.0.0.1\",\"port\":6443}"),
            ("{{ (index .Cluster.spec.clusterNetwork.pods.cidrBlocks 1) | trimSuffix \"/16\" }}", "10.1.0.0"),
            ("{{ (.Cluster.spec.controlPlaneEndpoint).host }}", "10.0.0.1"),
            ("{{ and .Cluster.spec.ha .Cluster.metadata.name }} {{ or .Cluster.spec.missing \"fallback\" }}", "alpha fallback"),
            ("{{ len .Cluster.spec.clusterNetwork.pods.cidrBlocks }} {{ not .Cluster.spec.ha }}", "2 false"),
            ("{{ ternary \"y\" \"n\" (gt .Cluster.spec.replicas 2) }}", "y"),
            ("{{ replace \".\" \"-\" .Cluster.spec.controlPlaneEndpoint.host }}", "10-0-0-1"),
            ("{{ hasKey .Cluster.spec \"ha\" }} {{ contains \"lph\" .Cluster.metadata.name }}", "true true"),
            ("{{ .Cluster.metadata.labels }}", "map[env:prod tier:1]"),
            ("{{ join \",\" .Cluster.spec.clusterNetwork.pods.cidrBlocks }}", "192.168.0.0/16,10.1.0.0/16"),
            ("{{ `raw {{ }}` }}", "raw {{ }}"),
        ];
        for (input, want) in table {
            match run(input) {
                Ok(got) => assert_eq!(&got, want, "template: {input}"),
                Err(e) => panic!("template {input}: {e}"),
            }
        }
    }

    #[test]
    fn unsupported_and_missing_are_errors_with_lines() {
        let table: &[(&str, &str)] = &[
            ("a\nb: {{ .Cluster.metadata.name | sha256sum }}", "values.yaml:2: function `sha256sum` is not defined"),
            ("a\nb\nc: {{ frobnicate 1 }}", "values.yaml:3: function `frobnicate` is not defined"),
            ("x\n{{ define \"t\" }}{{ end }}", "values.yaml:2: `define` is not supported"),
            ("x: {{ .Cluster.spec.nope }}", "values.yaml:1: map has no entry for key `.Cluster.spec.nope`"),
            ("\n\nx: {{ .Cluster.spec.nope.deeper | quote }}", "values.yaml:3: `quote`: map has no entry for key `.Cluster.spec.nope`"),
            ("x: {{ .ControlPlane.spec.replicas }}", "values.yaml:1: map has no entry for key `.ControlPlane`"),
            ("x: {{ .Cluster.spec.nothing }}", "values.yaml:1: value is nil"),
            ("x: {{ .Cluster.metadata.name.first }}", "values.yaml:1: can't evaluate field `first` in a string"),
            ("x: {{ index .Cluster.spec.clusterNetwork.pods.cidrBlocks 5 }}", "values.yaml:1: `index`: index out of range: 5"),
            ("{{ if .Cluster }}\nno end", "values.yaml:1: `if` has no matching `{{end}}`"),
            ("{{ end }}", "values.yaml:1: unexpected `{{end}}`"),
            ("x: {{ .Cluster.metadata.name", "values.yaml:1: unclosed action"),
            ("x: {{ required \"set a host\" .Cluster.spec.host }}", "values.yaml:1: set a host"),
            ("x: {{ eq .Cluster.spec.nope \"a\" }}", "values.yaml:1: `eq`: map has no entry for key `.Cluster.spec.nope`"),
            ("x: {{ .Cluster.metadata.name 1 }}", "values.yaml:1: can't give arguments to a field"),
        ];
        for (input, want) in table {
            let err = run(input).expect_err(input).to_string();
            assert!(err.starts_with(want), "template {input:?}\n got: {err}\nwant: {want}");
        }
    }

    #[test]
    fn multi_line_templates_report_the_action_line() {
        let text = "values: |\n  a:\n    name: {{ .Cluster.metadata.name }}\n    host: {{ .Cluster.spec.host }}\n";
        let err = run(text).unwrap_err();
        assert_eq!(err.line, 4, "{err}");
    }
}
