//! sprig's list, dict, default and JSON functions (the slim-sprig set) and stacksync's helm-style
//! extensions `toYaml` / `required`. Lists are copied as sprig copies them; maps are shared and
//! `set` / `unset` change them in place, as in Go.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::super::value::{
    IFACE, Val, appended, from_go_bytes, go_bytes, grow, is_nil_list, is_nil_map, nil_list, reaches, spare_of, with_spare,
};
use super::Run;
use super::sprig::{limit, strval, to_int64};
use super::{A, FuncError, R};

pub(super) fn call(ex: &mut dyn Run, name: &str, a: &[A]) -> Option<R> {
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
            // A nil `[]string` comes back as it is (sprig sorts it in place).
            if let Val::List(l, "string") = &v
                && is_nil_list(l)
            {
                return Some(Ok(v));
            }
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
        "compact" | "mustCompact" => {
            list_of(&a[0], "compact").map(|l| appended(l.iter().filter(|v| v.truthy()).cloned().collect(), IFACE, 0))
        }
        "fromJson" | "mustFromJson" => (|| {
            let text = s(0)?;
            match super::json::decode(&go_bytes(&text)) {
                Ok((v, None)) => Ok(v),
                // What Go decoded before a number out of range, with nil for that number.
                Ok((v, Some(e))) | Err((v, e)) if name == "mustFromJson" => {
                    let _ = v;
                    Err(e)
                }
                Ok((v, Some(_))) => Ok(v),
                Err((v, _)) => Ok(v),
            }
        })(),
        "toJson" | "mustToJson" | "toRawJson" | "mustToRawJson" | "toPrettyJson" | "mustToPrettyJson" => {
            let v = a[0].any();
            let mut out = String::new();
            let pretty = name.contains("Pretty");
            let escape = !name.contains("Raw");
            match json(&v, escape, pretty.then_some(0), &mut out) {
                Ok(()) => Ok(Val::str(out)),
                // slim-sprig's `toRawJson` panics where `toJson` and `toPrettyJson` print "".
                Err(e) if name.starts_with("must") || name == "toRawJson" => Err(e),
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
            let (d, k, v) = (a[0].dict()?, s(1)?, a[2].any());
            if is_nil_map(&d) {
                return Err(FuncError("assignment to entry in nil map".to_owned()));
            }
            if reaches(&v, &d) {
                return Err(FuncError("the value contains the map it is set into (a cycle)".to_owned()));
            }
            d.borrow_mut().insert(k, v);
            Ok(Val::Map(d, IFACE))
        })(),
        "unset" => (|| {
            let d = a[0].dict()?;
            let k = a.get(1).map(A::string).transpose()?.unwrap_or_default();
            if a.len() != 2 {
                return Err(FuncError(format!("wrong number of args for unset: want 2 got {}", a.len())));
            }
            if !is_nil_map(&d) {
                d.borrow_mut().remove(&k);
            }
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
        // sprig copies the list into one of its length and appends: Go grows the capacity.
        "append" | "push" | "mustAppend" | "mustPush" => list_of(&a[0], "push").map(|l| {
            let start = l.len();
            let mut l = l.to_vec();
            l.push(a[1].any());
            appended(l, IFACE, start)
        }),
        "prepend" | "mustPrepend" => list_of(&a[0], "prepend").map(|l| {
            let mut out = vec![a[1].any()];
            out.extend(l.iter().cloned());
            // `append([]interface{}{v}, nl...)`: one growth from capacity 1.
            let cap = if out.len() > 1 { grow(out.len(), 1, IFACE) } else { 1 };
            let spare = vec![Val::Nil; cap - out.len()];
            with_spare(out, IFACE, spare)
        }),
        "first" | "mustFirst" => list_of(&a[0], "first").map(|l| l.first().cloned().unwrap_or(Val::Nil)),
        "last" | "mustLast" => list_of(&a[0], "last").map(|l| l.last().cloned().unwrap_or(Val::Nil)),
        // Of an empty list, sprig returns a nil `[]interface {}`.
        "rest" | "mustRest" => {
            list_of(&a[0], "rest").map(|l| if l.is_empty() { nil_list(IFACE) } else { Val::list(l.get(1..).unwrap_or_default().to_vec()) })
        }
        "initial" | "mustInitial" => list_of(&a[0], "initial")
            .map(|l| if l.is_empty() { nil_list(IFACE) } else { Val::list(l[..l.len().saturating_sub(1)].to_vec()) }),
        "reverse" | "mustReverse" => list_of(&a[0], "reverse").map(|l| Val::list(l.iter().rev().cloned().collect())),
        "uniq" | "mustUniq" => list_of(&a[0], "uniq").map(|l| {
            let mut out: Vec<Val> = Vec::new();
            for v in l {
                if !out.iter().any(|o| o.deep_equal(&v)) {
                    out.push(v);
                }
            }
            appended(out, IFACE, 0)
        }),
        "without" | "mustWithout" => list_of(&a[0], "without").map(|l| {
            let omit: Vec<Val> = a[1..].iter().map(A::any).collect();
            appended(l.into_iter().filter(|v| !omit.iter().any(|o| o.deep_equal(v))).collect(), IFACE, 0)
        }),
        "has" | "mustHas" => {
            let needle = a[0].any();
            match a[1].any() {
                Val::Nil => Ok(Val::Bool(false)),
                Val::List(l, _) => Ok(Val::Bool(l.iter().any(|v| v.deep_equal(&needle)))),
                other => Err(format!("Cannot find has on type {}", other.type_name()).into()),
            }
        }
        "slice" | "mustSlice" => match a[0].any() {
            Val::List(l, elem) => {
                if l.is_empty() {
                    Ok(Val::Nil)
                } else {
                    let start = a.get(1).map_or(0, |x| to_int64(&x.any()));
                    let end = if a.len() < 3 { l.len() as i64 } else { to_int64(&a[2].any()) };
                    // Go slices up to the capacity: the elements past the length come along.
                    let mut all = l.to_vec();
                    all.extend(spare_of(&l));
                    if start < 0 || end < start || end > all.len() as i64 {
                        Err(format!("reflect: slice index out of range [{start}:{end}]").into())
                    } else {
                        let spare = all.split_off(end as usize);
                        Ok(with_spare(all.split_off(start as usize), elem, spare))
                    }
                }
            }
            other => Err(format!("list should be type of slice or array but {} found", other.type_name()).into()),
        },
        "concat" => (|| {
            let mut out = Vec::new();
            for x in a {
                match x.any() {
                    Val::List(l, _) => out.extend(l.iter().cloned()),
                    other => return Err(FuncError(format!("Cannot concat type {} as list", other.type_name()))),
                }
            }
            // sprig appends to a nil slice: nothing appended leaves it nil.
            Ok(if out.is_empty() { nil_list(IFACE) } else { appended(out, IFACE, 0) })
        })(),
        "dig" => dig(a),
        "chunk" | "mustChunk" => (|| {
            let size = a[0].int()?;
            let l = list_of(&a[1], "chunk")?;
            Ok(Val::List(Rc::new(chunk(&l, size)?), "[]interface {}"))
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
            Val::Nil => Err(FuncError(a[0].string()?)),
            Val::Str(s) if s.is_empty() => Err(FuncError(a[0].string()?)),
            v => Ok(v),
        })(),
        _ => return None,
    })
}

