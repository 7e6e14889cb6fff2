//! The wait conditions of `clusteraddon.yaml` stages (`waitForPreCondition`,
//! `waitForPostCondition`): objects of the workload cluster, each bound under its `key`, and a
//! CEL expression over them that must be `true`.
//!
//! Bound as the SCS cluster-stack-operator binds them: each object is the whole object as the
//! API server returns it (a map from string to any value: `apiVersion`, `metadata`, `spec`,
//! `status`), under its key as a top-level variable; the expression must evaluate to the boolean
//! `true` — `false`, or any value that is not a boolean, means "not yet". The operator gives up on
//! an object it cannot fetch and tries again later; so does stacksync (`missing` says which).
//!
//! CEL is `cel` (cel-rust, the maintained successor of `cel-interpreter`): the expression is
//! compiled when the release is read, so a syntax error is a release error naming the stage.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// One object a condition reads, and the variable it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitObject {
    pub key: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
}

impl std::fmt::Display for WaitObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// `waitForPreCondition` / `waitForPostCondition`: objects and the expression over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitFor {
    pub objects: Vec<WaitObject>,
    /// The CEL expression, as written (checked to compile when parsed).
    pub conditions: String,
}

/// What evaluating a condition over the fetched objects says.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Met,
    /// Not yet: why, for the status (`false`, a value that is not a boolean, or an evaluation
    /// error such as a field that is not there yet).
    NotYet(String),
}

/// A wait condition that cannot be evaluated, ever: the release must change. Permanent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("CEL expression `{expression}` does not compile: {}", one_line(&.source.to_string()))]
    Compile {
        expression: String,
        #[source]
        source: Arc<cel::ParseErrors>,
    },
    /// It reads a variable that is not one of the listed objects' keys.
    #[error("CEL expression `{expression}` does not compile: undeclared reference to `{variable}` ({})", declared(.keys))]
    Undeclared { expression: String, variable: String, keys: Vec<String> },
}

impl Error {
    /// Never: the expression is the release's.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        "InvalidCondition"
    }
}

fn declared(keys: &[String]) -> String {
    if keys.is_empty() { "no objects are listed".to_owned() } else { format!("the objects' keys are {}", keys.join(", ")) }
}

/// Checks that `expression` is CEL that compiles and that every variable it reads is one of
/// `keys` (cel-go would refuse an undeclared one when compiling, as the operator does).
///
/// # Errors
/// The parser's message, or the first undeclared variable.
pub fn check(expression: &str, keys: &[&str]) -> Result<(), Error> {
    let program = compile(expression)?;
    let references = program.references();
    let undeclared: Vec<&str> = references.variables().into_iter().filter(|v| !keys.contains(v)).collect();
    if let Some(v) = undeclared.first() {
        return Err(Error::Undeclared {
            expression: expression.to_owned(),
            variable: (*v).to_owned(),
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        });
    }
    Ok(())
}

/// Evaluates `expression` with each object bound under its key.
///
/// # Errors
/// The expression does not compile (checked when the release was read; kept for safety).
pub fn evaluate(expression: &str, objects: &BTreeMap<String, Value>) -> Result<Verdict, Error> {
    let program = compile(expression)?;
    let mut context = cel::Context::default();
    for (key, object) in objects {
        if let Err(e) = context.add_variable(key.clone(), object) {
            return Ok(Verdict::NotYet(format!("object `{key}` cannot be bound: {e}")));
        }
    }
    Ok(match program.execute(&context) {
        Ok(cel::Value::Bool(true)) => Verdict::Met,
        Ok(cel::Value::Bool(false)) => Verdict::NotYet(format!("`{expression}` is false")),
        Ok(other) => Verdict::NotYet(format!("`{expression}` is {other:?}, not a boolean")),
        Err(e) => Verdict::NotYet(format!("`{expression}` cannot be evaluated yet: {e}")),
    })
}

fn compile(expression: &str) -> Result<cel::Program, Error> {
    cel::Program::compile(expression).map_err(|e| Error::Compile { expression: expression.to_owned(), source: Arc::new(e) })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(v: Value) -> BTreeMap<String, Value> {
        v.as_object().expect("map").iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    #[test]
    fn objects_are_bound_whole_under_their_key() {
        let ds = json!({"ds": {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "cilium"},
            "status": {"numberAvailable": 3, "desiredNumberScheduled": 3}}});
        let e = "ds.status.numberAvailable == ds.status.desiredNumberScheduled && ds.metadata.name == 'cilium'";
        check(e, &["ds"]).expect("compiles");
        assert_eq!(evaluate(e, &objects(ds)).expect("evaluates"), Verdict::Met);
    }

    #[test]
    fn false_a_non_boolean_and_a_missing_field_are_not_yet() {
        let cm = objects(json!({"cm": {"data": {"ready": "no"}}}));
        for e in ["cm.data.ready == 'yes'", "cm.data.ready", "cm.status.phase == 'Done'"] {
            assert!(matches!(evaluate(e, &cm).expect("evaluates"), Verdict::NotYet(_)), "{e}");
        }
        assert_eq!(evaluate("has(cm.data.ready) && cm.data.ready == 'no'", &cm).expect("evaluates"), Verdict::Met);
    }

    #[test]
    fn a_syntax_error_or_an_unknown_variable_does_not_compile() {
        let err = check("cm.data.ready ==", &["cm"]).unwrap_err().to_string();
        assert!(err.contains("does not compile"), "{err}");
        let err = check("other.data.ready == 'yes'", &["cm"]).unwrap_err().to_string();
        assert!(err.contains("undeclared reference to `other`") && err.contains("cm"), "{err}");
    }
}
