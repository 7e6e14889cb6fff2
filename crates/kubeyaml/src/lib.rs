//! YAML as Kubernetes reads it: the reader for YAML that stacksync did not write (helm's output,
//! manifest files, values template results, `metadata.yaml`, `clusteraddon.yaml`). It accepts exactly what kubectl and
//! helm accept and gives it the meaning they give it (sigs.k8s.io/yaml on go-yaml v2).
//!
//! The scanner is libyaml's (through the safe port `libyaml-safer`), the one go-yaml was
//! translated from, so the same texts are refused: tabs as indentation, a `---` inside a quoted
//! scalar. On top of it this crate applies what go-yaml and sigs.k8s.io/yaml do after scanning:
//! YAML 1.1 scalars ([`scalar`]), merge keys, a repeated key's last value winning (reported as a
//! [`Warning`], never silently), kubectl's document splitting ([`split`]). Aliases and nesting are
//! budgeted so no input can exhaust memory or the stack.
//!
//! What it is not: a writer, a serde deserializer, or a strict reader for files whose format we
//! own (stacksync's config file has its own strict reader, `config::yaml`). Entry points:
//! [`split`] (kubectl's document splitting), [`parse_document`] / [`parse`] / [`documents`]
//! (positioned [`Node`]s with [`Warning`]s), [`values`] (plain JSON, as kubectl sends it). It
//! imports nothing of stacksync.

#![warn(missing_docs)]

pub mod scalar;

use std::collections::HashMap;
use std::fmt;

use libyaml_safer::{EventData, Parser, ScalarStyle};

pub use scalar::{Resolved, ScalarError};

/// The largest text read; a manifest is configuration, not a data set.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// The deepest nesting accepted. go-yaml allows 10000; no manifest comes near 100, and this keeps
/// the recursive conversions far from a worker thread's stack limit.
pub const MAX_DEPTH: usize = 512;
/// Aliases may add at most this many nodes beyond three times the document's own nodes (an
/// alias bomb grows exponentially; real anchors reuse a few small blocks).
pub const ALIAS_ALLOWANCE: usize = 100_000;

/// Where a node starts: 1-based line and column of the text given to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

/// A parsed node with its position. Maps hold each key once (merge keys applied, the last of
/// repeated keys kept), in first-appearance order.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub mark: Mark,
    /// What it holds.
    pub value: Value,
}

/// A node's content: a scalar, a sequence or a mapping.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar, unresolved ([`Node::resolved`] gives its meaning).
    Scalar(Scalar),
    /// A sequence, in order.
    Seq(Vec<Node>),
    /// A mapping's entries, each key once, in first-appearance order.
    Map(Vec<(Node, Node)>),
}

/// A scalar as written, with what decides its meaning.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The text as written (quotes and escapes already resolved).
    pub text: String,
    /// Plain (unquoted) scalars are resolved (`yes`, `0777`, `~`); every other style is a string.
    pub plain: bool,
    /// An explicit tag, expanded (`tag:yaml.org,2002:str` for `!!str`).
    pub tag: Option<String>,
}

impl Node {
    /// The scalar's text as written, whatever it resolves to.
    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) => Some(&s.text),
            _ => None,
        }
    }

    /// What the node means (scalars only).
    pub fn resolved(&self) -> Option<Resolved> {
        match &self.value {
            Value::Scalar(s) => Some(scalar::resolve(s)),
            _ => None,
        }
    }

    /// Whether the node is a scalar meaning null (`~`, `null`, nothing).
    pub fn is_null(&self) -> bool {
        matches!(self.resolved(), Some(Resolved::Null))
    }

    /// What the node is, for messages: `null`, `a scalar`, `a list` or `a mapping`.
    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Scalar(_) if self.is_null() => "null",
            Value::Scalar(_) => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| scalar::key_string(k).as_deref() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The JSON kubectl sends for this node (sigs.k8s.io/yaml's conversion, then the API
    /// machinery's number decoding: an integral float becomes an integer).
    ///
    /// # Errors
    /// What kubectl refuses at this step: a null or collection map key, `.inf` / `.nan`, an
    /// explicit tag the text does not fit (`!!int abc`).
    pub fn to_json(&self) -> Result<serde_json::Value, SyntaxError> {
        match &self.value {
            Value::Scalar(s) => scalar::to_json(s).map_err(|cause| SyntaxError {
                mark: self.mark,
                message: cause.to_string(),
                cause: Some(Box::new(cause)),
            }),
            Value::Seq(items) => items.iter().map(Node::to_json).collect::<Result<Vec<_>, _>>().map(serde_json::Value::Array),
            Value::Map(entries) => {
                let mut map = serde_json::Map::new();
                for (k, v) in entries {
                    let key = scalar::key_string(k).ok_or_else(|| {
                        SyntaxError::new(k.mark, format!("a map key must be a string, number or boolean, found {}", k.type_name()))
                    })?;
                    map.insert(key, v.to_json()?);
                }
                Ok(serde_json::Value::Object(map))
            }
        }
    }
}

