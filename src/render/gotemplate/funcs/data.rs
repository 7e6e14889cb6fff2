//! sprig's list, dict, default and JSON functions (the slim-sprig set) and stacksync's helm-style
//! extensions `toYaml` / `required`. Lists are copied as sprig copies them; maps are shared and
//! `set` / `unset` change them in place, as in Go.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::super::exec::Exec;
use super::super::value::{IFACE, Val, reaches};
use super::sprig::{limit, strval, to_int64};
use super::{A, R};

pub(super) fn call(ex: &mut Exec<'_>, name: &str, a: &[A]) -> Option<R> {
    let s = |i: usize| a[i].string();
    Some(match name {
        "split" | "splitn" => (|| {
            let (sep, n, orig) = if name == "split" { (s(0)?, -1, s(1)?) } else { (s(0)?, a[1].int()?, s(2)?) };
            let m: BTreeMap<String, Val> =
                go_split(&sep, &orig, n).into_iter().enumerate().map(|(i, p)| (format!("_{i}"), Val::str(p))).collect();
            Ok(Val::Map(Rc::new(std::cell::RefCell::new(m)), "string"))
        })(),
        "splitList" => (|| Ok(Val::strings(go_split(&s(0)?, &s(1)?, -1))))(),
        "toStrings" => Ok(Val::strings(strslice(&a[0].any()))),
        "join" => (|| {
            let sep = s(0)?;
            let parts = strslice(&a[1].any());
            limit(ex, parts.iter().map(|p| p.len() + sep.len()).sum())?;
            Ok(Val::str(parts.join(&sep)))
        })(),
        "sortAlpha" => {
            let v = a[0].any();
            Ok(Val::strings(match v {
                Val::List(..) => {
                    let mut l = strslice(&v);
                    l.sort();
                    l
                }
                v => vec![strval(&v)],
            }))
        }
        "default" => {
            let given = a.get(1).map(A::any).unwrap_or(Val::Nil);
            Ok(if given.truthy() { given } else { a[0].any() })
        }
        "empty" => Ok(Val::Bool(!a[0].any().truthy())),
        "coalesce" => Ok(a.iter().map(A::any).find(Val::truthy).unwrap_or(Val::Nil)),
        "all" => Ok(Val::Bool(a.iter().all(|x| x.any().truthy()))),
        "any" => Ok(Val::Bool(a.iter().any(|x| x.any().truthy()))),
        "ternary" => (|| Ok(if a[2].bool()? { a[0].any() } else { a[1].any() }))(),
        "compact" | "mustCompact" => list_of(&a[0], "compact").map(|l| Val::list(l.iter().filter(|v| v.truthy()).cloned().collect())),
        "fromJson" | "mustFromJson" => (|| {
            let text = s(0)?;
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) => Ok(from_json_float(&v)),
                Err(e) if name == "mustFromJson" => Err(e.to_string()),
                Err(_) => Ok(Val::Nil),
            }
        })(),
        "toJson" | "mustToJson" | "toRawJson" | "mustToRawJson" | "toPrettyJson" | "mustToPrettyJson" => {
            let v = a[0].any();
            let mut out = String::new();
            let pretty = name.contains("Pretty");
            let escape = !name.contains("Raw");
            match json(&v, escape, pretty.then_some(0), &mut out) {
                Ok(()) => Ok(Val::str(out)),
                Err(e) if name.starts_with("must") => Err(e),
                Err(_) => Ok(Val::str("")),
            }
        }
        "tuple" | "list" => Ok(Val::list(a.iter().map(A::any).collect())),
        "dict" => {
            let mut m = BTreeMap::new();
            for pair in a.chunks(2) {
                let key = strval(&pair[0].any());
                m.insert(key, pair.get(1).map_or(Val::str(""), A::any));
            }
            Ok(Val::map(m))
        }
        "get" => (|| {
            let (d, k) = (a[0].dict()?, s(1)?);
            Ok(d.borrow().get(&k).cloned().unwrap_or(Val::str("")))
        })(),
        "set" => (|| {
            if matches!(a[0].v, Val::Missing(_)) {
                return Err("assignment to entry in nil map".to_owned());
            }
            let (d, k, v) = (a[0].dict()?, s(1)?, a[2].any());
            if reaches(&v, &d) {
                return Err("the value contains the map it is set into (a cycle)".to_owned());
            }
            d.borrow_mut().insert(k, v);
            Ok(Val::Map(d, IFACE))
        })(),
        "unset" => (|| {
            let d = a[0].dict()?;
            let k = a.get(1).map(A::string).transpose()?.unwrap_or_default();
            if a.len() != 2 {
                return Err(format!("wrong number of args for unset: want 2 got {}", a.len()));
            }
            d.borrow_mut().remove(&k);
            Ok(Val::Map(d, IFACE))
        })(),
        "hasKey" => (|| Ok(Val::Bool(a[0].dict()?.borrow().contains_key(&s(1)?))))(),
        "pluck" => (|| {
            let key = s(0)?;
            let mut out = Vec::new();
            for d in &a[1..] {
                if let Some(v) = d.dict()?.borrow().get(&key) {
                    out.push(v.clone());
                }
            }
            Ok(Val::list(out))
        })(),
        "keys" => (|| {
            let mut out = Vec::new();
            for d in a {
                out.extend(d.dict()?.borrow().keys().cloned());
            }
            Ok(Val::strings(out))
        })(),
        "pick" | "omit" => (|| {
            let d = a[0].dict()?;
            let keys: Vec<String> = a[1..].iter().map(A::string).collect::<Result<_, _>>()?;
            let m = d.borrow().iter().filter(|(k, _)| keys.contains(k) == (name == "pick")).map(|(k, v)| (k.clone(), v.clone())).collect();
            Ok(Val::map(m))
        })(),
        "values" => (|| Ok(Val::list(a[0].dict()?.borrow().values().cloned().collect())))(),
        "append" | "push" | "mustAppend" | "mustPush" => list_of(&a[0], "push").map(|l| {
            let mut l = l.to_vec();
            l.push(a[1].any());
            Val::list(l)
        }),
        "prepend" | "mustPrepend" => list_of(&a[0], "prepend").map(|l| {
            let mut out = vec![a[1].any()];
            out.extend(l.iter().cloned());
            Val::list(out)
        }),
        "first" | "mustFirst" => list_of(&a[0], "first").map(|l| l.first().cloned().unwrap_or(Val::Nil)),
        "last" | "mustLast" => list_of(&a[0], "last").map(|l| l.last().cloned().unwrap_or(Val::Nil)),
        "rest" | "mustRest" => list_of(&a[0], "rest").map(|l| Val::list(l.get(1..).unwrap_or_default().to_vec())),
        "initial" | "mustInitial" => list_of(&a[0], "initial").map(|l| Val::list(l[..l.len().saturating_sub(1)].to_vec())),
        "reverse" | "mustReverse" => list_of(&a[0], "reverse").map(|l| Val::list(l.iter().rev().cloned().collect())),
        "uniq" | "mustUniq" => list_of(&a[0], "uniq").map(|l| {
            let mut out: Vec<Val> = Vec::new();
            for v in l {
                if !out.iter().any(|o| o.deep_equal(&v)) {
                    out.push(v);
                }
            }
            Val::list(out)
        }),
        "without" | "mustWithout" => list_of(&a[0], "without").map(|l| {
            let omit: Vec<Val> = a[1..].iter().map(A::any).collect();
            Val::list(l.into_iter().filter(|v| !omit.iter().any(|o| o.deep_equal(v))).collect())
        }),
        "has" | "mustHas" => {
            let needle = a[0].any();
            match a[1].any() {
                Val::Nil => Ok(Val::Bool(false)),
                Val::List(l, _) => Ok(Val::Bool(l.iter().any(|v| v.deep_equal(&needle)))),
                other => Err(format!("Cannot find has on type {}", other.type_name())),
            }
        }
        "slice" | "mustSlice" => match a[0].any() {
            Val::List(l, elem) => {
                if l.is_empty() {
                    Ok(Val::Nil)
                } else {
                    let start = a.get(1).map_or(0, |x| to_int64(&x.any()));
                    let end = if a.len() < 3 { l.len() as i64 } else { to_int64(&a[2].any()) };
                    if start < 0 || end < start || end > l.len() as i64 {
                        Err(format!("reflect: slice index out of range [{start}:{end}]"))
                    } else {
                        Ok(Val::List(Rc::new(l[start as usize..end as usize].to_vec()), elem))
                    }
                }
            }
            other => Err(format!("list should be type of slice or array but {} found", other.type_name())),
        },
        "concat" => (|| {
            let mut out = Vec::new();
            for x in a {
                match x.any() {
                    Val::List(l, _) => out.extend(l.iter().cloned()),
                    other => return Err(format!("Cannot concat type {} as list", other.type_name())),
                }
            }
            Ok(Val::list(out))
        })(),
        "dig" => dig(a),
        "chunk" | "mustChunk" => (|| {
            let size = a[0].int()?;
            let l = list_of(&a[1], "chunk")?;
            if size <= 0 {
                return Err("runtime error: makeslice: len out of range".to_owned());
            }
            let chunks: Vec<Val> = l.chunks(size as usize).map(|c| Val::list(c.to_vec())).collect();
            Ok(Val::List(Rc::new(chunks), "[]interface {}"))
        })(),
        "urlParse" => s(0).and_then(|u| url_parse(&u)),
        "urlJoin" => (|| url_join(&a[0].dict()?.borrow()))(),
        "toYaml" => {
            let v = a[0].any().to_json();
            match serde_saphyr::to_string(&v) {
                Ok(y) => Ok(Val::str(y.trim_end_matches('\n'))),
                Err(_) => Ok(Val::str("")),
            }
        }
        "required" => (|| match a[1].any() {
            Val::Nil => Err(a[0].string()?),
            Val::Str(s) if s.is_empty() => Err(a[0].string()?),
            v => Ok(v),
        })(),
        _ => return None,
    })
}

