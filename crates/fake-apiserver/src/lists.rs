//! Lists as the real server serves them: pages that are a snapshot of the first page's
//! resourceVersion (the continue token carries it, and expires with the event log),
//! `resourceVersionMatch=Exact` reading the past, `NotOlderThan` the newest state, and the
//! parameter combinations the real server refuses.

use base64::Engine;
use serde_json::{Value, json};

use super::query::{Query, Selection};
use super::status::{ApiError, ApiResult};
use super::store::{Key, State};
use super::target::{Target, present};

/// A page of a list.
pub struct Page {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

pub fn list(state: &State, t: &Target, sel: &Selection, q: &Query) -> ApiResult<Page> {
    let token = q.get("continue").filter(|c| !c.is_empty());
    let rv_param = q.get("resourceVersion").filter(|v| !v.is_empty());
    let rv_match = q.get("resourceVersionMatch").filter(|v| !v.is_empty());
    let current = state.store.current_rv();
    let (at, after) = match (token, rv_param, rv_match) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
        }
        (Some(token), None, None) => {
            let (rv, start) = decode_continue(token).ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            (rv, Some(start))
        }
        (None, None, Some(_)) => {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        (None, Some(rv), Some("Exact")) => {
            let rv: u64 = rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
            if rv == 0 {
                return Err(ApiError::invalid_options(
                    "ListOptions",
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            (rv, None)
        }
        (None, _, Some("NotOlderThan") | None) => (current, None),
        (None, _, Some(other)) => {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                &format!("Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\", \"\""),
            ));
        }
    };
    let limit = q.u64("limit")?.filter(|l| *l > 0);
    let ns = t.namespace.as_deref();
    // Past the page's last `namespace/name`, in the store's order (by namespace, then name: a
    // comparison of the joined strings would put `a-b/x` before `a/x`).
    let start = after.as_deref().map(|s| s.split_once('/').unwrap_or(("", s)));
    let keep = |k: &Key, o: &Value| start.is_none_or(|start| (k.namespace.as_str(), k.name.as_str()) > start) && sel.matches(o);
    let snapshot;
    let matching: Vec<(&Key, &Value)> = if at >= current {
        candidates(state, t, sel).into_iter().filter(|(k, o)| keep(k, o)).collect()
    } else {
        snapshot = state.store.snapshot(at, &t.rt.group, &t.rt.plural, ns).map_err(|_| {
            ApiError::gone(if after.is_some() { CONTINUE_EXPIRED } else { "The resourceVersion for the provided list is too old." })
        })?;
        snapshot.iter().map(|(k, o)| (k, o)).filter(|(k, o)| keep(k, o)).collect()
    };
    let total = matching.len() as u64;
    let take = limit.map_or(matching.len(), |l| l as usize);
    let items: Vec<Value> = matching.iter().take(take).map(|(_, o)| present(o, t)).collect();
    let (continue_token, remaining) = match (limit, matching.get(take.saturating_sub(1))) {
        (Some(l), Some((last, _))) if total > l => {
            (Some(encode_continue(at, &format!("{}/{}", last.namespace, last.name))), Some(total - l))
        }
        _ => (None, None),
    };
    Ok(Page { items, resource_version: at, continue_token, remaining })
}

/// The newest objects of the listed resource that may match `sel`, ordered by namespace then
/// name, found without a scan of the store: the fewest objects one of the selector's
/// value-requirements allows (label index), else the namespace (the path's, or a
/// `metadata.namespace=` field selector's), else the resource.
fn candidates<'a>(state: &'a State, t: &Target, sel: &Selection) -> Vec<(&'a Key, &'a Value)> {
    let (group, plural) = (t.rt.group.as_str(), t.rt.plural.as_str());
    let ns = t.namespace.as_deref().or_else(|| sel.fields.required("metadata.namespace").filter(|n| !n.is_empty()));
    let narrowest = sel
        .labels
        .indexable()
        .into_iter()
        .map(|(key, values)| (state.store.count_labelled(group, plural, key, &values), key, values))
        .min_by_key(|(n, _, _)| *n);
    match narrowest {
        Some((_, key, values)) => state.store.list_labelled(group, plural, ns, key, &values),
        None => state.store.list(group, plural, ns).collect(),
    }
}

/// The real token's shape: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":KEY}`.
fn encode_continue(rv: u64, last: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last}\u{0}")});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Option<(u64, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE.decode(token).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    if v["v"] != "meta.k8s.io/v1" {
        return None;
    }
    let start = v["start"].as_str()?.trim_end_matches('\u{0}').to_string();
    Some((v["rv"].as_u64()?, start))
}