/// A text kubectl refuses, with its position. Always permanent: the same text is refused again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {}: {message}", mark.line)]
pub struct SyntaxError {
    /// Where kubectl (go-yaml) reports the problem.
    pub mark: Mark,
    /// What is wrong.
    pub message: String,
    /// The scalar kubectl cannot turn into JSON, when that is the problem.
    #[source]
    pub cause: Option<Box<ScalarError>>,
}

impl SyntaxError {
    pub(crate) fn new(mark: Mark, message: impl Into<String>) -> SyntaxError {
        SyntaxError { mark, message: message.into(), cause: None }
    }

    /// A stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        "InvalidYaml"
    }
}

/// Something kubectl accepts silently that the user should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The 1-based line it concerns.
    pub line: usize,
    /// What was accepted silently (a repeated key, …).
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// One document: its root (`None` when it holds only comments) and its warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The 1-based line of the text the document starts on.
    pub line: usize,
    /// The root node; `None` for a document of comments only.
    pub root: Option<Node>,
    /// What kubectl would accept silently, in text order.
    pub warnings: Vec<Warning>,
}

/// Splits a multi-document text as kubectl does (`k8s.io/apimachinery`'s `YAMLReader`): a line
/// starting with `---` ends a document and is dropped; only spaces and a comment may follow it.
/// Yields each document's text with the 1-based line it starts on (empty documents included).
///
/// # Errors
/// A separator followed by anything but a comment (`--- foo`), which kubectl refuses.
pub fn split(text: &str) -> Result<Vec<(usize, &str)>, SyntaxError> {
    let mut docs = Vec::new();
    let (mut start, mut start_line, mut offset) = (0, 1, 0);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with('#') {
                return Err(SyntaxError::new(
                    Mark { line: i + 1, col: 4 },
                    format!("invalid document separator `--- {rest}`: only a comment may follow `---`"),
                ));
            }
            docs.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    docs.push((start_line, &text[start..]));
    Ok(docs)
}

/// Splits `text` ([`split`]) and parses every document ([`parse`]); positions are the text's.
///
/// # Errors
/// The first document kubectl would refuse.
pub fn documents(text: &str) -> Result<Vec<Document>, SyntaxError> {
    split(text)?.into_iter().map(|(line, doc)| parse_document(doc, line)).collect()
}

