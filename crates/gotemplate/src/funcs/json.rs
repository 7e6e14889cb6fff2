//! `encoding/json`'s `Unmarshal` into an `interface{}`, for sprig's `fromJson`: the whole text
//! is checked first (a syntax error leaves nil), numbers are float64 (one out of range becomes
//! nil and the error is kept while decoding goes on, as Go does), strings with bytes that are not
//! UTF-8 or lone surrogates get U+FFFD, and a repeated key keeps its last value.

use std::collections::BTreeMap;

use super::super::gonum::{NumError, parse_float};
use super::super::value::{IFACE, Val, appended, escape_text};
use super::FuncError;

/// Go nests at most this deep (`maxNestingDepth`).
const MAX_NESTING: usize = 10_000;

/// The decoded value and the first number error; or nil and the syntax error.
pub(super) fn decode(text: &[u8]) -> Result<(Val, Option<FuncError>), (Val, FuncError)> {
    let mut p = Parser { b: text, i: 0, err: None, depth: 0 };
    p.ws();
    let v = p.value().map_err(|e| (Val::Nil, e))?;
    p.ws();
    if p.i < p.b.len() {
        return Err((Val::Nil, format!("invalid character {:?} after top-level value", char::from(p.b[p.i])).into()));
    }
    Ok((v, p.err))
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    err: Option<FuncError>,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn syntax(&self) -> FuncError {
        match self.b.get(self.i) {
            Some(c) => format!("invalid character {:?} looking for beginning of value", char::from(*c)).into(),
            None => "unexpected end of JSON input".into(),
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), FuncError> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.syntax())
        }
    }

    fn value(&mut self) -> Result<Val, FuncError> {
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') => self.nested(|p| p.object()),
            Some(b'[') => self.nested(|p| p.array()),
            Some(b'"') => Ok(Val::str(self.string()?)),
            Some(b't') => self.word("true", Val::Bool(true)),
            Some(b'f') => self.word("false", Val::Bool(false)),
            Some(b'n') => self.word("null", Val::Nil),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax()),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Val, FuncError>) -> Result<Val, FuncError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err("exceeded max depth".into());
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn word(&mut self, w: &str, v: Val) -> Result<Val, FuncError> {
        if self.b[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Ok(v)
        } else {
            Err(self.syntax())
        }
    }

    fn object(&mut self) -> Result<Val, FuncError> {
        self.i += 1;
        let mut m = BTreeMap::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Val::map(m));
        }
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return Err(self.syntax());
            }
            let k = self.string()?;
            self.eat(b':')?;
            let v = self.value()?;
            m.insert(k, v);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Val::map(m));
                }
                _ => return Err(self.syntax()),
            }
        }
    }

    fn array(&mut self) -> Result<Val, FuncError> {
        self.i += 1;
        let mut out = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Val::list(out));
        }
        loop {
            out.push(self.value()?);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(appended(out, IFACE, 0));
                }
                _ => return Err(self.syntax()),
            }
        }
    }

    /// RFC 8259 number syntax; the value as `strconv.ParseFloat` reads it.
    fn number(&mut self) -> Result<Val, FuncError> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.b.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            p.i - s
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.syntax()),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return Err(self.syntax());
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.syntax());
            }
        }
        let text = std::str::from_utf8(&self.b[start..self.i]).unwrap_or_default();
        match parse_float(text) {
            Ok(f) => Ok(Val::F64(f)),
            Err(NumError::Range | NumError::Syntax) => {
                self.err.get_or_insert_with(|| format!("json: cannot unmarshal number {text} into Go value of type float64").into());
                Ok(Val::Nil)
            }
        }
    }

    /// A string literal; bytes that are not UTF-8 and lone surrogates become U+FFFD.
    fn string(&mut self) -> Result<String, FuncError> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.i) else { return Err("unexpected end of JSON input".into()) };
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(escape_text(&String::from_utf8_lossy(&out)).into_owned());
                }
                0..0x20 => return Err(format!("invalid character {:?} in string literal", char::from(c)).into()),
                b'\\' => {
                    let e = *self.b.get(self.i + 1).ok_or("unexpected end of JSON input")?;
                    self.i += 2;
                    let simple = match e {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(8),
                        b'f' => Some(12),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        b'u' => None,
                        _ => return Err("invalid character in string escape code".into()),
                    };
                    if let Some(x) = simple {
                        out.push(x);
                        continue;
                    }
                    let u = self.hex4().ok_or("invalid character in \\u hexadecimal character escape")?;
                    let c = if (0xd800..0xdc00).contains(&u) && self.b[self.i..].starts_with(b"\\u") {
                        let save = self.i;
                        self.i += 2;
                        match self.hex4() {
                            Some(lo) if (0xdc00..0xe000).contains(&lo) => char::from_u32(0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00)),
                            Some(_) => {
                                // Go: U+FFFD for the first, and the second read again.
                                self.i = save;
                                None
                            }
                            None => return Err("invalid character in \\u hexadecimal character escape".into()),
                        }
                    } else {
                        char::from_u32(u)
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.unwrap_or('\u{fffd}').encode_utf8(&mut buf).as_bytes());
                }
                _ => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        if !h.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    }
}
