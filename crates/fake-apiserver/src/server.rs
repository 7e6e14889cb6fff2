//! HTTP/1.1 on loopback: the accept loop, routing of API paths to discovery, OpenAPI and the
//! object verbs, fault injection and request counting in front of them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::objects;
use super::query::{Query, Selection};
use super::status::{ApiError, ApiResult};
use super::store::Shared;
use super::table::{self, Include};
use super::target::{self, Target};
use super::{deletion, discovery, lists, openapi, protobuf, validation, watch as watches};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Accepts connections until the task is aborted; dropping the JoinSet ends every connection.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(shared, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn full(code: u16, content_type: &str, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, v);
    }
    resp
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    full(code, "application/json", serde_json::to_vec(body).unwrap_or_default())
}

fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(err.code, &err.to_status());
    if let Some(secs) = err.retry_after {
        resp.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> &str {
    req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// What a path names.
enum Route {
    /// `/_testkit/<what>`: stats, faults, cut-watches, compact.
    Control(String),
    Version,
    CoreDiscovery,
    GroupsDiscovery,
    Group(String),
    GroupVersion(String, String),
    OpenApiIndex,
    OpenApiDoc(String, String),
    OpenApiV2,
    Resource {
        group: String,
        version: String,
        namespace: Option<String>,
        plural: String,
        name: Option<String>,
        subresource: Option<String>,
    },
    Unknown,
}

fn route(path: &str) -> Route {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["_testkit", what] => return Route::Control(what.to_string()),
        ["version"] => return Route::Version,
        ["api"] => return Route::CoreDiscovery,
        ["apis"] => return Route::GroupsDiscovery,
        ["apis", g] => return Route::Group(g.to_string()),
        ["openapi", "v3"] => return Route::OpenApiIndex,
        ["openapi", "v2"] => return Route::OpenApiV2,
        ["openapi", "v3", "api", v] => return Route::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => return Route::OpenApiDoc(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return Route::Unknown,
    };
    let s = |x: &&str| x.to_string();
    let (namespace, plural, name, subresource) = match rest {
        [] => return Route::GroupVersion(group, version),
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => (None, "namespaces".into(), Some(s(ns)), Some(s(sub))),
        ["namespaces", ns, plural, tail @ ..] => match tail {
            [] => (Some(s(ns)), s(plural), None, None),
            [name] => (Some(s(ns)), s(plural), Some(s(name)), None),
            [name, sub] => (Some(s(ns)), s(plural), Some(s(name)), Some(s(sub))),
            _ => return Route::Unknown,
        },
        [plural] => (None, s(plural), None, None),
        [plural, name] => (None, s(plural), Some(s(name)), None),
        [plural, name, sub] => (None, s(plural), Some(s(name)), Some(s(sub))),
        _ => return Route::Unknown,
    };
    Route::Resource { group, version, namespace, plural, name, subresource }
}

fn not_found_path() -> ApiError {
    ApiError::new(404, "NotFound", "the server could not find the requested resource")
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    match handle_inner(shared, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    }
}

async fn handle_inner(shared: Arc<Shared>, req: Request<Incoming>) -> ApiResult<Response<Body>> {
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let accept = header(&req, ACCEPT).to_string();
    let content_type = header(&req, CONTENT_TYPE).to_string();
    let user_agent = header(&req, USER_AGENT).to_string();
    let method = req.method().clone();
    let route = route(&path);
    tracing::debug!(method = %req.method(), uri = %req.uri(), accept, "testkit apiserver request");

    if let Route::OpenApiV2 = route {
        return Ok(full(200, openapi::V2_PROTOBUF, openapi::v2_protobuf()));
    }
    if !accept.is_empty() && !accept.split(',').any(|a| a.contains("json") || a.contains("*/*") || a.contains("yaml")) {
        return Err(ApiError::new(406, "NotAcceptable", "only application/json is served"));
    }
    let body = Limited::new(req.into_body(), 8 << 20)
        .collect()
        .await
        .map_err(|e| ApiError::new(413, "RequestEntityTooLarge", format!("reading the request body: {e}")))?
        .to_bytes();
    if let Route::Control(what) = &route {
        return control(&shared, &method, what, &body);
    }

    let verb = match (&route, &method) {
        (Route::Resource { name: Some(_), .. }, &Method::GET) => "get",
        (Route::Resource { .. }, &Method::GET) if query.flag("watch") => "watch",
        (Route::Resource { .. }, &Method::GET) => "list",
        (Route::Resource { .. }, &Method::POST) => "create",
        (Route::Resource { .. }, &Method::PUT) => "update",
        (Route::Resource { .. }, &Method::PATCH) => "patch",
        (Route::Resource { name: Some(_), .. }, &Method::DELETE) => "delete",
        (Route::Resource { .. }, &Method::DELETE) => "deletecollection",
        (_, &Method::GET) => "get",
        _ => {
            return Err(ApiError::method_not_allowed(format!("the server does not allow this method on the requested resource: {method}")));
        }
    };
    if content_type.contains("cbor") {
        return Err(ApiError::new(415, "UnsupportedMediaType", format!("testkit does not decode {content_type} bodies; send JSON")));
    }
    // Protobuf bodies become JSON before anything else reads them.
    let body = if content_type.contains("protobuf") && !body.is_empty() { Bytes::from(protobuf::decode(&body)?.to_string()) } else { body };
    let decision = shared.faults.decide(verb, &path);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }

    let Route::Resource { group, version, namespace, plural, name, subresource } = route else {
        if let Some((code, retry_after)) = decision.status {
            return Err(ApiError::injected(code, retry_after));
        }
        return non_resource(&shared, route, &accept);
    };

    let target = {
        let state = shared.lock();
        let rt = state.registry.find(&group, &version, &plural).cloned().ok_or_else(not_found_path)?;
        if namespace.is_some() && !rt.namespaced {
            return Err(not_found_path());
        }
        Target { rt, version, namespace, name, subresource }
    };
    let subresource_served = match target.subresource.as_deref() {
        None => true,
        Some("status") => target.rt.has_status(&target.version),
        Some("finalize") => target.rt.plural == "namespaces",
        Some(_) => false,
    };
    if !subresource_served {
        return Err(not_found_path());
    }
    let resource = match &target.subresource {
        Some(sub) => format!("{}/{sub}", target.rt.qualified()),
        None => target.rt.qualified(),
    };
    shared.counters.request(verb, &resource);
    if let Some((code, retry_after)) = decision.status {
        return Err(ApiError::injected(code, retry_after));
    }

    let table = table::wants_table(&accept).then(|| Include::parse(query.get("includeObject")));
    // A metadata-only client (`as=PartialObjectMetadata[List]`) gets metadata alone, as from the
    // real server.
    let metadata_only = table.is_none() && table::wants_metadata(&accept);
    match verb {
        "get" if metadata_only => Ok(json_response(200, &table::partial(objects::get(&shared.lock(), &target)?))),
        "get" => {
            let obj = objects::get(&shared.lock(), &target)?;
            Ok(json_response(200, &as_table_or(obj, &target, table)))
        }
        "list" => {
            let selection = Selection::from_query(&query, &target.rt, &target.version)?;
            let page = lists::list(&shared.lock(), &target, &selection, &query)?;
            let rv = page.resource_version.to_string();
            let body = match table {
                Some(include) => table::table(&target.rt, &target.version, &page.items, include, true, Some(rv)),
                None if metadata_only => {
                    let mut metadata = json!({"resourceVersion": rv});
                    if let Some(token) = &page.continue_token {
                        metadata["continue"] = json!(token);
                    }
                    if let Some(n) = page.remaining {
                        metadata["remainingItemCount"] = json!(n);
                    }
                    let items: Vec<Value> = page.items.into_iter().map(table::partial).collect();
                    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items})
                }
                None => {
                    let mut metadata = json!({"resourceVersion": rv});
                    if let Some(token) = &page.continue_token {
                        metadata["continue"] = json!(token);
                    }
                    if let Some(n) = page.remaining {
                        metadata["remainingItemCount"] = json!(n);
                    }
                    let mut items = page.items;
                    for item in &mut items {
                        target::list_item(item, &target);
                    }
                    json!({"kind": target.rt.list_kind, "apiVersion": target.rt.api_version(&target.version), "metadata": metadata, "items": items})
                }
            };
            let mut body = body;
            if table.is_some()
                && let Some(token) = &page.continue_token
            {
                body["metadata"]["continue"] = json!(token);
            }
            Ok(json_response(200, &body))
        }
        "watch" => watch_response(shared, target, &query, table, metadata_only),
        _ => {
            let (written, warnings) = shared.write(|state| {
                state.warnings.clear();
                let written = match verb {
                    "create" => {
                        state.duplicates = validation::duplicate_fields(&body);
                        objects::create(state, &target, parse_json(&body)?, &query, &user_agent)
                    }
                    "update" => {
                        state.duplicates = validation::duplicate_fields(&body);
                        objects::update(state, &target, parse_json(&body)?, &query, &user_agent)
                    }
                    "patch" => objects::patch(state, &target, &body, &content_type, &query, &user_agent),
                    "delete" => deletion::delete(state, &target, &body, &query),
                    _ => deletion::delete_collection(state, &target, &Selection::from_query(&query, &target.rt, &target.version)?, &query),
                }?;
                Ok::<_, ApiError>((written, std::mem::take(&mut state.warnings)))
            })?;
            if !query.dry_run() {
                shared.counters.write(verb, &resource, written.changed);
            }
            let mut body = written.body;
            target::answer_shape(&mut body, &target);
            if metadata_only {
                body = table::partial(body);
            }
            let mut resp = json_response(written.code, &body);
            for w in warnings {
                // RFC 7234 warn-code 299, agent "-", the text quoted as the real server sends it.
                let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
                if let Ok(v) = HeaderValue::from_str(&text) {
                    resp.headers_mut().append(hyper::header::WARNING, v);
                }
            }
            Ok(resp)
        }
    }
}