/// A list argument of a `must*`-style list function; sprig panics with "Cannot <op> on type".
fn list_of(a: &A, op: &str) -> Result<Vec<Val>, String> {
    match a.any() {
        Val::List(l, _) => Ok(l.to_vec()),
        other => Err(format!("Cannot {op} on type {}", other.type_name())),
    }
}

/// `strings.SplitN(s, sep, n)` (n < 0: all); an empty separator splits into characters.
fn go_split(sep: &str, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let parts: Vec<String> = if sep.is_empty() {
        let chars: Vec<String> = s.chars().map(String::from).collect();
        if n > 0 && chars.len() as i64 > n {
            let head = chars[..(n - 1) as usize].to_vec();
            let tail: String = chars[(n - 1) as usize..].concat();
            head.into_iter().chain(std::iter::once(tail)).collect()
        } else {
            chars
        }
    } else if n > 0 {
        s.splitn(n as usize, sep).map(str::to_owned).collect()
    } else {
        s.split(sep).map(str::to_owned).collect()
    };
    parts
}

/// sprig's `strslice`: strings of the elements, nils dropped; a non-list becomes one string.
pub(super) fn strslice(v: &Val) -> Vec<String> {
    match v {
        Val::List(l, _) => l.iter().filter(|x| !x.is_nil()).map(strval).collect(),
        Val::Nil | Val::Missing(_) => Vec::new(),
        v => vec![strval(v)],
    }
}

