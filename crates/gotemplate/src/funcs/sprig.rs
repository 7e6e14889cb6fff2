//! sprig's string, conversion, arithmetic, encoding, regular-expression, path and reflection
//! functions (the slim-sprig set), written after sprig 3.2.3's Go code: same quiet defaults
//! (`atoi "x"` is 0, `b64dec` of bad input returns the error text), same failures.

use base64::Engine as _;
use sha2::Digest as _;

use super::super::gofmt;
use super::super::gonum;
use super::super::value::{Val, appended, escape_text, from_go_bytes, go_bytes, lossy, nil_list};
use super::Run;
use super::{A, FuncError, R};

pub(super) fn call(ex: &mut dyn Run, name: &str, a: &[A]) -> Option<R> {
    let s = |i: usize| a[i].string();
    Some(match name {
        "hello" => Ok(Val::str("Hello!")),
        "trunc" => (|| {
            let (c, s) = (a[0].int()?, s(1)?);
            let b = go_bytes(&s);
            let len = b.len() as i64;
            Ok(Val::str(if c < 0 && len + c > 0 {
                from_go_bytes(&b[(len + c) as usize..])
            } else if c >= 0 && len > c {
                from_go_bytes(&b[..c as usize])
            } else {
                s.clone()
            }))
        })(),
        "trim" => s(0).map(|s| Val::str(s.trim_matches(is_go_space))),
        // Go maps rune by rune (simple case mapping), not with Unicode's special casing.
        "upper" => s(0).map(|s| Val::str(map_runes(&s, go_upper))),
        "lower" => s(0).map(|s| Val::str(map_runes(&s, go_lower))),
        "title" => s(0).map(|s| Val::str(title(&s))),
        "substr" => (|| {
            let (start, end, s) = (a[0].int()?, a[1].int()?, s(2)?);
            let b = go_bytes(&s);
            let len = b.len() as i64;
            let (from, to) = if start < 0 {
                (0, end)
            } else if end < 0 || end > len {
                (start, len)
            } else {
                (start, end)
            };
            if from < 0 || to < from || to > len {
                return Err(FuncError(format!("runtime error: slice bounds out of range [{from}:{to}]")));
            }
            Ok(Val::str(from_go_bytes(&b[from as usize..to as usize])))
        })(),
        "repeat" => (|| {
            let (n, s) = (a[0].int()?, s(1)?);
            if n < 0 {
                return Err(FuncError("strings: negative Repeat count".to_owned()));
            }
            limit(ex, (n as usize).saturating_mul(s.len()))?;
            Ok(Val::str(s.repeat(n as usize)))
        })(),
        "trimall" | "trimAll" => two(a).map(|(cut, s)| Val::str(s.trim_matches(|c| cut.contains(c)))),
        "trimSuffix" => two(a).map(|(x, s)| Val::str(s.strip_suffix(x.as_str()).unwrap_or(&s))),
        "trimPrefix" => two(a).map(|(x, s)| Val::str(s.strip_prefix(x.as_str()).unwrap_or(&s))),
        "contains" => two(a).map(|(x, s)| Val::Bool(s.contains(x.as_str()))),
        "hasPrefix" => two(a).map(|(x, s)| Val::Bool(s.starts_with(x.as_str()))),
        "hasSuffix" => two(a).map(|(x, s)| Val::Bool(s.ends_with(x.as_str()))),
        "quote" => {
            Ok(Val::str(a.iter().map(A::any).filter(|v| !v.is_nil()).map(|v| gofmt::quote(&strval(&v))).collect::<Vec<_>>().join(" ")))
        }
        "squote" => Ok(Val::str(
            a.iter().map(A::any).filter(|v| !v.is_nil()).map(|v| format!("'{}'", gofmt::sprint_one(&v))).collect::<Vec<_>>().join(" "),
        )),
        "cat" => Ok(Val::str(a.iter().map(A::any).filter(|v| !v.is_nil()).map(|v| gofmt::sprint_one(&v)).collect::<Vec<_>>().join(" "))),
        "indent" | "nindent" => (|| {
            let (n, s) = (a[0].int()?, s(1)?);
            if n < 0 {
                return Err(FuncError("strings: negative Repeat count".to_owned()));
            }
            limit(ex, (n as usize).saturating_mul(s.matches('\n').count() + 1).saturating_add(s.len()))?;
            let pad = " ".repeat(n as usize);
            let body = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
            Ok(Val::str(if name == "nindent" { format!("\n{body}") } else { body }))
        })(),
        "replace" => (|| {
            let (old, new, src) = (s(0)?, s(1)?, s(2)?);
            if old.is_empty() {
                limit(ex, src.len().saturating_add(1).saturating_mul(new.len() + 4))?;
            } else {
                limit(ex, src.len().saturating_mul(new.len() / old.len() + 1))?;
            }
            Ok(Val::str(src.replace(&old, &new)))
        })(),
        "plural" => (|| Ok(Val::str(if a[2].int()? == 1 { s(0)? } else { s(1)? })))(),
        "sha1sum" => s(0).map(|s| Val::str(hex::encode(sha1(&go_bytes(&s))))),
        "sha256sum" => s(0).map(|s| Val::str(hex::encode(sha2::Sha256::digest(go_bytes(&s))))),
        "adler32sum" => s(0).map(|s| Val::str(adler32(&go_bytes(&s)).to_string())),
        "toString" => Ok(Val::str(strval(&a[0].any()))),
        // `strconv.Atoi` gives the clamped value with its range error, which sprig ignores.
        "atoi" => s(0).map(|s| {
            Val::Int(match gonum::parse_int(&s, 10) {
                Ok(i) => i,
                Err(gonum::NumError::Range) if s.starts_with('-') => i64::MIN,
                Err(gonum::NumError::Range) => i64::MAX,
                Err(gonum::NumError::Syntax) => 0,
            })
        }),
        "int64" => Ok(Val::I64(to_int64(&a[0].any()))),
        "int" => Ok(Val::Int(to_int64(&a[0].any()))),
        "float64" => Ok(Val::F64(to_float64(&a[0].any()))),
        "toDecimal" => Ok(Val::I64(gonum::parse_int(&strval(&a[0].any()), 8).unwrap_or(0))),
        "add1" => Ok(Val::I64(to_int64(&a[0].any()).wrapping_add(1))),
        "add" => Ok(Val::I64(a.iter().fold(0i64, |acc, x| acc.wrapping_add(to_int64(&x.any()))))),
        "sub" => Ok(Val::I64(to_int64(&a[0].any()).wrapping_sub(to_int64(&a[1].any())))),
        "mul" => Ok(Val::I64(a.iter().fold(1i64, |acc, x| acc.wrapping_mul(to_int64(&x.any()))))),
        "div" | "mod" => (|| {
            let (x, y) = (to_int64(&a[0].any()), to_int64(&a[1].any()));
            if y == 0 {
                return Err(FuncError("runtime error: integer divide by zero".to_owned()));
            }
            Ok(Val::I64(if name == "div" { x.wrapping_div(y) } else { x.wrapping_rem(y) }))
        })(),
        "max" | "biggest" => Ok(Val::I64(a.iter().map(|x| to_int64(&x.any())).max().unwrap_or(0))),
        "min" => Ok(Val::I64(a.iter().map(|x| to_int64(&x.any())).min().unwrap_or(0))),
        "maxf" => Ok(Val::F64(a[1..].iter().fold(to_float64(&a[0].any()), |m, x| go_max(m, to_float64(&x.any()))))),
        "minf" => Ok(Val::F64(a[1..].iter().fold(to_float64(&a[0].any()), |m, x| go_min(m, to_float64(&x.any()))))),
        "ceil" => Ok(Val::F64(to_float64(&a[0].any()).ceil())),
        "floor" => Ok(Val::F64(to_float64(&a[0].any()).floor())),
        "round" => (|| {
            let val = to_float64(&a[0].any());
            let places = a[1].int()? as f64;
            let on = match a.get(2) {
                Some(x) => x.float()?,
                None => 0.5,
            };
            let pow = 10f64.powf(places);
            let digit = pow * val;
            let frac = digit.fract();
            let r = if frac >= on { digit.ceil() } else { digit.floor() };
            Ok(Val::F64(r / pow))
        })(),
        "seq" => (|| {
            let p: Vec<i64> = a.iter().map(A::int).collect::<Result<_, _>>()?;
            let list = match p.as_slice() {
                [end] => {
                    let inc = if *end < 1 { -1 } else { 1 };
                    until_step(ex, 1, end.wrapping_add(inc), inc)?
                }
                [start, end] => {
                    let step = if end < start { -1 } else { 1 };
                    until_step(ex, *start, end.wrapping_add(step), step)?
                }
                [start, step, end] => {
                    if end < start && *step > 0 {
                        Vec::new()
                    } else {
                        let inc = if end < start { -1 } else { 1 };
                        until_step(ex, *start, end.wrapping_add(inc), *step)?
                    }
                }
                _ => Vec::new(),
            };
            Ok(Val::str(list.iter().map(i64::to_string).collect::<Vec<_>>().join(" ")))
        })(),
        "until" => (|| {
            let n = a[0].int()?;
            let step = if n < 0 { -1 } else { 1 };
            Ok(ints(until_step(ex, 0, n, step)?))
        })(),
        "untilStep" => (|| Ok(ints(until_step(ex, a[0].int()?, a[1].int()?, a[2].int()?)?)))(),
        "typeOf" => Ok(Val::str(a[0].any().type_name())),
        "typeIs" => (|| Ok(Val::Bool(s(0)? == a[1].any().type_name())))(),
        "typeIsLike" => (|| {
            let (t, want) = (a[1].any().type_name(), s(0)?);
            Ok(Val::Bool(want == t || format!("*{want}") == t))
        })(),
        "kindOf" => Ok(Val::str(a[0].any().kind_name())),
        "kindIs" => (|| Ok(Val::Bool(s(0)? == a[1].any().kind_name())))(),
        "deepEqual" => Ok(Val::Bool(a[0].any().deep_equal(&a[1].any()))),
        "base" | "osBase" => s(0).map(|p| Val::str(path_base(&p))),
        "dir" | "osDir" => s(0).map(|p| Val::str(path_dir(&p))),
        "clean" | "osClean" => s(0).map(|p| Val::str(path_clean(&p))),
        "ext" | "osExt" => s(0).map(|p| {
            let e = p.rfind(['.', '/']).filter(|i| p.as_bytes()[*i] == b'.').map_or("", |i| &p[i..]);
            Val::str(e)
        }),
        "isAbs" | "osIsAbs" => s(0).map(|p| Val::Bool(p.starts_with('/'))),
        "b64enc" => s(0).map(|s| Val::str(base64::engine::general_purpose::STANDARD.encode(go_bytes(&s)))),
        "b64dec" => s(0).map(|s| {
            Val::str(match base64_decode(&go_bytes(&s)) {
                Ok(b) => from_go_bytes(&b),
                Err(at) => format!("illegal base64 data at input byte {at}"),
            })
        }),
        "b32enc" => s(0).map(|s| Val::str(base32_encode(&go_bytes(&s)))),
        "b32dec" => s(0).map(|s| {
            Val::str(base32_decode(&lossy(&s)).map_or_else(|at| format!("illegal base32 data at input byte {at}"), |b| from_go_bytes(&b)))
        }),
        "fail" => s(0).and_then(|m| Err(FuncError(m))),
        "regexQuoteMeta" => s(0).map(|s| {
            let mut out = String::new();
            for c in s.chars() {
                if "\\.+*?()|[]{}^$".contains(c) {
                    out.push('\\');
                }
                out.push(c);
            }
            Val::str(out)
        }),
        "regexMatch" | "mustRegexMatch" => (|| match compile(&s(0)?) {
            Ok(re) => Ok(Val::Bool(re.is_match(&s(1)?))),
            Err(_) if name == "regexMatch" => Ok(Val::Bool(false)),
            Err(e) => Err(e),
        })(),
        "regexFind" | "mustRegexFind" => (|| {
            let re = compile(&s(0)?)?;
            Ok(Val::str(re.find(&s(1)?).map_or("", |m| m.as_str())))
        })(),
        "regexFindAll" | "mustRegexFindAll" => (|| {
            let re = compile(&s(0)?)?;
            let (text, n) = (s(1)?, a[2].int()?);
            let found: Vec<String> = go_find_all(&re, &text, n).into_iter().map(|(b, e)| text[b..e].to_owned()).collect();
            // Go's `FindAllString` returns a nil slice when nothing matched (`toJson`: null).
            // ... and one of capacity 10 (`startSize`) grown by appending otherwise.
            Ok(if found.is_empty() { nil_list("string") } else { appended(found.into_iter().map(Val::str).collect(), "string", 10) })
        })(),
        "regexReplaceAll" | "mustRegexReplaceAll" | "regexReplaceAllLiteral" | "mustRegexReplaceAllLiteral" => (|| {
            let re = compile(&s(0)?)?;
            let (text, repl) = (s(1)?, s(2)?);
            limit(ex, text.len().saturating_add(1).saturating_mul(repl.len() + 1))?;
            Ok(Val::str(if name.contains("Literal") {
                re.replace_all(&text, regex::NoExpand(&repl)).into_owned()
            } else {
                re.replace_all(&text, repl.as_str()).into_owned()
            }))
        })(),
        "regexSplit" | "mustRegexSplit" => (|| {
            let re = compile(&s(0)?)?;
            let (text, n) = (s(1)?, a[2].int()?);
            // Go appends the parts to a slice with room for the matches.
            let room = if !re.as_str().is_empty() && text.is_empty() { 1 } else { go_find_all(&re, &text, n).len() };
            Ok(if n == 0 {
                nil_list("string")
            } else {
                appended(go_regex_split(&re, &text, n).into_iter().map(Val::str).collect(), "string", room)
            })
        })(),
        _ => return None,
    })
}

