//! Request parameters: the query string (parsed leniently: kube-rs sends `?&force=true`), label
//! selectors and field selectors: `metadata.name` and `metadata.namespace` on every resource,
//! plus the fields each built-in kind indexes (a Secret's `type`, a Pod's `spec.nodeName`, ...)
//! and a CRD version's `selectableFields`.

use serde_json::Value;

use super::kinds::{FieldLabels, Refusal, field_labels};
use super::meta;
use super::registry::ResourceType;
use super::status::{ApiError, ApiResult};

#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Query { pairs }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, key: &str) -> bool {
        self.get(key) == Some("true") || self.get(key) == Some("1")
    }

    pub fn dry_run(&self) -> bool {
        self.pairs.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }

    pub fn u64(&self, key: &str) -> ApiResult<Option<u64>> {
        match self.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| ApiError::bad_request(format!("invalid value for {key}: {v:?}"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// # Errors
    /// 400 BadRequest for a selector that does not parse.
    pub fn parse(s: &str) -> ApiResult<LabelSelector> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {term:?}"));
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().into())
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(rest).ok_or_else(bad)?)
            } else if term.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                Requirement::Exists(term.into())
            } else {
                return Err(bad());
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// The requirements an object's label must meet by value (`k=v`, `k==v`, `k in (...)`):
    /// each names a label key and the values that satisfy it, so a label index can give every
    /// possible match. Empty when no requirement does (only `!=`, `notin`, existence).
    pub fn indexable(&self) -> Vec<(&str, Vec<&str>)> {
        self.0
            .iter()
            .filter_map(|r| match r {
                Requirement::Equals(k, v) => Some((k.as_str(), vec![v.as_str()])),
                Requirement::In(k, vs) => Some((k.as_str(), vs.iter().map(String::as_str).collect())),
                _ => None,
            })
            .collect()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = meta::labels(obj);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

fn split_terms(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// # Errors
    /// 400 BadRequest for a field the server does not index, with the real message.
    pub fn parse(s: &str, labels: &FieldLabels) -> ApiResult<FieldSelector> {
        let mut terms = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{s}'; can't understand '{term}'")));
            };
            let field = field.trim();
            if !labels.fields.iter().any(|e| e == field) {
                return Err(ApiError::bad_request(labels.refusal.message(field)));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// The value an equality term requires of `field` (the first such term), if any.
    pub fn required(&self, field: &str) -> Option<&str> {
        self.0.iter().find(|(f, equal, _)| f == field && *equal).map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let mut node = obj;
            for part in field.split('.') {
                node = node.get(part).unwrap_or(&Value::Null);
            }
            let actual = match node {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    /// The selectors of `q` for resource `rt` in `version`, whose field selectors accept the
    /// fields that resource indexes.
    pub fn from_query(q: &Query, rt: &ResourceType, version: &str) -> ApiResult<Selection> {
        let labels = if rt.custom {
            // apiextensions' own conversion: the name, the namespace of a namespaced resource,
            // the version's selectableFields.
            let mut fields = vec!["metadata.name".to_string()];
            if rt.namespaced {
                fields.push("metadata.namespace".into());
            }
            fields.extend(rt.version(version).into_iter().flat_map(|v| v.selectable.iter().cloned()));
            FieldLabels { fields, refusal: Refusal::NotSupported }
        } else {
            field_labels(&rt.group, &rt.kind)
        };
        Ok(Selection {
            labels: LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?,
            fields: FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), &labels)?,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_cover_every_operator() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing,app=web", true),
            ("app in (db),tier", false),
            ("", true),
        ];
        for (selector, want) in cases {
            let parsed = LabelSelector::parse(selector).expect("parses");
            assert_eq!(parsed.matches(&obj), want, "{selector}");
        }
    }

    #[test]
    fn field_selectors_reject_unindexed_fields() {
        // As kube-apiserver 1.35 words it: runtime's default for kinds without a conversion of
        // their own, the kind's conversion otherwise.
        let deployments = field_labels("apps", "Deployment");
        let err = FieldSelector::parse("spec.replicas=1", &deployments).expect_err("unsupported");
        assert_eq!(err.message, r#""spec.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        let err = FieldSelector::parse("spec.x=1", &field_labels("", "Pod")).expect_err("unsupported");
        assert_eq!(err.message, "field label not supported: spec.x");
        let err = FieldSelector::parse("spec.x=1", &field_labels("batch", "Job")).expect_err("unsupported");
        assert_eq!(err.message, r#"field label "spec.x" not supported for Job"#);
        let err = FieldSelector::parse("metadata.namespace=x", &field_labels("", "Namespace")).expect_err("a namespace has none");
        assert_eq!(err.message, "field label not supported: metadata.namespace");
        let sel = FieldSelector::parse("metadata.name=x,metadata.namespace!=kube-system", &deployments).expect("parses");
        assert!(sel.matches(&json!({"metadata": {"name": "x", "namespace": "default"}})));
    }

    #[test]
    fn query_tolerates_a_leading_ampersand() {
        let q = Query::parse(Some("&force=true&fieldManager=m"));
        assert!(q.flag("force"));
        assert_eq!(q.get("fieldManager"), Some("m"));
    }
}