/// `encoding/json`'s decoding into `interface{}`: every number is a float64.
fn from_json_float(v: &serde_json::Value) -> Val {
    match v {
        serde_json::Value::Number(n) => Val::F64(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::Array(a) => Val::list(a.iter().map(from_json_float).collect()),
        serde_json::Value::Object(m) => Val::map(m.iter().map(|(k, v)| (k.clone(), from_json_float(v))).collect()),
        other => Val::from_json(other),
    }
}

/// Go's `encoding/json` output: keys sorted, HTML characters escaped unless `raw`, floats as Go
/// writes them; `indent` gives `MarshalIndent(v, "", "  ")`.
fn json(v: &Val, escape_html: bool, indent: Option<usize>, out: &mut String) -> Result<(), String> {
    let nl = |out: &mut String, level: usize| {
        if indent.is_some() {
            out.push('\n');
            out.push_str(&"  ".repeat(level));
        }
    };
    let level = indent.unwrap_or(0);
    match v {
        Val::Missing(_) | Val::Nil => out.push_str("null"),
        Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Val::Int(i) | Val::I64(i) => out.push_str(&i.to_string()),
        Val::F64(f) => out.push_str(&json_float(*f)?),
        Val::Str(s) => json_string(s, escape_html, out),
        Val::Time(t) => json_string(&t.rfc3339(), escape_html, out),
        Val::List(l, _) => {
            if l.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                nl(out, level + 1);
                json(item, escape_html, indent.map(|l| l + 1), out)?;
            }
            nl(out, level);
            out.push(']');
        }
        Val::Map(m, _) => {
            let m = m.borrow();
            if m.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                nl(out, level + 1);
                json_string(k, escape_html, out);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                json(item, escape_html, indent.map(|l| l + 1), out)?;
            }
            nl(out, level);
            out.push('}');
        }
    }
    Ok(())
}

