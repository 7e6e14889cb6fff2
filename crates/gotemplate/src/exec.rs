//! Execution of a parsed template against data, with Go's truthiness, scoping, missing-key and
//! printing rules. Bounded: template calls nest at most [`Limits::calls`] deep, every node and
//! range iteration is a step against [`Limits::steps`], and output stops at [`Limits::output`].

use std::rc::Rc;

use super::funcs;
use super::gofmt;
use super::parse::{Arg, List, Node, Pipe, Tree};
use super::value::{self, Val};
use super::{Error, Limits, Warning};

enum Flow {
    Normal,
    Break,
    Continue,
}

pub(super) struct Exec<'a> {
    pub file: &'a str,
    /// The name `{{ template }}` calls the whole file by.
    root_name: &'a str,
    tree: &'a Tree,
    vars: Vec<(String, Val)>,
    out: String,
    steps: u64,
    depth: usize,
    limits: Limits,
    pub warnings: Vec<Warning>,
    /// The first line that printed bytes that may not be UTF-8.
    out_of_utf8: Option<usize>,
}

impl funcs::Run for Exec<'_> {
    fn step(&mut self, line: usize) -> Result<(), Error> {
        Exec::step(self, line)
    }

    fn count_step(&mut self) -> Result<(), Error> {
        Exec::step(self, 0)
    }

    fn arg(&mut self, line: usize, arg: &Arg, dot: &Val) -> Result<Val, Error> {
        Exec::arg(self, line, arg, dot)
    }

    fn err(&self, line: usize, message: String) -> Error {
        Exec::err(self, line, message)
    }

    fn output_limit(&self) -> usize {
        self.limits.output
    }
}

impl<'a> Exec<'a> {
    pub(super) fn run(
        file: &'a str,
        root_name: &'a str,
        tree: &'a Tree,
        data: Val,
        limits: Limits,
    ) -> Result<(String, Vec<Warning>), Error> {
        let mut ex = Exec {
            file,
            root_name,
            tree,
            vars: vec![("$".to_owned(), data.clone())],
            out: String::new(),
            steps: 0,
            depth: 0,
            limits,
            warnings: Vec::new(),
            out_of_utf8: None,
        };
        // Go executes nil data as no value at all (`.x` of it prints `<no value>`).
        let data = if matches!(data, Val::Nil) { Val::missing() } else { data };
        ex.vars[0].1 = data.clone();
        ex.walk(&tree.root, &data, 0)?;
        // Go strings may hold any bytes; the output is YAML, which must be UTF-8.
        if !value::is_utf8(&ex.out) {
            let line = ex.out_of_utf8.unwrap_or(0);
            return Err(ex.err(line, "the output is not valid UTF-8 (a value printed here holds bytes that are not)"));
        }
        let out = String::from_utf8_lossy(&value::go_bytes(&ex.out)).into_owned();
        Ok((out, ex.warnings))
    }

    pub(super) fn err(&self, line: usize, message: impl Into<String>) -> Error {
        Error { file: self.file.to_owned(), line, message: message.into() }
    }

    /// Counts one step; an error past the step limit.
    pub(super) fn step(&mut self, line: usize) -> Result<(), Error> {
        self.steps += 1;
        if self.steps > self.limits.steps {
            return Err(self.err(line, format!("template execution exceeds the limit of {} steps", self.limits.steps)));
        }
        Ok(())
    }

    fn emit(&mut self, line: usize, text: &str) -> Result<(), Error> {
        if self.out.len() + text.len() > self.limits.output {
            return Err(self.err(line, format!("template output exceeds the limit of {} bytes", self.limits.output)));
        }
        if self.out_of_utf8.is_none() && !value::is_utf8(text) {
            self.out_of_utf8 = Some(line);
        }
        self.out.push_str(text);
        Ok(())
    }