/// A list argument of a `must*`-style list function; sprig panics with "Cannot `<op>` on type".
fn list_of(a: &A, op: &str) -> Result<Vec<Val>, FuncError> {
    match a.any() {
        Val::List(l, _) => Ok(l.to_vec()),
        other => Err(format!("Cannot {op} on type {}", other.type_name()).into()),
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

/// Go's `encoding/json` output: keys sorted, HTML characters escaped unless `raw`, floats as Go
/// writes them; `indent` gives `MarshalIndent(v, "", "  ")`.
fn json(v: &Val, escape_html: bool, indent: Option<usize>, out: &mut String) -> Result<(), FuncError> {
    let nl = |out: &mut String, level: usize| {
        if indent.is_some() {
            out.push('\n');
            out.push_str(&"  ".repeat(level));
        }
    };
    let level = indent.unwrap_or(0);
    match v {
        Val::Missing(_) | Val::Nil => out.push_str("null"),
        Val::List(l, _) if is_nil_list(l) => out.push_str("null"),
        Val::Map(m, _) if is_nil_map(m) => out.push_str("null"),
        Val::Complex(..) => return Err("json: unsupported type: complex128".into()),
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
    let bytes = go_bytes(s);
    for chunk in bytes.utf8_chunks() {
        json_chars(chunk.valid(), escape_html, out);
        // encoding/json writes each byte that is not UTF-8 as the escape of U+FFFD.
        for _ in chunk.invalid() {
            out.push_str("\\ufffd");
        }
    }
    out.push('"');
}

fn json_chars(s: &str, escape_html: bool, out: &mut String) {
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
}

/// `encoding/json`'s float format: plain from 1e-6 to below 1e21, else the exponent form with
/// a short exponent (`1e-7`, `1e+21`).
fn json_float(f: f64) -> Result<String, FuncError> {
    if !f.is_finite() {
        return Err(format!("json: unsupported value: {}", super::super::gofmt::go_float(f)).into());
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
        return Err("dig needs at least three arguments".into());
    }
    let default = a[a.len() - 2].any();
    let mut dict = match a[a.len() - 1].any() {
        Val::Map(m, e) if e == IFACE => m,
        other => return Err(format!("interface conversion: interface {{}} is {}, not map[string]interface {{}}", other.type_name()).into()),
    };
    // sprig asserts every key is a string before it looks anything up.
    let mut keys = Vec::with_capacity(a.len() - 2);
    for k in &a[..a.len() - 2] {
        match k.any() {
            Val::Str(s) => keys.push(s.to_string()),
            other => return Err(format!("interface conversion: interface {{}} is {}, not string", other.type_name()).into()),
        }
    }
    for (i, key) in keys.iter().enumerate() {
        let key = key.clone();
        let step = dict.borrow().get(&key).cloned();
        let Some(step) = step else { return Ok(default) };
        if i == keys.len() - 1 {
            return Ok(step);
        }
        dict = match step {
            Val::Map(m, e) if e == IFACE => m,
            other => {
                return Err(format!("interface conversion: interface {{}} is {}, not map[string]interface {{}}", other.type_name()).into());
            }
        };
    }
    Ok(default)
}

/// sprig's `urlParse`: Go's `url.Parse` (its errors too), with the path and fragment unescaped.
fn url_parse(s: &str) -> R {
    let fail = |why: &str| Err(FuncError(format!("unable to parse url: parse {}: {why}", super::super::gofmt::quote(s))));
    if go_bytes(s).iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return fail("net/url: invalid control character in URL");
    }
    let (rest, fragment) = s.split_once('#').unwrap_or((s, ""));
    let fragment = match url_unescape_mode(fragment, None) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    if rest.starts_with(':') {
        return fail("missing protocol scheme");
    }
    let (scheme, rest) = match rest.split_once(':') {
        Some((sc, r))
            if sc.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) && sc.starts_with(|c: char| c.is_ascii_alphabetic()) =>
        {
            (sc.to_ascii_lowercase(), r)
        }
        _ => (String::new(), rest),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (mut host, mut userinfo, raw_path, opaque) = (String::new(), String::new(), String::new(), String::new());
    let (raw_path, opaque) = if !scheme.is_empty() && !rest.starts_with('/') {
        (raw_path, rest.to_owned())
    } else if let Some(r) = rest.strip_prefix("//") {
        let (auth, path) = r.find('/').map_or((r, ""), |i| (&r[..i], &r[i..]));
        let (ui, h) = match auth.rfind('@') {
            Some(i) => (Some(&auth[..i]), &auth[i + 1..]),
            None => (None, auth),
        };
        if let Some(ui) = ui {
            match parse_userinfo(ui) {
                Ok((name, password)) => {
                    userinfo = url_escape(&name, USERINFO_KEEP);
                    if let Some(p) = password {
                        userinfo.push(':');
                        userinfo.push_str(&url_escape(&p, USERINFO_KEEP));
                    }
                }
                Err(_) => return fail("net/url: invalid userinfo"),
            }
        }
        if let Err(e) = check_host(h) {
            return fail(&e.to_string());
        }
        host = match url_unescape_mode(h, Some(HOST_KEEP)) {
            Ok(h) => h,
            Err(e) => return fail(&e.to_string()),
        };
        (path.to_owned(), opaque)
    } else {
        if scheme.is_empty() && rest.split('/').next().is_some_and(|seg| seg.contains(':')) {
            return fail("first path segment in URL cannot contain colon");
        }
        (rest.to_owned(), opaque)
    };
    let path = match url_unescape_mode(&raw_path, None) {
        Ok(p) => p,
        Err(e) => return fail(&e.to_string()),
    };
    let hostname = if host.starts_with('[') {
        host.split_once(']').map_or(host.as_str(), |(h, _)| &h[1..]).to_owned()
    } else {
        host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h).to_owned()
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

/// Go's `parseHost` checks: a port after the last colon (or after `]`) must be digits.
fn check_host(h: &str) -> Result<(), FuncError> {
    let port = if h.starts_with('[') {
        match h.find(']') {
            Some(i) => &h[i + 1..],
            None => return Err("missing ']' in host".into()),
        }
    } else {
        h.rfind(':').map_or("", |i| &h[i..])
    };
    if !(port.is_empty() || port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("invalid port {} after host", super::super::gofmt::quote(port)).into());
    }
    Ok(())
}

/// Go's `url.unescape`: `%XX` decoded (a bad one is an error); in a host (`host_keep`), other
/// ASCII bytes that would need escaping are errors, and so are escapes of bytes below 0x80
/// other than `%25`.
fn url_unescape_mode(s: &str, host_keep: Option<&str>) -> Result<String, FuncError> {
    let b = go_bytes(s);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let ok = b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
            if !ok {
                let bad = String::from_utf8_lossy(&b[i..(i + 3).min(b.len())]).into_owned();
                return Err(format!("invalid URL escape {}", super::super::gofmt::quote(&bad)).into());
            }
            let v = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("00"), 16).unwrap_or(0);
            if host_keep.is_some() && v < 0x80 && &b[i..i + 3] != b"%25" {
                let bad = String::from_utf8_lossy(&b[i..i + 3]).into_owned();
                return Err(format!("invalid URL escape {}", super::super::gofmt::quote(&bad)).into());
            }
            out.push(v);
            i += 3;
        } else {
            if let Some(keep) = host_keep
                && b[i] < 0x80
                && !(b[i].is_ascii_alphanumeric() || keep.as_bytes().contains(&b[i]))
            {
                return Err(format!("invalid character {} in host name", super::super::gofmt::quote(&char::from(b[i]).to_string())).into());
            }
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(from_go_bytes(&out))
}

/// sprig's `urlJoin`: the inverse of [`url_parse`] for the same fields.
fn url_join(d: &BTreeMap<String, Val>) -> R {
    let get = |k: &str| -> Result<String, FuncError> {
        match d.get(k) {
            None => Ok(String::new()),
            Some(Val::Str(s)) => Ok(s.to_string()),
            Some(other) => {
                Err(format!("unable to parse {k} field: interface conversion: interface {{}} is {}, not string", other.type_name()).into())
            }
        }
    };
    let (scheme, host, path, query, opaque, fragment, userinfo) =
        (get("scheme")?, get("host")?, get("path")?, get("query")?, get("opaque")?, get("fragment")?, get("userinfo")?);
    // sprig reads the userinfo as `url.Parse("proto://<userinfo>@host")` would.
    let user = if userinfo.is_empty() { None } else { Some(parse_userinfo(&userinfo)?) };
    let mut out = String::new();
    if !scheme.is_empty() {
        out.push_str(&scheme);
        out.push(':');
    }
    if !opaque.is_empty() {
        out.push_str(&opaque);
    } else {
        if !scheme.is_empty() || !host.is_empty() || user.is_some() {
            if !host.is_empty() || !path.is_empty() || user.is_some() {
                out.push_str("//");
            }
            if let Some((name, password)) = &user {
                out.push_str(&url_escape(name, USERINFO_KEEP));
                if let Some(p) = password {
                    out.push(':');
                    out.push_str(&url_escape(p, USERINFO_KEEP));
                }
                out.push('@');
            }
            out.push_str(&url_escape(&host, HOST_KEEP));
        }
        let path = if path == "*" { path } else { url_escape(&path, PATH_KEEP) };
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            out.push('/');
        }
        if out.is_empty() && path.split('/').next().is_some_and(|segment| segment.contains(':')) {
            out.push_str("./");
        }
        out.push_str(&path);
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query);
    }
    if !fragment.is_empty() {
        out.push('#');
        out.push_str(&url_escape(&fragment, FRAGMENT_KEEP));
    }
    Ok(Val::str(out))
}

