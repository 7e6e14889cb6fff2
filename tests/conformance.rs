//! Differential conformance of the values-template engine against Go: every case of the corpus
//! (`tests/conformance/cases/*.txt`, plus cases generated here from every slim-sprig function
//! and a pool of typed arguments) is executed by stacksync and by the oracle — Go's real
//! `text/template` with sprig 3.2.3's text functions restricted to slim-sprig's set, built by
//! `scripts/build-oracles.sh` — on the same data (`tests/conformance/data.json`, decoded as
//! Kubernetes decodes unstructured objects). The outputs must be byte-identical, or both
//! executions must fail. Differences documented in `tests/conformance/known-differences.txt`
//! are reported but do not fail.
//!
//! The oracle's path comes from `STACKSYNC_TEMPLATE_ORACLE` (scripts/test.sh sets it). Without
//! it the test is skipped with a loud message, except under CI (`CI` set), where it fails.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use stacksync::render::gotemplate::{Template, funcs};

const NAME: &str = "values.yaml";

struct Case {
    origin: String,
    template: String,
}

/// Table cases: one template per line; `⏎` stands for a newline; `#` starts a comment line.
fn table_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("cases dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("case file");
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            out.push(Case { origin: format!("{stem}.txt:{}", i + 1), template: line.replace('⏎', "\n") });
        }
    }
    out
}

/// Functions whose output Go itself does not make reproducible (map iteration order, the clock,
/// the environment, randomness, DNS), left out of generation.
const NOT_GENERATED: &[&str] = &[
    "keys",
    "values",
    "now",
    "ago",
    "date",
    "date_in_zone",
    "dateInZone",
    "date_modify",
    "dateModify",
    "must_date_modify",
    "mustDateModify",
    "duration",
    "durationRound",
    "htmlDate",
    "htmlDateInZone",
    "toDate",
    "mustToDate",
    "unixEpoch",
    "env",
    "expandenv",
    "getHostByName",
    "randInt",
    "fail",
    "hello",
];

/// Every function of slim-sprig's TxtFuncMap and Go's builtins, from the oracle's list.
fn all_functions() -> Vec<String> {
    let src = include_str!("conformance/oracle/main.go");
    let start = src.find("var slimSprig = []string{").expect("list");
    let end = start + src[start..].find('}').expect("end");
    let mut names: Vec<String> = src[start..end].split('"').skip(1).step_by(2).map(str::to_owned).collect();
    for b in
        ["and", "or", "not", "len", "index", "print", "printf", "println", "eq", "ne", "lt", "le", "gt", "ge", "html", "js", "urlquery"]
    {
        names.push(b.to_owned());
    }
    names
}

/// Each function applied to each argument of a pool of typed values, directly and piped, with
/// one, two and three arguments.
fn generated_cases() -> Vec<Case> {
    let pool = [
        ".v.i",
        ".v.neg",
        ".v.f",
        ".v.fint",
        ".v.s",
        ".v.empty",
        ".v.num",
        ".v.l",
        ".v.sl",
        ".v.il",
        ".v.el",
        ".v.one",
        ".v.em",
        ".v.nil",
        ".v.missing",
        ".v.b",
        "3",
        "-2",
        "1.5",
        "\"a,b\"",
        "\"\"",
        "true",
        "nil",
    ];
    let small = [".v.i", ".v.f", ".v.s", ".v.sl", ".v.one", ".v.nil", ".v.missing", "2", "\"b\"", "\",\""];
    let mut out = Vec::new();
    for f in all_functions() {
        if NOT_GENERATED.contains(&f.as_str()) {
            continue;
        }
        out.push(Case { origin: format!("generated {f}/0"), template: format!("{{{{ {f} }}}}") });
        for a in pool {
            out.push(Case { origin: format!("generated {f}/1"), template: format!("{{{{ {f} {a} }}}}") });
        }
        for a in small {
            for b in small {
                out.push(Case { origin: format!("generated {f}/2"), template: format!("{{{{ {f} {a} {b} }}}}") });
            }
        }
        for a in ["1", "\"x\"", ".v.sl"] {
            for b in small {
                out.push(Case { origin: format!("generated {f}/3"), template: format!("{{{{ {b} | {f} {a} 2 }}}}") });
            }
        }
    }
    out
}

