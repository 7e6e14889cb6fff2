//! The crate's files form layers: when `a.rs` names an item of `b.rs` (`use super::b::X`,
//! `crate::b::f(..)`, `super::Item` re-exported from `b.rs`), `b.rs` must not name anything of
//! `a.rs`, directly or through others. Measured on the source, so a new import that closes a
//! circle fails here with the circle printed.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

/// Module name (`lib` for the crate root) → its source.
fn sources() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    std::fs::read_dir(&dir)
        .expect("src/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| (p.file_stem().expect("stem").to_string_lossy().into_owned(), std::fs::read_to_string(&p).expect("read")))
        .collect()
}

/// The modules each file names, as `file → {module}`.
fn imports(files: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    let modules: BTreeSet<&str> = files.keys().map(String::as_str).filter(|m| *m != "lib").collect();
    // Where a name the root offers lives: the root's own items, and what it re-exports.
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    let item = Regex::new(r"(?m)^pub (?:async )?(?:struct|enum|fn|trait|type|const|static) (\w+)").expect("regex");
    for c in item.captures_iter(&files["lib"]) {
        owner.insert(c[1].to_string(), "lib");
    }
    let reexport = Regex::new(r"(?m)^pub use (\w+)::\{?([^;}]*)\}?;").expect("regex");
    for c in reexport.captures_iter(&files["lib"]) {
        let module = modules.get(&c[1]).copied().expect("a re-export from a sibling module");
        for name in c[2].split(',').map(str::trim).filter(|n| !n.is_empty()) {
            owner.insert(name.to_string(), module);
        }
    }
    let resolve = |name: &str| modules.get(name).copied().or_else(|| owner.get(name).copied());
    // `super::` / `crate::` then one name or a `{..}` group of paths.
    let path = Regex::new(r"\b(?:super|crate)::(\{[^;]*?\}|\w+)").expect("regex");
    let root_path = Regex::new(r"(?:^|[^\w:])(\w+)::").expect("regex");
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (file, text) in files {
        let mut in_tests = false;
        let edges = graph.entry(file.as_str()).or_default();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            in_tests |= line.starts_with("mod tests");
            if file == "lib" {
                // The root names its children without a prefix; `mod x;` only declares them.
                if code.starts_with("mod ") || code.starts_with("pub mod ") {
                    continue;
                }
                edges.extend(root_path.captures_iter(line).filter_map(|c| modules.get(&c[1]).copied()));
                continue;
            }
            for c in path.captures_iter(line) {
                // `super::` in a file's own `mod tests` is that file.
                if in_tests && line.starts_with(' ') && c[0].starts_with("super::") {
                    continue;
                }
                let heads: Vec<&str> = match c[1].strip_prefix('{') {
                    Some(group) => {
                        group.trim_end_matches('}').split(',').map(|p| p.trim().split("::").next().unwrap_or_default()).collect()
                    }
                    None => vec![c.get(1).expect("name").as_str()],
                };
                edges.extend(heads.into_iter().filter_map(|h| resolve(h.split(' ').next().unwrap_or_default())).filter(|m| m != file));
            }
        }
    }
    graph
}

/// A circle through the graph, if there is one.
fn circle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(start) = path.iter().position(|n| *n == node) {
            let mut found = path[start..].to_vec();
            found.push(node);
            return Some(found);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_file_imports_from_a_file_that_imports_from_it() {
    let files = sources();
    let graph = imports(&files);
    assert!(graph["server"].contains("store") && graph["store"].contains("faults"), "the scan sees imports: {graph:?}");
    if let Some(found) = circle(&graph) {
        panic!("import circle: {}", found.join(" -> "));
    }
}

#[test]
fn the_scan_finds_a_circle() {
    let graph: BTreeMap<&str, BTreeSet<&str>> =
        [("a", BTreeSet::from(["b"])), ("b", BTreeSet::from(["c"])), ("c", BTreeSet::from(["a"]))].into_iter().collect();
    assert_eq!(circle(&graph), Some(vec!["a", "b", "c", "a"]));
}
