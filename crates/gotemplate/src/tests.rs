//! Unit tests of the engine's own guarantees (limits, warnings, errors with lines). Go
//! conformance is proven by `tests/conformance.rs` against the real Go.

use serde_json::{Value, json};

use super::*;

fn data() -> Value {
    json!({"Cluster": {"metadata": {"name": "alpha"}, "spec": {"nothing": null, "port": 6443, "l": [1, null]}}})
}

fn run(text: &str) -> Result<Output, Error> {
    Template::parse("values.yaml", text)?.execute(&data())
}

fn err(text: &str) -> String {
    run(text).expect_err(text).to_string()
}

#[test]
fn a_values_template_nested_2000_levels_deep_is_an_error_not_a_stack_overflow() {
    for (open, close) in [("{{ if true }}", "{{ end }}"), ("{{ with . }}", "{{ end }}"), ("{{ range list 1 }}", "{{ end }}")] {
        let text = format!("x\n{}{}", open.repeat(2000), close.repeat(2000));
        let e = err(&text);
        assert!(e.starts_with(&format!("values.yaml:2: template nesting exceeds the limit of {MAX_DEPTH} levels")), "{e}");
    }
    let parens = format!("x\n\n{{{{ {}1{} }}}}", "(".repeat(2000), ")".repeat(2000));
    assert!(err(&parens).starts_with("values.yaml:3: template nesting exceeds the limit"), "{}", err(&parens));
    // Up to the limit it works.
    let ok = format!("{}x{}", "{{ if true }}".repeat(MAX_DEPTH), "{{ end }}".repeat(MAX_DEPTH));
    assert_eq!(run(&ok).unwrap().text, "x");
}

#[test]
fn a_template_calling_itself_stops_at_the_call_limit_with_its_line() {
    let e = err("{{ define \"loop\" }}{{ template \"loop\" . }}{{ end }}\n{{ template \"loop\" . }}");
    assert!(e.starts_with("values.yaml:1: `template \"loop\"` exceeds the limit of 1000 nested template calls"), "{e}");
    // Recursion that ends is fine.
    let t = "{{ define \"r\" }}{{ if . }}{{ len . }}{{ template \"r\" (rest .) }}{{ end }}{{ end }}{{ template \"r\" (list 1 2 3) }}";
    assert_eq!(run(t).unwrap().text, "321");
}

#[test]
fn steps_and_output_are_bounded() {
    let t = Template::parse("v.yaml", "{{ range until 100 }}{{ range until 100 }}x{{ end }}{{ end }}").unwrap();
    let small = Limits { steps: 5_000, ..Limits::default() };
    let e = t.execute_with(&data(), small).unwrap_err().to_string();
    assert!(e.starts_with("v.yaml:1: ") && e.contains("template execution exceeds the limit of 5000 steps"), "{e}");
    let small = Limits { output: 1_000, ..Limits::default() };
    let e = t.execute_with(&data(), small).unwrap_err().to_string();
    assert!(e.starts_with("v.yaml:1: template output exceeds the limit of 1000 bytes"), "{e}");
    let e = err("{{ repeat 1000000000 \"xx\" }}");
    assert!(e.contains("would exceed the output limit"), "{e}");
    let e = err("{{ $l := list }}{{ range until 100 }}{{ $l = list $l }}{{ end }}");
    assert!(e.contains("nests lists and maps deeper than 64 levels"), "{e}");
    let e = err("{{ $d := dict }}{{ $_ := set $d \"self\" $d }}");
    assert!(e.contains("a cycle"), "{e}");
}

#[test]
fn no_value_and_nil_print_as_go_does_and_each_is_a_warning_with_line_and_path() {
    let out = run("a: {{ .Cluster.spec.missing.deeper }}\nb: {{ .Cluster.spec.nothing }}\nc: {{ print .Cluster.spec.nothing }}\nd: {{ .Cluster.spec.l }}").unwrap();
    assert_eq!(out.text, "a: <no value>\nb: <no value>\nc: <nil>\nd: [1 <nil>]");
    let got: Vec<(usize, &str, &str)> = out.warnings.iter().map(|w| (w.line, w.path.as_str(), w.printed)).collect();
    assert_eq!(
        got,
        [
            (1, ".Cluster.spec.missing", "<no value>"),
            (2, ".Cluster.spec.nothing", "<no value>"),
            (3, "print", "<nil>"),
            (4, ".Cluster.spec.l", "<nil>")
        ]
    );
    // A missing key that is tested or defaulted is not a warning.
    let out = run("{{ .Cluster.spec.missing | default \"d\" }}{{ if .Cluster.spec.missing }}x{{ end }}").unwrap();
    assert_eq!((out.text.as_str(), out.warnings.len()), ("d", 0));
}

