//! Values as Go's `text/template` sees them: the dynamic Go type matters (an `int` literal is not
//! an `int64` from a Kubernetes object, a `[]string` from `splitList` is not a `[]interface {}`),
//! because Go's functions, comparisons and `fmt` verbs depend on it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

/// A Go map: shared and mutable, as sprig's `set` / `unset` change the map they are given.
pub type MapRef = Rc<RefCell<BTreeMap<String, Val>>>;

/// The deepest nesting of lists and maps a value may reach; deeper values are refused where
/// they are built, so printing, comparing and dropping them never recurse without bound.
pub const MAX_VALUE_DEPTH: usize = 64;

/// A value during execution.
#[derive(Debug, Clone)]
pub enum Val {
    /// Go's invalid `reflect.Value` ("no value"): a missing map key, or a nil interface after a
    /// pipeline stage. Carries the path asked for, for warnings.
    Missing(Rc<str>),
    /// A nil `interface{}` (JSON null, the `nil` literal, a function returning nil).
    Nil,
    Bool(bool),
    /// Go `int` (template literals, `len`, `atoi`, ...).
    Int(i64),
    /// Go `int64` (integers in Kubernetes objects, sprig arithmetic).
    I64(i64),
    F64(f64),
    /// Go `complex128` (an imaginary constant such as `1i`): real, imaginary.
    Complex(f64, f64),
    /// A Go string: bytes, held as text with every byte that is not part of valid UTF-8 (and
    /// every character of the escape range itself) written as an escape character
    /// ([`go_bytes`], [`from_go_bytes`]), so one `str` holds any Go string exactly.
    Str(Rc<str>),
    /// A slice; `elem` is the Go element type (`interface {}`, `string`, `int`, ...).
    List(Rc<Vec<Val>>, &'static str),
    /// A `map[string]elem`.
    Map(MapRef, &'static str),
    /// A Go `time.Time` (sprig's date functions).
    Time(Rc<GoTime>),
}

/// A Go `time.Time`: an instant, and the zone it is shown in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoTime {
    /// Seconds since the Unix epoch.
    pub secs: i64,
    pub nanos: u32,
    /// Seconds east of UTC.
    pub offset: i32,
    /// The zone's abbreviation (`UTC`); empty for a fixed offset without a name.
    pub zone: String,
}

pub const IFACE: &str = "interface {}";

impl Val {
    pub fn str(s: impl Into<Rc<str>>) -> Val {
        Val::Str(s.into())
    }

    pub fn list(items: Vec<Val>) -> Val {
        Val::List(Rc::new(items), IFACE)
    }

    pub fn strings(items: Vec<String>) -> Val {
        Val::List(Rc::new(items.into_iter().map(Val::str).collect()), "string")
    }

    pub fn map(m: BTreeMap<String, Val>) -> Val {
        Val::Map(Rc::new(RefCell::new(m)), IFACE)
    }

    pub fn missing() -> Val {
        Val::Missing(Rc::from(""))
    }

    /// Data as Kubernetes decodes unstructured objects: integral JSON numbers that fit are
    /// `int64`, every other number `float64`.
    pub fn from_json(v: &Value) -> Val {
        match v {
            Value::Null => Val::Nil,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Val::I64(i),
                None => Val::F64(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => Val::str(escape_text(s)),
            // encoding/json appends the elements one by one to an empty slice.
            Value::Array(a) => appended(a.iter().map(Val::from_json).collect(), IFACE, 0),
            Value::Object(m) => Val::map(m.iter().map(|(k, v)| (escape_text(k).into_owned(), Val::from_json(v))).collect()),
        }
    }

    /// The Go type name, as `%T` prints it.
    pub fn type_name(&self) -> String {
        match self {
            Val::Missing(_) | Val::Nil => "<nil>".into(),
            Val::Bool(_) => "bool".into(),
            Val::Int(_) => "int".into(),
            Val::I64(_) => "int64".into(),
            Val::F64(_) => "float64".into(),
            Val::Complex(..) => "complex128".into(),
            Val::Str(_) => "string".into(),
            Val::List(_, e) => format!("[]{e}"),
            Val::Map(_, e) => format!("map[string]{e}"),
            Val::Time(_) => "time.Time".into(),
        }
    }

    /// The `reflect.Kind` name (sprig's `kindOf`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Val::Missing(_) | Val::Nil => "invalid",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::I64(_) => "int64",
            Val::F64(_) => "float64",
            Val::Complex(..) => "complex128",
            Val::Str(_) => "string",
            Val::List(..) => "slice",
            Val::Map(..) => "map",
            Val::Time(_) => "struct",
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Val::Missing(_) | Val::Nil)
    }

    /// Go's `isTrue`: the zero value of its type is false.
    pub fn truthy(&self) -> bool {
        match self {
            Val::Missing(_) | Val::Nil => false,
            Val::Bool(b) => *b,
            Val::Int(i) | Val::I64(i) => *i != 0,
            Val::F64(f) => *f != 0.0,
            Val::Complex(re, im) => *re != 0.0 || *im != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::List(l, _) => !l.is_empty(),
            Val::Map(m, _) => !m.borrow().is_empty(),
            Val::Time(_) => true,
        }
    }