fn json_string(s: &str, escape_html: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            '<' | '>' | '&' if escape_html => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `encoding/json`'s float format: plain from 1e-6 to below 1e21, else the exponent form with
/// a short exponent (`1e-7`, `1e+21`).
fn json_float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!("json: unsupported value: {}", super::super::gofmt::go_float(f)));
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return Ok(format!("{f}"));
    }
    let sci = format!("{f:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    Ok(format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs()).replace("e-0", "e-"))
}

fn dig(a: &[A]) -> R {
    if a.len() < 3 {
        return Err("dig needs at least three arguments".to_owned());
    }
    let default = a[a.len() - 2].any();
    let mut dict = match a[a.len() - 1].any() {
        Val::Map(m, e) if e == IFACE => m,
        other => return Err(format!("interface conversion: interface {{}} is {}, not map[string]interface {{}}", other.type_name())),
    };
    let keys = &a[..a.len() - 2];
    for (i, k) in keys.iter().enumerate() {
        let key = match k.any() {
            Val::Str(s) => s.to_string(),
            other => return Err(format!("interface conversion: interface {{}} is {}, not string", other.type_name())),
        };
        let step = dict.borrow().get(&key).cloned();
        let Some(step) = step else { return Ok(default) };
        if i == keys.len() - 1 {
            return Ok(step);
        }
        dict = match step {
            Val::Map(m, e) if e == IFACE => m,
            other => return Err(format!("interface conversion: interface {{}} is {}, not map[string]interface {{}}", other.type_name())),
        };
    }
    Ok(default)
}

/// sprig's `urlParse` for the URLs values templates build: `scheme://[userinfo@]host/path?query#fragment`.
fn url_parse(s: &str) -> R {
    let (rest, fragment) = s.split_once('#').unwrap_or((s, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (scheme, rest) = match rest.split_once(':') {
        Some((sc, r))
            if !sc.is_empty()
                && sc.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && sc.starts_with(|c: char| c.is_ascii_alphabetic()) =>
        {
            (sc.to_ascii_lowercase(), r)
        }
        _ => (String::new(), rest),
    };
    let (authority, path, opaque) = if let Some(r) = rest.strip_prefix("//") {
        let (auth, path) = r.find('/').map_or((r, ""), |i| (&r[..i], &r[i..]));
        (auth, path.to_owned(), String::new())
    } else if !scheme.is_empty() && !rest.starts_with('/') {
        ("", String::new(), rest.to_owned())
    } else {
        ("", rest.to_owned(), String::new())
    };
    let (userinfo, host) = authority.rsplit_once('@').unwrap_or(("", authority));
    let hostname = if host.starts_with('[') {
        host.split_once(']').map_or(host, |(h, _)| &h[1..]).to_owned()
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned()
    };
    let mut m = BTreeMap::new();
    m.insert("scheme".to_owned(), Val::str(scheme));
    m.insert("host".to_owned(), Val::str(host));
    m.insert("hostname".to_owned(), Val::str(hostname));
    m.insert("path".to_owned(), Val::str(path));
    m.insert("query".to_owned(), Val::str(query));
    m.insert("opaque".to_owned(), Val::str(opaque));
    m.insert("fragment".to_owned(), Val::str(fragment));
    m.insert("userinfo".to_owned(), Val::str(userinfo));
    Ok(Val::map(m))
}

/// sprig's `urlJoin`: the inverse of [`url_parse`] for the same fields.
fn url_join(d: &BTreeMap<String, Val>) -> R {
    let get = |k: &str| -> Result<String, String> {
        match d.get(k) {
            None => Ok(String::new()),
            Some(Val::Str(s)) => Ok(s.to_string()),
            Some(other) => {
                Err(format!("unable to parse {k} field: interface conversion: interface {{}} is {}, not string", other.type_name()))
            }
        }
    };
    let (scheme, host, path, query, opaque, fragment, userinfo) =
        (get("scheme")?, get("host")?, get("path")?, get("query")?, get("opaque")?, get("fragment")?, get("userinfo")?);
    let mut out = String::new();
    if !scheme.is_empty() {
        out.push_str(&scheme);
        out.push(':');
    }
    if !opaque.is_empty() {
        out.push_str(&opaque);
    } else {
        if !scheme.is_empty() || !host.is_empty() || !userinfo.is_empty() {
            out.push_str("//");
            if !userinfo.is_empty() {
                out.push_str(&userinfo);
                out.push('@');
            }
            out.push_str(&host);
        }
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            out.push('/');
        }
        out.push_str(&path);
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query);
    }
    if !fragment.is_empty() {
        out.push('#');
        out.push_str(&fragment);
    }
    Ok(Val::str(out))
}
