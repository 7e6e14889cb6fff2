//! A manifest file parsed once per release and filled in per cluster.
//!
//! Rendering substitutes `${var}` in a file's text and parses the result as YAML — for every
//! cluster, although most of a file is the same for all of them. Here the file is substituted
//! once with a *token* in place of each variable (an ASCII word that cannot occur in YAML
//! syntax), split and parsed; each cluster's objects are then the parsed JSON with the tokens in
//! its scalars replaced by the cluster's values, each such scalar resolved again as the parser
//! would (`replicas: ${n}` with `n=3` is the integer 3, quoted it stays a string).
//!
//! That is the text path's result exactly when the values are *inert*: short, made of letters,
//! digits, `.`, `_`, `-` and `/`, starting with a letter or digit — characters YAML treats alike
//! wherever a token can stand, so the text has the same structure with the token as with the
//! value (no new line, separator, indicator, quote or comment). A file is not templated at all
//! when anything could make the two differ: a backslash (an escape could spell a token), a
//! token in a mapping key, an anchor, an alias, a tag or a comment (each token must be found
//! in exactly one scalar), a substitution error, a YAML error or warning, or a scalar that does
//! not convert to JSON. Such a file, and a cluster whose values are not inert, take the text
//! path ([`super::Manifests::render`]) — which also reports every error with its position.

use super::subst::Variables;

use kubeyaml::{self, Node, Scalar};
use serde_json::Value;

/// Tokens are `<PREFIX><index><SUFFIX>`; a file that contains the prefix is not templated.
const PREFIX: &str = "QzStKn";
const SUFFIX: &str = "nKtSzQ";
/// The longest value filled in (a DNS name is at most 253); longer ones take the text path.
const MAX_VALUE: usize = 253;

/// One file, parsed with tokens, for the variable names it was built for.
#[derive(Debug)]
pub(super) struct FileTemplate {
    /// The variable names, in order: token `i` stands for `names[i]`.
    names: Vec<String>,
    /// `None`: this file is rendered from its text.
    docs: Option<Vec<DocTemplate>>,
}

#[derive(Debug)]
struct DocTemplate {
    /// The document's first line in the file.
    line: usize,
    /// The document as JSON, `Null` at each hole.
    value: Value,
    holes: Vec<Hole>,
}

/// A scalar with tokens in it, and where in the document it is.
#[derive(Debug)]
struct Hole {
    path: Vec<Step>,
    scalar: Scalar,
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn token(i: usize) -> String {
    format!("{PREFIX}{i}{SUFFIX}")
}

/// Whether `v` may stand where its token stood without changing the text's YAML structure.
pub(super) fn inert(v: &str) -> bool {
    v.len() <= MAX_VALUE
        && v.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

impl FileTemplate {
    /// Parses `text` once for clusters whose variables are named `names`.
    pub(super) fn build(text: &str, names: &[&str]) -> FileTemplate {
        FileTemplate { names: names.iter().map(|n| (*n).to_owned()).collect(), docs: docs(text, names) }
    }

    /// Whether this template was built for exactly these variable names.
    pub(super) fn fits(&self, names: &[&str]) -> bool {
        self.names.len() == names.len() && self.names.iter().zip(names).all(|(a, b)| a == *b)
    }

    /// The documents of this file for one cluster as `(line, JSON)`, `None` when they must be
    /// rendered from the text (the file is not templated, or a value it uses is not inert, or
    /// a filled-in scalar does not convert — the text path says where).
    pub(super) fn fill(&self, vars: &Variables<'_>) -> Option<Vec<(usize, Value)>> {
        let docs = self.docs.as_ref()?;
        let values: Vec<&str> = self.names.iter().map(|n| vars.get(n.as_str()).copied().unwrap_or("")).collect();
        let mut out = Vec::with_capacity(docs.len());
        for d in docs {
            let mut value = d.value.clone();
            for h in &d.holes {
                let text = replace(&h.scalar.text, &values)?;
                let json = kubeyaml::scalar::to_json(&Scalar { text, plain: h.scalar.plain, tag: h.scalar.tag.clone() }).ok()?;
                *slot(&mut value, &h.path)? = json;
            }
            out.push((d.line, value));
        }
        Some(out)
    }
}

/// The file's documents with tokens, or `None` when it must not be templated.
fn docs(text: &str, names: &[&str]) -> Option<Vec<DocTemplate>> {
    if text.contains('\\') || text.contains(PREFIX) {
        return None;
    }
    let tokens: Vec<String> = (0..names.len()).map(token).collect();
    let tokens: Variables<'_> = names.iter().copied().zip(tokens.iter().map(String::as_str)).collect();
    let substituted = super::subst::substitute(text, &tokens).ok()?;
    // The longest a cluster's text can be: every token replaced by the longest value.
    let tokens_in = substituted.matches(PREFIX).count();
    if substituted.len() + tokens_in * MAX_VALUE > kubeyaml::MAX_BYTES {
        return None;
    }
    let mut out = Vec::new();
    for (line, doc) in kubeyaml::split(&substituted).ok()? {
        let parsed = kubeyaml::parse_document(doc, line).ok()?;
        if !parsed.warnings.is_empty() {
            return None;
        }
        let mut holes = Vec::new();
        let value = match &parsed.root {
            None => Value::Null,
            Some(root) => walk(root, &mut Vec::new(), &mut holes)?,
        };
        let found: usize = holes.iter().map(|h| h.scalar.text.matches(PREFIX).count()).sum();
        if found != doc.matches(PREFIX).count() {
            return None;
        }
        out.push(DocTemplate { line, value, holes });
    }
    Some(out)
}

/// The node as JSON with `Null` at each scalar holding a token (recorded in `holes`); `None`
/// when a mapping key holds a token or a node does not convert.
fn walk(node: &Node, path: &mut Vec<Step>, holes: &mut Vec<Hole>) -> Option<Value> {
    match &node.value {
        kubeyaml::Value::Scalar(s) if s.text.contains(PREFIX) => {
            holes.push(Hole { path: path.clone(), scalar: s.clone() });
            Some(Value::Null)
        }
        kubeyaml::Value::Scalar(s) => kubeyaml::scalar::to_json(s).ok(),
        kubeyaml::Value::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                out.push(walk(item, path, holes)?);
                path.pop();
            }
            Some(Value::Array(out))
        }
        kubeyaml::Value::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (k, v) in entries {
                if k.scalar_text().is_none_or(|t| t.contains(PREFIX)) {
                    return None;
                }
                let key = kubeyaml::scalar::key_string(k)?;
                path.push(Step::Key(key.clone()));
                let value = walk(v, path, holes)?;
                path.pop();
                map.insert(key, value);
            }
            Some(Value::Object(map))
        }
    }
}

