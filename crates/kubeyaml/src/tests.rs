use serde_json::json;

use super::*;

fn json_of(text: &str) -> serde_json::Value {
    parse(text).unwrap().root.unwrap().to_json().unwrap()
}

/// The scalar table of docs/clusterstacks.md, each row checked with
/// `kubectl annotate --local -f - a=b -o json` (kubectl 1.35.2).
#[test]
fn scalars_resolve_as_kubectl_reads_them() {
    let rows: &[(&str, serde_json::Value)] = &[
        ("yes", json!(true)),
        ("Yes", json!(true)),
        ("on", json!(true)),
        ("y", json!(true)),
        ("True", json!(true)),
        ("NO", json!(false)),
        ("Off", json!(false)),
        ("n", json!(false)),
        ("\"yes\"", json!("yes")),
        ("'on'", json!("on")),
        ("~", json!(null)),
        ("null", json!(null)),
        ("Null", json!(null)),
        ("", json!(null)),
        ("0777", json!(511)),
        ("-0777", json!(-511)),
        ("0_777", json!(511)),
        ("00", json!(0)),
        ("08", json!(8)),
        ("0o17", json!(15)),
        ("0o8", json!("0o8")),
        ("0x1F", json!(31)),
        ("-0x1F", json!(-31)),
        ("0x_1F", json!(31)),
        ("0b101", json!(5)),
        ("0b_1", json!(1)),
        ("1_000", json!(1000)),
        ("1__0", json!(10)),
        ("+12", json!(12)),
        ("-0", json!(0)),
        (".5", json!(0.5)),
        ("+.5", json!(0.5)),
        ("-.5e2", json!(-50)),
        ("0.", json!(0)),
        ("1.", json!(1)),
        ("1.0", json!(1)),
        ("1e3", json!(1000)),
        ("12e03", json!(12000)),
        ("1.5e+03", json!(1500)),
        ("1_0.5", json!(10.5)),
        ("1e21", json!(1e21)),
        ("9223372036854775808", json!(9_223_372_036_854_775_808.0_f64)),
        ("99999999999999999999", json!(1e20)),
        ("6e", json!("6e")),
        ("1:30", json!("1:30")),
        ("190:20:30", json!("190:20:30")),
        ("2001-12-14", json!("2001-12-14")),
        ("2001-12-14t21:59:43.10-05:00", json!("2001-12-14t21:59:43.10-05:00")),
        ("=", json!("=")),
        ("<<", json!("<<")),
        ("!!str 12", json!("12")),
        ("!!int \"12\"", json!(12)),
        ("!!float 1", json!(1)),
        ("!foo 12", json!("12")),
        ("!foo \"x\"", json!("x")),
        ("!!binary aGVsbG8=", json!("hello")),
    ];
    for (text, want) in rows {
        assert_eq!(json_of(&format!("v: {text}\n"))["v"], *want, "v: {text}");
    }
}

#[test]
fn infinities_and_bad_tags_are_refused_with_their_line() {
    for text in [".inf", "-.Inf", ".NaN", "!!int abc"] {
        let root = parse(&format!("a: 1\nv: {text}\n")).unwrap().root.unwrap();
        let e = root.to_json().unwrap_err();
        assert_eq!(e.mark.line, 2, "{text}: {e}");
    }
}

#[test]
fn keys_are_formatted_as_sigs_k8s_io_yaml_does() {
    let v = json_of("1: a\n1.5: b\n0777: c\nyes: e\n1e3: f\n1e21: g\n0.1: h\n1e6: i\n1234567.0: j\n0.00001: k\n-2.5: l\n");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = ["1", "1.5", "511", "true", "1000", "1e+21", "0.1", "1e+06", "1.234567e+06", "1e-05", "-2.5"];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    for text in ["~: a\n", "[a]: a\n", "{a: 1}: b\n"] {
        assert!(parse(text).unwrap().root.unwrap().to_json().is_err(), "{text}");
    }
}

#[test]
fn a_repeated_key_keeps_the_last_value_with_a_warning() {
    let doc = parse("metadata:\n  name: a\n  labels: {}\n  name: b\n  name: c\n").unwrap();
    assert_eq!(doc.root.as_ref().unwrap().to_json().unwrap(), json!({"metadata": {"name": "c", "labels": {}}}));
    let lines: Vec<usize> = doc.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines, [4, 5]);
    assert!(doc.warnings[0].message.contains("`name` repeats the one at line 2"), "{}", doc.warnings[0]);
}

#[test]
fn merge_keys_follow_go_yaml_v2() {
    let v = json_of(
        "b: &a\n  x: 1\nb1:\n  a: 1\n  <<: {a: 2, c: 3}\nb2:\n  <<: {a: 2, c: 3}\n  a: 1\nb3:\n  <<: [{a: 1}, {a: 2, b: 2}]\nb4:\n  <<: *a\n  y: 2\n",
    );
    assert_eq!(v["b1"], json!({"a": 2, "c": 3}));
    assert_eq!(v["b2"], json!({"a": 1, "c": 3}));
    assert_eq!(v["b3"], json!({"a": 1, "b": 2}));
    // `y` is a YAML 1.1 boolean, also as a key.
    assert_eq!(v["b4"], json!({"x": 1, "true": 2}));
    assert!(parse("a: {<<: 1}\n").is_err());
}