fn two(a: &[A]) -> Result<(String, String), FuncError> {
    Ok((a[0].string()?, a[1].string()?))
}

/// Refuses a result larger than the output limit before building it.
pub(super) fn limit(ex: &dyn Run, bytes: usize) -> Result<(), FuncError> {
    if bytes > ex.output_limit() {
        return Err(format!("the result ({bytes} bytes) would exceed the output limit of {} bytes", ex.output_limit()).into());
    }
    Ok(())
}

/// Go's `strings.Map(f, s)`: bytes that are not UTF-8 become U+FFFD.
fn map_runes(s: &str, f: fn(char) -> char) -> String {
    let text = lossy(s);
    escape_text(&text.chars().map(f).collect::<String>()).into_owned()
}

/// `unicode.ToUpper`: the simple mapping (`ß` stays, `ᾳ` is `ᾼ`).
fn go_upper(c: char) -> char {
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        // Characters whose full mapping has several: Greek with a subscript iota map to the
        // titlecase letter; the others (`ß`, `ŉ`, ligatures, ...) to themselves.
        _ => match c as u32 {
            0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => char::from_u32(c as u32 + 8).unwrap_or(c),
            0x1FB3 => '\u{1FBC}',
            0x1FC3 => '\u{1FCC}',
            0x1FF3 => '\u{1FFC}',
            _ => c,
        },
    }
}

