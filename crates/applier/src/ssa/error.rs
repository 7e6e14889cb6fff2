//! Errors of the per-object operations, and the message a Failed entry carries for each: the
//! API server's own words, with conflicts and immutable fields spelled out.

use kube::core::Status;

use super::Manager;
use crate::ObjectRef;

/// A per-object operation that failed, with the object and the API server's cause.
#[allow(missing_docs, reason = "each variant is the operation its message names; the fields are the object, the cause and the wait")]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {object}")]
    Get {
        object: ObjectRef,
        #[source]
        source: kube::Error,
    },
    #[error("dry-run apply of {object}")]
    DryRun {
        object: ObjectRef,
        #[source]
        source: kube::Error,
    },
    #[error("applying {object}")]
    Patch {
        object: ObjectRef,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {object}")]
    Delete {
        object: ObjectRef,
        #[source]
        source: kube::Error,
    },
    #[error("{object} was deleted for re-creation but is still there after {wait:?}")]
    AwaitDeletion { object: ObjectRef, wait: std::time::Duration },
    #[error("{object} is not Established after {wait:?}{detail}")]
    Establish { object: ObjectRef, wait: std::time::Duration, detail: String },
    /// The request got no final answer within `request_timeout`: kube's client retries 429, 503
    /// and 504 for minutes (honouring `Retry-After`), so an overloaded server would otherwise
    /// hold the whole sync.
    #[error("{operation} {object}: no answer from the API server within {after:?}")]
    Timeout { operation: &'static str, object: ObjectRef, after: std::time::Duration },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A short, bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Get { .. } => "get",
            Error::DryRun { source, .. } | Error::Patch { source, .. } if is_conflict(source) => "conflict",
            Error::DryRun { source, .. } | Error::Patch { source, .. } if is_immutable(source) => "immutable",
            Error::DryRun { .. } => "dry_run",
            Error::Patch { .. } => "patch",
            Error::Delete { .. } => "delete",
            Error::AwaitDeletion { .. } => "await_deletion",
            Error::Establish { .. } => "establish",
            Error::Timeout { .. } => "timeout",
        }
    }

    /// Whether the next sync may well succeed without a change to the release or the cluster.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Get { source, .. } | Error::DryRun { source, .. } | Error::Patch { source, .. } | Error::Delete { source, .. } => {
                match source {
                    kube::Error::Api(s) if does_not_fit_schema(s) => false,
                    kube::Error::Api(s) => s.code == 429 || s.code >= 500,
                    _ => true,
                }
            }
            Error::AwaitDeletion { .. } | Error::Establish { .. } | Error::Timeout { .. } => true,
        }
    }

    /// Whether an apply or its dry-run was answered 404: an apply creates what is absent, so the
    /// kind's resource (or the object's namespace) is not there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::DryRun { source: kube::Error::Api(s), .. } | Error::Patch { source: kube::Error::Api(s), .. } if s.code == 404)
    }

    /// Whether the server refused the change because it touches an immutable field.
    pub fn is_immutable(&self) -> bool {
        matches!(self, Error::DryRun { source, .. } | Error::Patch { source, .. } if is_immutable(source))
    }

    /// The API server's own words (or the client's, when no answer came), without hints.
    pub fn server_message(&self) -> String {
        match self {
            Error::Get { source, .. } | Error::DryRun { source, .. } | Error::Patch { source, .. } | Error::Delete { source, .. } => {
                server_message(source)
            }
            Error::AwaitDeletion { .. } | Error::Establish { .. } => self.to_string(),
            Error::Timeout { operation, after, .. } => timeout_message(operation, *after),
        }
    }

    /// The field managers a conflict names (empty for any other error).
    pub fn conflicting_managers(&self) -> Vec<String> {
        let (Error::Patch { source: kube::Error::Api(s), .. } | Error::DryRun { source: kube::Error::Api(s), .. }) = self else {
            return Vec::new();
        };
        if s.code != 409 {
            return Vec::new();
        }
        let mut texts: Vec<&str> = s.details.iter().flat_map(|d| &d.causes).map(|c| c.message.as_str()).collect();
        if texts.is_empty() {
            texts.push(&s.message);
        }
        let mut managers: Vec<String> = Vec::new();
        for text in texts {
            for part in text.split("conflict with \"").skip(1) {
                if let Some((manager, _)) = part.split_once('"')
                    && !managers.iter().any(|m| m == manager)
                {
                    managers.push(manager.to_owned());
                }
            }
        }
        managers
    }

    /// The message of the object's Failed entry: the server's message, without the object's
    /// identity (the entry carries that), with a hint where the user has a choice (the
    /// annotations are `manager`'s).
    pub fn message(&self, manager: &Manager) -> String {
        match self {
            Error::Get { source, .. } | Error::Delete { source, .. } => server_message(source),
            Error::DryRun { source, .. } | Error::Patch { source, .. } => match source {
                kube::Error::Api(s) if is_conflict(source) => conflict_message(s, manager.force_annotation()),
                _ if is_immutable(source) => format!(
                    "{} (immutable field: annotate the object with {}: \"true\" to delete and re-create it)",
                    server_message(source),
                    manager.recreate_annotation()
                ),
                kube::Error::Api(s) if does_not_fit_schema(s) => {
                    format!("{} (the object does not fit its kind's schema: the release needs a change)", server_message(source))
                }
                _ => server_message(source),
            },
            Error::AwaitDeletion { .. } | Error::Establish { .. } => self.to_string(),
            Error::Timeout { operation, after, .. } => timeout_message(operation, *after),
        }
    }
}

