//! API errors as the real server shapes them: a `meta.k8s.io/v1` `Status` with reason, code and
//! optional details (causes, retryAfterSeconds).

use serde_json::{Value, json};

/// An error answered as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The `Status` reason (`NotFound`, `Conflict`, `Invalid`, ...).
    pub reason: &'static str,
    /// The message, worded as the real server words it.
    pub message: String,
    /// `details` of the `Status` (name, group, kind, causes), when it has them.
    pub details: Option<Value>,
    /// Sent as the `Retry-After` header too.
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None, retry_after: None }
    }

    /// The real server omits an empty `group` (the core group) from a Status's details.
    fn with_details(mut self, mut details: Value) -> ApiError {
        omit_empty_group(&mut details);
        self.details = Some(details);
        self
    }

    /// `<resource>[.<group>] "<name>" not found`.
    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(group, plural)))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(group, plural)))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// The optimistic-concurrency conflict of an update with a stale resourceVersion.
    pub(crate) fn stale(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// A server-side apply conflict: `causes` are `(manager as printed, field path)` pairs.
    pub(crate) fn apply_conflict(message: String, causes: &[(String, String)]) -> ApiError {
        let causes: Vec<Value> = causes
            .iter()
            .map(
                |(manager, field)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager}"), "field": field}),
            )
            .collect();
        ApiError::new(409, "Conflict", message).with_details(json!({"causes": causes}))
    }

    /// 422 with one cause per `(field, message)`.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: &[(&str, String)]) -> ApiError {
        // The message is an aggregate, which names an error once however often it is a cause.
        let mut text: Vec<String> = Vec::new();
        for (f, m) in causes {
            let line = format!("{f}: {m}");
            if !text.contains(&line) {
                text.push(line);
            }
        }
        let message = match text.len() {
            1 => format!("{} \"{name}\" is invalid: {}", qualified(group, kind), text[0]),
            _ => format!("{} \"{name}\" is invalid: [{}]", qualified(group, kind), text.join(", ")),
        };
        let causes: Vec<Value> = causes.iter().map(|(f, m)| json!({"reason": cause_reason(m), "message": m, "field": f})).collect();
        ApiError::new(422, "Invalid", message).with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    /// 500 for an error the real server's handler did not type: its Status has no reason.
    pub(crate) fn untyped(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "", message)
    }

    /// 422 for a request's options (`ListOptions.meta.k8s.io "" is invalid: ...`), as 1.35
    /// validates them before serving.
    pub(crate) fn invalid_options(options: &str, field: &str, message: &str) -> ApiError {
        ApiError::new(422, "Invalid", format!("{options}.meta.k8s.io \"\" is invalid: {field}: {message}")).with_details(
            json!({"group": "meta.k8s.io", "kind": options, "causes": [{"reason": cause_reason(message), "message": message, "field": field}]}),
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 403 for new content in a terminating namespace, with the `NamespaceTerminating` cause.
    pub(crate) fn namespace_terminating(group: &str, plural: &str, name: &str, namespace: &str) -> ApiError {
        ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                qualified(group, plural)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural, "causes": [
            {"reason": "NamespaceTerminating", "message": format!("namespace {namespace} is being terminated"), "field": "metadata.namespace"}
        ]}))
    }

    pub(crate) fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// What fault injection answers for a bare status code.
    pub(crate) fn injected(code: u16, retry_after: Option<u64>) -> ApiError {
        let reason = reason_for(code);
        let mut err = ApiError::new(code, reason, format!("testkit: injected fault ({code} {reason})"));
        if let Some(secs) = retry_after {
            err.retry_after = Some(secs);
            err.details = Some(json!({"retryAfterSeconds": secs}));
        }
        err
    }

    /// The `Status` body.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            let mut details = details.clone();
            // Go's omitempty: the core group is not sent as "".
            if details["group"] == ""
                && let Some(d) = details.as_object_mut()
            {
                d.remove("group");
            }
            status["details"] = details;
        }
        if self.reason.is_empty()
            && let Some(s) = status.as_object_mut()
        {
            s.remove("reason");
        }
        status
    }
}

/// The `CauseType` of a field error, from the words its message starts with.
fn cause_reason(message: &str) -> &'static str {
    let prefixes = [
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Not found", "FieldValueNotFound"),
    ];
    if message.starts_with("Invalid value") && message.contains(" in body must be of type ") {
        return "FieldValueTypeInvalid";
    }
    prefixes.iter().find(|(p, _)| message.starts_with(p)).map_or("FieldValueInvalid", |(_, r)| r)
}

/// The `StatusReason` the real server pairs with a code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// A successful `Status`, as DELETE answers for kinds that do not return the deleted object.
pub fn success(group: &str, plural: &str, name: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "group": group, "kind": plural, "uid": uid});
    omit_empty_group(&mut details);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

fn omit_empty_group(details: &mut Value) {
    if let Some(map) = details.as_object_mut()
        && map.get("group").is_some_and(|g| g == "")
    {
        map.remove("group");
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.message, self.code, self.reason)
    }
}

impl std::error::Error for ApiError {}
