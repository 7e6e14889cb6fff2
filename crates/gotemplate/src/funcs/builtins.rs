//! Go's `text/template` builtins (`and` / `or` short-circuit in the caller). sprig's `slice`
//! replaces Go's, as in the operator's function map.

use std::cmp::Ordering;

use super::super::gofmt;
use super::super::value::{Val, go_bytes, is_escape, is_nil_list, is_nil_map};
use super::{A, FuncError, R};

pub(super) fn call(name: &str, a: &[A]) -> Option<R> {
    Some(match name {
        "not" => Ok(Val::Bool(!a[0].v.truthy())),
        "len" => len(&a[0].v),
        "index" => index(&a[0].v, &a[1..]),
        "print" => Ok(Val::str(gofmt::sprint(&any_all(a)))),
        "println" => Ok(Val::str(gofmt::sprintln(&any_all(a)))),
        "printf" => a[0].string().and_then(|f| {
            let out = gofmt::sprintf(&f, &any_all(&a[1..]));
            if gofmt::take_printed_time_fields() {
                return Err(format!(
                    "printf {}: a time formatted with this verb prints Go's internal time fields (and a pointer that differs between processes); format it with date, or use %v",
                    gofmt::sprintf("%q", &[Val::str(f.clone())])
                ).into());
            }
            Ok(Val::str(out))
        }),
        "eq" => eq(&a[0].v, &a[1..]),
        "ne" => eq(&a[0].v, &a[1..]).map(|v| Val::Bool(!v.truthy())),
        "lt" => cmp(&a[0].v, &a[1].v).map(|o| Val::Bool(o == Ordering::Less)),
        "le" => cmp(&a[0].v, &a[1].v).map(|o| Val::Bool(o != Ordering::Greater)),
        "gt" => cmp(&a[0].v, &a[1].v).map(|o| Val::Bool(o == Ordering::Greater)),
        "ge" => cmp(&a[0].v, &a[1].v).map(|o| Val::Bool(o != Ordering::Less)),
        "html" => Ok(Val::str(html(&eval_args(a)))),
        "js" => Ok(Val::str(js(&eval_args(a)))),
        "urlquery" => Ok(Val::str(query_escape(&eval_args(a)))),
        _ => return None,
    })
}

fn any_all(a: &[A]) -> Vec<Val> {
    a.iter().map(A::any).collect()
}

/// Go's `evalArgs` for `html` / `js` / `urlquery`: a single string as is, else `fmt.Sprint` with
/// "no value" for nils.
fn eval_args(a: &[A]) -> String {
    if let [one] = a
        && let Val::Str(s) = &one.v
    {
        return s.to_string();
    }
    let vals: Vec<Val> = a.iter().map(|x| if x.v.is_nil() { Val::str("<no value>") } else { x.v.clone() }).collect();
    gofmt::sprint(&vals)
}

fn len(v: &Val) -> R {
    match v {
        Val::Str(s) => Ok(Val::Int(go_bytes(s).len() as i64)),
        Val::List(l, _) => Ok(Val::Int(l.len() as i64)),
        Val::Map(m, _) => Ok(Val::Int(m.borrow().len() as i64)),
        Val::Missing(_) | Val::Nil => Err("reflect: call of reflect.Value.Type on zero Value".into()),
        other => Err(format!("len of type {}", other.type_name()).into()),
    }
}

fn index(item: &Val, idx: &[A]) -> R {
    if item.is_nil() {
        return Err("index of untyped nil".into());
    }
    let mut cur = item.clone();
    for i in idx {
        cur = match cur {
            Val::Missing(_) | Val::Nil => return Err("index of untyped nil".into()),
            Val::List(l, _) => l.get(position(&i.v, l.len())?).cloned().unwrap_or(Val::Nil),
            Val::Str(s) => {
                let b = go_bytes(&s);
                Val::Int(i64::from(b[position(&i.v, b.len())?]))
            }
            // A missing key gives the zero value of the element type, as Go's `index` does.
            Val::Map(m, elem) => match &i.v {
                Val::Str(k) => m.borrow().get(k.as_ref()).cloned().unwrap_or(match elem {
                    "string" => Val::str(""),
                    _ => Val::Nil,
                }),
                Val::Missing(_) | Val::Nil => return Err("value is nil; should be of type string".into()),
                other => return Err(format!("value has type {}; should be string", other.type_name()).into()),
            },
            other => return Err(format!("can't index item of type {}", other.type_name()).into()),
        };
    }
    Ok(cur)
}

