//! The functions a values template may call: Go's builtins and the sprig functions SCS cluster
//! stacks use. A name outside [`SUPPORTED`] is refused when the template is parsed.
//!
//! A missing field (Go's "no value") may be tested (`if`, `with`, `and`, `or`, `not`, `default`,
//! `empty`, `coalesce`, `ternary`, `required`) but passing it to any other function is an error:
//! sprig would quietly turn it into `""` or `null`.

use serde_json::{Map, Value};

use super::Error;
use super::exec::{Exec, MAX_OUTPUT, Val, describe, go_float, go_string, sorted};
use super::parse::Arg;

/// Every function stacksync's template engine implements.
pub const SUPPORTED: &[&str] = &[
    "and",
    "or",
    "not",
    "len",
    "index",
    "print",
    "printf",
    "println",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "default",
    "empty",
    "coalesce",
    "ternary",
    "required",
    "fail",
    "quote",
    "squote",
    "toString",
    "toYaml",
    "toJson",
    "indent",
    "nindent",
    "upper",
    "lower",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "replace",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "hasKey",
    "join",
    "list",
    "dict",
    "int",
    "int64",
    "float64",
    "add",
    "sub",
    "b64enc",
];

/// Go and sprig functions that exist elsewhere but not here, for a clearer error.
const KNOWN_UNSUPPORTED: &[&str] = &[
    "html",
    "js",
    "urlquery",
    "call",
    "slice",
    "tpl",
    "include",
    "lookup",
    "fromYaml",
    "fromJson",
    "toToml",
    "toRawJson",
    "toPrettyJson",
    "regexMatch",
    "regexReplaceAll",
    "regexFind",
    "split",
    "splitList",
    "semverCompare",
    "sha256sum",
    "genCA",
    "genPrivateKey",
    "randAlphaNum",
    "now",
    "date",
    "dig",
    "merge",
    "mergeOverwrite",
    "deepCopy",
    "keys",
    "values",
    "pluck",
    "first",
    "last",
    "until",
    "b64dec",
    "kindIs",
    "typeOf",
    "trunc",
    "title",
    "camelcase",
    "snakecase",
    "repeat",
    "cat",
    "uniq",
    "sortAlpha",
    "set",
    "unset",
    "get",
    "env",
    "expandenv",
    "mul",
    "div",
    "mod",
    "max",
    "min",
    "atoi",
    "toStrings",
    "substr",
    "nospace",
    "wrap",
    "abbrev",
];

pub(super) fn is_supported(name: &str) -> bool {
    SUPPORTED.contains(&name)
}

pub(super) fn is_known_unsupported(name: &str) -> bool {
    KNOWN_UNSUPPORTED.contains(&name)
}

/// Calls `name` with `args` (unevaluated, so `and` / `or` can stop early) and the value piped in.
pub(super) fn call(ex: &mut Exec<'_>, line: usize, name: &str, args: &[Arg], dot: &Val, piped: Option<Val>) -> Result<Val, Error> {
    if matches!(name, "and" | "or") {
        let total = args.len() + usize::from(piped.is_some());
        if total == 0 {
            return Err(ex.err(line, format!("`{name}` needs at least one argument")));
        }
        let mut last = Val::Missing(String::new());
        for a in args {
            last = ex.arg(line, a, dot)?;
            if last.truthy() != (name == "and") {
                return Ok(last);
            }
        }
        if let Some(p) = piped {
            last = p;
        }
        return Ok(last);
    }
    let mut vals = Vec::with_capacity(args.len() + 1);
    for a in args {
        vals.push(ex.arg(line, a, dot)?);
    }
    vals.extend(piped);
    let f = Call { ex, line, name };
    f.run(vals)
}

struct Call<'e, 'a> {
    ex: &'e Exec<'a>,
    line: usize,
    name: &'e str,
}

impl Call<'_, '_> {
    fn err(&self, message: impl std::fmt::Display) -> Error {
        self.ex.err(self.line, format!("`{}`: {message}", self.name))
    }

