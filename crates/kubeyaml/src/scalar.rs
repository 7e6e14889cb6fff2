//! What a scalar means to kubectl: go-yaml v2's YAML 1.1 resolution as sigs.k8s.io/yaml uses it,
//! then the JSON the API machinery decodes. Pure; the table in docs/clusterstacks.md is tested
//! here and was checked against the real kubectl 1.35.

use super::{Node, Scalar, Value};

const TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// A scalar's meaning.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// `~`, `null`, `Null`, `NULL` or nothing.
    Null,
    /// YAML 1.1 booleans (`yes`, `off`, …), as go-yaml v2 reads them.
    Bool(bool),
    /// Decimal, `0x`, `0o`/`0` octal and `0b` integers, with `_` separators.
    Int(i64),
    /// An integer above `i64::MAX` that fits 64 bits.
    Uint(u64),
    /// A float, including `.inf` and `.nan` (which [`to_json`] refuses).
    Float(f64),
    /// Anything else: a string.
    Str(String),
    /// An explicit tag the text does not fit (`!!int abc`): kubectl refuses it.
    Invalid(ScalarError),
}

/// A scalar kubectl cannot send as JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScalarError {
    /// An explicit standard tag the text does not fit (`!!int abc`).
    #[error("cannot decode `{text}` as !!{tag}")]
    Tag {
        /// The scalar's text.
        text: String,
        /// The tag, without `tag:yaml.org,2002:`.
        tag: String,
    },
    /// A `!!binary` scalar that is not base64.
    #[error("!!binary value contains invalid base64 data: {0}")]
    Base64(#[source] base64::DecodeError),
    /// `.inf`, `-.inf`, `.nan`: JSON has no such number.
    #[error("json: unsupported value: {0} (kubectl cannot send it)")]
    NotFinite(&'static str),
}

/// go-yaml v2's `resolve` for a scalar: quoted, literal and folded scalars are strings; plain ones
/// (and those with a standard tag) are null, booleans (YAML 1.1: `y`, `yes`, `on`, ...), integers
/// (`0777` octal, `0x`, `0o`, `0b`, `_` separators), floats (`.5`, `1e3`), else strings.
/// Timestamps stay strings, as kubectl leaves them.
pub(crate) fn resolve(s: &Scalar) -> Resolved {
    let tag = s.tag.as_deref().map(|t| t.strip_prefix(TAG_PREFIX).map_or(t, |short| short));
    match tag {
        None if !s.plain => Resolved::Str(s.text.clone()),
        None | Some("null" | "bool" | "int" | "float" | "timestamp") => {
            let r = resolve_plain(&s.text);
            match (tag, &r) {
                (None | Some("timestamp"), _)
                | (Some("null"), Resolved::Null)
                | (Some("bool"), Resolved::Bool(_))
                | (Some("int"), Resolved::Int(_) | Resolved::Uint(_))
                | (Some("float"), Resolved::Float(_) | Resolved::Int(_) | Resolved::Uint(_)) => r,
                (Some(t), _) => Resolved::Invalid(ScalarError::Tag { text: s.text.clone(), tag: t.to_owned() }),
            }
        }
        Some("binary") => {
            use base64::Engine as _;
            let clean: String = s.text.chars().filter(|c| !c.is_whitespace()).collect();
            match base64::engine::general_purpose::STANDARD.decode(clean) {
                Ok(bytes) => Resolved::Str(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) => Resolved::Invalid(ScalarError::Base64(e)),
            }
        }
        // `!!str` and tags go-yaml does not resolve (`!foo`) keep the text.
        Some(_) => Resolved::Str(s.text.clone()),
    }
}

fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => return Resolved::Bool(true),
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => return Resolved::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        _ => {}
    }
    match text.as_bytes().first() {
        Some(b'.') => match go_parse_float(text) {
            Some(f) => Resolved::Float(f),
            None => Resolved::Str(text.to_owned()),
        },
        Some(b'+' | b'-' | b'0'..=b'9') => {
            let plain: String = text.chars().filter(|&c| c != '_').collect();
            if let Some(i) = go_parse_int(&plain) {
                Resolved::Int(i)
            } else if let Some(u) = go_parse_uint(&plain) {
                Resolved::Uint(u)
            } else if is_yaml_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
            {
                Resolved::Float(f)
            } else {
                Resolved::Str(text.to_owned())
            }
        }
        _ => Resolved::Str(text.to_owned()),
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` on a text without `_`: optional sign, then `0x`, `0o`, `0b`
/// or a leading `0` (octal) prefix, else decimal.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = go_parse_uint(digits)?;
    if neg { 0i64.checked_sub_unsigned(magnitude) } else { i64::try_from(magnitude).ok() }
}

/// Go's `strconv.ParseUint(s, 0, 64)` on a text without `_` (no sign).
fn go_parse_uint(s: &str) -> Option<u64> {
    let lower = s.get(..2).map(str::to_ascii_lowercase);
    let (digits, radix) = match lower.as_deref() {
        Some("0x") => (&s[2..], 16),
        Some("0o") => (&s[2..], 8),
        Some("0b") => (&s[2..], 2),
        _ if s.len() > 1 && s.starts_with('0') => (&s[1..], 8),
        _ => (s, 10),
    };
    // from_str_radix accepts a sign; Go's ParseUint does not.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// go-yaml's float pattern: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    mantissa_ok && exp.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)))
}

/// Go's `strconv.ParseFloat(s, 64)` for a text starting with `.` (go-yaml's `.5`, `.5e3`).
fn go_parse_float(s: &str) -> Option<f64> {
    if is_yaml_float(s) { s.parse().ok() } else { None }
}

/// Whether `k` is the merge key `<<` (plain, untagged or tagged `!!merge`).
pub(crate) fn is_merge_key(k: &Node) -> bool {
    match &k.value {
        Value::Scalar(s) => {
            s.text == "<<"
                && match s.tag.as_deref() {
                    None => s.plain,
                    Some(t) => t == "tag:yaml.org,2002:merge",
                }
        }
        _ => false,
    }
}

/// The JSON object key sigs.k8s.io/yaml makes of a map key: strings as they are, numbers and
/// booleans formatted (`1.5`, `1e+06`, `true`). `None` for keys it refuses (null, collections).
pub fn key_string(k: &Node) -> Option<String> {
    let Value::Scalar(s) = &k.value else { return None };
    match resolve(s) {
        Resolved::Null | Resolved::Invalid(_) => None,
        Resolved::Bool(b) => Some(b.to_string()),
        Resolved::Int(i) => Some(i.to_string()),
        Resolved::Uint(u) => Some(u.to_string()),
        #[expect(clippy::cast_possible_truncation, reason = "sigs.k8s.io/yaml formats float keys at 32 bits")]
        Resolved::Float(f) => Some(go_format_g32(f as f32)),
        Resolved::Str(s) => Some(s),
    }
}

/// The JSON value kubectl produces for a scalar: sigs.k8s.io/yaml marshals Go values to JSON,
/// and the API machinery reads a number without a fraction or exponent back as an integer, so
/// an integral float within Go's fixed-point range (`1.0`, `1e3`) is an integer, and an integer
/// past `i64` (a `u64`) a float.
///
/// # Errors
/// `.inf` and `.nan` (JSON has no such number; kubectl says "json: unsupported value"), and
/// a tag the text does not fit.
pub fn to_json(s: &Scalar) -> Result<serde_json::Value, ScalarError> {
    Ok(match resolve(s) {
        Resolved::Null => serde_json::Value::Null,
        Resolved::Bool(b) => serde_json::Value::Bool(b),
        Resolved::Int(i) => serde_json::Value::from(i),
        #[expect(clippy::cast_precision_loss, reason = "kubectl reads integers past i64 as float64")]
        Resolved::Uint(u) => float_json(u as f64)?,
        Resolved::Float(f) => float_json(f)?,
        Resolved::Str(t) => serde_json::Value::String(t),
        Resolved::Invalid(m) => return Err(m),
    })
}

fn float_json(f: f64) -> Result<serde_json::Value, ScalarError> {
    if !f.is_finite() {
        return Err(ScalarError::NotFinite(go_float_name(f)));
    }
    // Go writes floats below 1e21 in fixed notation; an integral one then reads back as an
    // integer when it fits i64. `-0.0` is written `-0` and read as 0.
    let two_63 = 2f64.powi(63);
    if f.fract() == 0.0 && (-two_63..two_63).contains(&f) {
        return Ok(serde_json::Value::from(f as i64));
    }
    serde_json::Number::from_f64(f).map(serde_json::Value::Number).ok_or(ScalarError::NotFinite(go_float_name(f)))
}

fn go_float_name(f: f64) -> &'static str {
    if f.is_nan() {
        "NaN"
    } else if f > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)`: the shortest digits, in exponent form when the
/// exponent is below -4 or at least 6 (`1.5`, `1000`, `1e+06`, `1e-05`).
fn go_format_g32(f: f32) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // `{:e}` gives the shortest round-trip digits: `-1.5e3`.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1;
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{sign}{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}