/// Whether the server refused an apply because its body does not fit the kind's schema (a string
/// where a number goes, a field the schema does not declare, two list entries with one key).
/// Server-side apply answers these with 500, not 400 (kubernetes/kubernetes#139253): the same
/// body fails the same way every time, so it is not retried as a server fault.
fn does_not_fit_schema(s: &Status) -> bool {
    s.code == 500 && s.message.starts_with("failed to create typed patch object")
}

/// The message of a request that timed out (shared with discovery).
pub fn timeout_message(operation: &str, after: std::time::Duration) -> String {
    format!(
        "{operation}: no answer from the API server within {after:?} (it kept answering 429/5xx, which the client retries, or did not answer); tried again next sync"
    )
}

/// How much of an error body that is not an API `Status` a message keeps.
const FOREIGN_BODY_CHARS: usize = 200;

fn server_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.message.is_empty() => format!("{} {}", s.code, s.reason),
        // kube's reconstruction of a body that is no `Status` (a proxy's or load balancer's HTML
        // page): one short line, or every Failed entry of a cluster carries the whole page
        // into the status resource.
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => {
            let text = s.message.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut excerpt: String = text.chars().take(FOREIGN_BODY_CHARS).collect();
            if excerpt.len() < text.len() {
                excerpt.push_str(" ...");
            }
            format!("HTTP {} with a body that is no API Status: {excerpt}", s.code)
        }
        kube::Error::Api(s) => s.message.clone(),
        // `ServiceError: client error (SendRequest)` alone does not say the connection was
        // refused or reset.
        other => super::with_causes(other),
    }
}

/// The reason kube-client gives an error response whose body is not a `Status`.
const NOT_A_STATUS: &str = "Failed to parse error data";

/// A server-side apply conflict (not the optimistic-concurrency conflict of an update).
fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict" && s.message.starts_with("Apply failed"))
}

fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && (s.message.contains("field is immutable")
        || s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.message.contains("field is immutable")))))
}

/// `conflict with "alpha": .data.a, .data.b; conflict with "kubectl-edit" using v1: .spec.x`,
/// grouped by manager from the Status causes, and how to take ownership.
fn conflict_message(status: &Status, force_annotation: &str) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for cause in status.details.iter().flat_map(|d| &d.causes) {
        if cause.field.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(m, _)| *m == cause.message) {
            Some((_, fields)) => fields.push(cause.field.clone()),
            None => groups.push((cause.message.clone(), vec![cause.field.clone()])),
        }
    }
    let what = if groups.is_empty() {
        status.message.clone()
    } else {
        groups.iter().map(|(manager, fields)| format!("{manager}: {}", fields.join(", "))).collect::<Vec<_>>().join("; ")
    };
    format!(
        "{what} (another field manager owns these fields; set force, or annotate the object with {force_annotation}: \"true\", to take them over)"
    )
}