    /// The JSON value `encoding/json` would marshal.
    pub fn to_json(&self) -> Value {
        match self {
            Val::Missing(_) | Val::Nil | Val::Complex(..) => Value::Null,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(i) | Val::I64(i) => Value::from(*i),
            Val::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Val::Str(s) => Value::String(String::from_utf8_lossy(&go_bytes(s)).into_owned()),
            Val::List(l, _) if is_nil_list(l) => Value::Null,
            Val::Map(m, _) if is_nil_map(m) => Value::Null,
            Val::List(l, _) => Value::Array(l.iter().map(Val::to_json).collect()),
            Val::Map(m, _) => Value::Object(m.borrow().iter().map(|(k, v)| (k.clone(), v.to_json())).collect()),
            Val::Time(t) => Value::String(t.rfc3339()),
        }
    }

    /// Go's `reflect.DeepEqual` (types must match).
    pub fn deep_equal(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Missing(_) | Val::Nil, Val::Missing(_) | Val::Nil) => true,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Int(a), Val::Int(b)) | (Val::I64(a), Val::I64(b)) => a == b,
            (Val::F64(a), Val::F64(b)) => a == b,
            (Val::Complex(a, b), Val::Complex(c, d)) => a == c && b == d,
            (Val::Str(a), Val::Str(b)) => a == b,
            (Val::Time(a), Val::Time(b)) => a == b,
            (Val::List(a, ea), Val::List(b, eb)) => {
                ea == eb && is_nil_list(a) == is_nil_list(b) && a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.deep_equal(y))
            }
            (Val::Map(a_ref, ea), Val::Map(b_ref, eb)) => {
                let (a, b) = (a_ref.borrow(), b_ref.borrow());
                ea == eb
                    && is_nil_map(a_ref) == is_nil_map(b_ref)
                    && a.len() == b.len()
                    && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal(vb))
            }
            _ => false,
        }
    }
}