/// Besides letters and digits, the bytes Go's `url.URL.String()` writes as they are, per part.
const HOST_KEEP: &str = "!\"$&'()*+,-.:;<=>[]_~";
const PATH_KEEP: &str = "$&+,-./:;=@_~";
const FRAGMENT_KEEP: &str = "!$&()*+,-./:;=?@_~";
const USERINFO_KEEP: &str = "$&+,-.;=_~";

/// Go's `url.escape`: every other byte as `%XX`.
fn url_escape(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in go_bytes(s).iter() {
        if b.is_ascii_alphanumeric() || keep.as_bytes().contains(b) {
            out.push(char::from(*b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `url.unescape` of a userinfo part.
fn url_unescape(s: &str) -> Result<String, FuncError> {
    let b = go_bytes(s);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(v) = hex.filter(|_| b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()) else {
                return Err("unable to parse userinfo in dict: invalid URL escape".into());
            };
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(from_go_bytes(&out))
}

/// The user name and password of `url.Parse("proto://<userinfo>@host")`.
fn parse_userinfo(userinfo: &str) -> Result<(String, Option<String>), FuncError> {
    let valid = go_bytes(userinfo).iter().all(|b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(b));
    if !valid {
        return Err("unable to parse userinfo in dict: net/url: invalid userinfo".into());
    }
    Ok(match userinfo.split_once(':') {
        None => (url_unescape(userinfo)?, None),
        Some((name, password)) => (url_unescape(name)?, Some(url_unescape(password)?)),
    })
}

/// slim-sprig's `chunk`, with its float arithmetic: a size that is not positive usually fails
/// (a negative length for `make`), but may give an empty list (`chunk -2` of two elements).
fn chunk(l: &[Val], size: i64) -> Result<Vec<Val>, FuncError> {
    use super::super::gonum::f64_to_i64;
    let makeslice = || "runtime error: makeslice: len out of range".to_owned();
    let len = l.len() as i64;
    let count = f64_to_i64(((len - 1) as f64 / size as f64).floor()).wrapping_add(1);
    let count = usize::try_from(count).map_err(|_| makeslice())?;
    if count > l.len() + 1 {
        return Err(makeslice().into());
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut clen = size;
        if i == count - 1 {
            clen = f64_to_i64((len as f64 % size as f64).floor());
            if clen == 0 {
                clen = size;
            }
        }
        let clen = usize::try_from(clen).map_err(|_| makeslice())?;
        let mut c = Vec::with_capacity(clen);
        for j in 0..clen {
            let ix = (i as i64).wrapping_mul(size).wrapping_add(j as i64);
            match usize::try_from(ix).ok().and_then(|ix| l.get(ix)) {
                Some(v) => c.push(v.clone()),
                None => return Err(format!("reflect: slice index out of range: {ix}").into()),
            }
        }
        out.push(Val::list(c));
    }
    Ok(out)
}