    fn walk(&mut self, list: &List, dot: &Val, line: usize) -> Result<Flow, Error> {
        for node in list {
            self.step(line)?;
            match node {
                Node::Text(t) => self.emit(line, t)?,
                Node::Action(pipe) => {
                    gofmt::take_printed_nil();
                    let v = self.pipeline(pipe, dot)?;
                    if pipe.decl.is_empty() {
                        self.print_action(pipe, &v)?;
                    }
                }
                Node::If { branches, otherwise } | Node::With { branches, otherwise } => {
                    let is_with = matches!(node, Node::With { .. });
                    let mark = self.vars.len();
                    let mut flow = None;
                    for (pipe, body) in branches {
                        let v = self.pipeline(pipe, dot)?;
                        if v.truthy() {
                            flow = Some(if is_with { self.walk(body, &v, pipe.line)? } else { self.walk(body, dot, pipe.line)? });
                            break;
                        }
                    }
                    let flow = match (flow, otherwise) {
                        (Some(f), _) => f,
                        (None, Some(body)) => self.walk(body, dot, line)?,
                        (None, None) => Flow::Normal,
                    };
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
                Node::Template { line, name, pipe } => self.template(*line, name, pipe.as_ref(), dot)?,
            }
        }
        Ok(Flow::Normal)
    }

    /// Prints an action's value as Go does (`<no value>` for a missing one), recording a warning
    /// for every `<no value>` / `<nil>` that reaches the output.
    fn print_action(&mut self, pipe: &Pipe, v: &Val) -> Result<(), Error> {
        let text = match v {
            Val::Missing(path) => {
                self.warnings.push(Warning { file: self.file.to_owned(), line: pipe.line, path: path.to_string(), printed: "<no value>" });
                "<no value>".to_owned()
            }
            v => {
                let text = gofmt::sprint_one(v);
                if gofmt::take_printed_nil() && text.contains("<nil>") {
                    let path = describe_pipe(pipe);
                    self.warnings.push(Warning { file: self.file.to_owned(), line: pipe.line, path, printed: "<nil>" });
                }
                text
            }
        };
        self.emit(pipe.line, &text)
    }

    fn template(&mut self, line: usize, name: &str, pipe: Option<&Pipe>, dot: &Val) -> Result<(), Error> {
        let body = match self.tree.defines.get(name) {
            Some(body) => body,
            None if name == self.root_name => &self.tree.root,
            None => return Err(self.err(line, format!("no such template `{name}`"))),
        };
        let new_dot = match pipe {
            Some(p) => self.pipeline(p, dot)?,
            None => Val::missing(),
        };
        if self.depth >= self.limits.calls {
            return Err(self.err(line, format!("`template \"{name}\"` exceeds the limit of {} nested template calls", self.limits.calls)));
        }
        self.depth += 1;
        let saved = std::mem::replace(&mut self.vars, vec![("$".to_owned(), new_dot.clone())]);
        let r = self.walk(body, &new_dot, line);
        self.vars = saved;
        self.depth -= 1;
        r.map(|_| ())
    }

    fn range(&mut self, pipe: &Pipe, body: &List, otherwise: Option<&List>, dot: &Val, mark: usize) -> Result<Flow, Error> {
        // The declared variables get the key/index and element, not the whole value.
        let undeclared = Pipe { decl: Vec::new(), assign: false, ..pipe.clone() };
        let value = self.pipeline(&undeclared, dot)?;
        let items: Vec<(Val, Val)> = match &value {
            Val::Missing(_) | Val::Nil => Vec::new(),
            Val::List(a, _) => a.iter().enumerate().map(|(i, v)| (Val::Int(i as i64), v.clone())).collect(),
            // In key order, as Go's range over a map.
            Val::Map(m, _) => m.borrow().iter().map(|(k, v)| (Val::str(k.as_str()), v.clone())).collect(),
            // Go 1.22: `range N` counts 0..N (nothing for N <= 0) into one variable.
            Val::Int(n) | Val::I64(n) => {
                if pipe.decl.len() > 1 {
                    return Err(self.err(pipe.line, format!("can't use {n} to iterate over more than one variable")));
                }
                let count = (*n).max(0) as u64;
                if count > self.limits.steps {
                    return Err(self.err(pipe.line, format!("range over {n} exceeds the limit of {} steps", self.limits.steps)));
                }
                let int = matches!(value, Val::Int(_));
                (0..count as i64).map(|i| if int { (Val::Int(i), Val::Int(i)) } else { (Val::I64(i), Val::I64(i)) }).collect()
            }
            other => return Err(self.err(pipe.line, format!("range can't iterate over {}", gofmt::sprint_one(other)))),
        };
        // Go pushes the declared variables with the whole value first: that is what they
        // hold in the `else` part.
        for name in &pipe.decl {
            self.vars.push((name.clone(), value.clone()));
        }
        if items.is_empty() {
            return match otherwise {
                // Go recovers a `break` anywhere in the range statement, its `else` included:
                // it ends this range, not the enclosing one; a `continue` goes on up.
                Some(list) => match self.walk(list, dot, pipe.line)? {
                    Flow::Break => Ok(Flow::Normal),
                    flow => Ok(flow),
                },
                None => Ok(Flow::Normal),
            };
        }
        for (key, elem) in items {
            self.step(pipe.line)?;
            self.vars.truncate(mark);
            match pipe.decl.as_slice() {
                [] => {}
                [e] => self.vars.push((e.clone(), elem.clone())),
                [k, e, ..] => {
                    self.vars.push((k.clone(), key));
                    self.vars.push((e.clone(), elem.clone()));
                }
            }
            match self.walk(body, &elem, pipe.line)? {
                Flow::Break => break,
                Flow::Continue | Flow::Normal => {}
            }
        }
        Ok(Flow::Normal)
    }

    pub(super) fn pipeline(&mut self, pipe: &Pipe, dot: &Val) -> Result<Val, Error> {
        let mut value: Option<Val> = None;
        for cmd in &pipe.cmds {
            let v = self.command(pipe.line, &cmd.args, dot, value)?;
            // Go digs a nil `interface{}` out into "no value" after every stage.
            value = Some(match v {
                Val::Nil => Val::Missing(Rc::from(describe_args(&cmd.args))),
                v => v,
            });
        }
        let value = value.unwrap_or_else(Val::missing);
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
            return Err(self.err(line, "can't give arguments to a field, variable or constant: only functions take arguments"));
        }
        match &args[0] {
            Arg::Nil => Err(self.err(line, "nil is not a command")),
            arg => self.arg(line, arg, dot),
        }
    }

