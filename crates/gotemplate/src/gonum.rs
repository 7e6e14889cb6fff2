//! Go's `strconv` number syntax, as the template parser (number constants) and sprig's
//! conversions (`int64`, `float64`, `atoi`, ...) read numbers: base prefixes, `_` separators
//! where Go allows them, hexadecimal floats, `Inf` / `NaN`, and the range errors.

/// Why a number did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumError {
    Syntax,
    /// Well-formed but out of range (`strconv.ErrRange`).
    Range,
}

/// Go's `underscoreOK`: `_` only between digits, or between a base prefix and a digit.
fn underscore_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    // '^' start, '0' digit or prefix, '_' underscore, '!' anything else.
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// `strconv.ParseUint(s, base, 64)`; base 0 reads Go's prefixes and separators.
pub fn parse_uint(s: &str, base: u32) -> Result<u64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let b = s.as_bytes();
    let (radix, digits, base0) = if base == 0 {
        if b[0] == b'0' && b.len() >= 3 && matches!(b[1].to_ascii_lowercase(), b'x' | b'o' | b'b') {
            let r = match b[1].to_ascii_lowercase() {
                b'x' => 16,
                b'o' => 8,
                _ => 2,
            };
            (r, &s[2..], true)
        } else if b[0] == b'0' && b.len() > 1 {
            (8, &s[1..], true)
        } else {
            (10, s, true)
        }
    } else {
        (base, s, false)
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    let mut range = false;
    for c in digits.bytes() {
        if c == b'_' && base0 {
            underscores = true;
            continue;
        }
        let d = (c as char).to_digit(radix).ok_or(NumError::Syntax)?;
        match n.checked_mul(u64::from(radix)).and_then(|x| x.checked_add(u64::from(d))) {
            Some(x) => n = x,
            None => range = true,
        }
    }
    if underscores && !underscore_ok(s) {
        return Err(NumError::Syntax);
    }
    if range {
        return Err(NumError::Range);
    }
    Ok(n)
}

/// `strconv.ParseInt(s, base, 64)`.
pub fn parse_int(s: &str, base: u32) -> Result<i64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let u = parse_uint(body, base)?;
    if neg {
        if u > 1 << 63 { Err(NumError::Range) } else { Ok((u as i64).wrapping_neg()) }
    } else {
        i64::try_from(u).map_err(|_| NumError::Range)
    }
}

/// `strconv.ParseFloat(s, 64)`: decimal and hexadecimal floats with Go's `_` rule, `Inf`,
/// `Infinity` and `NaN` in any case; out of range is ±Inf with [`NumError::Range`].
pub fn parse_float(s: &str) -> Result<f64, NumError> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let sign = |f: f64| if neg { -f } else { f };
    match lower.as_str() {
        "inf" | "infinity" => return Ok(sign(f64::INFINITY)),
        // Go reads a sign before NaN as a syntax error.
        "nan" if body.len() == s.len() => return Ok(f64::NAN),
        _ => {}
    }
    if body.contains('_') && !underscore_ok(s) {
        return Err(NumError::Syntax);
    }
    let clean = lower.replace('_', "");
    let f = if let Some(hex) = clean.strip_prefix("0x") {
        parse_hex_float(hex)?
    } else {
        let b = clean.as_bytes();
        let mantissa_end = b.iter().position(|c| *c == b'e').unwrap_or(b.len());
        let mant = &clean[..mantissa_end];
        if !mant.bytes().any(|c| c.is_ascii_digit()) || !mant.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return Err(NumError::Syntax);
        }
        if mantissa_end < b.len() {
            let exp = clean[mantissa_end + 1..].strip_prefix(['+', '-']).unwrap_or(&clean[mantissa_end + 1..]);
            if exp.is_empty() || !exp.bytes().all(|c| c.is_ascii_digit()) {
                return Err(NumError::Syntax);
            }
        }
        clean.parse::<f64>().map_err(|_| NumError::Syntax)?
    };
    if f.is_infinite() {
        return Err(NumError::Range);
    }
    Ok(sign(f))
}

