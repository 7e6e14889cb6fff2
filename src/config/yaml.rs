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

/// Parses a single YAML document. An empty file yields `None`.
///
/// # Errors
/// A scan error, a second document in the stream, or an alias to an unknown anchor.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
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
            Event::Scalar(text, style, anchor, _tag) => {
                let quoted = !matches!(style, ScalarStyle::Plain);
                builder.push(Node { mark, value: Value::Scalar { text: text.into_owned(), quoted } }, anchor);
            }
            Event::SequenceStart(_, anchor, _) => builder.open(mark, anchor, Value::Seq(Vec::new())),
            Event::MappingStart(_, anchor, _) => builder.open(mark, anchor, Value::Map(Vec::new())),
            Event::SequenceEnd | Event::MappingEnd => builder.close(),
            Event::Alias(id) => {
                let node =
                    builder.anchors.get(&id).cloned().ok_or_else(|| SyntaxError { mark, message: "alias to an unknown anchor".into() })?;
                builder.push(node, 0);
            }
            _ => {}
        }
    }
    Ok(builder.root)
}

#[derive(Default)]
struct Builder {
    /// Open collections with their anchor id and, for maps, a pending key.
    stack: Vec<(Node, usize, Option<Node>)>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
}

impl Builder {
    fn open(&mut self, mark: Mark, anchor: usize, value: Value) {
        self.stack.push((Node { mark, value }, anchor, None));
    }

    fn close(&mut self) {
        if let Some((node, anchor, _)) = self.stack.pop() {
            self.push(node, anchor);
        }
    }

    fn push(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some((parent, _, pending)) => match &mut parent.value {
                Value::Seq(items) => items.push(node),
                Value::Map(entries) => match pending.take() {
                    None => *pending = Some(node),
                    Some(key) => entries.push((key, node)),
                },
                Value::Scalar { .. } => {}
            },
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
    fn empty_input_is_none() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
    }
}
