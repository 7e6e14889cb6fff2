//! Go's `fmt` for template values: `Sprint`, `Sprintln`, `Sprintf` with every verb that applies to
//! the types a template sees, including Go's `%!verb(type=value)` error forms.

use std::cell::Cell;

use super::value::Val;

thread_local! {
    /// Set whenever a nil is formatted as `<nil>`, so an action that prints one can warn. The
    /// engine runs each execution on its own thread, so this is per execution.
    static PRINTED_NIL: Cell<bool> = const { Cell::new(false) };
}

/// Whether a nil was formatted since the last call (and resets it).
pub fn take_printed_nil() -> bool {
    PRINTED_NIL.with(|p| p.replace(false))
}

fn note_nil() {
    PRINTED_NIL.with(|p| p.set(true));
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`: shortest digits, exponent form when the decimal
/// exponent is below -4 or at least 21 for `%v`... no: at least 6 when shortest.
pub fn go_float(f: f64) -> String {
    format_g(f, None, false)
}

/// `%g` / `%G` with an optional precision (significant digits).
fn format_g(f: f64, prec: Option<usize>, upper: bool) -> String {
    if let Some(s) = special(f, upper) {
        return s;
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let (digits, exp) = decimal_digits(f, prec.map(|p| p.max(1)));
    let neg = f.is_sign_negative();
    let eprec: i32 = match prec {
        None => 6,
        Some(p) => {
            let p = p.max(1) as i32;
            if p > digits.len() as i32 && digits.len() as i32 > exp { digits.len() as i32 } else { p }
        }
    };
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if exp < -4 || exp >= eprec {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push(if upper { 'E' } else { 'e' });
        s.push(if exp < 0 { '-' } else { '+' });
        s.push_str(&format!("{:02}", exp.unsigned_abs()));
    } else if exp < 0 {
        s.push_str("0.");
        s.push_str(&"0".repeat((-exp - 1) as usize));
        s.push_str(&digits);
    } else {
        let int_len = (exp + 1) as usize;
        if digits.len() <= int_len {
            s.push_str(&digits);
            s.push_str(&"0".repeat(int_len - digits.len()));
        } else {
            s.push_str(&digits[..int_len]);
            s.push('.');
            s.push_str(&digits[int_len..]);
        }
    }
    s
}

fn special(f: f64, upper: bool) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" }.into())
    } else {
        let _ = upper;
        None
    }
}

/// The decimal digits of `|f|` (no trailing zeros) and the decimal exponent of the first digit:
/// shortest round-trip digits, or `sig` significant digits rounded half to even as Go does.
fn decimal_digits(f: f64, sig: Option<usize>) -> (String, i32) {
    let sci = match sig {
        None => format!("{:e}", f.abs()),
        Some(p) => format!("{:.*e}", p - 1, f.abs()),
    };
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    (digits, exp)
}

/// `%e` with precision `prec` (default 6).
fn format_e(f: f64, prec: usize, upper: bool) -> String {
    if let Some(s) = special(f, upper) {
        return s;
    }
    let sci = format!("{:.*e}", prec, f);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mant}{}{}{:02}", if upper { 'E' } else { 'e' }, if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
}

/// Go's `strconv.Quote`.
pub fn quote(s: &str) -> String {
    quote_with(s, false)
}

/// Go's `strconv.Quote`, or `QuoteToASCII` when `ascii`.
fn quote_with(s: &str, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if is_print(c) && (!ascii || c.is_ascii()) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `strconv.IsPrint` (letters, marks, numbers, punctuation, symbols
/// and the ASCII space).
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{e000}'..='\u{f8ff}'))
}

/// `%v` of one value (Go's `fmt.Sprint` of a single operand).
pub fn sprint_one(v: &Val) -> String {
    let mut out = String::new();
    print_verb(&mut out, v, 'v', &Spec::default(), 0);
    out
}

/// Go's `fmt.Sprint`: operands separated by a space when neither side is a string.
pub fn sprint(args: &[Val]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, Val::Str(_)) && !matches!(args[i - 1], Val::Str(_)) {
            out.push(' ');
        }
        out.push_str(&sprint_one(a));
    }
    out
}

/// Go's `fmt.Sprintln`.
pub fn sprintln(args: &[Val]) -> String {
    let mut out = args.iter().map(sprint_one).collect::<Vec<_>>().join(" ");
    out.push('\n');
    out
}

#[derive(Default, Clone)]
struct Spec {
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

/// Go's `fmt.Sprintf`.
pub fn sprintf(format: &str, args: &[Val]) -> String {
    let mut out = String::new();
    let mut argi = 0;
    let mut reordered = false;
    let chars: Vec<char> = format.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '%' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        i += 1;
        let mut spec = Spec::default();
        while i < chars.len() {
            match chars[i] {
                '-' => {
                    spec.minus = true;
                    spec.zero = false;
                }
                '+' => spec.plus = true,
                '#' => spec.sharp = true,
                ' ' => spec.space = true,
                '0' => spec.zero = !spec.minus,
                _ => break,
            }
            i += 1;
        }
        // Argument index `[n]`, width (or `*`), precision.
        let mut bad_index = false;
        let arg_index = |i: &mut usize, argi: &mut usize, bad: &mut bool, reordered: &mut bool| {
            if chars.get(*i) == Some(&'[') {
                *reordered = true;
                let end = chars[*i..].iter().position(|c| *c == ']');
                match end.and_then(|e| chars[*i + 1..*i + e].iter().collect::<String>().parse::<usize>().ok().map(|n| (n, e))) {
                    Some((n, e)) if n >= 1 && n <= args.len() => {
                        *argi = n - 1;
                        *i += e + 1;
                    }
                    Some((_, e)) => {
                        *bad = true;
                        *i += e + 1;
                    }
                    None => {
                        *bad = true;
                        *i = chars.len().min(*i + end.map_or(1, |e| e + 1));
                    }
                }
            }
        };
        arg_index(&mut i, &mut argi, &mut bad_index, &mut reordered);
        if chars.get(i) == Some(&'*') {
            i += 1;
            match args.get(argi) {
                Some(Val::Int(n)) if !bad_index => {
                    let n = *n;
                    if n < 0 {
                        spec.minus = true;
                        spec.zero = false;
                    }
                    spec.width = Some(n.unsigned_abs() as usize);
                    if spec.width > Some(1_000_000) {
                        out.push_str("%!(BADWIDTH)");
                        spec.width = None;
                    }
                }
                _ => out.push_str("%!(BADWIDTH)"),
            }
            argi += 1;
        } else {
            let start = i;
            while chars.get(i).is_some_and(char::is_ascii_digit) {
                i += 1;
            }
            if i > start {
                // Go refuses widths and precisions above 10^6 (`%!(BADWIDTH)`).
                match chars[start..i].iter().collect::<String>().parse::<usize>() {
                    Ok(w) if w <= 1_000_000 => spec.width = Some(w),
                    _ => out.push_str("%!(BADWIDTH)"),
                }
            }
        }
        if chars.get(i) == Some(&'.') {
            i += 1;
            arg_index(&mut i, &mut argi, &mut bad_index, &mut reordered);
            if chars.get(i) == Some(&'*') {
                i += 1;
                match args.get(argi) {
                    Some(Val::Int(n)) if *n >= 0 && *n <= 1_000_000 && !bad_index => spec.prec = Some(*n as usize),
                    Some(Val::Int(n)) if *n < 0 && !bad_index => spec.prec = None,
                    _ => out.push_str("%!(BADPREC)"),
                }
                argi += 1;
            } else {
                let start = i;
                while chars.get(i).is_some_and(char::is_ascii_digit) {
                    i += 1;
                }
                match chars[start..i].iter().collect::<String>().parse::<usize>() {
                    Ok(p) if p <= 1_000_000 => spec.prec = Some(p),
                    Ok(_) | Err(_) if i > start => out.push_str("%!(BADPREC)"),
                    _ => spec.prec = Some(0),
                }
            }
        }
        arg_index(&mut i, &mut argi, &mut bad_index, &mut reordered);
        let Some(&verb) = chars.get(i) else {
            out.push_str("%!(NOVERB)");
            break;
        };
        i += 1;
        if verb == '%' {
            out.push('%');
            continue;
        }
        if bad_index {
            out.push_str(&format!("%!{verb}(BADINDEX)"));
            continue;
        }
        let Some(arg) = args.get(argi) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        argi += 1;
        print_verb(&mut out, arg, verb, &spec, 0);
    }
    if !reordered && argi < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = args[argi..]
            .iter()
            .map(|a| if a.is_nil() { "<nil>".to_owned() } else { format!("{}={}", a.type_name(), sprint_one(a)) })
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

fn bad_verb(out: &mut String, v: &Val, verb: char) {
    if v.is_nil() {
        out.push_str(&format!("%!{verb}(<nil>)"));
    } else {
        out.push_str(&format!("%!{verb}({}={})", v.type_name(), sprint_one(v)));
    }
}

fn pad(out: &mut String, s: &str, spec: &Spec) {
    let len = s.chars().count();
    let width = spec.width.unwrap_or(0);
    if len >= width {
        out.push_str(s);
    } else if spec.minus {
        out.push_str(s);
        out.push_str(&" ".repeat(width - len));
    } else {
        out.push_str(&" ".repeat(width - len));
        out.push_str(s);
    }
}

/// Pads a number with zeros after its sign when the `0` flag asks for it.
fn pad_number(out: &mut String, s: &str, spec: &Spec) {
    let width = spec.width.unwrap_or(0);
    if spec.zero && !spec.minus && s.chars().count() < width {
        let (sign, rest) = match s.chars().next() {
            Some(c @ ('+' | '-' | ' ')) => (c.to_string(), &s[1..]),
            _ => (String::new(), s),
        };
        let zeros = width - s.chars().count();
        out.push_str(&sign);
        out.push_str(&"0".repeat(zeros));
        out.push_str(rest);
    } else {
        pad(out, s, spec);
    }
}

/// Go syntax (`%#v`).
fn go_syntax(v: &Val, top: bool) -> String {
    match v {
        Val::Missing(_) | Val::Nil if top => "<nil>".to_owned(),
        Val::Missing(_) | Val::Nil => "interface {}(nil)".to_owned(),
        Val::Str(s) => quote(s),
        Val::List(l, _) => format!("{}{{{}}}", v.type_name(), l.iter().map(|x| go_syntax(x, false)).collect::<Vec<_>>().join(", ")),
        Val::Map(m, _) => format!(
            "{}{{{}}}",
            v.type_name(),
            m.borrow().iter().map(|(k, x)| format!("{}:{}", quote(k), go_syntax(x, false))).collect::<Vec<_>>().join(", ")
        ),
        v => sprint_one(v),
    }
}

fn print_verb(out: &mut String, v: &Val, verb: char, spec: &Spec, depth: usize) {
    if verb == 'T' {
        pad(out, &v.type_name(), spec);
        return;
    }
    if verb == 'v' && spec.sharp {
        pad(out, &go_syntax(v, depth == 0), spec);
        return;
    }
    if verb == 'v' && spec.plus {
        // `%+v` only adds field names to structs, which templates never see.
        print_verb(out, v, verb, &Spec { plus: false, ..spec.clone() }, depth);
        return;
    }
    match v {
        Val::Time(t) => match verb {
            'v' | 's' => pad(out, &t.string(), spec),
            'q' => pad(out, &quote(&t.string()), spec),
            _ => bad_verb(out, v, verb),
        },
        Val::Missing(_) | Val::Nil if depth > 0 => {
            note_nil();
            pad(out, "<nil>", spec);
        }
        Val::Missing(_) | Val::Nil => match verb {
            'v' => {
                note_nil();
                pad(out, "<nil>", spec);
            }
            _ => bad_verb(out, v, verb),
        },
        Val::Bool(b) => match verb {
            't' | 'v' => pad(out, if *b { "true" } else { "false" }, spec),
            _ => bad_verb(out, v, verb),
        },
        Val::Int(i) | Val::I64(i) => print_int(out, v, *i, verb, spec),
        Val::F64(f) => print_float(out, v, *f, verb, spec),
        Val::Str(s) => print_str(out, v, s, verb, spec),
        Val::List(items, elem) => {
            if matches!(verb, 'x' | 'X' | 's' | 'q') && *elem == "uint8" {
                bad_verb(out, v, verb);
                return;
            }
            let mut inner = String::from("[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    inner.push(' ');
                }
                print_verb(&mut inner, item, verb, &Spec { width: spec.width, ..spec.clone() }, depth + 1);
            }
            inner.push(']');
            out.push_str(&inner);
        }
        Val::Map(m, _) => {
            let mut inner = String::from("map[");
            for (i, (k, item)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    inner.push(' ');
                }
                print_verb(&mut inner, &Val::str(k.as_str()), verb, spec, depth + 1);
                inner.push(':');
                print_verb(&mut inner, item, verb, spec, depth + 1);
            }
            inner.push(']');
            out.push_str(&inner);
        }
    }
}

