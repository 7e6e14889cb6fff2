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
//!   is not a test is an error naming the field;
//! - where Go would print a type error into the output (`printf "%s"` of a number gives
//!   `%!s(int64=3)`), stacksync fails.
//!
//! Everything it does print is byte-for-byte what Go prints: numbers as `fmt` formats them
//! (`1e+06` for a float million), `toJson` as `encoding/json` writes it, maps in key order.

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
                    "nothing": null,
                    "big": 1e6,
                    "bigger": 1234567.5,
                    "small": 0.00001,
                    "port": 6443.0,
                    "mixed": ["a", null, "b"],
                    "url": "a?b=1&c=<d>"
                }
            }
        })
    }

    /// Runs each template, expecting the output, or (for `Err`) an error starting with the text.
    fn check(table: &[(&str, Result<&str, &str>)]) {
        for (input, want) in table {
            match (run(input), want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "template: {input}"),
                (Err(e), Err(want)) => assert!(e.to_string().starts_with(want), "template {input:?}\n got: {e}\nwant: {want}"),
                (got, want) => panic!("template {input:?}\n got: {got:?}\nwant: {want:?}"),
            }
        }
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

    #[test]
    fn floats_print_as_go_fmt_not_as_rust_display() {
        check(&[
            ("{{ .Cluster.spec.big }}", Ok("1e+06")),
            ("{{ .Cluster.spec.bigger }}", Ok("1.2345675e+06")),
            ("{{ .Cluster.spec.small }}", Ok("1e-05")),
            ("{{ .Cluster.spec.port }} {{ .Cluster.spec.ratio }}", Ok("6443 1.5")),
            ("{{ .Cluster.spec.big | quote }} {{ printf \"%v\" .Cluster.spec.big }}", Ok("\"1e+06\" 1e+06")),
            ("{{ 1e6 }} {{ 100000.0 }} {{ 0.0001 }} {{ -2.5e-7 }}", Ok("1e+06 100000 0.0001 -2.5e-07")),
        ]);
    }

    #[test]
    fn to_json_writes_what_go_encoding_json_writes() {
        check(&[
            ("{{ .Cluster.spec.url | toJson }}", Ok(r#""a?b=1\u0026c=\u003cd\u003e""#)),
            (
                "{{ dict \"p\" .Cluster.spec.port \"b\" .Cluster.spec.big \"s\" .Cluster.spec.small | toJson }}",
                Ok(r#"{"b":1000000,"p":6443,"s":0.00001}"#),
            ),
            ("{{ list 1e21 1e-7 \"\\u2028\" | toJson }}", Ok(r#"[1e+21,1e-7,"\u2028"]"#)),
            ("{{ dict \"p\" .Cluster.spec.port | toYaml }}", Ok("p: 6443")),
        ]);
    }

    #[test]
    fn break_in_the_else_of_a_top_level_range_is_refused_not_truncating() {
        check(&[
            ("{{ range .Cluster.spec.missing }}x{{ else }}{{ break }}{{ end }}after", Err("values.yaml:1: `break` outside of `range`")),
            // Inside an outer range, it breaks the outer one, as in Go.
            ("{{ range $i := list 1 2 }}{{ $i }}{{ range list }}{{ else }}{{ break }}{{ end }}{{ end }}.", Ok("1.")),
        ]);
    }

    #[test]
    fn integer_literals_follow_go_bases() {
        check(&[
            ("{{ 017 }} {{ 0o17 }} {{ 0x1F }} {{ 0b101 }} {{ 1_000 }} {{ -010 }}", Ok("15 15 31 5 1000 -8")),
            ("{{ 08 }}", Err("values.yaml:1: invalid number `08`")),
            ("{{ 9223372036854775808 }}", Err("values.yaml:1: invalid number")),
        ]);
    }

    #[test]
    fn string_literal_escapes_are_go_escapes() {
        check(&[
            (r#"{{ "\u00e9\x41\101\a\v\U0001F600" }}"#, Ok("\u{e9}AA\x07\x0b\u{1F600}")),
            (r#"{{ "it\'s" }}"#, Err("values.yaml:1: unterminated or invalid quoted string")),
            ("{{ `a\r\nb` }}", Ok("a\nb")),
        ]);
    }

    #[test]
    fn trim_markers_trim_only_what_go_calls_space() {
        check(&[("a\u{a0}\n {{- 1 -}} \n\u{a0}b", Ok("a\u{a0}1\u{a0}b"))]);
    }

    #[test]
    fn a_comment_must_open_at_the_delimiter() {
        check(&[("{{/* c */}}a{{- /* c */ -}} b", Ok("ab")), ("x\n{{ /* c */ }}", Err("values.yaml:2: unexpected `/` in action"))]);
    }

    #[test]
    fn sprig_functions_keep_their_go_types() {
        check(&[
            // sprig's join drops nil elements.
            ("{{ join \",\" .Cluster.spec.mixed }}", Ok("a,b")),
            // ternary's condition is a bool, not a truthy value.
            ("{{ ternary \"y\" \"n\" .Cluster.metadata.name }}", Err("values.yaml:1: `ternary`: the condition must be a bool")),
            // toInt64 parses the string as it is.
            ("{{ int \" 3\" }}", Err("values.yaml:1: `int`: ` 3` is not a decimal integer")),
            ("{{ add (int \"3\") 1 }}", Ok("4")),
            // A string parameter takes no number (Go: "wrong type for value").
            ("{{ .Cluster.spec.replicas | upper }}", Err("values.yaml:1: `upper`: expected a string, got a number")),
            ("{{ .Cluster.spec.replicas | toString | upper }} {{ indent 2 \"x\" }}", Ok("3   x")),
            ("{{ indent \"2\" \"x\" }}", Err("values.yaml:1: `indent`: expected an integer")),
            ("{{ indent 1000000000 \"x\" }}", Err("values.yaml:1: `indent`: indent 1000000000 exceeds the output limit")),
            // Go compares ints with ints and floats with floats.
            ("{{ eq .Cluster.spec.replicas 3.0 }}", Err("values.yaml:1: `eq`: incompatible types")),
            ("{{ eq .Cluster.spec.replicas 3 }} {{ lt .Cluster.spec.ratio 2.0 }}", Ok("true true")),
        ]);
    }

    #[test]
    fn printf_s_of_a_non_string_is_refused_not_printed() {
        check(&[
            ("{{ printf \"%s\" .Cluster.spec.replicas }}", Err("values.yaml:1: `printf`: unsupported verb `%s` for a number")),
            ("{{ printf \"%s:%d %v\" .Cluster.metadata.name .Cluster.spec.replicas .Cluster.spec.ha }}", Ok("alpha:3 true")),
        ]);
    }

    #[test]
    fn index_of_a_missing_key_is_nil_as_in_go() {
        check(&[
            ("{{ index .Cluster.metadata.labels \"nope\" | default \"d\" }}", Ok("d")),
            ("{{ index .Cluster.metadata.labels \"nope\" }}", Err("values.yaml:1: value is nil")),
            // Go: "nil pointer evaluating interface {}.x", not a quiet default.
            ("{{ (index .Cluster.metadata.labels \"nope\").x | default \"d\" }}", Err("values.yaml:1: nil pointer evaluating")),
        ]);
    }

    #[test]
    fn maps_range_and_print_in_go_key_order() {
        let mut m = serde_json::Map::new();
        for k in ["b", "a", "_", "B"] {
            m.insert(k.to_owned(), Value::from(k));
        }
        let data = json!({"m": m});
        let t = Template::parse("v.yaml", "{{ range $k, $v := .m }}{{ $k }}{{ end }} {{ .m }}").unwrap();
        assert_eq!(t.execute(&data).unwrap(), "B_ab map[B:B _:_ a:a b:b]");
    }

    #[test]
    fn an_undefined_variable_is_a_parse_error_even_in_a_branch_not_taken() {
        check(&[
            ("x\n{{ if false }}{{ $nope }}{{ end }}", Err("values.yaml:2: undefined variable `$nope`")),
            ("{{ with $x := 1 }}{{ $x }}{{ end }}{{ $x }}", Err("values.yaml:1: undefined variable `$x`")),
            ("{{ range $i, $e := list 1 }}{{ end }}{{ $e }}", Err("values.yaml:1: undefined variable `$e`")),
            ("{{ $x := 1 }}{{ if true }}{{ $y := $x }}{{ $y }}{{ else }}{{ $x }}{{ end }}{{ $x }}", Ok("11")),
            ("{{ $x := 1 }}{{ range list 2 }}{{ $x = . }}{{ end }}{{ $x }}", Ok("2")),
        ]);
    }

    #[test]
    fn range_over_an_integer_is_go_1_22_range() {
        check(&[
            ("{{ range 3 }}{{ . }}{{ end }}|{{ range $i := 2 }}{{ $i }}{{ end }}", Ok("012|01")),
            ("{{ range -1 }}x{{ else }}none{{ end }}", Ok("none")),
            ("{{ range $i, $e := 3 }}{{ end }}", Err("values.yaml:1: can't use 3 to iterate over more than one variable")),
            ("{{ range 100000000000 }}{{ end }}", Err("values.yaml:1: range over 100000000000 exceeds the step limit")),
        ]);
    }
}