#[test]
fn quoted_and_plain_scalars_continue_at_any_indentation_libyaml_accepts() {
    let text = "spec:\n  schema:\n    properties:\n      a:\n        description: \"one\ntwo\n   three \\\n  four\"\n        type: string\n      b:\n        description: plain\n          continued\n           more\n";
    let v = json_of(text);
    assert_eq!(v["spec"]["schema"]["properties"]["a"]["description"], "one two three four");
    assert_eq!(v["spec"]["schema"]["properties"]["b"]["description"], "plain continued more");
}

#[test]
fn tabs_crlf_and_a_bom_read_as_kubectl_reads_them() {
    let v = json_of("\u{feff}a: \"x\ty\"\r\nb: p\tq\r\nc: |\r\n  l1\r\n  l2\r\n");
    assert_eq!(v, json!({"a": "x\ty", "b": "p\tq", "c": "l1\nl2\n"}));
    let e = parse("a:\n\tb: 1\n").unwrap_err();
    assert_eq!(e.mark.line, 2, "{e}");
}

#[test]
fn documents_split_as_kubectl_splits_them() {
    let text = "# c\n--- # x\napiVersion: v1\nkind: A\n---\n# only a comment\n---\nnull\n---\n~\n---\nkind: B\n";
    let docs = documents(text).unwrap();
    let roots: Vec<(usize, Option<serde_json::Value>)> =
        docs.iter().map(|d| (d.line, d.root.as_ref().map(|r| r.to_json().unwrap()))).collect();
    assert_eq!(
        roots,
        [
            (1, None),
            (3, Some(json!({"apiVersion": "v1", "kind": "A"}))),
            (6, None),
            (8, Some(json!(null))),
            (10, Some(json!(null))),
            (12, Some(json!({"kind": "B"}))),
        ]
    );
    let e = documents("a: 1\n--- foo\n").unwrap_err();
    assert_eq!((e.mark.line, e.message.contains("--- foo")), (2, true), "{e}");
    // A position inside a later document counts from the start of the text.
    let e = documents("a: 1\n---\nb: [\n").unwrap_err();
    assert!(e.mark.line >= 3, "{e}");
}

#[test]
fn an_alias_bomb_is_refused_without_exhausting_memory() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("excessive aliasing"), "{e}");
    let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert!(parse(&deep).unwrap_err().message.contains("nested deeper"));
    // Ordinary anchors are fine.
    assert_eq!(json_of("a: &x {k: v}\nb: [*x, *x]\n")["b"], json!([{"k": "v"}, {"k": "v"}]));
}

#[test]
fn only_the_first_document_of_a_text_is_read_as_go_yaml_unmarshal_does() {
    assert_eq!(json_of("a: 1\n...\nb: [\n"), json!({"a": 1}));
    assert!(parse("").unwrap().root.is_none());
    assert!(parse("# only\n").unwrap().root.is_none());
}

/// The directory target writes objects with serde-saphyr; kubectl must read back the same values
/// (a string `on` written plain would come back a boolean).
#[test]
fn what_the_directory_target_writes_reads_back_unchanged() {
    let strings = [
        "yes",
        "Yes",
        "on",
        "OFF",
        "y",
        "n",
        "~",
        "null",
        "",
        "0777",
        "0o17",
        "0x1F",
        "0b1",
        "1_000",
        ".5",
        "+12",
        "1e3",
        "08",
        "1.",
        "2001-12-14",
        "<<",
        "=",
        "1:30",
        "true",
        "- a",
        "a: b",
        "#x",
        "x #y",
        "@a",
        "`a",
        "%a",
        "!a",
        "&a",
        "*a",
        "'a",
        "\"a",
        "a\tb",
        " a",
        "a ",
        "a\nb",
        "\u{feff}a",
        "---",
        "...",
    ];
    let numbers = [json!(0), json!(-1), json!(1.5), json!(1e21), json!(9_007_199_254_740_993_i64), json!(true), json!(null)];
    let mut object = serde_json::Map::new();
    for (i, s) in strings.iter().enumerate() {
        object.insert(format!("s{i}"), json!(s));
        object.insert((*s).to_owned(), json!(i));
    }
    for (i, n) in numbers.iter().enumerate() {
        object.insert(format!("n{i}"), n.clone());
    }
    let value = serde_json::Value::Object(object);
    let text = serde_saphyr::to_string(&value).unwrap();
    let back = parse(&text).unwrap().root.unwrap().to_json().unwrap();
    assert_eq!(back, value, "{text}");
}

/// A block scalar that ends the text without a line break: the scanner panicked; kubectl reads
/// it as ending in one (checked with `kubectl label --local -f … -o json`).
#[test]
fn a_block_scalar_at_the_end_of_the_text_without_a_line_break() {
    for (text, want) in [
        ("a: |\n  x\n  y", "x\ny\n"),
        ("a: |-\n  x\n  y", "x\ny"),
        ("a: |+\n  x\n  y", "x\ny\n"),
        ("a: >\n  x\n  y", "x y\n"),
        ("- |\n  x", "x\n"),
    ] {
        let root = super::parse_document(text, 1).expect("parses").root.expect("a document").to_json().expect("json");
        let got = root.get("a").or_else(|| root.get(0)).cloned();
        assert_eq!(got, Some(serde_json::Value::String(want.into())), "{text:?}");
    }
    // An error at the end is reported at the text's last line, not one past it.
    let e = super::parse_document("a: 1\nb: 'x", 1).expect_err("unterminated");
    assert_eq!(e.mark.line, 2, "{e:?}");
}