    /// Evaluates one operand. Number constants become what Go's `idealConstant` makes of them.
    pub(super) fn arg(&mut self, line: usize, arg: &Arg, dot: &Val) -> Result<Val, Error> {
        match arg {
            Arg::Field(chain) => self.fields(line, dot.clone(), chain, ""),
            Arg::Var(name, chain) => {
                let Some((_, v)) = self.vars.iter().rev().find(|(n, _)| n == name) else {
                    return Err(self.err(line, format!("undefined variable `{name}`")));
                };
                let v = v.clone();
                self.fields(line, v, chain, name)
            }
            Arg::Func(name) => funcs::call(self, line, name, &[], dot, None),
            Arg::Str(s) => Ok(Val::str(s.as_str())),
            // Go's `idealConstant`.
            Arg::Num(n) => match (n.complex, n.float_syntax, n.int, n.float) {
                (Some((re, im)), ..) => Ok(Val::Complex(re, im)),
                (None, true, _, Some(f)) => Ok(Val::F64(f)),
                (None, _, Some(i), _) => Ok(Val::Int(i)),
                _ => Err(self.err(line, "number constant overflows int")),
            },
            Arg::Bool(b) => Ok(Val::Bool(*b)),
            Arg::Nil => Ok(Val::Nil),
            Arg::Sub(pipe, chain) => {
                self.step(line)?;
                let v = self.pipeline(pipe, dot)?;
                self.fields(line, v, chain, "(...)")
            }
        }
    }

    /// Follows `.a.b.c` from `start`. A missing key is "no value", and so is any field of it; a
    /// field of a nil or of a scalar is an error, as in Go.
    fn fields(&self, line: usize, start: Val, chain: &[String], base: &str) -> Result<Val, Error> {
        let mut cur = start;
        let mut path = base.to_owned();
        for name in chain {
            path.push('.');
            path.push_str(name);
            cur = match cur {
                Val::Missing(p) => Val::Missing(if p.is_empty() { Rc::from(path.as_str()) } else { p }),
                Val::Map(m, _) => match m.borrow().get(name) {
                    Some(v) => v.clone(),
                    None => Val::Missing(Rc::from(path.as_str())),
                },
                Val::Nil => return Err(self.err(line, format!("nil pointer evaluating interface {{}}.{name} (at `{path}`)"))),
                other => {
                    return Err(self.err(line, format!("can't evaluate field {name} in type {} (at `{path}`)", other.type_name())));
                }
            };
        }
        if let Val::Missing(p) = &cur
            && p.is_empty()
            && !path.is_empty()
        {
            return Ok(Val::Missing(Rc::from(path.as_str())));
        }
        Ok(cur)
    }
}

/// A short text naming what an action printed, for warnings.
fn describe_pipe(pipe: &Pipe) -> String {
    pipe.cmds.first().map(|c| describe_args(&c.args)).unwrap_or_default()
}

fn describe_args(args: &[Arg]) -> String {
    match args.first() {
        Some(Arg::Field(chain)) if chain.is_empty() => ".".to_owned(),
        Some(Arg::Field(chain)) => chain.iter().map(|n| format!(".{n}")).collect(),
        Some(Arg::Var(name, chain)) => format!("{name}{}", chain.iter().map(|n| format!(".{n}")).collect::<String>()),
        Some(Arg::Func(name)) => name.clone(),
        _ => String::new(),
    }
}