/// `unicode.ToLower`: the simple mapping (`İ` is `i`).
fn go_lower(c: char) -> char {
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ => match c {
            '\u{130}' => 'i',
            _ => c,
        },
    }
}

/// `unicode.ToTitle`: the simple titlecase mapping, the uppercase one except for the digraphs
/// (`ǆ` is `ǅ`) and Georgian Mkhedruli (which has none).
fn go_title(c: char) -> char {
    match c as u32 {
        0x1C4..=0x1C6 => '\u{1C5}',
        0x1C7..=0x1C9 => '\u{1C8}',
        0x1CA..=0x1CC => '\u{1CB}',
        0x1F1..=0x1F3 => '\u{1F2}',
        0x10D0..=0x10FA | 0x10FD..=0x10FF => c,
        _ => go_upper(c),
    }
}

fn is_go_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{85}' || c == '\u{a0}'
}

/// sprig's `strval`: strings as they are, everything else as `fmt`'s `%v`.
pub(super) fn strval(v: &Val) -> String {
    match v {
        Val::Str(s) => s.to_string(),
        v => gofmt::sprint_one(v),
    }
}

/// `strings.Title`: upper-cases letters that follow a separator.
fn title(s: &str) -> String {
    let sep = |c: char| {
        if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else if c.is_alphabetic() || c.is_numeric() {
            false
        } else {
            c.is_whitespace()
        }
    };
    let mut prev = ' ';
    let mut out = String::with_capacity(s.len());
    for c in lossy(s).chars() {
        out.push(if sep(prev) { go_title(c) } else { c });
        prev = c;
    }
    escape_text(&out).into_owned()
}