fn position(v: &Val, len: usize) -> Result<usize, FuncError> {
    let i = match v {
        Val::Int(i) | Val::I64(i) => *i,
        Val::Missing(_) | Val::Nil => return Err("cannot index slice/array with nil".into()),
        other => return Err(format!("cannot index slice/array with type {}", other.type_name()).into()),
    };
    match usize::try_from(i) {
        Ok(u) if u < len => Ok(u),
        _ => Err(format!("index out of range: {i}").into()),
    }
}

#[derive(PartialEq)]
enum Kind {
    Invalid,
    Bool,
    Int,
    Float,
    Complex,
    Str,
    Other,
}

fn kind(v: &Val) -> Kind {
    match v {
        Val::Missing(_) | Val::Nil => Kind::Invalid,
        Val::Bool(_) => Kind::Bool,
        Val::Int(_) | Val::I64(_) => Kind::Int,
        Val::F64(_) => Kind::Float,
        Val::Complex(..) => Kind::Complex,
        Val::Str(_) => Kind::Str,
        _ => Kind::Other,
    }
}

/// Go's `isNil` in `eq`: no value, a nil interface, a nil slice or map.
fn go_is_nil(v: &Val) -> bool {
    match v {
        Val::Missing(_) | Val::Nil => true,
        Val::List(l, _) => is_nil_list(l),
        Val::Map(m, _) => is_nil_map(m),
        _ => false,
    }
}

/// Go's `eq`: true when the first argument equals any of the others.
fn eq(first: &Val, others: &[A]) -> R {
    if others.is_empty() {
        return Err("missing argument for comparison".into());
    }
    // Kinds other than bool, numbers and strings are all Go's "invalidKind" here.
    let basic = |k: &Kind| !matches!(k, Kind::Invalid | Kind::Other);
    let k1 = kind(first);
    for o in others {
        let o = &o.v;
        let k2 = kind(o);
        let truth = if k1 != k2 && (basic(&k1) || basic(&k2)) {
            if !first.is_nil() && !o.is_nil() {
                return Err("incompatible types for comparison".into());
            }
            false
        } else {
            match (first, o) {
                (Val::Bool(a), Val::Bool(b)) => a == b,
                (Val::Int(a) | Val::I64(a), Val::Int(b) | Val::I64(b)) => a == b,
                (Val::F64(a), Val::F64(b)) => a == b,
                (Val::Complex(a, b), Val::Complex(c, d)) => a == c && b == d,
                (Val::Str(a), Val::Str(b)) => a == b,
                (a, b) => {
                    let same_kind = std::mem::discriminant(a) == std::mem::discriminant(b) || a.is_nil() || b.is_nil();
                    if !same_kind {
                        return Err(format!("non-comparable types: {} and {}", a.type_name(), b.type_name()).into());
                    }
                    if go_is_nil(a) || go_is_nil(b) {
                        go_is_nil(a) == go_is_nil(b)
                    } else if let (Val::Time(x), Val::Time(y)) = (a, b) {
                        x == y
                    } else {
                        return Err(
                            format!("non-comparable type {}: {}", gofmt::sprintf("%s", std::slice::from_ref(b)), b.type_name()).into()
                        );
                    }
                }
            }
        };
        if truth {
            return Ok(Val::Bool(true));
        }
    }
    Ok(Val::Bool(false))
}

fn cmp(a: &Val, b: &Val) -> Result<Ordering, FuncError> {
    let (ka, kb) = (kind(a), kind(b));
    if matches!(ka, Kind::Invalid | Kind::Other | Kind::Bool | Kind::Complex)
        || matches!(kb, Kind::Invalid | Kind::Other | Kind::Bool | Kind::Complex)
    {
        return Err("invalid type for comparison".into());
    }
    if ka != kb {
        return Err("incompatible types for comparison".into());
    }
    Ok(match (a, b) {
        (Val::Int(x) | Val::I64(x), Val::Int(y) | Val::I64(y)) => x.cmp(y),
        (Val::F64(x), Val::F64(y)) => x.partial_cmp(y).unwrap_or(Ordering::Greater),
        (Val::Str(x), Val::Str(y)) => go_bytes(x).cmp(&go_bytes(y)),
        _ => Ordering::Equal,
    })
}

/// Go's `template.HTMLEscapeString`.
fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if (c as u32) < 0x80 => out.push(c),
            // A byte that is not UTF-8 decodes as U+FFFD, which is printable: Go copies the byte.
            c if is_escape(c) => out.push(c),
            c if gofmt::quote(&c.to_string()).chars().count() == 3 => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub(super) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in go_bytes(s).iter().copied() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(b)),
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