/// The documents of a multi-document text as JSON, empty and `null` documents left out (as
/// kubectl skips them). Warnings are logged; callers that can name a chart use [`documents`].
///
/// # Errors
/// The first document kubectl would refuse.
pub fn values(text: &str) -> Result<Vec<serde_json::Value>, SyntaxError> {
    let mut out = Vec::new();
    for doc in documents(text)? {
        for w in &doc.warnings {
            tracing::warn!(line = w.line, "{}", w.message);
        }
        if let Some(v) = doc.root.as_ref().map(Node::to_json).transpose()?.filter(|v| !v.is_null()) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Parses the first YAML document of `text` (as go-yaml's `Unmarshal` does: anything after a
/// `...` end marker is not read).
///
/// # Errors
/// A scan or parse error, an alias to an unknown anchor, or a document over budget.
pub fn parse(text: &str) -> Result<Document, SyntaxError> {
    parse_document(text, 1)
}

/// [`parse`] for a document that starts at line `first_line` of a larger text (from [`split`]):
/// positions are the larger text's.
///
/// # Errors
/// As [`parse`].
pub fn parse_document(text: &str, first_line: usize) -> Result<Document, SyntaxError> {
    let at = |line: u64, col: u64| Mark { line: first_line + line as usize, col: col as usize + 1 };
    if text.len() > MAX_BYTES {
        return Err(SyntaxError::new(at(0, 0), format!("the text is larger than {MAX_BYTES} bytes")));
    }
    // A block scalar whose last line has no line break makes the scanner panic ("unexpected end
    // of input"); kubectl reads such a text as if it ended in one (`a: |` + `x` at the end of
    // a file is "x\n"), so it is given one. An error past the text's end is put at its end.
    let end = Mark { line: text.matches('\n').count(), col: text.rsplit('\n').next().map_or(0, |l| l.chars().count()) };
    let text: std::borrow::Cow<'_, str> = if text.is_empty() || text.ends_with('\n') { text.into() } else { format!("{text}\n").into() };
    let mut input = text.as_bytes();
    let mut parser = Parser::new();
    parser.set_input_string(&mut input);
    let mut b = Builder::default();
    for event in parser {
        let event = event.map_err(|e| {
            let m = e.problem_mark().unwrap_or_default();
            let message = match e.context() {
                Some(c) => format!("{} ({c})", e.problem()),
                None => e.problem().to_owned(),
            };
            let (line, col) = if m.line as usize > end.line { (end.line as u64, end.col as u64) } else { (m.line, m.column) };
            SyntaxError::new(at(line, col), message)
        })?;
        let mark = at(event.start_mark.line, event.start_mark.column);
        if matches!(event.data, EventData::Scalar { .. } | EventData::SequenceStart { .. } | EventData::MappingStart { .. }) {
            b.own += 1;
        }
        match event.data {
            EventData::Scalar { anchor, tag, value, style, .. } => {
                let plain = style == ScalarStyle::Plain;
                b.push(Node { mark, value: Value::Scalar(Scalar { text: value, plain, tag }) }, anchor, 1)?;
            }
            EventData::SequenceStart { anchor, .. } => b.open(mark, anchor, Value::Seq(Vec::new()))?,
            EventData::MappingStart { anchor, .. } => b.open(mark, anchor, Value::Map(Vec::new()))?,
            EventData::SequenceEnd | EventData::MappingEnd => b.close()?,
            EventData::Alias { anchor } => {
                let (node, size) = b
                    .anchors
                    .get(&anchor)
                    .cloned()
                    .ok_or_else(|| SyntaxError::new(mark, format!("unknown anchor `{anchor}` referenced")))?;
                b.aliased += size;
                if b.aliased > 3 * b.own + ALIAS_ALLOWANCE {
                    return Err(SyntaxError::new(mark, "document contains excessive aliasing"));
                }
                b.push(node, None, size)?;
            }
            EventData::DocumentEnd { .. } => break,
            _ => {}
        }
    }
    Ok(Document { line: first_line, root: b.root, warnings: b.warnings })
}

/// An open collection: its node, anchor, size so far and, for maps, the pending key.
struct Frame {
    node: Node,
    anchor: Option<String>,
    size: usize,
    key: Option<Node>,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<String, (Node, usize)>,
    root: Option<Node>,
    warnings: Vec<Warning>,
    /// Nodes written in the text, and nodes added by aliases.
    own: usize,
    aliased: usize,
}

impl Builder {
    fn open(&mut self, mark: Mark, anchor: Option<String>, value: Value) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError::new(mark, format!("the document is nested deeper than {MAX_DEPTH} levels")));
        }
        self.stack.push(Frame { node: Node { mark, value }, anchor, size: 1, key: None });
        Ok(())
    }

    fn close(&mut self) -> Result<(), SyntaxError> {
        let Some(mut frame) = self.stack.pop() else { return Ok(()) };
        if let Value::Map(entries) = &mut frame.node.value {
            *entries = self.finish_map(std::mem::take(entries))?;
        }
        self.push(frame.node, frame.anchor, frame.size)
    }

    fn push(&mut self, node: Node, anchor: Option<String>, size: usize) -> Result<(), SyntaxError> {
        if let Some(a) = anchor {
            self.anchors.insert(a, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => {
                // go-yaml reads the first document only; the builder never sees a second root.
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some(frame) => {
                frame.size += size;
                match &mut frame.node.value {
                    Value::Seq(items) => items.push(node),
                    Value::Map(entries) => match frame.key.take() {
                        None => frame.key = Some(node),
                        Some(key) => entries.push((key, node)),
                    },
                    Value::Scalar(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Applies merge keys (`<<`) and keeps the last of repeated keys, as go-yaml v2 does when it
    /// decodes into a map: in text order, a merged key overrides what came before it (kubectl
    /// reads `{a: 1, <<: {a: 2}}` as `a: 2`), and in a merged list the first map wins. A key
    /// written twice is reported; a merge overriding a key is what merges are for.
    fn finish_map(&mut self, raw: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, SyntaxError> {
        let mut map = Entries::default();
        for (k, v) in raw {
            if scalar::is_merge_key(&k) {
                let sources: Vec<&Node> = match &v.value {
                    Value::Map(_) => vec![&v],
                    Value::Seq(items) if items.iter().all(|i| matches!(i.value, Value::Map(_))) => items.iter().rev().collect(),
                    _ => {
                        return Err(SyntaxError::new(v.mark, "map merge requires map or sequence of maps as the value"));
                    }
                };
                for source in sources {
                    let Value::Map(entries) = &source.value else { continue };
                    for (mk, mv) in entries {
                        map.set(mk.clone(), mv.clone(), true);
                    }
                }
                continue;
            }
            if let Some(first) = map.set(k.clone(), v, false) {
                let key = scalar::key_string(&k).unwrap_or_default();
                self.warnings.push(Warning {
                    line: k.mark.line,
                    message: format!("mapping key `{key}` repeats the one at line {}; the last value wins", first.line),
                });
            }
        }
        Ok(map.out)
    }
}

/// A mapping under construction: entries in first-appearance order, indexed by key.
#[derive(Default)]
struct Entries {
    out: Vec<(Node, Node)>,
    /// Key -> (index in `out`, whether its value came from a merge).
    index: HashMap<String, (usize, bool)>,
}

impl Entries {
    /// Sets `k` to `v`. Returns where a key written (not merged) before was, when this repeats it.
    fn set(&mut self, k: Node, v: Node, merged: bool) -> Option<Mark> {
        let Some(key) = scalar::key_string(&k) else {
            // Refused by `to_json`, with its position.
            self.out.push((k, v));
            return None;
        };
        match self.index.get(&key).copied() {
            Some((i, was_merged)) => {
                let first = self.out[i].0.mark;
                self.out[i] = (k, v);
                self.index.insert(key, (i, merged));
                (!merged && !was_merged).then_some(first)
            }
            None => {
                self.index.insert(key, (self.out.len(), merged));
                self.out.push((k, v));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