#[cfg(test)]
mod tests {
    use kube::core::response::{StatusCause, StatusDetails};

    use super::*;

    fn m() -> Manager {
        crate::ssa::test_manager()
    }

    fn api(code: u16, reason: &str, message: &str, causes: Vec<StatusCause>) -> kube::Error {
        let mut s = Status::failure(message, reason);
        s.code = code;
        s.details = Some(StatusDetails {
            name: "c".into(),
            group: String::new(),
            kind: "configmaps".into(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
        kube::Error::Api(s.boxed())
    }

    fn cause(message: &str, field: &str) -> StatusCause {
        StatusCause { reason: "FieldManagerConflict".into(), message: message.into(), field: field.into() }
    }

    fn obj() -> ObjectRef {
        ObjectRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: Some("default".into()), name: "c".into() }
    }

    #[test]
    fn a_body_that_does_not_fit_the_schema_is_not_retried_as_a_server_fault() {
        // What the real kube-apiserver 1.35 answers (kubernetes/kubernetes#139253): 500.
        let message = "failed to create typed patch object (ns/bad; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string";
        let e = Error::Patch { object: obj(), source: api(500, "", message, Vec::new()) };
        assert!(!e.is_transient());
        assert!(
            e.message(&m()).ends_with("(the object does not fit its kind's schema: the release needs a change)"),
            "{}",
            e.message(&m())
        );
        let e = Error::Patch { object: obj(), source: api(500, "InternalError", "etcdserver: request timed out", Vec::new()) };
        assert!(e.is_transient());
    }

    #[test]
    fn conflicts_name_managers_and_fields() {
        let source = api(
            409,
            "Conflict",
            "Apply failed with 3 conflicts: ...",
            vec![
                cause("conflict with \"alpha\"", ".data.a"),
                cause("conflict with \"beta\" using v1", ".data.c"),
                cause("conflict with \"alpha\"", ".data.b"),
            ],
        );
        let e = Error::DryRun { object: obj(), source };
        assert_eq!(e.kind(), "conflict");
        assert!(!e.is_transient());
        assert!(
            e.message(&m())
                .starts_with("conflict with \"alpha\": .data.a, .data.b; conflict with \"beta\" using v1: .data.c (another field manager"),
            "{}",
            e.message(&m())
        );
    }

    #[test]
    fn immutable_fields_say_how_to_recreate() {
        let message = "Job.batch \"j\" is invalid: spec.template: Invalid value: ...: field is immutable";
        let e = Error::Patch { object: obj(), source: api(422, "Invalid", message, vec![]) };
        assert!(e.is_immutable());
        assert_eq!(e.kind(), "immutable");
        assert!(e.message(&m()).starts_with(message) && e.message(&m()).contains(m().recreate_annotation()), "{}", e.message(&m()));
    }

    /// Regression: a proxy's HTML error page became the whole message of every Failed entry,
    /// blowing up the status resource.
    #[test]
    fn an_error_page_that_is_no_status_becomes_one_short_line() {
        let page = format!("<html>\n<head><title>502 Bad Gateway</title></head>\n<body>{}</body>\n</html>\n", "x".repeat(5000));
        let status = Status::failure(page.trim(), NOT_A_STATUS).with_code(502);
        let e = Error::Get { object: obj(), source: kube::Error::Api(status.boxed()) };
        let message = e.message(&m());
        assert!(
            message.starts_with("HTTP 502 with a body that is no API Status: <html> <head><title>502 Bad Gateway</title>"),
            "{message}"
        );
        assert!(message.ends_with(" ...") && message.len() < 300, "{message}");
        assert!(e.is_transient());
    }

    #[test]
    fn other_errors_are_the_servers_message_and_5xx_is_transient() {
        let e = Error::Patch { object: obj(), source: api(500, "InternalError", "boom", vec![]) };
        assert_eq!((e.message(&m()).as_str(), e.kind(), e.is_transient()), ("boom", "patch", true));
        let e = Error::Patch { object: obj(), source: api(409, "Conflict", "Operation cannot be fulfilled", vec![]) };
        assert_eq!(e.kind(), "patch", "a stale update is no field conflict");
    }
}