/// slim-sprig's `toInt64`: numbers truncated, strings as `strconv.ParseInt(s, 10, 64)` (0 when
/// they do not parse), booleans 1/0, anything else 0.
pub(super) fn to_int64(v: &Val) -> i64 {
    match v {
        Val::Int(i) | Val::I64(i) => *i,
        Val::F64(f) => gonum::f64_to_i64(*f),
        Val::Str(s) => gonum::parse_int(s, 10).unwrap_or(0),
        Val::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// slim-sprig's `toFloat64`: strings as `strconv.ParseFloat` reads them (hex floats, `_`
/// separators, `Inf`; 0 when they do not parse or are out of range).
pub(super) fn to_float64(v: &Val) -> f64 {
    match v {
        Val::Int(i) | Val::I64(i) => *i as f64,
        Val::F64(f) => *f,
        Val::Str(s) => gonum::parse_float(s).unwrap_or(0.0),
        Val::Bool(b) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

/// `math.Max`: +Inf wins over NaN, and +0 over -0.
fn go_max(a: f64, b: f64) -> f64 {
    if a == f64::INFINITY || b == f64::INFINITY {
        f64::INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && a == b {
        if a.is_sign_negative() { b } else { a }
    } else if a > b {
        a
    } else {
        b
    }
}

/// `math.Min`: -Inf wins over NaN, and -0 over +0.
fn go_min(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY || b == f64::NEG_INFINITY {
        f64::NEG_INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && a == b {
        if a.is_sign_negative() { a } else { b }
    } else if a < b {
        a
    } else {
        b
    }
}

/// sprig's `untilStep` appends to `[]int{}`.
fn ints(v: Vec<i64>) -> Val {
    appended(v.into_iter().map(Val::Int).collect(), "int", 0)
}

/// sprig's `untilStep`, bounded by the step limit.
fn until_step(ex: &mut dyn Run, start: i64, stop: i64, step: i64) -> Result<Vec<i64>, FuncError> {
    let mut v = Vec::new();
    let mut i = start;
    let ok = |i: i64| if stop < start { step < 0 && i > stop } else { step > 0 && i < stop };
    while ok(i) {
        ex.count_step().map_err(|e| e.message)?;
        v.push(i);
        i = match i.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    Ok(v)
}

/// A Go regular expression: its text must be UTF-8, as Go's parser requires.
fn compile(pattern: &str) -> Result<regex::Regex, FuncError> {
    if !super::super::value::is_utf8(pattern) {
        return Err("error parsing regexp: invalid UTF-8".into());
    }
    regex::Regex::new(&go_regex_syntax(pattern)).map_err(|e| regex_error(&e))
}

/// Go's RE2 syntax in the `regex` crate's: Go's `\d`, `\s`, `\w` and `\b` are ASCII (the
/// crate's are Unicode), and a `{` that starts no repetition is a literal.
fn go_regex_syntax(p: &str) -> String {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut in_class = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if i + 1 < chars.len() => {
                let n = chars[i + 1];
                let ascii = match (in_class, n) {
                    (false, 'd') => Some("[0-9]"),
                    (false, 'D') => Some("[^0-9]"),
                    (false, 's') => Some("[\\t\\n\\f\\r ]"),
                    (false, 'S') => Some("[^\\t\\n\\f\\r ]"),
                    (false, 'w') => Some("[0-9A-Za-z_]"),
                    (false, 'W') => Some("[^0-9A-Za-z_]"),
                    (false, 'b') => Some("(?-u:\\b)"),
                    (false, 'B') => Some("(?-u:\\B)"),
                    (true, 'd') => Some("0-9"),
                    (true, 's') => Some("\\t\\n\\f\\r "),
                    (true, 'w') => Some("0-9A-Za-z_"),
                    _ => None,
                };
                match ascii {
                    Some(a) => out.push_str(a),
                    None => {
                        out.push(c);
                        out.push(n);
                    }
                }
                i += 2;
                continue;
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                i += 1;
                // A `]` right after `[` or `[^` is a literal.
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
                continue;
            }
            '[' if chars.get(i + 1) == Some(&':') => {
                // A POSIX class inside a class: copied to its `:]`.
                let end = (i + 2..chars.len().saturating_sub(1)).find(|j| chars[*j] == ':' && chars[j + 1] == ']');
                let end = end.map_or(i + 1, |j| j + 2);
                out.extend(&chars[i..end]);
                i = end;
                continue;
            }
            // Inside a class, a `[` that starts no POSIX class is a literal for Go.
            '[' => {
                out.push_str("\\[");
                i += 1;
                continue;
            }
            ']' if in_class => in_class = false,
            '{' if !in_class => {
                let rest: String = chars[i + 1..].iter().take_while(|c| **c != '}').collect();
                let closed = i + 1 + rest.chars().count() < chars.len();
                let (lo, hi) = rest.split_once(',').unwrap_or((&rest, "0"));
                let repeat = closed && !lo.is_empty() && lo.chars().all(|c| c.is_ascii_digit()) && hi.chars().all(|c| c.is_ascii_digit());
                if !repeat {
                    out.push_str("\\{");
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

fn regex_error(e: &regex::Error) -> FuncError {
    FuncError(format!("error parsing regexp: {}", e.to_string().lines().last().unwrap_or_default().trim()))
}

/// Go's `FindAllStringIndex(s, n)`: an empty match right after the previous match is skipped.
fn go_find_all(re: &regex::Regex, s: &str, n: i64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if n == 0 {
        return out;
    }
    let mut prev_end: Option<usize> = None;
    for m in re.find_iter(s) {
        if n > 0 && out.len() as i64 >= n {
            break;
        }
        if m.start() == m.end() && prev_end == Some(m.start()) {
            continue;
        }
        prev_end = Some(m.end());
        out.push((m.start(), m.end()));
    }
    out
}

/// Go's `Regexp.Split(s, n)`.
fn go_regex_split(re: &regex::Regex, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if !re.as_str().is_empty() && s.is_empty() {
        return vec![String::new()];
    }
    let matches = go_find_all(re, s, n);
    let mut out: Vec<String> = Vec::new();
    let (mut beg, mut end) = (0, 0);
    for (b, e) in matches {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        end = b;
        if e != 0 {
            out.push(s[beg..end].to_owned());
        }
        beg = e;
    }
    if end != s.len() {
        out.push(s[beg..].to_owned());
    }
    out
}

fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

fn path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".to_owned();
    }
    t.rsplit('/').next().unwrap_or(t).to_owned()
}

fn path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    path_clean(dir)
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// SHA-1 (FIPS 180-4), for sprig's `sha1sum`.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in chunk.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn base32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let n = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < chars {
                out.push(char::from(B32[((n >> (35 - i * 5)) & 31) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard padded base32; the error is the offset of the first bad byte.
fn base32_decode(s: &str) -> Result<Vec<u8>, usize> {
    let s: Vec<u8> = s.bytes().filter(|b| *b != b'\n' && *b != b'\r').collect();
    if let Some(i) = s.iter().position(|b| *b != b'=' && !B32.contains(b)) {
        return Err(i);
    }
    if !s.len().is_multiple_of(8) {
        return Err(s.len() / 8 * 8);
    }
    let mut out = Vec::new();
    for (ci, chunk) in s.chunks(8).enumerate() {
        let pad = chunk.iter().rev().take_while(|b| **b == b'=').count();
        let data_len = 8 - pad;
        if !matches!(data_len, 2 | 4 | 5 | 7 | 8) || (pad > 0 && ci * 8 + 8 != s.len()) {
            return Err(ci * 8 + data_len);
        }
        let mut n = 0u64;
        for (i, b) in chunk.iter().enumerate() {
            let v = if i < data_len { B32.iter().position(|c| c == b).ok_or(ci * 8 + i)? as u64 } else { 0 };
            n = (n << 5) | v;
        }
        let bytes = n.to_be_bytes();
        let keep = match data_len {
            2 => 1,
            4 => 2,
            5 => 3,
            7 => 4,
            _ => 5,
        };
        out.extend_from_slice(&bytes[3..3 + keep]);
    }
    Ok(out)
}

/// `base64.StdEncoding.DecodeString`: the bytes, or the offset Go's error reports (newlines are
/// skipped; after the padding only newlines may follow).
fn base64_decode(src: &[u8]) -> Result<Vec<u8>, usize> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let newline = |c: u8| c == b'\n' || c == b'\r';
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let mut quantum = [0u8; 4];
        let (mut j, mut len, mut trailing) = (0, 4, None);
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(v) = val(c) {
                quantum[j] = v;
                j += 1;
                continue;
            }
            if newline(c) {
                continue;
            }
            if c != b'=' || j < 2 {
                return Err(si - 1);
            }
            if j == 2 {
                // "==": the second one must follow (after newlines).
                while si < src.len() && newline(src[si]) {
                    si += 1;
                }
                if si == src.len() {
                    return Err(src.len());
                }
                if src[si] != b'=' {
                    return Err(si - 1);
                }
                si += 1;
            }
            while si < src.len() && newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                trailing = Some(si);
            }
            len = j;
            break;
        }
        let v = u32::from(quantum[0]) << 18 | u32::from(quantum[1]) << 12 | u32::from(quantum[2]) << 6 | u32::from(quantum[3]);
        out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8][..len - 1]);
        if let Some(at) = trailing {
            return Err(at);
        }
    }
    Ok(out)
}