/// `text` with every token replaced by its value; `None` when a value it uses is not inert.
fn replace(text: &str, values: &[&str]) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let index: usize = after[..digits].parse().ok()?;
        let tail = after[digits..].strip_prefix(SUFFIX)?;
        let value = values.get(index)?;
        if !inert(value) {
            return None;
        }
        out.push_str(value);
        rest = tail;
    }
    out.push_str(rest);
    Some(out)
}

fn slot<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut at = value;
    for step in path {
        at = match step {
            Step::Key(k) => at.as_object_mut()?.get_mut(k)?,
            Step::Index(i) => at.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the text path makes of `text`: every document as `(line, JSON)`, or `Err` where it
    /// reports an error.
    fn text_docs(text: &str, vars: &Variables<'_>) -> Result<Vec<(usize, Value)>, ()> {
        let text = crate::render::subst::substitute(text, vars).map_err(drop)?;
        let mut out = Vec::new();
        for (line, doc) in kubeyaml::split(&text).map_err(drop)? {
            let parsed = kubeyaml::parse_document(doc, line).map_err(drop)?;
            let value = match &parsed.root {
                None => Value::Null,
                Some(root) => root.to_json().map_err(drop)?,
            };
            out.push((line, value));
        }
        Ok(out)
    }

    /// The template's answer, checked against the text path's; whether the template answered.
    fn agrees(text: &str, vars: &Variables<'_>) -> bool {
        let names: Vec<&str> = vars.keys().copied().collect();
        let t = FileTemplate::build(text, &names);
        let Some(filled) = t.fill(vars) else { return false };
        assert_eq!(Ok(filled), text_docs(text, vars), "text: {text:?}, vars: {vars:?}");
        true
    }

    fn vars(x: &str) -> Variables<'_> {
        [("x", x), ("cluster.name", "c00001"), ("a-b", "zz")].into_iter().collect()
    }

    /// Snippets with `${x}` in every place YAML can hold it; `X` is a place for a second one.
    const SNIPPETS: &[&str] = &[
        "v: ${x}\n",
        "v: pre-${x}-post\n",
        "v: '${x}'\n",
        "v: \"${x}\"\n",
        "v: |\n  line ${x}\n  two\n",
        "v: >-\n  folded ${x}\n  more ${x}\n",
        "v: [${x}, b, '${x}']\n",
        "v: {a: ${x}, b: \"${x}\"}\n",
        "${x}: v\n",
        "'${x}': v\n",
        "v: a # ${x}\n",
        "# ${x}\nv: 1\n",
        "a: &A ${x}\nb: *A\n",
        "a: &${x} 1\n",
        "v: !!str ${x}\n",
        "v: !!int ${x}\n",
        "v: ${y:-fallback}\n",
        "v: ${y:-}\n",
        "v: $${x}\n",
        "v: \"\\t${x}\"\n",
        "v: a\n  ${x}\n  b\n",
        "l:\n- ${x}\n- ${cluster.name}\n",
        "v: ${x}\n---\nw: ${cluster.name}\n",
        "v: ${x}:${a-b}\n",
        "v: ${x}\nv: 2\n",
        "base: &b {k: ${x}}\nm:\n  <<: *b\n",
        "v: ${undefined}\n",
        "v: ${x\n",
        "v: [unclosed ${x}\n",
        "---\n${x}\n",
        "v: ${x}${x}\n",
        "v:\n  - a: ${x}\n    b: ${cluster.name}\n",
        "v: \"multi\n  line ${x}\"\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-${cluster.name}\n  namespace: ns-${cluster.name}\ndata:\n  n: \"${x}\"\n",
    ];

    /// Values YAML reads differently, and values that must take the text path.
    const VALUES: &[&str] = &[
        "c00001",
        "3",
        "-3",
        "true",
        "yes",
        "Off",
        "y",
        "null",
        "NULL",
        "~",
        "0777",
        "0o17",
        "0x1F",
        "1e3",
        "1_000",
        "1.0",
        ".5",
        "2001-12-14",
        "a.b-c_d/e",
        "9223372036854775808",
        ".inf",
        "",
        "has space",
        "x: y",
        "#c",
        "-lead",
        "a\nb",
        "'q'",
        "\"dq\"",
        "${x}",
        "[a]",
        "{a: b}",
        "a#b",
        "a,b",
        "QzStKn0nKtSzQ",
        "back\\slash",
        "ünï",
    ];

    #[test]
    fn every_snippet_and_value_agrees_with_the_text_path() {
        let mut templated = 0;
        for s in SNIPPETS {
            for v in VALUES {
                templated += usize::from(agrees(s, &vars(v)));
            }
        }
        // Most plain and quoted places are templated; keys, comments, anchors, escapes are not.
        assert!(templated > SNIPPETS.len() * VALUES.len() / 3, "templated {templated}");
    }

    #[test]
    fn random_documents_agree_with_the_text_path() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % n as u64).unwrap_or(0)
        };
        for _ in 0..3000 {
            let text: String = (0..1 + next(4)).map(|_| SNIPPETS[next(SNIPPETS.len())]).collect::<Vec<_>>().join("---\n");
            agrees(&text, &vars(VALUES[next(VALUES.len())]));
        }
    }

    #[test]
    fn a_plain_scalar_is_resolved_again_and_a_quoted_one_stays_a_string() {
        let names_vars = vars("3");
        let names: Vec<&str> = names_vars.keys().copied().collect();
        let t = FileTemplate::build("a: ${x}\nb: \"${x}\"\nc: n-${x}\n", &names);
        let docs = t.fill(&names_vars).expect("templated");
        assert_eq!(docs, vec![(1, serde_json::json!({"a": 3, "b": "3", "c": "n-3"}))]);
        assert!(t.fill(&vars("two words")).is_none(), "a value with a space takes the text path");
    }

    #[test]
    fn files_that_could_differ_are_not_templated() {
        let v = vars("c1");
        let names: Vec<&str> = v.keys().copied().collect();
        for text in ["${x}: v\n", "v: a # ${x}\n", "a: &A ${x}\nb: *A\n", "v: \"\\t${x}\"\n", "v: ${nope}\n", "v: QzStKn\n", "v: 1\nv: 2\n"]
        {
            assert!(FileTemplate::build(text, &names).fill(&v).is_none(), "{text:?}");
        }
    }

    /// Every `*.yaml` under `STACKSYNC_YAML_CORPUS` (say, a checkout of real manifests) as it is
    /// and with `${x}` put in front of every plain value that ends a line, for several values:
    /// the template agrees with the text path wherever it answers.
    /// `STACKSYNC_YAML_CORPUS=DIR cargo test --lib template::tests::corpus -- --ignored --nocapture`
    #[test]
    #[ignore = "needs STACKSYNC_YAML_CORPUS"]
    fn corpus_agrees_with_the_text_path() {
        fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    files(&p, out);
                } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    out.push(p);
                }
            }
        }
        let mut paths = Vec::new();
        files(std::path::Path::new(&std::env::var("STACKSYNC_YAML_CORPUS").expect("STACKSYNC_YAML_CORPUS")), &mut paths);
        let (mut checked, mut templated) = (0, 0);
        for p in paths {
            let Ok(text) = std::fs::read_to_string(&p) else { continue };
            // No prefix of a real file makes the parser panic (an unfinished upload, a cut file).
            for cut in (0..text.len()).step_by(7).filter(|&i| text.is_char_boundary(i)) {
                let _ = kubeyaml::documents(&text[..cut]);
            }
            let marked: String = text
                .lines()
                .map(|l| match l.split_once(": ") {
                    Some((k, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') => {
                        format!("{k}: ${{x}}{v}\n")
                    }
                    _ => format!("{l}\n"),
                })
                .collect();
            for t in [&text, &marked] {
                for v in ["c1", "3", "true", "a b", "0777"] {
                    checked += 1;
                    templated += usize::from(agrees(t, &vars(v)));
                }
            }
        }
        eprintln!("{checked} file renders checked, {templated} templated");
        assert!(checked > 0);
    }

    #[test]
    fn inert_values() {
        for v in ["c1", "a.b", "a_b", "a-b/c", "3", "true"] {
            assert!(inert(v), "{v}");
        }
        for v in ["", "-a", ".a", "/a", "_a", "a b", "a:b", "a#b", "a\nb", "'a'", "ü", &"a".repeat(254)] {
            assert!(!inert(v), "{v}");
        }
    }
}
