//! The crate's layering, checked: every `crate::` path in `src/` (a `use`, a path in code, a
//! `super::` that climbs to the crate root) is an import of one top-level module by another, and
//! each must be one the rules in docs/architecture.md ("Layers") allow. There must be no cycle
//! between top-level modules, in the rules or in the code. A failure names the file and line, the
//! path, and the rule it breaks.
//!
//! Pure Rust over the source text: comments, string and character literals are blanked (line
//! numbers kept) before paths are read, so a doc link or a message mentioning `crate::x` is no
//! import.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One import of a top-level module by another.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    /// The importing top-level module.
    from: String,
    /// The imported top-level module.
    to: String,
    file: PathBuf,
    line: usize,
    /// The path as written (`crate::config::Config`, `super::super::config::Config`; in a
    /// group, up to the module: `crate::{config`).
    path: String,
}

/// The rules: for each top-level module, the modules it may import.
type Rules = BTreeMap<String, BTreeSet<String>>;

const RULES_START: &str = "<!-- layering rules: read by tests/layering.rs -->";
const RULES_END: &str = "<!-- end of layering rules -->";

#[test]
fn imports_follow_the_documented_layering() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = root.join("docs/architecture.md");
    let text = std::fs::read_to_string(&doc).expect("docs/architecture.md");
    let rules = parse_rules(&text).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let modules = top_level_modules(&root.join("src"));
    let imports = scan_crate(root, &modules);

    let mut report = String::new();
    for m in &modules {
        if !rules.contains_key(m) {
            let _ =
                writeln!(report, "src/{m}: a top-level module the layering does not place: add it to the rules in docs/architecture.md");
        }
    }
    for m in rules.keys().filter(|m| !modules.contains(*m)) {
        let _ = writeln!(report, "docs/architecture.md: the rules name `{m}`, which is no top-level module of src/");
    }
    if let Some(cycle) = find_cycle(&rules) {
        let _ = writeln!(report, "docs/architecture.md: the rules allow a cycle: {}", cycle.join(" -> "));
    }
    for i in &imports {
        let Some(allowed) = rules.get(&i.from) else { continue };
        if !allowed.contains(&i.to) {
            let may = if allowed.is_empty() {
                "nothing of the crate".to_owned()
            } else {
                allowed.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
            };
            let _ = writeln!(
                report,
                "{}:{}: `{}` imports `{}` (`{}`): the layering lets `{}` import only {may}",
                i.file.display(),
                i.line,
                i.from,
                i.to,
                i.path,
                i.from
            );
        }
    }
    // Every cycle, each with one import per edge: found, reported, its first edge taken out of
    // the graph, and again (bounded: a graph of n modules has at most n² edges).
    let mut graph = graph_of(&imports);
    for _ in 0..modules.len() * modules.len() {
        let Some(cycle) = find_cycle(&graph) else { break };
        let _ = writeln!(report, "a cycle between top-level modules: {}", cycle.join(" -> "));
        for pair in cycle.windows(2) {
            if let Some(i) = imports.iter().find(|i| i.from == pair[0] && i.to == pair[1]) {
                let _ = writeln!(report, "  {}:{}: `{}` imports `{}` (`{}`)", i.file.display(), i.line, i.from, i.to, i.path);
            }
        }
        if let Some(edges) = graph.get_mut(&cycle[0]) {
            edges.remove(&cycle[1]);
        }
    }
    assert!(report.is_empty(), "the layering of docs/architecture.md is broken:\n{report}");
    assert!(imports.len() > 100, "only {} imports between top-level modules found: is the scanner reading src/?", imports.len());
}

/// docs/architecture.md's "Follow one Cluster" walks from a watch event to the status in at most
/// eight files: each numbered step names one file, under `src/` or of a library crate
/// (`crates/…`), and it must exist.
#[test]
fn the_walk_through_names_at_most_eight_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let start = doc.find("### Follow one Cluster").expect("a \"### Follow one Cluster\" section");
    let section = doc[start + 1..].split("\n#").next().unwrap_or_default();
    let files: Vec<&str> = section
        .lines()
        .filter(|l| l.split_once(". `").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
        .filter_map(|l| l.split('`').nth(1))
        .collect();
    assert!(!files.is_empty() && files.len() <= 8, "the walk-through names {} files: {files:?}", files.len());
    for f in &files {
        let path = if f.starts_with("crates/") { root.join(f) } else { root.join("src").join(f) };
        assert!(path.is_file(), "docs/architecture.md, Follow one Cluster: {} does not exist", path.display());
    }
}