#[test]
fn errors_name_file_and_line() {
    let cases = [
        ("a\nb: {{ frobnicate 1 }}", "values.yaml:2: function `frobnicate` is not defined"),
        ("a\n\n{{ env \"HOME\" }}", "values.yaml:3: function `env` is not defined (slim-sprig's `env` is not provided"),
        ("a\n{{ template \"nope\" }}", "values.yaml:2: no such template `nope`"),
        ("{{ if true }}\nno end", "values.yaml:1: `if` has no matching `{{end}}`"),
        ("x\n{{ fail \"stop here\" }}", "values.yaml:2: error calling fail: stop here"),
        ("x\n{{ .Cluster.spec.nothing.x }}", "values.yaml:2: nil pointer evaluating interface {}.x"),
        ("x\n{{ required \"set a host\" .Cluster.spec.host }}", "values.yaml:2: error calling required: set a host"),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with(want), "{text:?}\n got: {e}\nwant: {want}");
    }
}

#[test]
fn helm_extensions_to_yaml_and_required_work() {
    let out = run("{{ dict \"p\" .Cluster.spec.port \"l\" (list \"a\") | toYaml }}|{{ required \"m\" .Cluster.metadata.name }}").unwrap();
    assert_eq!(out.text, "l:\n- a\np: 6443|alpha");
}

#[test]
fn hostile_templates_are_errors_not_panics() {
    let texts = [
        "{{ printf \"%99999999999d|%.99999999999f\" 1 1.5 }}",
        "{{ printf \"%[99999999999999999999]d %[\" 1 }}",
        "{{ seq 9223372036854775807 }}",
        "{{ seq -9223372036854775808 1 }}",
        "{{ seq 1 -9223372036854775808 9223372036854775807 }}",
        "{{ toDate \"Jan\" \"Ja\u{e9}\" }}",
        "{{ toDate \"Monday\" \"Mon\u{e9}\u{e9}\u{e9}\" }}",
        "{{ date \"\u{e9}2006\u{e9}Jan\u{e9}.000\u{e9}\" 0 }}",
        "{{ toDate \"2006 PM\" \"2006 \u{e9}\u{e9}\" }}",
        "{{ toDate \"-07:00\" \"+\u{e9}\" }}",
        "{{ dateModify \"99999999999999999999h\" (toDate \"2006\" \"2024\") }}",
        "{{ duration \"-9223372036854775808\" }}",
        "{{ trunc -9223372036854775808 \"abc\" }}",
        "{{ substr -5 -9 \"abc\" }}",
        "{{ substr 2 1 \"abc\" }}",
        "{{ div -9223372036854775808 -1 }}",
        "{{ mod -9223372036854775808 -1 }}",
        "{{ mul 9223372036854775807 2 }}",
        "{{ index \"\u{e9}\" 1 }}",
        "{{ until 99999999999 }}",
        "{{ '\\400' }}",
        "{{ b64dec \"\u{e9}\" }}",
        "{{ b32dec \"\u{e9}=======\" }}",
        "{{ regexReplaceAll \"(\" \"x\" \"y\" }}",
        "{{ regexSplit \"\" \"\u{e9}a\" -1 }}",
        "{{ splitn \"\" 2 \"\u{e9}\u{e9}\u{e9}\" }}",
        "{{ round 1.5 999999999 }}",
        "{{ int64 \"-9223372036854775809\" }}",
        "{{ chunk 9223372036854775807 (list 1) }}",
        "{{ slice (list 1 2) 9223372036854775807 }}",
    ];
    for text in texts {
        if let Err(e) = run(text) {
            assert!(!e.to_string().contains("failed unexpectedly"), "{text:?} panicked: {e}");
        }
    }
}