fn as_table_or(obj: Value, t: &Target, table: Option<Include>) -> Value {
    match table {
        Some(include) => table::table(&t.rt, &t.version, &[obj], include, true, None),
        None => obj,
    }
}

fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the body of the request is not valid JSON: {e}")))
}

fn watch_response(
    shared: Arc<Shared>,
    target: Target,
    q: &Query,
    table: Option<Include>,
    metadata_only: bool,
) -> ApiResult<Response<Body>> {
    let start = if q.flag("sendInitialEvents") {
        watches::Start::InitialEvents
    } else {
        match q.u64("resourceVersion")? {
            None | Some(0) => watches::Start::Now,
            Some(rv) => watches::Start::After(rv),
        }
    };
    let params = watches::Params {
        selection: Selection::from_query(q, &target.rt, &target.version)?,
        target,
        start,
        bookmarks: q.flag("allowWatchBookmarks"),
        timeout: q.u64("timeoutSeconds")?.map(Duration::from_secs),
        table,
        metadata_only,
    };
    let events = watches::stream(shared, params).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(events)));
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

fn non_resource(shared: &Shared, route: Route, accept: &str) -> ApiResult<Response<Body>> {
    // Discovery requests count too (verb `discovery`, by what was asked), so a client's cost
    // per sync is all in the stats.
    let asked = match &route {
        // `GET /version` (a client's reachability probe) is a request a sync pays for too.
        Route::Version => Some("version".to_string()),
        Route::CoreDiscovery => Some("api".to_string()),
        Route::GroupsDiscovery => Some("apis".to_string()),
        Route::Group(g) => Some(g.clone()),
        Route::GroupVersion(g, v) if g.is_empty() => Some(v.clone()),
        Route::GroupVersion(g, v) => Some(format!("{g}/{v}")),
        _ => None,
    };
    if let Some(asked) = asked {
        shared.counters.request("discovery", &asked);
    }
    let state = shared.lock();
    let reg = &state.registry;
    let aggregated = discovery::wants_aggregated(accept);
    let body = match route {
        Route::Version => discovery::version(),
        Route::CoreDiscovery if aggregated => {
            return Ok(full(200, discovery::AGGREGATED, discovery::aggregated(reg, true).to_string().into_bytes()));
        }
        Route::GroupsDiscovery if aggregated => {
            return Ok(full(200, discovery::AGGREGATED, discovery::aggregated(reg, false).to_string().into_bytes()));
        }
        Route::CoreDiscovery => discovery::api_versions(),
        Route::GroupsDiscovery => discovery::group_list(reg),
        Route::Group(g) => discovery::group(reg, &g).ok_or_else(not_found_path)?,
        Route::GroupVersion(g, v) => discovery::resource_list(reg, &g, &v).ok_or_else(not_found_path)?,
        Route::OpenApiIndex => openapi::index(reg),
        Route::OpenApiDoc(g, v) => openapi::document(reg, &g, &v).ok_or_else(not_found_path)?,
        Route::Control(_) | Route::OpenApiV2 | Route::Resource { .. } | Route::Unknown => return Err(not_found_path()),
    };
    Ok(json_response(200, &body))
}