fn print_int(out: &mut String, v: &Val, i: i64, verb: char, spec: &Spec) {
    let neg = i < 0;
    let u = i.unsigned_abs();
    let digits = match verb {
        'v' | 'd' => u.to_string(),
        'b' => format!("{u:b}"),
        'o' | 'O' => format!("{u:o}"),
        'x' => format!("{u:x}"),
        'X' => format!("{u:X}"),
        'c' => {
            pad(out, &char::from_u32(i as u32).filter(|_| i >= 0).unwrap_or('\u{fffd}').to_string(), spec);
            return;
        }
        'q' => {
            let c = char::from_u32(i as u32).filter(|_| i >= 0).unwrap_or('\u{fffd}');
            let q = quote(&c.to_string());
            let inner = &q[1..q.len() - 1];
            let inner = if inner == "\\\"" {
                "\""
            } else if c == '\'' {
                "\\'"
            } else {
                inner
            };
            pad(out, &format!("'{inner}'"), spec);
            return;
        }
        'U' => {
            let mut s = format!("U+{u:04X}");
            if spec.sharp
                && let Some(c) = char::from_u32(i as u32).filter(|c| is_print(*c))
            {
                s.push_str(&format!(" '{c}'"));
            }
            pad(out, &s, spec);
            return;
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 's' | 't' | 'p' => {
            bad_verb(out, v, verb);
            return;
        }
        _ => {
            bad_verb(out, v, verb);
            return;
        }
    };
    let mut digits = digits;
    if let Some(p) = spec.prec {
        if p == 0 && u == 0 {
            digits.clear();
        } else if digits.len() < p {
            digits = format!("{}{digits}", "0".repeat(p - digits.len()));
        }
    }
    let prefix = match verb {
        'O' => "0o",
        'b' if spec.sharp => "0b",
        'o' if spec.sharp && !digits.starts_with('0') => "0",
        'x' if spec.sharp => "0x",
        'X' if spec.sharp => "0X",
        _ => "",
    };
    let sign = if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    let body = format!("{sign}{prefix}{digits}");
    if spec.prec.is_some() {
        pad(out, &body, spec);
    } else if spec.zero && !spec.minus && spec.width.is_some_and(|w| body.len() < w) {
        let zeros = spec.width.unwrap_or(0) - body.len();
        pad(out, &format!("{sign}{prefix}{}{digits}", "0".repeat(zeros)), spec);
    } else {
        pad(out, &body, spec);
    }
}

fn print_float(out: &mut String, v: &Val, f: f64, verb: char, spec: &Spec) {
    let body = match verb {
        'v' | 'g' => format_g(f, spec.prec, false),
        'G' => format_g(f, spec.prec, true),
        'e' => format_e(f, spec.prec.unwrap_or(6), false),
        'E' => format_e(f, spec.prec.unwrap_or(6), true),
        'f' | 'F' => {
            if let Some(s) = special(f, false) {
                s
            } else {
                format!("{:.*}", spec.prec.unwrap_or(6), f)
            }
        }
        _ => {
            bad_verb(out, v, verb);
            return;
        }
    };
    let body = if spec.sharp && verb != 'v' && !f.is_nan() && !f.is_infinite() { sharp_float(&body, verb, spec.prec) } else { body };
    let body = if !body.starts_with('-') && (spec.plus || (f.is_infinite() && f > 0.0)) {
        if body.starts_with('+') { body } else { format!("+{body}") }
    } else if !body.starts_with('-') && spec.space {
        format!(" {}", body.trim_start_matches('+'))
    } else if f.is_infinite() && f > 0.0 && !spec.plus {
        body.trim_start_matches('+').to_owned()
    } else {
        body
    };
    if f.is_nan() || f.is_infinite() {
        pad(out, &body, &Spec { zero: false, ..spec.clone() });
    } else {
        pad_number(out, &body, spec);
    }
}

/// The `#` flag on a float: always a decimal point, and for `%g` trailing zeros up to the
/// precision (6 by default), as Go's `fmtFloat`.
fn sharp_float(num: &str, verb: char, prec: Option<usize>) -> String {
    let mut digits: i64 = if matches!(verb, 'g' | 'G') { prec.map_or(6, |p| p as i64) } else { 0 };
    let (mant, tail) = match num.find(['e', 'E']) {
        Some(i) => (&num[..i], &num[i..]),
        None => (num, ""),
    };
    let mut has_point = false;
    let mut nonzero = false;
    for c in mant.trim_start_matches(['-', '+', ' ']).chars() {
        match c {
            '.' => has_point = true,
            c => {
                if c != '0' {
                    nonzero = true;
                }
                if nonzero {
                    digits -= 1;
                }
            }
        }
    }
    let mut out = mant.to_owned();
    if !has_point {
        if mant.trim_start_matches(['-', '+', ' ']) == "0" {
            digits -= 1;
        }
        out.push('.');
    }
    while digits > 0 {
        out.push('0');
        digits -= 1;
    }
    out.push_str(tail);
    out
}

fn print_str(out: &mut String, v: &Val, s: &str, verb: char, spec: &Spec) {
    let s: String = match spec.prec {
        Some(p) if matches!(verb, 'v' | 's' | 'q' | 'x' | 'X') => s.chars().take(p).collect(),
        _ => s.to_owned(),
    };
    match verb {
        'v' | 's' => pad(out, &s, spec),
        'q' => {
            if spec.sharp && !s.contains('`') && s.chars().all(|c| c == '\t' || is_print(c)) {
                pad(out, &format!("`{s}`"), spec);
            } else {
                pad(out, &quote_with(&s, spec.plus), spec);
            }
        }
        'x' | 'X' => {
            let mut hex = String::new();
            for (i, b) in s.bytes().enumerate() {
                if spec.space && i > 0 {
                    hex.push(' ');
                }
                if spec.sharp && (spec.space || i == 0) {
                    hex.push_str(if verb == 'x' { "0x" } else { "0X" });
                }
                hex.push_str(&if verb == 'x' { format!("{b:02x}") } else { format!("{b:02X}") });
            }
            pad(out, &hex, spec);
        }
        _ => bad_verb(out, v, verb),
    }
}
