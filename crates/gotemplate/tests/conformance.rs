//! Differential conformance of the values-template engine against Go: every case of the corpus
//! (`tests/conformance/cases/*.txt`, plus cases generated here from every slim-sprig function
//! and a pool of typed arguments) is executed by stacksync and by the oracle — Go's real
//! `text/template` (Go 1.26) with slim-sprig v3's `TxtFuncMap`, built by
//! `scripts/build-oracles.sh` — on the same data (`tests/conformance/data.json`, decoded as
//! Kubernetes decodes unstructured objects). The outputs must be byte-identical, or both
//! executions must fail. Differences documented in `tests/conformance/known-differences.txt`
//! (stacksync refuses them with the phrase listed there) are counted but do not fail, and each
//! of them must still be a difference. The cases of `scs.txt` run against every document of
//! `tests/conformance/scs-data/` (Cluster / InfraCluster / ControlPlane shapes of SCS stacks), and
//! so do the files of the directory `STACKSYNC_CONFORMANCE_EXTRA` names, each file one template
//! (to check a release's own values templates).
//!
//! The oracle's path comes from `STACKSYNC_TEMPLATE_ORACLE` (scripts/test.sh sets it). Without
//! it the test is skipped with a loud message, except under CI (`CI` set), where it fails.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use gotemplate::{Template, funcs};

const NAME: &str = "values.yaml";

struct Case {
    origin: String,
    template: String,
    /// Index into the data documents.
    data: usize,
}

/// The data documents: `data.json` first, then the SCS-shaped ones, by file name.
fn data_documents() -> Vec<(String, serde_json::Value)> {
    let mut docs = vec![("data.json".to_owned(), serde_json::from_str(include_str!("conformance/data.json")).expect("data.json"))];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/scs-data");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("scs-data").map(|e| e.expect("entry").path()).collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("scs data");
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        docs.push((name, serde_json::from_str(&text).expect("scs data json")));
    }
    docs
}

/// Templates read whole from the files of `dir`, each run against the SCS-shaped documents.
fn extra_cases(dir: &Path, docs: usize) -> Vec<Case> {
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("STACKSYNC_CONFORMANCE_EXTRA").map(|e| e.expect("entry").path()).collect();
    files.sort();
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.is_file()) {
        let text = std::fs::read_to_string(f).expect("extra template");
        for data in 1..docs {
            out.push(Case { origin: format!("{} (data {data})", f.display()), template: text.clone(), data });
        }
    }
    out
}

/// Table cases: one template per line; `⏎` stands for a newline; `#` starts a comment line.
/// `scs.txt` cases run against every document, the others against `data.json`.
fn table_cases(docs: usize) -> Vec<Case> {
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
            let data: Vec<usize> = if stem == "scs" { (0..docs).collect() } else { vec![0] };
            for d in data {
                out.push(Case { origin: format!("{stem}.txt:{} (data {d})", i + 1), template: line.replace('⏎', "\n"), data: d });
            }
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
    let small = [".v.i", ".v.f", ".v.sl", ".v.one", ".v.nil", "2", "\",\""];
    let mut out = Vec::new();
    for f in all_functions() {
        if NOT_GENERATED.contains(&f.as_str()) {
            continue;
        }
        out.push(Case { origin: format!("generated {f}/0"), template: format!("{{{{ {f} }}}}"), data: 0 });
        for a in pool {
            out.push(Case { origin: format!("generated {f}/1"), template: format!("{{{{ {f} {a} }}}}"), data: 0 });
        }
        for a in small {
            for b in small {
                out.push(Case { origin: format!("generated {f}/2"), template: format!("{{{{ {f} {a} {b} }}}}"), data: 0 });
            }
        }
        for a in ["1", ".v.sl"] {
            for b in small {
                out.push(Case { origin: format!("generated {f}/3"), template: format!("{{{{ {b} | {f} {a} 2 }}}}"), data: 0 });
            }
        }
    }
    out
}

/// `printf` with every verb and a spread of flags, widths and precisions, on each Go type.
fn printf_cases() -> Vec<Case> {
    let verbs = "vdsqxXobcUeEfFgGtTp%".chars();
    let flags = ["", "+", "#", " ", "-6", "06", ".2", "8.3", "+.0", "#x"];
    let args = [
        ".v.i",
        ".v.neg",
        ".v.f",
        ".v.fbig",
        ".v.fsmall",
        ".v.s",
        ".v.uni",
        ".v.b",
        ".v.nil",
        ".v.l",
        ".v.sl",
        ".v.m",
        "65",
        "-0.0",
        "\"\"",
    ];
    let mut out = Vec::new();
    for verb in verbs {
        for flag in flags {
            let flag = flag.trim_end_matches('x');
            // `%p` of a list or map prints its address.
            for a in args.iter().filter(|a| verb != 'p' || !matches!(**a, ".v.l" | ".v.sl" | ".v.m")) {
                out.push(Case {
                    origin: format!("printf %{flag}{verb}"),
                    template: format!("{{{{ printf \"%{flag}{verb}|\" {a} }}}}"),
                    data: 0,
                });
            }
        }
    }
    out
}

