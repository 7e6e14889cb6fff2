//! The functions a values template may call: Go's builtins and every function of slim-sprig's
//! `TxtFuncMap` (what the SCS cluster-stack-operator gives its templates), each with Go's
//! argument conversion rules and sprig's behaviour, including its quiet defaults and its errors.
//! A few functions are deliberately not provided ([`unsupported_reason`]): they read the clock,
//! the environment or the network, or draw random numbers, so they cannot render reproducibly.

mod builtins;
mod data;
mod dates;
mod json;
pub(crate) mod names;
mod sprig;

use super::Error;
use super::parse::{Arg, Num};
use super::value::{IFACE, Val};
use names::arity;
pub use names::unsupported_reason;

/// What a function call needs of the template run making it (the executor, `exec.rs`): its step
/// and output budgets, its operands evaluated, and errors at the template's line. A trait, so
/// that the functions, which the executor calls, do not name the executor back.
pub(crate) trait Run {
    /// Counts one step at `line`; an error past the step limit.
    fn step(&mut self, line: usize) -> Result<(), Error>;
    /// Counts one step of a function's own loop (`untilStep`); an error past the step limit.
    fn count_step(&mut self) -> Result<(), Error>;
    /// The value of operand `arg` with `dot` as `.`.
    fn arg(&mut self, line: usize, arg: &Arg, dot: &Val) -> Result<Val, Error>;
    /// An error of the template at `line`.
    fn err(&self, line: usize, message: String) -> Error;
    /// The output limit in bytes: no function builds a larger result.
    fn output_limit(&self) -> usize;
}

/// Functions stacksync adds beyond slim-sprig, as helm does (documented extensions): `toYaml`
/// and `required`. They are not in the conformance suite (Go has no reference for them).
pub const EXTENSIONS: &[&str] = &["toYaml", "required"];

/// One argument as the function receives it: its value, and for a number constant the constant
/// itself (Go converts constants to the parameter's type; computed values must already have it).
pub(super) struct A {
    pub v: Val,
    pub num: Option<Num>,
}

/// Why a function failed, in the words of Go's function or of its argument conversion; the
/// caller makes it an [`Error`] at the template's line, after `error calling <name>: `. The text
/// is Go's, byte for byte (the conformance suite compares it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FuncError(pub(super) String);

impl From<String> for FuncError {
    fn from(message: String) -> FuncError {
        FuncError(message)
    }
}

impl From<&str> for FuncError {
    fn from(message: &str) -> FuncError {
        FuncError(message.to_owned())
    }
}

type R = Result<Val, FuncError>;

fn wrong(expected: &str, a: &A) -> FuncError {
    FuncError(match (&a.num, &a.v) {
        (Some(_), v) => format!("expected {expected}; found {}", super::gofmt::sprint_one(v)),
        (None, Val::Missing(_)) => format!("invalid value; expected {expected}"),
        (None, Val::Nil) => format!("invalid value; expected {expected}"),
        (None, v) => format!("wrong type for value; expected {expected}; got {}", v.type_name()),
    })
}

impl A {
    /// As an `interface{}` parameter: no value becomes nil.
    pub fn any(&self) -> Val {
        match &self.v {
            Val::Missing(_) => Val::Nil,
            v => v.clone(),
        }
    }

    pub fn string(&self) -> Result<String, FuncError> {
        match (&self.v, &self.num) {
            (Val::Str(s), None) => Ok(s.to_string()),
            _ => Err(wrong("string", self)),
        }
    }

    /// As a Go `int` parameter.
    pub fn int(&self) -> Result<i64, FuncError> {
        match (&self.v, &self.num) {
            (_, Some(Num { int: Some(i), .. })) => Ok(*i),
            (Val::Int(i), None) => Ok(*i),
            _ => Err(wrong("int", self)),
        }
    }

    pub fn float(&self) -> Result<f64, FuncError> {
        match (&self.v, &self.num) {
            (_, Some(Num { float: Some(f), .. })) => Ok(*f),
            (Val::F64(f), None) => Ok(*f),
            _ => Err(wrong("float64", self)),
        }
    }

    pub fn bool(&self) -> Result<bool, FuncError> {
        match &self.v {
            Val::Bool(b) => Ok(*b),
            _ => Err(wrong("bool", self)),
        }
    }

    /// As a `time.Time` parameter.
    pub fn time(&self) -> Result<super::value::GoTime, FuncError> {
        match &self.v {
            Val::Time(t) => Ok((**t).clone()),
            _ => Err(wrong("time.Time", self)),
        }
    }

    /// As a `map[string]interface {}` parameter; nil is an empty map (reading a nil map works
    /// in Go; `set` refuses it itself).
    pub fn dict(&self) -> Result<super::value::MapRef, FuncError> {
        match &self.v {
            Val::Map(m, e) if *e == IFACE => Ok(m.clone()),
            // Go: a missing value or the `nil` literal is a nil map; a nil interface is a type error.
            Val::Missing(_) => Ok(super::value::nil_map()),
            Val::Nil => Err("wrong type for value; expected map[string]interface {}; got interface {}".into()),
            _ => Err(wrong("map[string]interface {}", self)),
        }
    }
}

