//! Executes a parsed template against JSON data, with Go's truthiness, scoping and printing rules.

use serde_json::Value;

use super::Error;
use super::funcs;
use super::parse::{Arg, List, Node, Pipe};

/// A value during execution: JSON data, or the absence of a field (Go's "no value").
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Json(Value),
    /// A map key that is not there, with the path that was asked for (for error messages).
    Missing(String),
}

impl Val {
    pub(super) fn truthy(&self) -> bool {
        match self {
            Val::Missing(_) => false,
            Val::Json(v) => match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(m) => !m.is_empty(),
            },
        }
    }
}

enum Flow {
    Normal,
    Break,
    Continue,
}

pub(super) struct Exec<'a> {
    pub file: &'a str,
    vars: Vec<(String, Val)>,
    out: String,
    steps: usize,
}

/// A bound on work per execution, so a hostile template cannot loop for ever.
const MAX_STEPS: usize = 1_000_000;
/// A bound on output size.
pub(super) const MAX_OUTPUT: usize = 16 * 1024 * 1024;

impl<'a> Exec<'a> {
    pub(super) fn run(file: &'a str, list: &List, data: &Value) -> Result<String, Error> {
        let mut ex = Exec { file, vars: vec![("$".to_owned(), Val::Json(data.clone()))], out: String::new(), steps: 0 };
        let dot = Val::Json(data.clone());
        ex.walk(list, &dot)?;
        Ok(ex.out)
    }

    pub(super) fn err(&self, line: usize, message: impl Into<String>) -> Error {
        Error { file: self.file.to_owned(), line, message: message.into() }
    }

