//! The functions a values template may call: Go's builtins and the sprig functions SCS cluster
//! stacks use. A name outside [`SUPPORTED`] is refused when the template is parsed.
//!
//! A missing field (Go's "no value") may be tested (`if`, `with`, `and`, `or`, `not`, `default`,
//! `empty`, `coalesce`, `ternary`, `required`) but passing it to any other function is an error:
//! sprig would quietly turn it into `""` or `null`.

use serde_json::{Map, Value};

use super::Error;
use super::exec::{Exec, Val, describe, go_string};
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

    fn string(&self, v: Val) -> Result<String, Error> {
        let v = self.need(v)?;
        match v {
            Value::Null => Err(self.err("argument is nil")),
            v => Ok(go_string(&v)),
        }
    }

    fn int(&self, v: Val) -> Result<i64, Error> {
        match self.need(v)? {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).ok_or_else(|| self.err("number out of range")),
            Value::String(s) => s.trim().parse().map_err(|_| self.err(format!("`{s}` is not an integer"))),
            other => Err(self.err(format!("expected a number, got {}", describe(&other)))),
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
                let cond = vals.pop().map(|c| c.truthy()).unwrap_or(false);
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
                        (Value::Object(mut m), Value::String(k)) => match m.remove(k) {
                            Some(v) => v,
                            None => return Ok(Val::Missing(format!("[{k:?}]"))),
                        },
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
                    (Value::Number(x), Value::Number(y)) => x.as_f64().partial_cmp(&y.as_f64()),
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
                text(self.string(vals.remove(0))?)
            }
            "toYaml" => {
                self.arity(&vals, 1, 1)?;
                let v = self.need(vals.remove(0))?;
                let y = serde_saphyr::to_string(&v).map_err(|e| self.err(e))?;
                text(y.trim_end_matches('\n').to_owned())
            }
            "toJson" => {
                self.arity(&vals, 1, 1)?;
                let v = self.need(vals.remove(0))?;
                text(serde_json::to_string(&v).map_err(|e| self.err(e))?)
            }
            "indent" | "nindent" => {
                self.arity(&vals, 2, 2)?;
                let s = self.string(vals.pop().unwrap_or(Val::Json(Value::Null)))?;
                let n = usize::try_from(self.int(vals.remove(0))?).map_err(|_| self.err("negative indent"))?;
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
                    Value::Array(items) => text(items.iter().map(go_string).collect::<Vec<_>>().join(&sep)),
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
                    m.insert(self.string(k)?, self.need(v)?);
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
                    Value::String(s) => s.trim().parse().map_err(|_| self.err(format!("`{s}` is not a number")))?,
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
            (Value::Number(x), Value::Number(y)) => Ok(x.as_f64() == y.as_f64()),
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
                ('s' | 'v', v) => out.push_str(&go_string(v)),
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
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
}