/// The test-control endpoints, for people and scripts driving the `testkit apiserver` binary:
/// `GET|DELETE /_testkit/stats`, `POST|DELETE /_testkit/faults` (a JSON [`FaultRule`]),
/// `POST /_testkit/cut-watches`, `POST /_testkit/compact`.
///
/// [`FaultRule`]: super::FaultRule
fn control(shared: &Shared, method: &Method, what: &str, body: &[u8]) -> ApiResult<Response<Body>> {
    let done = || json_response(200, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}));
    match (what, method) {
        ("stats", &Method::GET) => Ok(json_response(200, &serde_json::to_value(shared.counters.snapshot()).unwrap_or(Value::Null))),
        ("stats", &Method::DELETE) => {
            shared.counters.reset();
            Ok(done())
        }
        ("faults", &Method::POST) => {
            let rule = super::FaultRule::from_json(&parse_json(body)?).map_err(ApiError::bad_request)?;
            shared.faults.add(rule);
            Ok(done())
        }
        ("faults", &Method::DELETE) => {
            shared.faults.clear();
            Ok(done())
        }
        ("cut-watches", &Method::POST) => {
            shared.faults.cut_watches();
            Ok(done())
        }
        ("compact", &Method::POST) => {
            shared.lock().store.compact();
            Ok(done())
        }
        _ => Err(not_found_path()),
    }
}