/// Prints the import graph between top-level modules (`cargo test --test layering -- --nocapture
/// import_graph`): each module, what it imports and how many paths say so.
#[test]
fn import_graph() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = top_level_modules(&root.join("src"));
    let imports = scan_crate(root, &modules);
    let mut counts: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for i in &imports {
        *counts.entry(&i.from).or_default().entry(&i.to).or_default() += 1;
    }
    for m in &modules {
        let to = counts.get(m.as_str()).map(|c| c.iter().map(|(t, n)| format!("{t}({n})")).collect::<Vec<_>>().join(", "));
        println!("{m} -> {}", to.unwrap_or_default());
    }
}

/// The modules `src/lib.rs` is made of: `src/<m>.rs` and `src/<m>/mod.rs`.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("src/") {
        let path = entry.expect("src/ entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if path.is_dir() && path.join("mod.rs").is_file() {
            out.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs")
            && stem != "lib"
            && stem != "main"
        {
            out.insert(stem.to_owned());
        }
    }
    out
}

/// Every import between top-level modules in the library's files (`src/main.rs` is the binary,
/// above every layer; `src/lib.rs` only declares the modules).
fn scan_crate(root: &Path, modules: &BTreeSet<String>) -> Vec<Import> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).expect("under the root").to_path_buf();
        let Some(module_path) = module_path(&rel) else { continue };
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        for (to, line, path) in crate_paths(&text, module_path.len()) {
            if to != module_path[0] && modules.contains(&to) {
                out.push(Import { from: module_path[0].clone(), to, file: rel.clone(), line, path });
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/` (`src/a/b.rs` and `src/a/b/mod.rs`: `[a, b]`); `None`
/// for `src/lib.rs` and `src/main.rs`.
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().skip(1).map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

/// The code of a Rust file with comments and the contents of string and character literals
/// replaced by spaces (newlines kept, so lines still count).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_prefix(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push_str(&" ".repeat(j + 1 - i));
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    out.push_str(&" ".repeat(hashes + 1));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), else a lifetime or label.
            let end = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push_str(&" ".repeat(end + 1 - i));
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Whether the `r` at `i` starts a raw string (`r"`, `br"`) rather than ending an identifier.
fn raw_prefix(chars: &[char], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).map(|p| chars[p]);
    !ident_char(before(1)) || (before(1) == Some('b') && !ident_char(before(2)))
}

/// A token of the code: an identifier, `::`, or one other character.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_whitespace() {
        } else if c.is_alphabetic() || c == '_' {
            let mut ident = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_alphanumeric() || n == '_' {
                    ident.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push((Tok::Ident(ident), line));
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push((Tok::PathSep, line));
        } else {
            out.push((Tok::Punct(c), line));
        }
    }
    out
}

/// The crate's top-level modules a file names: `(module, line, path as written)` for every
/// `crate::m`, every `crate::{m::…, n}` (nested groups too) and every `super::…::m` that climbs
/// to the crate root. `depth` is the file's module depth (`src/a/b.rs`: 2); inline `mod x { … }`
/// blocks add to it.
fn crate_paths(text: &str, depth: usize) -> Vec<(String, usize, String)> {
    let toks = tokens(&code_only(text));
    let mut out = Vec::new();
    // Open braces: whether each opened an inline module.
    let mut braces: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => {
                let inline_mod = i >= 2 && toks[i - 2].0 == Tok::Ident("mod".into()) && matches!(toks[i - 1].0, Tok::Ident(_));
                braces.push(inline_mod);
            }
            Tok::Punct('}') => {
                braces.pop();
            }
            Tok::Ident(word) if word == "crate" && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) => {
                // `pub(crate)`, `$crate` and `crate` alone are no paths; `crate::` always is one.
                after_root(&toks, i + 2, "crate::", &mut out);
            }
            Tok::Ident(word) if word == "super" && (i == 0 || toks[i - 1].0 != Tok::PathSep) => {
                let mut j = i;
                let mut ups = 0;
                let mut written = String::new();
                while toks.get(j).map(|t| &t.0) == Some(&Tok::Ident("super".into())) && toks.get(j + 1).map(|t| &t.0) == Some(&Tok::PathSep)
                {
                    ups += 1;
                    written.push_str("super::");
                    j += 2;
                }
                let here = depth + braces.iter().filter(|m| **m).count();
                if ups > 0 && ups >= here {
                    after_root(&toks, j, &written, &mut out);
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// After a path reaching the crate root (`crate::`, `super::super::`): the module named at `at`,
/// or each first segment of a `{…}` group.
fn after_root(toks: &[(Tok, usize)], at: usize, written: &str, out: &mut Vec<(String, usize, String)>) {
    match toks.get(at) {
        Some((Tok::Ident(m), line)) if m != "self" && m != "super" => {
            // The path as written, as far as it goes (`crate::config::Config`).
            let mut path = format!("{written}{m}");
            let mut k = at + 1;
            while let (Some((Tok::PathSep, _)), Some((Tok::Ident(next), _))) = (toks.get(k), toks.get(k + 1)) {
                path.push_str("::");
                path.push_str(next);
                k += 2;
            }
            out.push((m.clone(), *line, path));
        }
        Some((Tok::Punct('{'), _)) => {
            // Each item of the group starts after `{` or a `,` at the group's own level.
            let mut level = 0;
            let mut expect_item = true;
            for (tok, line) in &toks[at..] {
                match tok {
                    Tok::Punct('{') => {
                        level += 1;
                        expect_item = level == 1;
                    }
                    Tok::Punct('}') => {
                        level -= 1;
                        if level == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if level == 1 => expect_item = true,
                    Tok::Ident(m) if expect_item && level == 1 => {
                        if m != "self" {
                            out.push((m.clone(), *line, format!("{written}{{{m}")));
                        }
                        expect_item = false;
                    }
                    _ => expect_item = false,
                }
            }
        }
        _ => {}
    }
}

/// The rules table of docs/architecture.md, between [`RULES_START`] and [`RULES_END`]: rows
/// `| `module` | … | `a`, `b` |` whose last column lists what the module may import (`nothing`:
/// no module of the crate).
fn parse_rules(doc: &str) -> Result<Rules, String> {
    let start = doc.find(RULES_START).ok_or_else(|| format!("no `{RULES_START}` line"))?;
    let end = doc[start..].find(RULES_END).ok_or_else(|| format!("no `{RULES_END}` line after the rules"))? + start;
    let mut rules = Rules::new();
    for row in doc[start..end].lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
        let (Some(first), Some(last)) = (cells.first(), cells.last()) else { continue };
        let Some(module) = first.strip_prefix('`').and_then(|m| m.strip_suffix('`')) else { continue };
        let allowed: BTreeSet<String> = last.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        if allowed.is_empty() && *last != "nothing" {
            return Err(format!("the rule of `{module}` lists no module in backticks, nor `nothing`: `{last}`"));
        }
        if rules.insert(module.to_owned(), allowed).is_some() {
            return Err(format!("`{module}` has two rules"));
        }
    }
    if rules.is_empty() {
        return Err("the layering rules table has no rows".into());
    }
    Ok(rules)
}

fn graph_of(imports: &[Import]) -> Rules {
    let mut g = Rules::new();
    for i in imports {
        g.entry(i.from.clone()).or_default().insert(i.to.clone());
    }
    g
}

/// A cycle of the graph (`[a, b, a]`), if it has one.
fn find_cycle(g: &Rules) -> Option<Vec<String>> {
    fn visit(n: &str, g: &Rules, stack: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[pos..].to_vec();
            cycle.push(n.to_owned());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

#[test]
fn the_scanner_reads_paths_as_rustc_does() {
    let text = r##"
//! A doc line naming crate::doc does not count.
use crate::apply::ssa;
use crate::{
    config::{self, Config},
    model::ObjKey,
    self,
};
pub(crate) fn f() -> crate::status::ClusterStatus {
    let _ = "crate::in_a_string";
    let _ = r#"crate::in_a_raw_string"#;
    let _c = '"';
    let _l: &'static str = "x"; /* crate::in_a_block_comment */
    super::super::release::select()
}
mod tests {
    use super::super::super::cache;
    use super::super::not_the_root;
    let _ = br#"crate::in_a_byte_string"#;
}
"##;
    let found: Vec<(String, usize)> = crate_paths(text, 2).into_iter().map(|(m, l, _)| (m, l)).collect();
    let want = [("apply", 3), ("config", 5), ("model", 6), ("status", 9), ("release", 14), ("cache", 17)];
    assert_eq!(found, want.map(|(m, l)| (m.to_owned(), l)));
    // From src/a/mod.rs (depth 1), one `super` is the crate root.
    let top: Vec<String> = crate_paths("use super::config::Config;\nuse super::*;\n", 1).into_iter().map(|(m, ..)| m).collect();
    assert_eq!(top, ["config"]);
    assert_eq!(module_path(Path::new("src/a/b/mod.rs")), Some(vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(module_path(Path::new("src/telemetry.rs")), Some(vec!["telemetry".to_owned()]));
    assert_eq!(module_path(Path::new("src/main.rs")), None);
}

#[test]
fn cycles_are_found() {
    let g: Rules = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
        .collect();
    assert_eq!(find_cycle(&g), Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned(), "a".to_owned()]));
    let acyclic: Rules =
        [("a", vec!["b"]), ("b", vec![])].into_iter().map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect())).collect();
    assert_eq!(find_cycle(&acyclic), None);
}

// ---- The file-level import graph ----------------------------------------------------------

/// One file naming an item of another: `from` holds a path that resolves into `to`'s module.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileImport {
    from: PathBuf,
    to: PathBuf,
    line: usize,
    /// The path as resolved, from the crate root (`crate::controller::Context`).
    path: String,
}

/// File-level imports left out of [`no_file_level_import_cycle`] while the work that removes
/// their cycle is in flight elsewhere: `(from, to, why)`. Each must still exist.
const PENDING: &[(&str, &str, &str)] = &[];

/// No file-level import circle anywhere in `src/`: a file imports another when a `crate::`,
/// `super::` or `self::` path in it resolves to an item of the other file's module. A failure
/// names each cycle, file -> file -> …, each edge with the file, line and path that make it.
///
/// How paths are resolved, an approximation that needs no compiler:
/// - a path is resolved to the longest prefix of it that is the module of a file (`src/a/b.rs`
///   and `src/a/b/mod.rs` are `a::b`; `mod.rs` is its folder's module): `super::status::now`
///   in `src/targets/kubernetes/reconcile/cluster.rs` is `targets/kubernetes/reconcile/status.rs`,
///   `crate::controller::Context` is `controller/mod.rs`;
/// - an item re-exported with `pub use` belongs to the file that defines it: `super::Context`
///   in `src/controller/pipeline.rs`, re-exported by `controller/mod.rs` from `context`, is
///   `controller/context.rs` (re-exports followed, `as` and globs too, [`Reexports::resolve`]);
/// - only paths that start with `crate::`, `super::` or `self::` are read, in `use` lines,
///   `use` groups (nested too) and code; a bare path (`run::pass`, `pub use context::Context`
///   in a `mod.rs`: a parent naming its own children) is not, for it cannot be told from an
///   external crate's path without resolving names; `mod x;` declarations are no imports;
/// - `pub(in crate::x)` is a visibility, not an import; inline `mod x { … }` blocks (the
///   `tests` modules) are part of their file, and a path into one's own file is no edge;
/// - comments and string literals are blanked first ([`code_only`]), so a doc link is no edge.
#[test]
fn no_file_level_import_cycle() {
    let imports = workspace_imports();
    // Edges of cycles in other people's work in flight, left out until it lands; each must
    // still exist (a stale entry fails, so the list only shrinks).
    let mut report = String::new();
    let kept: Vec<FileImport> = imports
        .iter()
        .filter(|i| !PENDING.iter().any(|(from, to, _)| i.from == Path::new(from) && i.to == Path::new(to)))
        .cloned()
        .collect();
    for (from, to, why) in PENDING {
        if !imports.iter().any(|i| i.from == Path::new(from) && i.to == Path::new(to)) {
            let _ = writeln!(report, "tests/layering.rs: PENDING names {from} -> {to} ({why}), which no longer exists: remove it");
        }
    }
    report.push_str(&file_cycles(&kept));
    assert!(
        report.is_empty(),
        "file-level import cycles in src/, crates/ or testkit/ (break each: move what both need into a third file):\n{report}"
    );
    assert!(imports.len() > 300, "only {} file-level imports found: is the scanner reading src/?", imports.len());
    for krate in ["crates/applier/", "crates/gotemplate/", "testkit/"] {
        assert!(imports.iter().any(|i| i.from.starts_with(krate)), "no file-level import found in {krate}: is the scanner reading it?");
    }
}

/// The file-level imports of every crate of the workspace with a library (`src/`, each of
/// `crates/*` and `testkit/`), each crate's files named from the repository's root.
fn workspace_imports() -> Vec<FileImport> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = vec![root.to_path_buf(), root.join("testkit")];
    let mut members: Vec<PathBuf> =
        std::fs::read_dir(root.join("crates")).expect("crates/").flatten().map(|e| e.path()).filter(|p| p.join("src").is_dir()).collect();
    members.sort();
    crates.extend(members);
    let mut out = Vec::new();
    for krate in crates {
        let prefix = krate.strip_prefix(root).expect("under the root").to_path_buf();
        out.extend(scan_files(&krate).into_iter().map(|i| FileImport { from: prefix.join(&i.from), to: prefix.join(&i.to), ..i }));
    }
    out
}

/// Prints each file and the files it imports (`cargo test --test layering -- --nocapture
/// file_graph`).
#[test]
fn file_graph() {
    let mut g: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for i in workspace_imports() {
        g.entry(i.from).or_default().insert(i.to);
    }
    for (from, to) in &g {
        println!("{} -> {}", from.display(), to.iter().map(|t| t.display().to_string()).collect::<Vec<_>>().join(", "));
    }
}

/// Every cycle of the file graph, one report line per cycle and one per edge: a cycle is found,
/// reported, its first edge taken out, and again (bounded by the number of edges).
fn file_cycles(imports: &[FileImport]) -> String {
    let key = |p: &Path| p.display().to_string();
    let mut graph: Rules = Rules::new();
    for i in imports {
        graph.entry(key(&i.from)).or_default().insert(key(&i.to));
    }
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    let mut report = String::new();
    for _ in 0..=edges {
        let Some(cycle) = find_cycle(&graph) else { break };
        let _ = writeln!(report, "a file-level import cycle: {}", cycle.join(" -> "));
        for pair in cycle.windows(2) {
            if let Some(i) = imports.iter().find(|i| key(&i.from) == pair[0] && key(&i.to) == pair[1]) {
                let _ = writeln!(report, "  {}:{}: `{}` (in {})", i.from.display(), i.line, i.path, i.to.display());
            }
        }
        if let Some(out) = graph.get_mut(&cycle[0]) {
            out.remove(&cycle[1]);
        }
    }
    report
}

/// Every file-level import of one crate's library files (`src/main.rs`, the binary, names the
/// library by its crate name, and is left out), paths reported relative to `root` (the crate's
/// directory). An import through a `pub use` resolves to the file that defines the item
/// ([`reexports`]), so a re-export hides no circle.
fn scan_files(root: &Path) -> Vec<FileImport> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(root).expect("under the root").to_path_buf();
            Some((module_path(&rel)?, rel))
        })
        .collect();
    // The crate root: what `src/lib.rs` defines or re-exports (`crate::Object`).
    if root.join("src/lib.rs").is_file() {
        modules.insert(Vec::new(), PathBuf::from("src/lib.rs"));
    }
    let texts: BTreeMap<&PathBuf, String> = modules
        .values()
        .map(|rel| (rel, std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))))
        .collect();
    let mut index = Reexports::default();
    for (module, rel) in &modules {
        let code = code_only(&texts[rel]);
        index.defined.insert(rel.clone(), defined_items(&code));
        for (name, target) in reexports(&code, module) {
            match name {
                Some(name) => index.named.insert((module.clone(), name), target),
                None => {
                    index.globs.entry(module.clone()).or_default().push(target);
                    None
                }
            };
        }
    }
    let mut out = Vec::new();
    for (module, rel) in &modules {
        for (path, line) in resolved_paths(&texts[rel], module) {
            let Some((to, path)) = index.resolve(&modules, path, 0) else { continue };
            if to != rel {
                out.push(FileImport { from: rel.clone(), to: to.clone(), line, path: format!("crate::{}", path.join("::")) });
            }
        }
    }
    out
}

/// What a crate's files re-export (`pub use`, any visibility): `(module, name)` -> the path it
/// names; `module` -> the paths of its glob re-exports; and each file's own items.
#[derive(Default)]
struct Reexports {
    named: BTreeMap<(Vec<String>, String), Vec<String>>,
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    defined: BTreeMap<PathBuf, BTreeSet<String>>,
}

impl Reexports {
    /// The file that defines what `path` names, and the path followed there: the file of the
    /// longest prefix of `path` that is a module; when the next name is not that file's own item
    /// but one it re-exports, the re-exported path instead (followed up to eight re-exports
    /// deep). `None`: no prefix is a module of the crate (another crate's path).
    fn resolve<'m>(
        &self,
        modules: &'m BTreeMap<Vec<String>, PathBuf>,
        path: Vec<String>,
        depth: usize,
    ) -> Option<(&'m PathBuf, Vec<String>)> {
        let k = (0..=path.len()).rev().find(|&k| modules.contains_key(&path[..k]))?;
        let file = &modules[&path[..k]];
        let Some(name) = path.get(k).filter(|_| depth < 8) else { return Some((file, path)) };
        if self.defined.get(file).is_some_and(|d| d.contains(name)) {
            return Some((file, path));
        }
        let module = path[..k].to_vec();
        let follow = |target: &[String], rest: &[String]| -> Vec<String> { target.iter().chain(rest).cloned().collect() };
        if let Some(target) = self.named.get(&(module.clone(), name.clone())) {
            let next = follow(target, &path[k + 1..]);
            if next != path {
                return self.resolve(modules, next, depth + 1).or(Some((file, path)));
            }
        }
        for glob in self.globs.get(&module).into_iter().flatten() {
            let next = follow(glob, &path[k..]);
            if next != path
                && let Some((to, p)) = self.resolve(modules, next, depth + 1)
                && to != file
                && self.defined.get(to).is_some_and(|d| d.contains(name) || p.len() > glob.len() + 1)
            {
                return Some((to, p));
            }
        }
        Some((file, path))
    }
}

/// The names of the items a file's code declares at any depth (`fn`, `struct`, `enum`, `union`,
/// `trait`, `type`, `const`, `static`, `mod`, `macro_rules!`): an item a module defines itself is
/// never looked for in its re-exports.
fn defined_items(code: &str) -> BTreeSet<String> {
    let toks = tokens(code);
    let mut out = BTreeSet::new();
    for (i, (t, _)) in toks.iter().enumerate() {
        let Tok::Ident(kw) = t else { continue };
        let at = match kw.as_str() {
            "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const" | "static" | "mod" => i + 1,
            "macro_rules" if toks.get(i + 1).is_some_and(|(t, _)| *t == Tok::Punct('!')) => i + 2,
            _ => continue,
        };
        if let Some((Tok::Ident(name), _)) = toks.get(at) {
            out.insert(name.clone());
        }
    }
    out
}

/// The re-exports of a file's code (`code_only` text) in module `module`: `(Some(name), path)`
/// for each item a `pub use` (any visibility) makes a name of the module (`as` respected;
/// `self` in a group re-exports the module it names), `(None, path)` for a glob. Paths are
/// resolved from the crate root; a bare path (`pub use context::Context`) is read from the
/// module itself (it may name another crate: then it resolves to no file).
fn reexports(code: &str, module: &[String]) -> Vec<Reexport> {
    let toks = tokens(code);
    let ident = |i: usize| match toks.get(i) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let sep = |i: usize| matches!(toks.get(i), Some((Tok::PathSep, _)));
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if ident(i) != Some("pub") {
            i += 1;
            continue;
        }
        // `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
        let mut j = i + 1;
        if toks.get(j).is_some_and(|(t, _)| *t == Tok::Punct('(')) {
            while j < toks.len() && toks[j].0 != Tok::Punct(')') {
                j += 1;
            }
            j += 1;
        }
        if ident(j) != Some("use") {
            i += 1;
            continue;
        }
        j += 1;
        let mut here: Vec<String> = module.to_vec();
        match ident(j) {
            Some("crate") if sep(j + 1) => {
                here.clear();
                j += 2;
            }
            Some("self") if sep(j + 1) => j += 2,
            Some("super") => {
                while ident(j) == Some("super") && sep(j + 1) {
                    here.pop();
                    j += 2;
                }
            }
            _ => {}
        }
        let (items, end) = aliased_tree(&toks, j, &here);
        out.extend(items);
        i = end.max(i + 1);
    }
    out
}

/// A re-exported path with the name it is exported as (`None`: a glob).
type Reexport = (Option<String>, Vec<String>);

/// [`use_tree`] for a re-export: each path with the name it is exported as, and the index after it.
fn aliased_tree(toks: &[(Tok, usize)], at: usize, prefix: &[String]) -> (Vec<Reexport>, usize) {
    let alias = |k: usize| match (toks.get(k), toks.get(k + 1)) {
        (Some((Tok::Ident(as_), _)), Some((Tok::Ident(name), _))) if as_ == "as" => Some((name.clone(), k + 2)),
        _ => None,
    };
    match toks.get(at).map(|t| &t.0) {
        Some(Tok::Ident(name)) if name == "self" => {
            let exported = prefix.last().cloned();
            match alias(at + 1) {
                Some((a, end)) => (vec![(Some(a), prefix.to_vec())], end),
                None => (vec![(exported, prefix.to_vec())], at + 1),
            }
        }
        Some(Tok::Ident(name)) => {
            let mut path = prefix.to_vec();
            path.push(name.clone());
            let next = toks.get(at + 2).map(|t| &t.0);
            if toks.get(at + 1).map(|t| &t.0) == Some(&Tok::PathSep)
                && matches!(next, Some(Tok::Ident(_) | Tok::Punct('{') | Tok::Punct('*')))
            {
                return aliased_tree(toks, at + 2, &path);
            }
            match alias(at + 1) {
                Some((a, end)) => (vec![(Some(a), path)], end),
                None => (vec![(Some(name.clone()), path)], at + 1),
            }
        }
        Some(Tok::Punct('*')) => (vec![(None, prefix.to_vec())], at + 1),
        Some(Tok::Punct('{')) => {
            let mut out = Vec::new();
            let mut k = at + 1;
            while k < toks.len() {
                match &toks[k].0 {
                    Tok::Punct('}') => return (out, k + 1),
                    Tok::Ident(_) | Tok::Punct('*') | Tok::Punct('{') => {
                        let (items, end) = aliased_tree(toks, k, prefix);
                        out.extend(items);
                        k = end;
                        while k < toks.len() && !matches!(toks[k].0, Tok::Punct(',') | Tok::Punct('}')) {
                            k += 1;
                        }
                    }
                    _ => k += 1,
                }
            }
            (out, k)
        }
        _ => (Vec::new(), at),
    }
}

/// The paths a file's code names, resolved from the crate root, each with its line: every path
/// starting with `crate::`, `super::` (any number) or `self::`, `use` groups expanded (`use
/// super::{a::b, c}` is `a::b` and `c`). `module` is the file's module path; inline
/// `mod x { … }` blocks add to it where they are open.
fn resolved_paths(text: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let toks = tokens(&code_only(text));
    let mut out = Vec::new();
    // Open braces: the inline module each opened, if it did.
    let mut braces: Vec<Option<String>> = Vec::new();
    let ident = |i: usize| match toks.get(i) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let sep = |i: usize| matches!(toks.get(i), Some((Tok::PathSep, _)));
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => {
                let name = (i >= 2 && ident(i - 2) == Some("mod")).then(|| ident(i - 1)).flatten().map(str::to_owned);
                braces.push(name);
            }
            Tok::Punct('}') => {
                braces.pop();
            }
            Tok::Ident(word) if matches!(word.as_str(), "crate" | "super" | "self") && sep(i + 1) && (i == 0 || !sep(i - 1)) => {
                // `pub(in crate::a)` is a visibility.
                let visibility = i >= 2 && ident(i - 1) == Some("in") && toks[i - 2].0 == Tok::Punct('(');
                let mut here: Vec<String> = module.iter().cloned().chain(braces.iter().flatten().cloned()).collect();
                let mut j = i;
                match word.as_str() {
                    "crate" => {
                        here.clear();
                        j += 2;
                    }
                    "self" => j += 2,
                    _ => {
                        while ident(j) == Some("super") && sep(j + 1) {
                            here.pop();
                            j += 2;
                        }
                    }
                }
                let (paths, end) = use_tree(&toks, j, &here);
                if !visibility {
                    out.extend(paths.into_iter().map(|p| (p, toks[i].1)));
                }
                i = end.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths of the use tree (or code path) at `at` under `prefix`, and the index after it:
/// `a::b` is `prefix::a::b`; `{a, b::{c, self}}` is `a`, `b::c` and `b`; `*` is `prefix`. A code
/// path ends at its first token that is not `::` followed by a name (`a::b::<T>`, `a::f(`).
fn use_tree(toks: &[(Tok, usize)], at: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    match toks.get(at).map(|t| &t.0) {
        Some(Tok::Ident(name)) if name == "self" => (vec![prefix.to_vec()], at + 1),
        Some(Tok::Ident(name)) => {
            let mut path = prefix.to_vec();
            path.push(name.clone());
            let next = toks.get(at + 2).map(|t| &t.0);
            if toks.get(at + 1).map(|t| &t.0) == Some(&Tok::PathSep)
                && matches!(next, Some(Tok::Ident(_) | Tok::Punct('{') | Tok::Punct('*')))
            {
                use_tree(toks, at + 2, &path)
            } else {
                (vec![path], at + 1)
            }
        }
        Some(Tok::Punct('*')) => (vec![prefix.to_vec()], at + 1),
        Some(Tok::Punct('{')) => {
            let mut out = Vec::new();
            let mut k = at + 1;
            while k < toks.len() {
                match &toks[k].0 {
                    Tok::Punct('}') => return (out, k + 1),
                    Tok::Punct(',') => k += 1,
                    Tok::Ident(_) | Tok::Punct('*') | Tok::Punct('{') => {
                        let (paths, end) = use_tree(toks, k, prefix);
                        out.extend(paths);
                        // Skip what the item has after its path (`as name`).
                        k = end;
                        while k < toks.len() && !matches!(toks[k].0, Tok::Punct(',') | Tok::Punct('}')) {
                            k += 1;
                        }
                    }
                    _ => k += 1,
                }
            }
            (out, k)
        }
        _ => (vec![prefix.to_vec()], at),
    }
}

#[test]
fn file_paths_resolve_as_rustc_resolves_them() {
    let text = r#"
use super::{Kube, status::{self, now}, rollout::*};
use crate::controller::Context as Ctx;
pub(in crate::targets::kubernetes) fn f() -> self::Local {
    super::super::directory::pass();
    crate::model::ClusterKey::new::<u8>("a", "b")
}
// crate::not::a::path
mod tests {
    use super::*;
    use super::super::events::for_cluster_sync;
}
"#;
    let module = ["targets".to_owned(), "kubernetes".to_owned(), "reconcile".to_owned()];
    let got: Vec<(String, usize)> = resolved_paths(text, &module).into_iter().map(|(p, l)| (p.join("::"), l)).collect();
    let want = [
        ("targets::kubernetes::Kube", 2),
        ("targets::kubernetes::status", 2),
        ("targets::kubernetes::status::now", 2),
        ("targets::kubernetes::rollout", 2),
        ("controller::Context", 3),
        ("targets::kubernetes::reconcile::Local", 4),
        ("targets::directory::pass", 5),
        ("model::ClusterKey::new", 6),
        ("targets::kubernetes::reconcile", 10),
        ("targets::kubernetes::events::for_cluster_sync", 11),
    ];
    assert_eq!(got, want.map(|(p, l)| (p.to_owned(), l)));
}

#[test]
fn an_import_through_a_reexport_is_an_import_of_the_defining_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("src/lib.rs", "pub mod a;\npub mod c;\npub use a::Thing as Root;\n");
    write(
        "src/a/mod.rs",
        "mod b;\nmod g;\npub use b::{Thing, other as Renamed};\npub use g::*;\npub use crate::c as see;\npub struct Own;\n",
    );
    write("src/a/b.rs", "pub struct Thing;\npub fn other() {}\n");
    write("src/a/g.rs", "pub fn globbed() {}\n");
    write(
        "src/c.rs",
        "use crate::a::Thing;\nuse crate::a::Renamed;\nuse crate::a::globbed;\nuse crate::a::Own;\nuse crate::Root;\nuse applier::x;\n",
    );
    let mut got: Vec<(String, String, usize)> =
        scan_files(dir.path()).into_iter().map(|i| (i.from.display().to_string(), i.to.display().to_string(), i.line)).collect();
    got.sort();
    let want = [
        ("src/a/mod.rs", "src/c.rs", 5),
        ("src/c.rs", "src/a/b.rs", 1),
        ("src/c.rs", "src/a/b.rs", 2),
        ("src/c.rs", "src/a/g.rs", 3),
        ("src/c.rs", "src/a/mod.rs", 4),
        ("src/c.rs", "src/a/b.rs", 5),
    ];
    let mut want: Vec<(String, String, usize)> = want.iter().map(|(f, t, l)| ((*f).to_owned(), (*t).to_owned(), *l)).collect();
    want.sort();
    assert_eq!(got, want, "through `pub use` (named, renamed, glob, the crate root's) to the defining file; another crate's path is none");
}

#[test]
fn file_cycles_are_named_with_their_edges() {
    let import = |from: &str, to: &str, line| FileImport { from: from.into(), to: to.into(), line, path: format!("crate::{to}") };
    let imports = [import("a.rs", "b.rs", 1), import("b.rs", "c.rs", 2), import("c.rs", "a.rs", 3), import("c.rs", "d.rs", 4)];
    let report = file_cycles(&imports);
    assert!(report.contains("a.rs -> b.rs -> c.rs -> a.rs"), "{report}");
    assert!(report.contains("  c.rs:3: `crate::a.rs` (in a.rs)"), "{report}");
    assert_eq!(file_cycles(&imports[1..]), "");
}
