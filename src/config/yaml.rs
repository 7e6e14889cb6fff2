//! A YAML node tree that remembers where every node came from, so config errors can name the line
//! and column of the exact field that is wrong (serde stops at the first error and loses positions).

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

/// Where a node starts in its file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    pub line: usize,
    pub col: usize,
}

/// A parsed YAML value with its position.
#[derive(Debug, Clone)]
pub struct Node {
    pub mark: Mark,
    pub value: Value,
}

#[derive(Debug, Clone)]
pub enum Value {
    /// A scalar as written; `quoted` is true for any non-plain style (so `"5"` stays a string).
    Scalar {
        text: String,
        quoted: bool,
    },
    Seq(Vec<Node>),
    /// Keys keep their own positions so "unknown field" points at the key.
    Map(Vec<(Node, Node)>),
}

impl Node {
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, quoted: false } if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Scalar { .. } if self.is_null() => "null",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// Converts the node to JSON with YAML 1.2 core-schema scalars (plain `true`/`false`, numbers,
    /// null; everything quoted or otherwise is a string), for free-form user values.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Scalar { .. } if self.is_null() => serde_json::Value::Null,
            Value::Scalar { text, quoted: true } => serde_json::Value::String(text.clone()),
            Value::Scalar { text, quoted: false } => match text.as_str() {
                "true" | "True" | "TRUE" => serde_json::Value::Bool(true),
                "false" | "False" | "FALSE" => serde_json::Value::Bool(false),
                t => {
                    let radix = |prefix: &str, radix: u32| t.strip_prefix(prefix).and_then(|d| i64::from_str_radix(d, radix).ok());
                    if let Some(i) = radix("0x", 16).or_else(|| radix("0o", 8)) {
                        serde_json::Value::from(i)
                    } else if let Ok(i) = t.parse::<i64>() {
                        serde_json::Value::from(i)
                    } else if let Some(f) = t.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                        serde_json::Value::Number(f)
                    } else {
                        serde_json::Value::String(t.to_owned())
                    }
                }
            },
            Value::Seq(items) => serde_json::Value::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => serde_json::Value::Object(
                entries.iter().map(|(k, v)| (k.scalar_text().unwrap_or_default().to_owned(), v.to_json())).collect(),
            ),
        }
    }

    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }
}

/// A syntax error with its position.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    pub mark: Mark,
    pub message: String,
}

/// Most nodes a document may hold once its aliases are expanded: far above any real config,
/// far below what an alias bomb (nested anchors each referenced many times) would allocate.
pub const MAX_NODES: usize = 200_000;
/// Deepest nesting of collections; everything that walks the tree recurses.
pub const MAX_DEPTH: usize = 64;

/// Parses a single YAML document. An empty file yields `None`.
///
/// # Errors
/// A scan error, a second document in the stream, an alias to an unknown anchor, a tag (YAML
/// tags such as `!!binary` or `!foo` would be silently ignored), nesting deeper than
/// [`MAX_DEPTH`], or aliases expanding to more than [`MAX_NODES`] nodes.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let tagged = |mark: Mark, tag: &dyn std::fmt::Display| SyntaxError {
        mark,
        message: format!("YAML tag `{tag}` is not supported: write the value plainly (tags would be ignored, not applied)"),
    };
    let mut docs = 0;
    for item in Parser::new_from_str(text) {
        let (event, span) =
            item.map_err(|e| SyntaxError { mark: Mark { line: e.marker().line(), col: e.marker().col() + 1 }, message: e.info() })?;
        let mark = Mark { line: span.start.line(), col: span.start.col() + 1 };
        match event {
            Event::DocumentStart(..) => {
                docs += 1;
                if docs > 1 {
                    return Err(SyntaxError { mark, message: "expected one YAML document, found a second one (`---`)".into() });
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if let Some(tag) = tag {
                    return Err(tagged(mark, &tag));
                }
                let quoted = !matches!(style, ScalarStyle::Plain);
                builder.push(Node { mark, value: Value::Scalar { text: text.into_owned(), quoted } }, anchor, 1);
                builder.count(mark, 1)?;
            }
            Event::SequenceStart(_, anchor, tag) | Event::MappingStart(_, anchor, tag) if tag.is_some() => {
                let _ = anchor;
                return Err(tagged(mark, &tag.map(|t| t.to_string()).unwrap_or_default()));
            }
            Event::SequenceStart(_, anchor, _) => builder.open(mark, anchor, Value::Seq(Vec::new()))?,
            Event::MappingStart(_, anchor, _) => builder.open(mark, anchor, Value::Map(Vec::new()))?,
            Event::SequenceEnd | Event::MappingEnd => builder.close()?,
            Event::Alias(id) => {
                let (node, size) =
                    builder.anchors.get(&id).cloned().ok_or_else(|| SyntaxError { mark, message: "alias to an unknown anchor".into() })?;
                // Counted before the copy: the budget is what stops an alias bomb allocating.
                builder.count(mark, size)?;
                // An alias nested deeper than the limit is as deep as the anchor's own nesting.
                if builder.stack.len() + depth(&node) > MAX_DEPTH {
                    return Err(too_deep(mark));
                }
                builder.push(node, 0, size);
            }
            _ => {}
        }
    }
    Ok(builder.root)
}