/// Random templates from a small grammar of Go's syntax (text with spaces and newlines, trim
/// markers, comments, literals, fields, variables, pipelines, parentheses, control structures,
/// `define` / `template`), from a fixed seed so every run checks the same ones.
fn syntax_cases(n: usize) -> Vec<Case> {
    struct Lcg(u64);
    impl Lcg {
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            items[((self.0 >> 33) as usize) % items.len()]
        }
    }
    let mut r = Lcg(0x5eed);
    let texts = ["", " ", "  ", "\n", " \n ", "a", "a b", "\t\n", "x\n  ", "{", "}", "-"];
    let opens = ["{{", "{{ ", "{{- ", "{{-", "{{  "];
    let closes = ["}}", " }}", " -}}", "-}}", "  }}"];
    let operands = [
        ".v.s",
        ".v.i",
        ".v.f",
        ".v.missing",
        ".v.nil",
        "$",
        "$.v.sl",
        ".",
        "1",
        "-1",
        "1.5",
        "0x10",
        "'a'",
        "\"q\"",
        "`r`",
        "true",
        "nil",
        "(.v.m).a",
        "(len .v.sl)",
        ".v.missing.x",
    ];
    let funcs = ["print", "len", "quote", "upper", "default \"d\"", "printf \"%v|%d\"", "not", "toString", "list", "eq 1", "index .v.sl"];
    let mut out = Vec::new();
    for i in 0..n {
        let mut t = String::new();
        let mut open_blocks = Vec::new();
        let define = r.pick(&["", "", "", "{{ define \"d\" }}<{{ . }}>{{ end }}"]);
        t.push_str(define);
        for _ in 0..(3 + i % 5) {
            t.push_str(r.pick(&texts));
            let (open, close) = (r.pick(&opens), r.pick(&closes));
            let body = match r.pick(&["op", "op", "pipe", "pipe", "comment", "if", "range", "with", "end", "var", "tmpl"]) {
                "op" => r.pick(&operands).to_owned(),
                "pipe" => format!("{} | {}", r.pick(&operands), r.pick(&funcs)),
                "comment" => format!("/* {} */", r.pick(&["c", "", "multi\nline", "}}"])),
                "if" | "range" | "with" => {
                    let kw = r.pick(&["if", "range", "with"]);
                    open_blocks.push(kw);
                    format!("{kw} {}", r.pick(&operands))
                }
                "end" if open_blocks.pop().is_some() => "end".to_owned(),
                "var" => format!("$x := {}", r.pick(&operands)),
                "tmpl" if !define.is_empty() => format!("template \"d\" {}", r.pick(&operands)),
                _ => r.pick(&operands).to_owned(),
            };
            // A comment must touch its delimiters (Go's rule), possibly across a trim marker.
            let (open, close) = if body.starts_with("/*") { (r.pick(&["{{", "{{- "]), r.pick(&["}}", " -}}"])) } else { (open, close) };
            t.push_str(&format!("{open}{body}{close}"));
        }
        for _ in open_blocks {
            t.push_str(r.pick(&["{{end}}", "{{ end -}}", "{{- end }}"]));
        }
        t.push_str(r.pick(&texts));
        out.push(Case { origin: format!("syntax #{i}"), template: t, data: 0 });
    }
    out
}

/// The deliberate differences: `(template, refusal, reason)` per line of known-differences.txt.
fn known_differences() -> Vec<(String, String, String)> {
    let text = include_str!("conformance/known-differences.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cols = l.split('\t');
            let (t, refusal, why) = (cols.next(), cols.next(), cols.next());
            let (Some(t), Some(refusal), Some(why)) = (t, refusal, why) else {
                panic!("known-differences.txt: not template TAB refusal TAB reason: {l:?}")
            };
            (t.replace('⏎', "\n"), refusal.to_owned(), why.to_owned())
        })
        .collect()
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Ok(String),
    Failed(String),
}