    fn arity(&self, vals: &[Val], min: usize, max: usize) -> Result<(), Error> {
        if vals.len() < min || vals.len() > max {
            let want = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.err(format!("wants {want} argument(s), got {}", vals.len())));
        }
        Ok(())
    }

    /// The JSON value, or an error naming the missing field.
    fn need(&self, v: Val) -> Result<Value, Error> {
        match v {
            Val::Json(v) => Ok(v),
            Val::Missing(p) if p.is_empty() => Err(self.err("argument has no value")),
            Val::Missing(p) => Err(self.err(format!("map has no entry for key `{p}` (missing field)"))),
        }
    }

    /// A `string` parameter of a Go or sprig function. Go does not convert: a number or a map
    /// passed where a string is declared fails the template ("wrong type for value").
    fn string(&self, v: Val) -> Result<String, Error> {
        match self.need(v)? {
            Value::String(s) => Ok(s),
            Value::Null => Err(self.err("argument is nil")),
            other => Err(self.err(format!("expected a string, got {} (use `toString` or `quote` to convert)", describe(&other)))),
        }
    }

    /// sprig's `toInt64`: numbers (floats truncated) and decimal strings, which Go parses as
    /// they are (`" 3"` is not a number).
    fn int(&self, v: Val) -> Result<i64, Error> {
        match self.need(v)? {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).ok_or_else(|| self.err("number out of range")),
            Value::String(s) => s.parse().map_err(|_| self.err(format!("`{s}` is not a decimal integer"))),
            other => Err(self.err(format!("expected a number, got {}", describe(&other)))),
        }
    }

    /// An `int` parameter (`indent`'s width): an integer, not a string or a float.
    fn int_param(&self, v: Val) -> Result<i64, Error> {
        match self.need(v)? {
            Value::Number(n) if n.is_i64() => n.as_i64().ok_or_else(|| self.err("number out of range")),
            other => Err(self.err(format!("expected an integer, got {}", describe(&other)))),
        }
    }

    fn run(self, mut vals: Vec<Val>) -> Result<Val, Error> {
        let json = |v: Value| Ok(Val::Json(v));
        let text = |s: String| Ok(Val::Json(Value::String(s)));
        match self.name {
            "not" => {
                self.arity(&vals, 1, 1)?;
                json(Value::Bool(!vals[0].truthy()))
            }
            "empty" => {
                self.arity(&vals, 1, 1)?;
                json(Value::Bool(!vals[0].truthy()))
            }
            "default" => {
                self.arity(&vals, 1, 2)?;
                let given = if vals.len() == 2 { vals.pop() } else { None };
                let fallback = vals.pop().unwrap_or(Val::Missing(String::new()));
                Ok(match given {
                    Some(g) if g.truthy() => g,
                    _ => fallback,
                })
            }
            "coalesce" => Ok(vals.into_iter().find(Val::truthy).unwrap_or(Val::Json(Value::Null))),
            "ternary" => {
                self.arity(&vals, 3, 3)?;
                // sprig declares `v bool`: Go refuses anything else rather than testing truthiness.
                let cond = match self.need(vals.pop().unwrap_or(Val::Json(Value::Null)))? {
                    Value::Bool(b) => b,
                    other => return Err(self.err(format!("the condition must be a bool, got {}", describe(&other)))),
                };
                let if_false = vals.pop().unwrap_or(Val::Json(Value::Null));
                let if_true = vals.pop().unwrap_or(Val::Json(Value::Null));
                Ok(if cond { if_true } else { if_false })
            }
            "required" => {
                self.arity(&vals, 2, 2)?;
                let v = vals.pop().unwrap_or(Val::Missing(String::new()));
                let msg = self.string(vals.remove(0))?;
                match &v {
                    Val::Missing(_) | Val::Json(Value::Null) => Err(self.ex.err(self.line, msg)),
                    Val::Json(Value::String(s)) if s.is_empty() => Err(self.ex.err(self.line, msg)),
                    _ => Ok(v),
                }
            }
            "fail" => {
                self.arity(&vals, 1, 1)?;
                let msg = self.string(vals.remove(0))?;
                Err(self.ex.err(self.line, msg))
            }
            "len" => {
                self.arity(&vals, 1, 1)?;
                match self.need(vals.remove(0))? {
                    Value::String(s) => json(s.len().into()),
                    Value::Array(a) => json(a.len().into()),
                    Value::Object(m) => json(m.len().into()),
                    other => Err(self.err(format!("len of {}", describe(&other)))),
                }
            }
            "index" => {
                self.arity(&vals, 1, usize::MAX)?;
                let mut cur = self.need(vals.remove(0))?;
                for key in vals {
                    let key = self.need(key)?;
                    cur = match (cur, &key) {
                        // Go's `index` gives the element type's zero value for a missing key: nil,
                        // not "no value" (so printing it or a field of it fails).
                        (Value::Object(mut m), Value::String(k)) => m.remove(k).unwrap_or(Value::Null),
                        (Value::Array(a), Value::Number(n)) => {
                            let i = n.as_u64().ok_or_else(|| self.err(format!("index {n} out of range")))?;
                            let len = a.len();
                            a.into_iter()
                                .nth(usize::try_from(i).unwrap_or(usize::MAX))
                                .ok_or_else(|| self.err(format!("index out of range: {i} (length {len})")))?
                        }
                        (Value::Null, _) => return Err(self.err("index of untyped nil")),
                        (other, k) => return Err(self.err(format!("can't index {} with {}", describe(&other), describe(k)))),
                    };
                }
                json(cur)
            }
            "print" | "println" => {
                let vals: Vec<Value> = vals.into_iter().map(|v| self.need(v)).collect::<Result<_, _>>()?;
                let mut out = String::new();
                for (i, v) in vals.iter().enumerate() {
                    let sep = self.name == "println" || (i > 0 && !vals[i - 1].is_string() && !v.is_string());
                    if i > 0 && sep {
                        out.push(' ');
                    }
                    out.push_str(&go_string(v));
                }
                if self.name == "println" {
                    out.push('\n');
                }
                text(out)
            }
            "printf" => {
                self.arity(&vals, 1, usize::MAX)?;
                let format = self.string(vals.remove(0))?;
                text(self.printf(&format, vals)?)
            }
            "eq" | "ne" => {
                self.arity(&vals, 2, usize::MAX)?;
                let first = self.need(vals.remove(0))?;
                let mut any = false;
                for v in vals {
                    any |= self.equal(&first, &self.need(v)?)?;
                }
                json(Value::Bool(if self.name == "eq" { any } else { !any }))
            }
            "lt" | "le" | "gt" | "ge" => {
                self.arity(&vals, 2, 2)?;
                let b = self.need(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let a = self.need(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let ord = match (&a, &b) {
                    (Value::Number(x), Value::Number(y)) if is_int(x) && is_int(y) => Some(int_cmp(x, y)),
                    (Value::Number(x), Value::Number(y)) if !is_int(x) && !is_int(y) => x.as_f64().partial_cmp(&y.as_f64()),
                    (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                    _ => None,
                }
                .ok_or_else(|| self.err(format!("incompatible types for comparison: {} and {}", describe(&a), describe(&b))))?;
                let r = match self.name {
                    "lt" => ord.is_lt(),
                    "le" => ord.is_le(),
                    "gt" => ord.is_gt(),
                    _ => ord.is_ge(),
                };
                json(Value::Bool(r))
            }
            "quote" | "squote" => {
                let mut parts = Vec::new();
                for v in vals {
                    match self.need(v)? {
                        // sprig skips nil arguments.
                        Value::Null => {}
                        v if self.name == "quote" => parts.push(go_quote(&go_string(&v))),
                        v => parts.push(format!("'{}'", go_string(&v))),
                    }
                }
                text(parts.join(" "))
            }
            "toString" => {
                self.arity(&vals, 1, 1)?;
                match self.need(vals.remove(0))? {
                    Value::Null => Err(self.err("argument is nil")),
                    v => text(go_string(&v)),
                }
            }
            "toYaml" => {
                self.arity(&vals, 1, 1)?;
                let v = go_json_numbers(self.need(vals.remove(0))?);
                let y = serde_saphyr::to_string(&v).map_err(|e| self.err(e))?;
                text(y.trim_end_matches('\n').to_owned())
            }
            "toJson" => {
                self.arity(&vals, 1, 1)?;
                let v = self.need(vals.remove(0))?;
                let mut out = String::new();
                go_json(&v, &mut out);
                text(out)
            }
            "indent" | "nindent" => {
                self.arity(&vals, 2, 2)?;
                let s = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let n = usize::try_from(self.int_param(vals.remove(0))?).map_err(|_| self.err("negative indent"))?;
                // The output limit is checked between actions; one huge pad must not get past it.
                if n.saturating_mul(s.matches('\n').count() + 1) > MAX_OUTPUT {
                    return Err(self.err(format!("indent {n} exceeds the output limit")));
                }
                let pad = " ".repeat(n);
                let indented = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
                text(if self.name == "nindent" { format!("\n{indented}") } else { indented })
            }
            "upper" | "lower" | "trim" | "b64enc" => {
                self.arity(&vals, 1, 1)?;
                let s = self.string(vals.remove(0))?;
                text(match self.name {
                    "upper" => s.to_uppercase(),
                    "lower" => s.to_lowercase(),
                    "trim" => s.trim().to_owned(),
                    _ => base64(s.as_bytes()),
                })
            }
            "trimPrefix" | "trimSuffix" | "contains" | "hasPrefix" | "hasSuffix" => {
                self.arity(&vals, 2, 2)?;
                let s = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let a = self.string(vals.remove(0))?;
                match self.name {
                    "trimPrefix" => text(s.strip_prefix(a.as_str()).unwrap_or(&s).to_owned()),
                    "trimSuffix" => text(s.strip_suffix(a.as_str()).unwrap_or(&s).to_owned()),
                    "contains" => json(Value::Bool(s.contains(&a))),
                    "hasPrefix" => json(Value::Bool(s.starts_with(&a))),
                    _ => json(Value::Bool(s.ends_with(&a))),
                }
            }
            "replace" => {
                self.arity(&vals, 3, 3)?;
                let s = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let new = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let old = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                text(s.replace(&old, &new))
            }
            "hasKey" => {
                self.arity(&vals, 2, 2)?;
                let key = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                match self.need(vals.remove(0))? {
                    Value::Object(m) => json(Value::Bool(m.contains_key(&key))),
                    other => Err(self.err(format!("expected a map, got {}", describe(&other)))),
                }
            }
            "join" => {
                self.arity(&vals, 2, 2)?;
                let list = self.need(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let sep = self.string(vals.remove(0))?;
                match list {
                    Value::Array(items) => text(items.iter().filter(|v| !v.is_null()).map(go_string).collect::<Vec<_>>().join(&sep)),
                    other => Err(self.err(format!("expected a list, got {}", describe(&other)))),
                }
            }
            "list" => json(Value::Array(vals.into_iter().map(|v| self.need(v)).collect::<Result<_, _>>()?)),
            "dict" => {
                if !vals.len().is_multiple_of(2) {
                    return Err(self.err("wants key/value pairs"));
                }
                let mut m = Map::new();
                let mut it = vals.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    // sprig converts keys with `strval`.
                    let key = match self.need(k)? {
                        Value::Null => return Err(self.err("a key is nil")),
                        k => go_string(&k),
                    };
                    m.insert(key, self.need(v)?);
                }
                json(Value::Object(m))
            }
            "int" | "int64" => {
                self.arity(&vals, 1, 1)?;
                json(self.int(vals.remove(0))?.into())
            }
            "float64" => {
                self.arity(&vals, 1, 1)?;
                let f = match self.need(vals.remove(0))? {
                    Value::Number(n) => n.as_f64().unwrap_or(0.0),
                    Value::String(s) => s.parse().map_err(|_| self.err(format!("`{s}` is not a number")))?,
                    other => return Err(self.err(format!("expected a number, got {}", describe(&other)))),
                };
                json(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
            }
            "add" | "sub" => {
                self.arity(&vals, if self.name == "sub" { 2 } else { 1 }, if self.name == "sub" { 2 } else { usize::MAX })?;
                let mut nums = Vec::new();
                for v in vals {
                    nums.push(self.int(v)?);
                }
                let r =
                    if self.name == "add" { nums.iter().try_fold(0i64, |a, b| a.checked_add(*b)) } else { nums[0].checked_sub(nums[1]) };
                json(r.ok_or_else(|| self.err("integer overflow"))?.into())
            }
            other => Err(self.ex.err(self.line, format!("function `{other}` is not defined"))),
        }
    }

    fn equal(&self, a: &Value, b: &Value) -> Result<bool, Error> {
        match (a, b) {
            // Go compares integers with integers and floats with floats; `eq 1 1.0` is an error.
            (Value::Number(x), Value::Number(y)) if is_int(x) && is_int(y) => Ok(int_cmp(x, y).is_eq()),
            (Value::Number(x), Value::Number(y)) if !is_int(x) && !is_int(y) => Ok(x.as_f64() == y.as_f64()),
            (Value::String(x), Value::String(y)) => Ok(x == y),
            (Value::Bool(x), Value::Bool(y)) => Ok(x == y),
            (Value::Null, Value::Null) => Ok(true),
            (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => {
                Err(self.err(format!("non-comparable types: {} and {}", describe(a), describe(b))))
            }
            _ => Err(self.err(format!("incompatible types for comparison: {} and {}", describe(a), describe(b)))),
        }
    }

    fn printf(&self, format: &str, vals: Vec<Val>) -> Result<String, Error> {
        let mut out = String::new();
        let mut args = vals.into_iter();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let verb = chars.next().ok_or_else(|| self.err("format ends with `%`"))?;
            if verb == '%' {
                out.push('%');
                continue;
            }
            let v = self.need(args.next().ok_or_else(|| self.err(format!("missing argument for `%{verb}`")))?)?;
            match (verb, &v) {
                ('v', v) => out.push_str(&go_string(v)),
                // Go writes `%!s(int64=3)` for a non-string: refuse instead.
                ('s', v) if strings_only(v) => out.push_str(&go_string(v)),
                ('d', Value::Number(n)) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
                ('t', Value::Bool(b)) => out.push_str(&b.to_string()),
                ('q', Value::String(s)) => out.push_str(&go_quote(s)),
                (verb, v) => return Err(self.err(format!("unsupported verb `%{verb}` for {}", describe(v)))),
            }
        }
        if args.next().is_some() {
            return Err(self.err("too many arguments for the format"));
        }
        Ok(out)
    }
}

fn is_int(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64()
}

/// Orders two integers exactly (past 2^53, where `f64` would round).
fn int_cmp(x: &serde_json::Number, y: &serde_json::Number) -> std::cmp::Ordering {
    let wide = |n: &serde_json::Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)).unwrap_or(0);
    wide(x).cmp(&wide(y))
}

/// Whether `%s` prints `v` as Go's `%v` would: strings, and lists and maps holding only strings.
fn strings_only(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Array(a) => a.iter().all(strings_only),
        Value::Object(m) => m.values().all(strings_only),
        _ => false,
    }
}