fn too_deep(mark: Mark) -> SyntaxError {
    SyntaxError { mark, message: format!("nested more than {MAX_DEPTH} levels deep") }
}

/// Nesting depth of a node (a scalar is 0).
fn depth(node: &Node) -> usize {
    match &node.value {
        Value::Scalar { .. } => 0,
        Value::Seq(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Map(entries) => 1 + entries.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
    }
}

/// A mapping's entry: its key and its value.
type Entry = (Node, Node);

/// YAML's merge key, as kubectl, helm and Go's YAML read it: `<<: *defaults` (or a list of
/// mappings, `<<: [*a, *b]`) adds the entries of those mappings that the mapping does not set
/// itself; of several, the first that sets a key wins. A quoted `"<<"` is a plain key. Merged
/// entries keep their own positions, so an error in one names the line it was written on.
fn merge_keys(entries: &mut Vec<(Node, Node)>) -> Result<(), SyntaxError> {
    let is_merge = |k: &Node| matches!(&k.value, Value::Scalar { text, quoted: false } if text == "<<");
    if !entries.iter().any(|(k, _)| is_merge(k)) {
        return Ok(());
    }
    let (merges, mut own): (Vec<Entry>, Vec<Entry>) = std::mem::take(entries).into_iter().partition(|(k, _)| is_merge(k));
    let wrong = |mark: Mark| SyntaxError { mark, message: "a merge key (`<<`) takes a mapping or a list of mappings".into() };
    for (_, value) in merges {
        let from: Vec<&Node> = match &value.value {
            Value::Map(_) => vec![&value],
            Value::Seq(items) => items.iter().collect(),
            Value::Scalar { .. } => return Err(wrong(value.mark)),
        };
        for map in from {
            let Value::Map(merged) = &map.value else { return Err(wrong(map.mark)) };
            for (k, v) in merged {
                let set = own.iter().any(|(o, _)| o.scalar_text().is_some() && o.scalar_text() == k.scalar_text());
                if !set {
                    own.push((k.clone(), v.clone()));
                }
            }
        }
    }
    *entries = own;
    Ok(())
}

#[derive(Default)]
struct Builder {
    /// Open collections with their anchor id, for maps a pending key, and their node count.
    stack: Vec<(Node, usize, Option<Node>, usize)>,
    /// By anchor id: the node and how many nodes it holds.
    anchors: HashMap<usize, (Node, usize)>,
    root: Option<Node>,
    /// Nodes in the document so far, aliases counted at their expanded size.
    nodes: usize,
}

impl Builder {
    fn count(&mut self, mark: Mark, n: usize) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(SyntaxError {
                mark,
                message: format!("the document expands to more than {MAX_NODES} values (anchors and aliases nested to blow it up?)"),
            });
        }
        Ok(())
    }

    fn open(&mut self, mark: Mark, anchor: usize, value: Value) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(too_deep(mark));
        }
        self.count(mark, 1)?;
        self.stack.push((Node { mark, value }, anchor, None, 1));
        Ok(())
    }

    fn close(&mut self) -> Result<(), SyntaxError> {
        if let Some((mut node, anchor, _, size)) = self.stack.pop() {
            if let Value::Map(entries) = &mut node.value {
                merge_keys(entries)?;
            }
            self.push(node, anchor, size);
        }
        Ok(())
    }

    fn push(&mut self, node: Node, anchor: usize, size: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some((parent, _, pending, parent_size)) => {
                *parent_size = parent_size.saturating_add(size);
                match &mut parent.value {
                    Value::Seq(items) => items.push(node),
                    Value::Map(entries) => match pending.take() {
                        None => *pending = Some(node),
                        Some(key) => entries.push((key, node)),
                    },
                    Value::Scalar { .. } => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let node = parse("a: 1\nb:\n  - x\n  - \"y\"\n").unwrap().unwrap();
        let Value::Map(entries) = &node.value else { panic!("map") };
        assert_eq!(entries[1].0.mark, Mark { line: 2, col: 1 });
        let Value::Seq(items) = &entries[1].1.value else { panic!("seq") };
        assert_eq!(items[1].mark, Mark { line: 4, col: 5 });
        assert!(matches!(&items[1].value, Value::Scalar { quoted: true, .. }));
    }

    #[test]
    fn aliases_resolve_and_second_document_is_refused() {
        let node = parse("a: &x {k: v}\nb: *x\n").unwrap().unwrap();
        assert_eq!(node.to_json(), serde_json::json!({"a": {"k": "v"}, "b": {"k": "v"}}));
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.mark.line, 2);
    }

    #[test]
    fn plain_scalars_follow_the_yaml_1_2_core_schema() {
        let node = parse("a: True\nb: FALSE\nc: 0x1F\nd: 0o17\ne: 1.5\nf: .inf\ng: \"true\"\nh: ~\ni: 007\n").unwrap().unwrap();
        assert_eq!(
            node.to_json(),
            serde_json::json!({"a": true, "b": false, "c": 31, "d": 15, "e": 1.5, "f": ".inf", "g": "true", "h": null, "i": 7})
        );
    }

    #[test]
    fn alias_bomb_was_expanded_until_abort() {
        // Ten levels of nine aliases each: 9^10 values if expanded.
        let mut text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n".to_owned();
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("expands to more than"), "{}", err.message);
        assert!(err.mark.line > 1);
    }

    #[test]
    fn deep_nesting_is_refused_by_line() {
        let text = format!("a: {}1{}\n", "[".repeat(100), "]".repeat(100));
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("nested more than 64"), "{}", err.message);
        let text = format!("a: &x {}1{}\nb: [[[[*x]]]]\n", "[".repeat(62), "]".repeat(62));
        assert!(parse(&text).unwrap_err().message.contains("nested"));
    }

    #[test]
    fn yaml_tags_were_ignored_silently() {
        for text in ["a: !!binary aGVsbG8=\n", "a: !foo bar\n", "a: !foo {b: 1}\n", "a: !!set [x]\n"] {
            let err = parse(text).unwrap_err();
            assert!(err.message.contains("YAML tag") && err.mark.line == 1, "{text}: {}", err.message);
        }
    }

    /// Regression: a config using YAML's merge key had `<<` refused as a "value name".
    #[test]
    fn merge_keys_add_what_the_mapping_does_not_set() {
        let node =
            parse("d: &d {a: 1, b: 2}\ne: &e {b: 9, c: 3}\nx:\n  b: own\n  <<: [*d, *e]\ny: {<<: *d}\nz: {\"<<\": 1}\n").unwrap().unwrap();
        let json = node.to_json();
        assert_eq!(json["x"], serde_json::json!({"a": 1, "b": "own", "c": 3}));
        assert_eq!(json["y"], serde_json::json!({"a": 1, "b": 2}));
        assert_eq!(json["z"], serde_json::json!({"<<": 1}), "a quoted key is a plain key");
        for bad in ["x: {<<: 1}\n", "x: {<<: [1]}\n"] {
            assert!(parse(bad).unwrap_err().message.contains("merge key"), "{bad}");
        }
    }

    #[test]
    fn empty_input_is_none() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
    }
}