    fn walk(&mut self, list: &List, dot: &Val) -> Result<Flow, Error> {
        for node in list {
            self.steps += 1;
            if self.steps > MAX_STEPS || self.out.len() > MAX_OUTPUT {
                return Err(self.err(0, "template execution exceeded its step or output limit"));
            }
            match node {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(pipe) => {
                    let v = self.pipeline(pipe, dot)?;
                    if pipe.decl.is_empty() {
                        let text = print(&v).map_err(|m| self.err(pipe.line, m))?;
                        self.out.push_str(&text);
                    }
                }
                Node::If { branches, otherwise } | Node::With { branches, otherwise } => {
                    let is_with = matches!(node, Node::With { .. });
                    let mark = self.vars.len();
                    let mut taken = false;
                    let mut flow = Flow::Normal;
                    for (pipe, body) in branches {
                        let v = self.pipeline(pipe, dot)?;
                        if v.truthy() {
                            flow = if is_with { self.walk(body, &v)? } else { self.walk(body, dot)? };
                            taken = true;
                            break;
                        }
                    }
                    if !taken && let Some(body) = otherwise {
                        flow = self.walk(body, dot)?;
                    }
                    self.vars.truncate(mark);
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Range { pipe, body, otherwise } => {
                    let mark = self.vars.len();
                    let flow = self.range(pipe, body, otherwise.as_ref(), dot, mark)?;
                    self.vars.truncate(mark);
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    fn range(&mut self, pipe: &Pipe, body: &List, otherwise: Option<&List>, dot: &Val, mark: usize) -> Result<Flow, Error> {
        // The declared variables get the key/index and element, not the whole value.
        let undeclared = Pipe { decl: Vec::new(), assign: false, ..pipe.clone() };
        let value = self.pipeline(&undeclared, dot)?;
        let items: Vec<(Value, Value)> = match &value {
            Val::Missing(_) | Val::Json(Value::Null) => Vec::new(),
            Val::Json(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| (Value::from(i), v.clone())).collect(),
            // In key order, as Go's range over a map.
            Val::Json(Value::Object(m)) => sorted(m).map(|(k, v)| (Value::String(k.clone()), v.clone())).collect(),
            // Go 1.22: `range N` counts 0..N (nothing for N <= 0) into one variable.
            Val::Json(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                if pipe.decl.len() > 1 {
                    return Err(self.err(pipe.line, format!("can't use {n} to iterate over more than one variable")));
                }
                let count = n.as_u64().unwrap_or(0);
                if count > MAX_STEPS as u64 {
                    return Err(self.err(pipe.line, format!("range over {n} exceeds the step limit")));
                }
                (0..count).map(|i| (Value::from(i), Value::from(i))).collect()
            }
            Val::Json(other) => return Err(self.err(pipe.line, format!("range can't iterate over {}", describe(other)))),
        };
        if items.is_empty() {
            return match otherwise {
                Some(list) => self.walk(list, dot),
                None => Ok(Flow::Normal),
            };
        }
        for (key, elem) in items {
            self.vars.truncate(mark);
            match pipe.decl.as_slice() {
                [] => {}
                [e] => self.vars.push((e.clone(), Val::Json(elem.clone()))),
                [k, e, ..] => {
                    self.vars.push((k.clone(), Val::Json(key)));
                    self.vars.push((e.clone(), Val::Json(elem.clone())));
                }
            }
            match self.walk(body, &Val::Json(elem))? {
                Flow::Break => break,
                Flow::Continue | Flow::Normal => {}
            }
        }
        Ok(Flow::Normal)
    }

    pub(super) fn pipeline(&mut self, pipe: &Pipe, dot: &Val) -> Result<Val, Error> {
        let mut value: Option<Val> = None;
        for cmd in &pipe.cmds {
            value = Some(self.command(pipe.line, &cmd.args, dot, value)?);
        }
        let value = value.unwrap_or(Val::Missing(String::new()));
        match pipe.decl.as_slice() {
            [] => {}
            [name] if pipe.assign => {
                let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) else {
                    return Err(self.err(pipe.line, format!("undefined variable `{name}`")));
                };
                slot.1 = value.clone();
            }
            [name] => self.vars.push((name.clone(), value.clone())),
            _ => return Err(self.err(pipe.line, "too many declarations in pipeline")),
        }
        Ok(value)
    }

    fn command(&mut self, line: usize, args: &[Arg], dot: &Val, piped: Option<Val>) -> Result<Val, Error> {
        if let Arg::Func(name) = &args[0] {
            return funcs::call(self, line, name, &args[1..], dot, piped);
        }
        if args.len() > 1 || piped.is_some() {
            let what = match &args[0] {
                Arg::Field(_) | Arg::Var(..) | Arg::Sub(..) => "a field or variable",
                _ => "a constant",
            };
            return Err(self.err(line, format!("can't give arguments to {what}: only functions take arguments")));
        }
        self.arg(line, &args[0], dot)
    }

    pub(super) fn arg(&mut self, line: usize, arg: &Arg, dot: &Val) -> Result<Val, Error> {
        match arg {
            Arg::Field(chain) => self.fields(line, dot.clone(), chain, "."),
            Arg::Var(name, chain) => {
                let Some((_, v)) = self.vars.iter().rev().find(|(n, _)| n == name) else {
                    return Err(self.err(line, format!("undefined variable `{name}`")));
                };
                let v = v.clone();
                self.fields(line, v, chain, name)
            }
            Arg::Func(name) => funcs::call(self, line, name, &[], dot, None),
            Arg::Str(s) => Ok(Val::Json(Value::String(s.clone()))),
            Arg::Num(n) => Ok(Val::Json(Value::Number(n.clone()))),
            Arg::Bool(b) => Ok(Val::Json(Value::Bool(*b))),
            Arg::Nil => Err(self.err(line, "nil is not a command")),
            Arg::Sub(pipe, chain) => {
                let v = self.pipeline(pipe, dot)?;
                self.fields(line, v, chain, "(...)")
            }
        }
    }

    /// Follows `.a.b.c` from `start`. A missing key is a [`Val::Missing`] (Go's "no value"); a
    /// field of a missing value stays missing; a field of a scalar is an error, as in Go.
    fn fields(&self, line: usize, start: Val, chain: &[String], base: &str) -> Result<Val, Error> {
        let mut cur = start;
        let mut path = if base == "." { String::new() } else { base.to_owned() };
        for name in chain {
            path.push('.');
            path.push_str(name);
            cur = match cur {
                Val::Missing(p) => Val::Missing(if p.is_empty() { path.clone() } else { p }),
                Val::Json(Value::Object(mut m)) => match m.remove(name) {
                    Some(v) => Val::Json(v),
                    None => Val::Missing(path.clone()),
                },
                Val::Json(Value::Null) => return Err(self.err(line, format!("nil pointer evaluating `{path}`"))),
                Val::Json(other) => {
                    return Err(self.err(line, format!("can't evaluate field `{name}` in {} (at `{path}`)", describe(&other))));
                }
            };
        }
        Ok(cur)
    }
}

/// Prints a value as Go's text/template does, except that a missing or nil value is an error
/// rather than `<no value>` / `<nil>` in the output.
pub(super) fn print(v: &Val) -> Result<String, String> {
    match v {
        Val::Missing(path) if path.is_empty() => Err("no value to print".to_owned()),
        Val::Missing(path) => Err(format!("map has no entry for key `{}` (missing field; Go would print `<no value>`)", path)),
        Val::Json(Value::Null) => Err("value is nil (Go would print `<nil>`)".to_owned()),
        Val::Json(v) => Ok(go_string(v)),
    }
}

/// Go's `fmt.Sprint` of a JSON value (maps as `map[k:v]` in key order, slices as `[a b]`).
pub(super) fn go_string(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_string(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_string).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!("map[{}]", sorted(m).map(|(k, v)| format!("{k}:{}", go_string(v))).collect::<Vec<_>>().join(" ")),
    }
}

/// A map's entries in Go's order (byte-wise by key), whatever order the map keeps: Go sorts map
/// keys for `range` and `fmt`, and serde_json keeps insertion order if any crate in the build
/// turns on its `preserve_order` feature.
pub(super) fn sorted(m: &serde_json::Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries.into_iter()
}

/// A number as Go prints it: integers in full; floats (what Kubernetes decodes a JSON number with
/// a fraction or exponent to) as `%v` does, i.e. `strconv.FormatFloat(f, 'g', -1, 64)`: shortest
/// digits, exponent form when the decimal exponent is below -4 or at least 6 (`1e+06`,
/// `1.5e-05`), so `6443.0` prints `6443` but `1000000.0` prints `1e+06`.
pub(super) fn number_string(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    go_float(n.as_f64().unwrap_or(0.0), 6)
}

/// Go's shortest `%g`-style formatting of `f`, switching to the exponent form when the decimal
/// exponent is below -4 or at least `max_exp` (6 for `fmt`'s `%v`).
pub(super) fn go_float(f: f64, max_exp: i32) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".to_owned() } else { "0".to_owned() };
    }
    // Rust's `{:e}` gives the same shortest round-trip digits as Go, as `d.ddde<exp>`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= max_exp {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        // Plain notation with the same shortest digits.
        format!("{f}")
    }
}

pub(super) fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}