/// Go's `encoding/json` output (what sprig's `toJson` writes): keys sorted, `<`, `>`, `&`,
/// U+2028 and U+2029 escaped, floats without a needless `.0` (`6443`, `1e+21`, `1e-7`).
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
        Value::Number(n) => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        Value::String(s) => go_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in sorted(m).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                go_json(item, out);
            }
            out.push('}');
        }
    }
}

fn go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `encoding/json`'s float format: plain below 1e21 (and from 1e-6), else the exponent form
/// with a one-digit negative exponent kept short (`1e-7`, `1e+21`).
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    go_float(f, 0).replace("e-0", "e-")
}

/// Floats that hold an integer become integers, as they come out of Go's JSON encoding (helm's
/// `toYaml` goes through JSON): `6443`, not `6443.0`.
fn go_json_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) if !(n.is_i64() || n.is_u64()) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e15 { Value::from(f as i64) } else { Value::Number(n) }
        }
        Value::Array(a) => Value::Array(a.into_iter().map(go_json_numbers).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, go_json_numbers(v))).collect()),
        other => other,
    }
}

/// Go's `strconv.Quote`: a double-quoted string with Go escapes.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if !go_printable(c) && (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if !go_printable(c) => out.push_str(&format!("\\U{:08x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint` for what a values template can hold: everything but control and format
/// characters, spaces other than U+0020, line and paragraph separators, private use and
/// noncharacters (which `strconv.Quote` writes as `\u00a0`, `\u200b`, ...). Unassigned code
/// points count as printable here (Go escapes them too; they do not occur in real templates).
fn go_printable(c: char) -> bool {
    let u = c as u32;
    let not = matches!(u,
        0x00..=0x1f | 0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2 | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
        | 0xd800..=0xf8ff | 0xfdd0..=0xfdef | 0xfeff | 0xfff9..=0xfffb
        | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff);
    !not && (u & 0xfffe) != 0xfffe
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_and_base64_match_go() {
        assert_eq!(go_quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(base64(b"cluster"), "Y2x1c3Rlcg==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }

    #[test]
    fn quote_escapes_what_go_cannot_print() {
        // Go escapes what `unicode.IsPrint` rejects (NBSP, zero-width space, ...) and keeps other
        // non-ASCII text; only control characters were escaped before.
        assert_eq!(go_quote("é\u{a0}x\u{200b}\u{2028}\u{feff}\u{10ffff}😀"), r#""é\u00a0x\u200b\u2028\ufeff\U0010ffff😀""#);
    }
}