/// `(template, reason)` pairs Go and stacksync are known to disagree on, with why.
fn known_differences() -> BTreeMap<String, String> {
    let text = include_str!("conformance/known-differences.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .map(|(t, why)| (t.replace('⏎', "\n"), why.to_owned()))
        .collect()
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Ok(String),
    Failed(String),
}

fn oracle(path: &str, cases: &[Case], data: &serde_json::Value) -> Vec<Outcome> {
    let mut child = Command::new(path).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let input: String =
        cases.iter().map(|c| serde_json::json!({"name": NAME, "template": c.template, "data": data}).to_string() + "\n").collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("oracle output");
    writer.join().expect("writer").expect("write to the oracle");
    assert!(out.status.success(), "the oracle failed: {:?}", out.status);
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).expect("utf-8").lines().collect();
    assert_eq!(lines.len(), cases.len(), "the oracle answered {} of {} cases", lines.len(), cases.len());
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("oracle json");
            if v["ok"].as_bool() == Some(true) {
                Outcome::Ok(v["out"].as_str().unwrap_or_default().to_owned())
            } else {
                Outcome::Failed(v["err"].as_str().unwrap_or_default().to_owned())
            }
        })
        .collect()
}

fn ours(template: &str, data: &serde_json::Value) -> Outcome {
    match Template::parse(NAME, template).and_then(|t| t.execute(data)) {
        Ok(out) => Outcome::Ok(out.text),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

#[test]
fn values_templates_render_byte_for_byte_as_go_text_template_with_slim_sprig() {
    let Some(path) = std::env::var("STACKSYNC_TEMPLATE_ORACLE").ok().filter(|p| Path::new(p).is_file()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the conformance suite: STACKSYNC_TEMPLATE_ORACLE is unset or missing (scripts/test.sh builds it)"
        );
        eprintln!(
            "\n*** SKIPPED: values-template conformance suite: no Go oracle (run scripts/test.sh, or set \
             STACKSYNC_TEMPLATE_ORACLE=$(scripts/build-oracles.sh | tail -n 1)) ***\n"
        );
        return;
    };
    let data: serde_json::Value = serde_json::from_str(include_str!("conformance/data.json")).expect("conformance data");
    let table = table_cases();
    let generated = generated_cases();
    let (n_table, n_generated) = (table.len(), generated.len());
    let cases: Vec<Case> = table.into_iter().chain(generated).collect();
    let want = oracle(&path, &cases, &data);
    let known = known_differences();
    let (mut same_out, mut both_failed, mut known_seen) = (0, 0, 0);
    let mut mismatches = Vec::new();
    for (case, want) in cases.iter().zip(&want) {
        let got = ours(&case.template, &data);
        let agree = match (&got, want) {
            (Outcome::Ok(a), Outcome::Ok(b)) => a == b,
            (Outcome::Failed(_), Outcome::Failed(_)) => true,
            _ => false,
        };
        if agree {
            if matches!(got, Outcome::Ok(_)) {
                same_out += 1;
            } else {
                both_failed += 1;
            }
        } else if known.contains_key(&case.template) {
            known_seen += 1;
        } else {
            mismatches.push(format!("{}: {:?}\n    go:        {:?}\n    stacksync: {:?}", case.origin, case.template, want, got));
        }
    }
    eprintln!(
        "conformance: {} cases ({n_table} table, {n_generated} generated): {same_out} identical output, {both_failed} both \
         failed, {known_seen} known differences, {} mismatches",
        cases.len(),
        mismatches.len()
    );
    if !mismatches.is_empty() {
        let shown: Vec<&String> = mismatches.iter().take(200).collect();
        panic!(
            "{} of {} cases differ from Go (first {}):\n{}",
            mismatches.len(),
            cases.len(),
            shown.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
    // Every generated function is one stacksync defines (or refuses with a reason).
    for f in all_functions() {
        assert!(
            Template::parse(NAME, &format!("{{{{ {f} }}}}")).is_ok() || funcs::unsupported_reason(&f).is_some(),
            "{f} is neither defined nor refused with a reason"
        );
    }
}
