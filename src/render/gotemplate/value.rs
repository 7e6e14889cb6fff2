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
            Value::String(s) => Val::str(s.as_str()),
            Value::Array(a) => Val::list(a.iter().map(Val::from_json).collect()),
            Value::Object(m) => Val::map(m.iter().map(|(k, v)| (k.clone(), Val::from_json(v))).collect()),
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
            Val::Str(s) => !s.is_empty(),
            Val::List(l, _) => !l.is_empty(),
            Val::Map(m, _) => !m.borrow().is_empty(),
            Val::Time(_) => true,
        }
    }

    /// The JSON value `encoding/json` would marshal.
    pub fn to_json(&self) -> Value {
        match self {
            Val::Missing(_) | Val::Nil => Value::Null,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(i) | Val::I64(i) => Value::from(*i),
            Val::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Val::Str(s) => Value::String(s.to_string()),
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
            (Val::Str(a), Val::Str(b)) => a == b,
            (Val::Time(a), Val::Time(b)) => a == b,
            (Val::List(a, ea), Val::List(b, eb)) => ea == eb && a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.deep_equal(y)),
            (Val::Map(a, ea), Val::Map(b, eb)) => {
                let (a, b) = (a.borrow(), b.borrow());
                ea == eb && a.len() == b.len() && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal(vb))
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

/// An error when `v` nests deeper than [`MAX_VALUE_DEPTH`].
pub fn check_depth(v: &Val) -> Result<(), String> {
    if matches!(v, Val::List(..) | Val::Map(..)) && depth(v) > MAX_VALUE_DEPTH {
        return Err(format!("the value nests lists and maps deeper than {MAX_VALUE_DEPTH} levels"));
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