fn oracle(path: &str, cases: &[Case], docs: &[(String, serde_json::Value)]) -> Vec<Outcome> {
    let mut child = Command::new(path).env("TZ", "UTC").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let input: String = cases
        .iter()
        .map(|c| serde_json::json!({"name": NAME, "template": c.template, "data": docs[c.data].1}).to_string() + "\n")
        .collect();
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
    let docs = data_documents();
    let table = table_cases(docs.len());
    let generated: Vec<Case> = generated_cases().into_iter().chain(printf_cases()).chain(syntax_cases(3000)).collect();
    let extra = match std::env::var_os("STACKSYNC_CONFORMANCE_EXTRA") {
        Some(dir) => extra_cases(Path::new(&dir), docs.len()),
        None => Vec::new(),
    };
    let known = known_differences();
    // Every deliberate difference is a case too; below, each must still be one.
    let table: Vec<Case> = table
        .into_iter()
        .chain(known.iter().enumerate().map(|(i, (t, ..))| Case {
            origin: format!("known-differences.txt entry {}", i + 1),
            template: t.clone(),
            data: 0,
        }))
        .collect();
    let (n_table, n_generated, n_extra) = (table.len(), generated.len(), extra.len());
    let cases: Vec<Case> = table.into_iter().chain(generated).chain(extra).collect();
    let started = std::time::Instant::now();
    let want = oracle(&path, &cases, &docs);
    let oracle_time = started.elapsed();
    let started = std::time::Instant::now();
    let (mut same_out, mut both_failed, mut known_seen) = ([0usize; 3], [0usize; 3], 0);
    let mut mismatches = Vec::new();
    let functions = all_functions();
    // Per function: cases where it ran and printed exactly what Go printed.
    let mut proven: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (case, want)) in cases.iter().zip(&want).enumerate() {
        let kind = if i < n_table {
            0
        } else if i < n_table + n_generated {
            1
        } else {
            2
        };
        let got = ours(&case.template, &docs[case.data].1);
        // A panic inside the engine is caught (and reported as this error); it is always a bug.
        if let Outcome::Failed(e) = &got {
            assert!(!e.contains("template engine failed unexpectedly"), "{}: {:?} panicked the engine", case.origin, case.template);
        }
        let agree = match (&got, want) {
            (Outcome::Ok(a), Outcome::Ok(b)) => a == b,
            (Outcome::Failed(_), Outcome::Failed(_)) => true,
            _ => false,
        };
        if agree && matches!(got, Outcome::Ok(_)) {
            for f in &functions {
                if case.template.contains(&format!("{{{{ {f} "))
                    || case.template.contains(&format!(" {f} "))
                    || case.template.contains(&format!("({f} "))
                {
                    *proven.entry(f.as_str()).or_default() += 1;
                }
            }
        }
        if agree {
            if matches!(got, Outcome::Ok(_)) {
                same_out[kind] += 1;
            } else {
                both_failed[kind] += 1;
                if kind == 0 && std::env::var_os("STACKSYNC_CONFORMANCE_VERBOSE").is_some() {
                    eprintln!("both failed: {}: {:?}\n    go: {:?}\n    stacksync: {:?}", case.origin, case.template, want, got);
                }
            }
        } else if matches!(&got, Outcome::Failed(e) if known.iter().any(|(_, refusal, _)| e.contains(refusal.as_str()))) {
            known_seen += 1;
        } else {
            mismatches.push(format!(
                "{} [{}]: {:?}\n    go:        {:?}\n    stacksync: {:?}",
                case.origin, docs[case.data].0, case.template, want, got
            ));
        }
    }
    eprintln!(
        "conformance: {} cases (Go {:.1}s, stacksync {:.1}s): {} identical output, {} both failed, {known_seen} known \
         differences, {} mismatches",
        cases.len(),
        oracle_time.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        same_out.iter().sum::<usize>(),
        both_failed.iter().sum::<usize>(),
        mismatches.len()
    );
    for (k, (name, n)) in [("table", n_table), ("generated", n_generated), ("extra", n_extra)].into_iter().enumerate() {
        eprintln!("  {name}: {n} cases, {} identical output, {} both failed", same_out[k], both_failed[k]);
    }
    let unproven: Vec<&String> = functions
        .iter()
        // `fail` only fails; its cases are all "both failed".
        .filter(|f| funcs::unsupported_reason(f).is_none() && *f != "fail" && !proven.contains_key(f.as_str()))
        .collect();
    eprintln!(
        "  functions: {} of {} proven by at least one identical successful output (median {} cases each); without: {unproven:?}",
        proven.len(),
        functions.len(),
        {
            let mut n: Vec<usize> = proven.values().copied().collect();
            n.sort_unstable();
            n.get(n.len() / 2).copied().unwrap_or(0)
        }
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
    assert!(unproven.is_empty(), "functions without an identical successful case: {unproven:?}");
    // Each deliberate difference is still one: Go renders it, stacksync refuses it as documented.
    for (template, refusal, why) in &known {
        let i = cases.iter().position(|c| &c.template == template).expect("known difference case");
        let got = ours(template, &docs[0].1);
        assert!(
            matches!(&want[i], Outcome::Ok(_)) && matches!(&got, Outcome::Failed(e) if e.contains(refusal.as_str())),
            "known-differences.txt is stale for {template:?} ({why}):\n    go:        {:?}\n    stacksync: {got:?}",
            want[i]
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