/// The nesting depth of `v` (0 for a scalar), computed without recursion.
pub fn depth(v: &Val) -> usize {
    let mut max = 0;
    let mut stack = vec![(v.clone(), 0usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        if d > MAX_VALUE_DEPTH {
            break;
        }
        match v {
            Val::List(l, _) => stack.extend(l.iter().filter(|i| matches!(i, Val::List(..) | Val::Map(..))).map(|i| (i.clone(), d + 1))),
            Val::Map(m, _) => {
                stack.extend(m.borrow().values().filter(|i| matches!(i, Val::List(..) | Val::Map(..))).map(|i| (i.clone(), d + 1)))
            }
            _ => {}
        }
    }
    max
}

/// A value nesting lists and maps deeper than [`MAX_VALUE_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the value nests lists and maps deeper than {MAX_VALUE_DEPTH} levels")]
pub struct TooDeep;

/// An error when `v` nests deeper than [`MAX_VALUE_DEPTH`].
pub fn check_depth(v: &Val) -> Result<(), TooDeep> {
    if matches!(v, Val::List(..) | Val::Map(..)) && depth(v) > MAX_VALUE_DEPTH {
        return Err(TooDeep);
    }
    Ok(())
}

/// Whether `inner` is, or contains, the map `outer` (a `set` that would make a cycle).
pub fn reaches(inner: &Val, outer: &MapRef) -> bool {
    let mut stack = vec![inner.clone()];
    while let Some(v) = stack.pop() {
        match v {
            Val::Map(m, _) => {
                if Rc::ptr_eq(&m, outer) {
                    return true;
                }
                stack.extend(m.borrow().values().cloned());
            }
            Val::List(l, _) => stack.extend(l.iter().cloned()),
            _ => {}
        }
    }
    false
}

thread_local! {
    /// The nil slice and the nil map: Go tells them from empty ones (`toJson` prints `null`,
    /// `set` on a nil map fails, `%#v` and `deepEqual` differ). One shared, never-mutated
    /// value each per thread, recognised by identity.
    static NIL_LIST: Rc<Vec<Val>> = Rc::new(Vec::new());
    static NIL_MAP: MapRef = Rc::default();
}

/// A nil slice (`[]elem(nil)`).
pub fn nil_list(elem: &'static str) -> Val {
    Val::List(NIL_LIST.with(Rc::clone), elem)
}

pub fn is_nil_list(l: &Rc<Vec<Val>>) -> bool {
    NIL_LIST.with(|n| Rc::ptr_eq(n, l))
}

/// A nil `map[string]interface {}`.
pub fn nil_map() -> MapRef {
    NIL_MAP.with(Rc::clone)
}

pub fn is_nil_map(m: &MapRef) -> bool {
    NIL_MAP.with(|n| Rc::ptr_eq(n, m))
}

/// The first escape character: byte `b` of a Go string that is not valid UTF-8 is held as
/// `ESCAPE + b` (the last 256 code points of plane 16, private use). A character of that range
/// read from the data or the template is held as the escapes of its own four bytes, so every
/// Go string has exactly one representation.
const ESCAPE: u32 = 0x10_FF00;

pub fn is_escape(c: char) -> bool {
    c as u32 >= ESCAPE
}

/// The bytes of a Go string held in `s`.
pub fn go_bytes(s: &str) -> std::borrow::Cow<'_, [u8]> {
    if !s.chars().any(is_escape) {
        return std::borrow::Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        if is_escape(c) {
            out.push((c as u32 - ESCAPE) as u8);
        } else {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether the Go string held in `s` is valid UTF-8.
pub fn is_utf8(s: &str) -> bool {
    !s.chars().any(is_escape) || std::str::from_utf8(&go_bytes(s)).is_ok()
}

/// The representation of the Go string of bytes `b`.
pub fn from_go_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(&escape_text(chunk.valid()));
        for x in chunk.invalid() {
            out.push(escape_byte(*x));
        }
    }
    out
}

fn escape_byte(b: u8) -> char {
    char::from_u32(ESCAPE + u32::from(b)).unwrap_or('\u{fffd}')
}

/// The representation of valid UTF-8 text: itself, unless it has characters of the escape range.
pub fn escape_text(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_escape) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if is_escape(c) {
            let mut buf = [0; 4];
            out.extend(c.encode_utf8(&mut buf).bytes().map(escape_byte));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The Go string held in `s` as text, with U+FFFD for each byte that is not valid UTF-8 (what
/// Go's `range` over a string, `strings.Map` or `encoding/json` make of them).
pub fn lossy(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_escape) {
        return std::borrow::Cow::Borrowed(s);
    }
    match String::from_utf8_lossy(&go_bytes(s)) {
        std::borrow::Cow::Borrowed(t) => std::borrow::Cow::Owned(t.to_owned()),
        std::borrow::Cow::Owned(t) => std::borrow::Cow::Owned(t),
    }
}

/// Items of a registered slice (kept alive) and the elements past its length.
type SpareRegistry = std::collections::HashMap<usize, (Rc<Vec<Val>>, Vec<Val>)>;

thread_local! {
    /// The elements between length and capacity of the slices that have some, by the address of
    /// their items (the registry holds them, so an address is never reused while registered).
    /// Only sprig's `slice` reads them: Go slices up to the capacity. Executions run on their
    /// own thread, so the registry ends with the execution.
    static SPARE: RefCell<SpareRegistry> = RefCell::default();
}

/// A slice of `items` whose capacity holds `spare` more.
pub fn with_spare(items: Vec<Val>, elem: &'static str, spare: Vec<Val>) -> Val {
    let items = Rc::new(items);
    if !spare.is_empty() {
        SPARE.with(|s| s.borrow_mut().insert(Rc::as_ptr(&items) as usize, (items.clone(), spare)));
    }
    Val::List(items, elem)
}

/// A slice of `items` built by appending them one by one to an empty slice, or to `start`
/// (the capacity of the slice the appends began with), as Go grows it.
pub fn appended(items: Vec<Val>, elem: &'static str, start: usize) -> Val {
    let mut cap = start;
    for len in 0..items.len() {
        if len + 1 > cap {
            cap = grow(len + 1, cap, elem);
        }
    }
    let spare = vec![zero(elem); cap.saturating_sub(items.len())];
    with_spare(items, elem, spare)
}

/// The elements past the length of `l` up to its capacity.
pub fn spare_of(l: &Rc<Vec<Val>>) -> Vec<Val> {
    SPARE.with(|s| s.borrow().get(&(Rc::as_ptr(l) as usize)).map(|(_, v)| v.clone()).unwrap_or_default())
}

/// The zero value of a slice element type.
pub fn zero(elem: &str) -> Val {
    match elem {
        "string" => Val::str(""),
        "int" => Val::Int(0),
        _ => Val::Nil,
    }
}

/// Go's `growslice`: the capacity after appending up to `new_len` to a slice of capacity `old`,
/// rounded up to the allocator's size class.
pub fn grow(new_len: usize, old: usize, elem: &str) -> usize {
    let (size, pointers) = if elem == "int" { (8, false) } else { (16, true) };
    let double = old + old;
    let mut cap = if new_len > double {
        new_len
    } else if old < 256 {
        double
    } else {
        let mut c = old;
        while c < new_len {
            c += (c + 3 * 256) >> 2;
        }
        c
    };
    cap = cap.max(new_len);
    round_up_size(cap * size, !pointers) / size
}

/// Go's `roundupsize`: the bytes the allocator gives for `size`.
fn round_up_size(size: usize, noscan: bool) -> usize {
    const CLASSES: [usize; 68] = [
        0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576,
        640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784,
        6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768,
    ];
    if size <= 32768 - 8 {
        // Objects with pointers above 512 bytes carry an 8-byte header.
        let req = if !noscan && size > 512 { size + 8 } else { size };
        let class = CLASSES.iter().copied().find(|c| *c >= req).unwrap_or(32768);
        class - (req - size)
    } else {
        size.div_ceil(8192) * 8192
    }
}