/// The digits after `0x` of a hexadecimal float: a mantissa with an optional point and a
/// mandatory binary exponent (`1.8p1`).
fn parse_hex_float(s: &str) -> Result<f64, NumError> {
    let (mant, exp) = s.split_once('p').ok_or(NumError::Syntax)?;
    let exp_digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if exp_digits.is_empty() || !exp_digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(NumError::Syntax);
    }
    let exp: i64 = exp.parse::<i64>().unwrap_or(if exp.starts_with('-') { -100_000 } else { 100_000 }).clamp(-100_000, 100_000);
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(NumError::Syntax);
    }
    // Up to 16 significant hex digits exactly; further ones only matter as a sticky bit.
    let mut m: u64 = 0;
    let mut shift: i64 = 0;
    let mut sticky = false;
    for (i, c) in int.chars().chain(frac.chars()).enumerate() {
        let d = c.to_digit(16).ok_or(NumError::Syntax)?;
        let in_frac = i >= int.len();
        if m >> 60 == 0 {
            m = m * 16 + u64::from(d);
            if in_frac {
                shift -= 4;
            }
        } else {
            sticky |= d != 0;
            if !in_frac {
                shift += 4;
            }
        }
    }
    if m == 0 {
        return Ok(0.0);
    }
    let m = m | u64::from(sticky);
    Ok(scale(m as f64, exp + shift))
}

/// `x * 2^e` without overflowing intermediate steps.
fn scale(mut x: f64, mut e: i64) -> f64 {
    while e > 0 {
        let step = e.min(1000);
        x *= 2f64.powi(step as i32);
        e -= step;
    }
    while e < 0 {
        let step = (-e).min(1000);
        x /= 2f64.powi(step as i32);
        e += step;
    }
    x
}

/// Go's conversion of a float64 to int64 on amd64: out of range and NaN give the minimum.
pub fn f64_to_i64(f: f64) -> i64 {
    // 2^63 is exactly representable; every float below it and at least -2^63 converts.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&f) { f as i64 } else { i64::MIN }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_as_go_strconv_parses_them() {
        for (s, want) in [
            ("1_000", Ok(1000.0)),
            ("0x1p-2", Ok(0.25)),
            ("0X1.8P+1", Ok(3.0)),
            ("1e400", Err(NumError::Range)),
            ("1e-400", Ok(0.0)),
            ("1__0", Err(NumError::Syntax)),
            ("_1", Err(NumError::Syntax)),
            ("0x_1p0", Ok(1.0)),
            ("0x1", Err(NumError::Syntax)),
            (".5", Ok(0.5)),
            ("5.", Ok(5.0)),
            ("Inf", Ok(f64::INFINITY)),
            ("+NaN", Err(NumError::Syntax)),
            ("0b101", Err(NumError::Syntax)),
            ("1_0.5", Ok(10.5)),
            (" 4", Err(NumError::Syntax)),
            ("0x1p-1074", Ok(5e-324)),
        ] {
            assert_eq!(parse_float(s), want, "{s}");
        }
        assert!(parse_float("-0").is_ok_and(|f| f == 0.0 && f.is_sign_negative()));
    }

    #[test]
    fn ints_parse_as_go_strconv_parses_them() {
        assert_eq!(parse_int("1_000", 0), Ok(1000));
        assert_eq!(parse_int("1_000", 10), Err(NumError::Syntax));
        assert_eq!(parse_int("017", 0), Ok(15));
        assert_eq!(parse_int("08", 0), Err(NumError::Syntax));
        assert_eq!(parse_int("-9223372036854775808", 10), Ok(i64::MIN));
        assert_eq!(parse_int("9223372036854775808", 10), Err(NumError::Range));
        assert_eq!(parse_int("0x_1F", 0), Ok(31));
        assert_eq!(parse_int("+3", 10), Ok(3));
    }
}