/// Calls `name` with the operands `args` (evaluated here) and the piped value `piped` last.
pub(super) fn call(ex: &mut dyn Run, line: usize, name: &str, args: &[Arg], dot: &Val, piped: Option<Val>) -> Result<Val, Error> {
    ex.step(line)?;
    // `and` / `or` evaluate their operands only as far as needed, as Go 1.18+ does.
    if name == "and" || name == "or" {
        let mut last = Val::missing();
        for arg in args {
            last = ex.arg(line, arg, dot)?;
            if last.truthy() == (name == "or") {
                return Ok(last);
            }
        }
        let piped_given = piped.is_some();
        if let Some(p) = piped {
            last = p;
        }
        if args.is_empty() && !piped_given {
            return Err(ex.err(line, format!("wrong number of args for {name}: want at least 1 got 0")));
        }
        return Ok(last);
    }
    let mut vals = Vec::with_capacity(args.len() + 1);
    for arg in args {
        let num = if let Arg::Num(n) = arg { Some(n.clone()) } else { None };
        // The `nil` literal converts to any parameter that can be nil, like a missing value.
        let v = if matches!(arg, Arg::Nil) { Val::missing() } else { ex.arg(line, arg, dot)? };
        vals.push(A { v, num });
    }
    if let Some(p) = piped {
        vals.push(A { v: p, num: None });
    }
    let Some((min, max)) = arity(name) else {
        return Err(ex.err(line, format!("function `{name}` is not defined")));
    };
    if vals.len() < min || max.is_some_and(|m| vals.len() > m) {
        let want = if max.is_none() { format!("at least {min}") } else { min.to_string() };
        return Err(ex.err(line, format!("wrong number of args for {name}: want {want} got {}", vals.len())));
    }
    check_params(name, &vals).map_err(|m| ex.err(line, format!("error calling {name}: {m}")))?;
    let r = builtins::call(name, &vals)
        .or_else(|| sprig::call(ex, name, &vals))
        .or_else(|| data::call(ex, name, &vals))
        .or_else(|| dates::call(name, &vals))
        .unwrap_or_else(|| Err(format!("function `{name}` is not implemented").into()));
    let v = r.map_err(|m| ex.err(line, format!("error calling {name}: {m}")))?;
    super::value::check_depth(&v).map_err(|m| ex.err(line, format!("error calling {name}: {m}")))?;
    Ok(v)
}

/// The Go parameter types of the functions that have typed ones, one letter each: `s` string,
/// `i` int, `f` float64, `b` bool, `m` `map[string]interface {}`, `t` time.Time, `a`
/// interface {}; a trailing `*` repeats the last (variadic).
fn params(name: &str) -> Option<&'static str> {
    Some(match name {
        "trim" | "upper" | "lower" | "title" | "sha1sum" | "sha256sum" | "adler32sum" | "atoi" | "fromJson" | "mustFromJson" | "base"
        | "dir" | "clean" | "ext" | "isAbs" | "osBase" | "osClean" | "osDir" | "osExt" | "osIsAbs" | "b64enc" | "b64dec" | "b32enc"
        | "b32dec" | "fail" | "regexQuoteMeta" | "urlParse" => "s",
        "trunc" | "repeat" | "indent" | "nindent" => "is",
        "substr" => "iis",
        "trimall" | "trimAll" | "trimSuffix" | "trimPrefix" | "contains" | "hasPrefix" | "hasSuffix" | "split" | "splitList"
        | "regexMatch" | "mustRegexMatch" | "regexFind" | "mustRegexFind" | "toDate" | "mustToDate" => "ss",
        "replace" | "regexReplaceAll" | "mustRegexReplaceAll" | "regexReplaceAllLiteral" | "mustRegexReplaceAllLiteral" => "sss",
        "plural" => "ssi",
        "seq" => "i*",
        "splitn" => "sis",
        "until" => "i",
        "untilStep" => "iii",
        "round" => "aif*",
        "join" | "typeIs" | "typeIsLike" | "kindIs" | "date" => "sa",
        "ternary" => "aab",
        "get" | "unset" | "hasKey" => "ms",
        "set" => "msa",
        "pluck" => "sm*",
        "keys" => "m*",
        "pick" | "omit" => "ms*",
        "values" | "urlJoin" => "m",
        "chunk" | "mustChunk" => "ia",
        "regexFindAll" | "mustRegexFindAll" | "regexSplit" | "mustRegexSplit" => "ssi",
        "dateInZone" | "date_in_zone" => "sas",
        "htmlDateInZone" => "as",
        "dateModify" | "date_modify" | "mustDateModify" | "must_date_modify" => "st",
        "unixEpoch" => "t",
        "printf" => "sa*",
        _ => return None,
    })
}

/// Go's `call` converts every argument to its parameter's type before the function runs: the
/// first one that does not convert fails the call, whatever the function would have done.
fn check_params(name: &str, vals: &[A]) -> Result<(), FuncError> {
    let Some(sig) = params(name) else { return Ok(()) };
    let (fixed, repeat) = match sig.strip_suffix('*') {
        Some(f) => (f.as_bytes(), f.as_bytes().last().copied()),
        None => (sig.as_bytes(), None),
    };
    for (i, a) in vals.iter().enumerate() {
        let Some(t) = fixed.get(i).copied().or(repeat) else { break };
        match t {
            b's' => a.string().map(drop)?,
            b'i' => a.int().map(drop)?,
            b'f' => a.float().map(drop)?,
            b'b' => a.bool().map(drop)?,
            b'm' => a.dict().map(drop)?,
            b't' => a.time().map(drop)?,
            _ => {}
        }
    }
    Ok(())
}
