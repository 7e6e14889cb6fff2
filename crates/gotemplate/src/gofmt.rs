//! Go's `fmt` for template values: `Sprint`, `Sprintln`, `Sprintf` with every verb that applies to
//! the types a template sees, including Go's `%!verb(type=value)` error forms.

use std::cell::Cell;

use super::value::Val;

thread_local! {
    /// Set whenever a nil is formatted as `<nil>`, so an action that prints one can warn. The
    /// engine runs each execution on its own thread, so this is per execution.
    static PRINTED_NIL: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// Set when a time was formatted with a verb that makes Go print its internal fields.
    static PRINTED_TIME_FIELDS: Cell<bool> = const { Cell::new(false) };
}

/// Whether a time was formatted with a verb other than `%v %s %q %x %X %T %p` since the last
/// call (and resets it). Go prints a `time.Time`'s struct fields then — its wall clock and
/// monotonic words and the address of its `*Location`, which differs between processes —
/// so `printf` refuses such output rather than print something Go would not.
pub fn take_printed_time_fields() -> bool {
    PRINTED_TIME_FIELDS.with(|p| p.replace(false))
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
    let bytes = super::value::go_bytes(s);
    for chunk in bytes.utf8_chunks() {
        quote_chars(&mut out, chunk.valid(), ascii);
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

fn quote_chars(out: &mut String, s: &str, ascii: bool) {
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
    /// `%#v` (Go syntax) and `%+v`: for `v`, Go moves `#` and `+` here.
    sharp_v: bool,
    plus_v: bool,
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
        if verb == 'v' {
            spec.sharp_v = std::mem::take(&mut spec.sharp);
            spec.plus_v = std::mem::take(&mut spec.plus);
        }
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

/// Go's `badVerb`: `%!verb(type=value)`, the value printed as `%v` with the flags as given.
fn bad_verb(out: &mut String, v: &Val, verb: char, spec: &Spec) {
    if v.is_nil() {
        out.push_str(&format!("%!{verb}(<nil>)"));
        return;
    }
    out.push_str(&format!("%!{verb}({}=", v.type_name()));
    print_verb(out, v, 'v', spec, 1);
    out.push(')');
}

/// Go's `writePadding`: zeros when the `0` flag is set, else spaces.
fn padding(out: &mut String, n: usize, spec: &Spec) {
    let c = if spec.zero { '0' } else { ' ' };
    out.extend(std::iter::repeat_n(c, n));
}

/// Go's `pad`: `s` padded to the width, on the right with `-`.
fn pad(out: &mut String, s: &str, spec: &Spec) {
    let len = s.chars().count();
    let n = spec.width.unwrap_or(0).saturating_sub(len);
    if spec.minus {
        out.push_str(s);
        padding(out, n, spec);
    } else {
        padding(out, n, spec);
        out.push_str(s);
    }
}

/// `pad` with the `0` flag ignored (Go does so for integers and for infinities).
fn pad_spaces(out: &mut String, s: &str, spec: &Spec) {
    pad(out, s, &Spec { zero: false, ..spec.clone() });
}

/// Go syntax (`%#v`).
fn go_syntax(v: &Val, top: bool) -> String {
    match v {
        Val::Missing(_) | Val::Nil if top => "<nil>".to_owned(),
        Val::Missing(_) | Val::Nil => "interface {}(nil)".to_owned(),
        Val::Str(s) => quote(s),
        Val::List(l, _) if super::value::is_nil_list(l) => format!("{}(nil)", v.type_name()),
        Val::Map(m, _) if super::value::is_nil_map(m) => format!("{}(nil)", v.type_name()),
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
        // A nil's `<nil>` is padded but not truncated (Go's `padString`, not `fmtS`).
        let limit = if v.is_nil() { usize::MAX } else { spec.prec.unwrap_or(usize::MAX) };
        let name: String = v.type_name().chars().take(limit).collect();
        pad(out, &name, spec);
        return;
    }
    if verb == 'v' && spec.sharp_v {
        pad(out, &go_syntax(v, depth == 0), spec);
        return;
    }
    match v {
        Val::Time(t) => match verb {
            'v' | 's' => pad(out, &t.string(), spec),
            'q' => pad(out, &quote(&t.string()), spec),
            // Go formats a Stringer's String() for the string verbs.
            'x' | 'X' => print_str(out, v, &t.string(), verb, spec),
            'p' => bad_verb(out, v, verb, spec),
            _ => {
                PRINTED_TIME_FIELDS.with(|p| p.set(true));
                bad_verb(out, v, verb, spec);
            }
        },
        Val::Missing(_) | Val::Nil if depth > 0 => {
            note_nil();
            out.push_str("<nil>");
        }
        Val::Missing(_) | Val::Nil => match verb {
            'v' => {
                note_nil();
                pad(out, "<nil>", spec);
            }
            _ => bad_verb(out, v, verb, spec),
        },
        Val::Bool(b) => match verb {
            't' | 'v' => pad(out, if *b { "true" } else { "false" }, spec),
            _ => bad_verb(out, v, verb, spec),
        },
        Val::Int(i) | Val::I64(i) => print_int(out, v, *i, verb, spec),
        Val::F64(f) => print_float(out, v, *f, verb, spec),
        // Go's `fmtComplex`: each part as a float, the imaginary one always signed.
        Val::Complex(re, im) => match verb {
            'v' | 'b' | 'g' | 'G' | 'x' | 'X' | 'f' | 'F' | 'e' | 'E' => {
                out.push('(');
                print_float(out, v, *re, verb, spec);
                print_float(out, v, *im, verb, &Spec { plus: true, ..spec.clone() });
                out.push_str("i)");
            }
            _ => bad_verb(out, v, verb, spec),
        },
        Val::Str(s) => print_str(out, v, s, verb, spec),
        Val::List(items, _) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                print_verb(out, item, verb, spec, depth + 1);
            }
            out.push(']');
        }
        Val::Map(m, _) => {
            out.push_str("map[");
            for (i, (k, item)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                print_verb(out, &Val::str(k.as_str()), verb, spec, depth + 1);
                out.push(':');
                print_verb(out, item, verb, spec, depth + 1);
            }
            out.push(']');
        }
    }
}

/// Go's `fmtInteger` and friends for `int` / `int64`.
fn print_int(out: &mut String, v: &Val, i: i64, verb: char, spec: &Spec) {
    let (base, upper) = match verb {
        'v' | 'd' => (10, false),
        'b' => (2, false),
        'o' | 'O' => (8, false),
        'x' => (16, false),
        'X' => (16, true),
        'c' | 'q' => {
            let c = u32::try_from(i).ok().and_then(char::from_u32).unwrap_or('\u{fffd}');
            let text = if verb == 'c' { c.to_string() } else { quote_rune(c, spec.plus) };
            pad(out, &text, spec);
            return;
        }
        'U' => {
            let u = i as u64;
            let prec = spec.prec.filter(|p| *p > 4).unwrap_or(4);
            let mut s = format!("U+{u:0prec$X}");
            if spec.sharp
                && let Some(c) = u32::try_from(i).ok().and_then(char::from_u32).filter(|c| is_print(*c))
            {
                s.push_str(&format!(" '{c}'"));
            }
            pad_spaces(out, &s, spec);
            return;
        }
        _ => {
            bad_verb(out, v, verb, spec);
            return;
        }
    };
    let neg = i < 0;
    let u = i.unsigned_abs();
    let mut prec = 0usize;
    if let Some(p) = spec.prec {
        prec = p;
        if p == 0 && u == 0 {
            // Precision 0 and value 0 print nothing, but the padding.
            padding(out, spec.width.unwrap_or(0), &Spec { zero: false, ..spec.clone() });
            return;
        }
    } else if spec.zero
        && let Some(w) = spec.width
    {
        prec = w;
        if neg || spec.plus || spec.space {
            prec = prec.saturating_sub(1);
        }
    }
    let mut digits = match base {
        2 => format!("{u:b}"),
        8 => format!("{u:o}"),
        16 if upper => format!("{u:X}"),
        16 => format!("{u:x}"),
        _ => u.to_string(),
    };
    if digits.len() < prec {
        digits = format!("{}{digits}", "0".repeat(prec - digits.len()));
    }
    let mut prefix = String::new();
    if spec.sharp {
        match base {
            2 => prefix.push_str("0b"),
            8 if !digits.starts_with('0') => prefix.push('0'),
            16 => prefix.push_str(if upper { "0X" } else { "0x" }),
            _ => {}
        }
    }
    if verb == 'O' {
        prefix.insert_str(0, "0o");
    }
    let sign = if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    pad_spaces(out, &format!("{sign}{prefix}{digits}"), spec);
}

/// Go's `strconv.QuoteRune` (`QuoteRuneToASCII` with `ascii`).
fn quote_rune(c: char, ascii: bool) -> String {
    if c == '\'' {
        return "'\\''".to_owned();
    }
    let q = quote_with(&c.to_string(), ascii);
    let inner = &q[1..q.len() - 1];
    format!("'{}'", if inner == "\\\"" { "\"" } else { inner })
}

/// Go's `fmtFloat` for `float64`.
fn print_float(out: &mut String, v: &Val, f: f64, verb: char, spec: &Spec) {
    let num = match verb {
        'v' | 'g' => format_g(f, spec.prec, false),
        'G' => format_g(f, spec.prec, true),
        'e' => format_e(f, spec.prec.unwrap_or(6), false),
        'E' => format_e(f, spec.prec.unwrap_or(6), true),
        'f' | 'F' => special(f, false).unwrap_or_else(|| format!("{:.*}", spec.prec.unwrap_or(6), f)),
        'b' => float_b(f),
        'x' | 'X' => float_hex(f, spec.prec, verb == 'X'),
        _ => {
            bad_verb(out, v, verb, spec);
            return;
        }
    };
    let (mut sign, mut body) = match num.strip_prefix('-') {
        Some(b) => ('-', b.to_owned()),
        None => ('+', num.trim_start_matches('+').to_owned()),
    };
    if spec.space && sign == '+' && !spec.plus {
        sign = ' ';
    }
    if body.starts_with('I') || body.starts_with('N') {
        let text = if body.starts_with('N') && !spec.space && !spec.plus { body } else { format!("{sign}{body}") };
        pad_spaces(out, &text, spec);
        return;
    }
    if spec.sharp && verb != 'b' {
        body = sharp_float(&body, verb, spec.prec);
    }
    if spec.plus || sign != '+' {
        let len = body.chars().count() + 1;
        if spec.zero
            && let Some(w) = spec.width.filter(|w| *w > len)
        {
            out.push(sign);
            padding(out, w - len, spec);
            out.push_str(&body);
            return;
        }
        pad(out, &format!("{sign}{body}"), spec);
        return;
    }
    pad(out, &body, spec);
}

/// `strconv.FormatFloat(f, 'b', -1, 64)`: decimal mantissa, binary exponent.
fn float_b(f: f64) -> String {
    let bits = f.to_bits();
    let neg = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let mut mant = bits & ((1 << 52) - 1);
    let e = if exp == 0 {
        -1074
    } else {
        mant |= 1 << 52;
        exp - 1075
    };
    if let Some(s) = special(f, false) {
        return s;
    }
    format!("{neg}{mant}p{}{}", if e < 0 { '-' } else { '+' }, e.unsigned_abs())
}

/// `strconv.FormatFloat(f, 'x', prec, 64)`: `0x1.8p+00`.
fn float_hex(f: f64, prec: Option<usize>, upper: bool) -> String {
    if let Some(s) = special(f, false) {
        return s;
    }
    let bits = f.to_bits();
    let neg = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let mut mant = bits & ((1 << 52) - 1);
    let mut e = if exp == 0 { -1022 } else { exp - 1023 };
    if exp == 0 && mant == 0 {
        e = 0;
    } else if exp == 0 {
        // Subnormal: normalise so the leading digit is 1.
        while mant & (1 << 52) == 0 {
            mant <<= 1;
            e -= 1;
        }
        mant &= (1 << 52) - 1;
    }
    let lead: u64 = if exp == 0 && mant == 0 { 0 } else { 1 };
    let mut frac = format!("{mant:013x}");
    match prec {
        None => {
            while frac.ends_with('0') {
                frac.pop();
            }
        }
        Some(p) if p >= 13 => frac.push_str(&"0".repeat(p - 13)),
        Some(p) => {
            // Round half to even at `p` hex digits.
            let shift = 4 * (13 - p) as u32;
            let full = (lead << 52) | mant;
            let rem = full & ((1u64 << shift) - 1);
            let half = 1u64 << (shift - 1);
            let mut kept = full >> shift;
            if rem > half || (rem == half && kept & 1 == 1) {
                kept += 1;
            }
            let lead_now = kept >> (4 * p as u32);
            if lead_now > 1 {
                kept >>= 1;
                e += 1;
            }
            frac = if p == 0 { String::new() } else { format!("{:0w$x}", kept & ((1u64 << (4 * p as u32)) - 1), w = p) };
        }
    }
    let s =
        format!("{neg}0x{lead}{}{frac}p{}{:02}", if frac.is_empty() { "" } else { "." }, if e < 0 { '-' } else { '+' }, e.unsigned_abs());
    if upper { s.to_uppercase() } else { s }
}

/// The `#` flag on a float: always a decimal point, and for `%g` trailing zeros up to the
/// precision (6 by default), as Go's `fmtFloat`.
fn sharp_float(num: &str, verb: char, prec: Option<usize>) -> String {
    // As Go counts: after the sign, every digit from the first non-zero one (and the `x` of a
    // hex float, which Go's loop counts as a digit too).
    let mut digits: i64 = if matches!(verb, 'v' | 'g' | 'G' | 'x') { prec.map_or(6, |p| p as i64) } else { 0 };
    let hex = matches!(verb, 'x' | 'X');
    let split = if hex { num.find(['p', 'P']) } else { num.find(['e', 'E']) };
    let (mant, tail) = match split {
        Some(i) => (&num[..i], &num[i..]),
        None => (num, ""),
    };
    let mut has_point = false;
    let mut nonzero = false;
    let body = mant;
    for c in body.chars() {
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
        if body == "0" {
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

/// Go's `fmtS`, `fmtQ` and `fmtSx` for strings.
fn print_str(out: &mut String, v: &Val, s: &str, verb: char, spec: &Spec) {
    let truncated: String = match spec.prec {
        Some(p) => s.chars().take(p).collect(),
        None => s.to_owned(),
    };
    match verb {
        'v' | 's' => pad(out, &truncated, spec),
        'q' => {
            let text = if spec.sharp && !truncated.contains('`') && truncated.chars().all(|c| c == '\t' || is_print(c)) {
                format!("`{truncated}`")
            } else {
                quote_with(&truncated, spec.plus)
            };
            pad(out, &text, spec);
        }
        'x' | 'X' => {
            let held = super::value::go_bytes(s);
            let bytes: &[u8] = &held;
            let length = spec.prec.map_or(bytes.len(), |p| p.min(bytes.len()));
            let mut width = 2 * length;
            if width > 0 {
                if spec.space {
                    if spec.sharp {
                        width *= 2;
                    }
                    width += length - 1;
                } else if spec.sharp {
                    width += 2;
                }
            } else {
                padding(out, spec.width.unwrap_or(0), spec);
                return;
            }
            let w = spec.width.unwrap_or(0);
            if w > width && !spec.minus {
                padding(out, w - width, spec);
            }
            let prefix = if verb == 'x' { "0x" } else { "0X" };
            if spec.sharp {
                out.push_str(prefix);
            }
            for (i, b) in bytes[..length].iter().enumerate() {
                if spec.space && i > 0 {
                    out.push(' ');
                    if spec.sharp {
                        out.push_str(prefix);
                    }
                }
                out.push_str(&if verb == 'x' { format!("{b:02x}") } else { format!("{b:02X}") });
            }
            if w > width && spec.minus {
                padding(out, w - width, spec);
            }
        }
        _ => bad_verb(out, v, verb, spec),
    }
}
