//! The console's HTTP listener: routes to the pages, serves the stylesheet and script from the
//! binary, streams changes as server-sent events (`/events`), and puts the same safety headers
//! on every answer — a strict Content-Security-Policy (no inline script, nothing from another
//! origin), no framing, no caching. Only GET (and the Preview's POST) are served, and only to a
//! `Host` the console answers for, so a web page elsewhere cannot read it through DNS rebinding.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::api::Api;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, broadcast};

use super::html::{Layout, Nav, decode_segment};
use super::pages::{self, Ctx, preview};
use super::view::Query;
use super::watch::Stores;
use crate::config::Config;
use crate::status::crd::ClusterSync;

/// Connections served at once (each open page holds one for its event stream).
const MAX_CONNECTIONS: usize = 256;
/// Deadline for a client to send its request head, and separately its body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the Cluster page waits for its ClusterSync read.
const GET_TIMEOUT: Duration = Duration::from_secs(5);
/// A comment on an idle event stream, so proxies and the browser keep it open.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Every answer's Content-Security-Policy: only this origin's stylesheet and script, the event
/// stream and the Preview form; nothing inline, nothing framed, no plugin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                       form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What the listener serves from.
pub struct Console {
    pub stores: Arc<Stores>,
    /// For the reads a page makes itself (the Cluster page's full ClusterSync).
    pub client: kube::Client,
    /// The management cluster's context, shown in every page's header.
    pub context: String,
    pub config: Option<Arc<Config>>,
    pub config_path: Option<String>,
    /// `--preview FILE`, read at start.
    pub preview: Option<preview::Report>,
    /// Host names (without port) requests may name: the loopback names, and the listen address.
    pub hosts: Vec<String>,
}

/// Serves until the task is dropped; each connection on its own task.
pub async fn serve(listener: TcpListener, console: Arc<Console>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "console: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let console = console.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let console = console.clone();
                async move { Ok::<_, Infallible>(with_headers(route(&console, req).await)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "console: connection ended");
            }
            drop(permit);
        });
    }
}

fn with_headers(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    for (k, v) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
        (header::HeaderName::from_static("cross-origin-resource-policy"), "same-origin"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    r
}

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

const HTML: &str = "text/html; charset=utf-8";

/// The host name a request names, without its port (`[::1]` for IPv6).
fn host_name(req: &Request<Incoming>) -> Option<String> {
    let host = req.headers().get(header::HOST)?.to_str().ok()?;
    let name = if host.starts_with('[') { host.split_once(']').map(|(h, _)| format!("{h}]"))? } else { host.split(':').next()?.to_owned() };
    Some(name.to_ascii_lowercase())
}

async fn route(c: &Console, req: Request<Incoming>) -> Response<Body> {
    if !host_name(&req).is_some_and(|h| c.hosts.contains(&h)) {
        return reply(
            StatusCode::MISDIRECTED_REQUEST,
            "text/plain",
            "the console answers only to its own address (e.g. http://127.0.0.1:<port>/)\n",
        );
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let fragment = req.headers().contains_key("x-console-fragment");
    let segments: Vec<String> = path.split('/').filter(|s| !s.is_empty()).map(|s| decode_segment(s).unwrap_or_default()).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["assets", "console.css"]) => reply(StatusCode::OK, "text/css; charset=utf-8", CSS),
        (&Method::GET, ["assets", "console.js"]) => reply(StatusCode::OK, "text/javascript; charset=utf-8", JS),
        (&Method::GET, ["healthz"]) => reply(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, ["events"]) => events(c),
        (&Method::GET, []) => {
            let q = Query::parse(&query);
            page(c, fragment, "Fleet", Nav::Fleet, "*", |ctx| Some(pages::fleet::content(&c.stores.snapshot(), &q, ctx)))
        }
        (&Method::GET, ["rollouts"]) => {
            page(c, fragment, "Rollouts", Nav::Rollouts, "stackrelease/*", |ctx| Some(pages::rollouts::list(&c.stores.snapshot(), ctx)))
        }
        (&Method::GET, ["rollouts", release]) => {
            let title = format!("Rollout {release}");
            page(c, fragment, &title, Nav::Rollouts, "*", |ctx| pages::rollouts::detail(&c.stores.snapshot(), release, ctx))
        }
        (&Method::GET, ["releases"]) => page(c, fragment, "Releases", Nav::Releases, "stackrelease/* clustersync/*", |ctx| {
            Some(pages::releases::content(&c.stores.snapshot(), ctx))
        }),
        (&Method::GET, ["clusters", ns, name]) => {
            let api: Api<ClusterSync> = Api::namespaced(c.client.clone(), ns);
            // The full ClusterSync (its inventory is not kept by the watch); the watched one
            // when this read is refused or slow.
            let full = tokio::time::timeout(GET_TIMEOUT, api.get_opt(name)).await.ok().and_then(Result::ok).flatten();
            let title = format!("{ns}/{name}");
            let watch = format!("cluster/{ns}/{name} clustersync/{ns}/{name} event/* stackrelease/*");
            page(c, fragment, &title, Nav::Fleet, &watch, |ctx| pages::cluster::content(&c.stores.snapshot(), ns, name, full.as_ref(), ctx))
        }
        (&Method::GET, ["preview"]) => {
            let report = c.preview.as_ref().map(Ok);
            page(c, false, "Preview", Nav::Preview, "", |_| Some(preview::content(report)))
        }
        (&Method::POST, ["preview"]) => post_preview(c, req).await,
        (&Method::GET | &Method::POST, _) => not_found(c),
        _ => reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "the console only reads\n"),
    }
}

fn ctx(c: &Console) -> Ctx {
    Ctx { now: chrono::Utc::now(), config: c.config.clone(), config_path: c.config_path.clone() }
}

/// A page (or, for a live update, only its content); 404 when `content` finds nothing.
fn page(c: &Console, fragment: bool, title: &str, nav: Nav, watch: &str, content: impl FnOnce(&Ctx) -> Option<String>) -> Response<Body> {
    let ctx = ctx(c);
    let Some(mut body) = content(&ctx) else { return not_found(c) };
    let mut notes = String::new();
    pages::notes(&mut notes, &c.stores.loading(), &c.stores.problems());
    body.insert_str(0, &notes);
    if fragment {
        return reply(StatusCode::OK, HTML, body);
    }
    reply(StatusCode::OK, HTML, Layout { title, nav, watch, context: &c.context }.page(&body))
}

fn not_found(c: &Console) -> Response<Body> {
    let body = Layout { title: "Not found", nav: Nav::Fleet, watch: "", context: &c.context }
        .page("<h1>Not found</h1><p>Nothing here. <a href=\"/\">Back to the fleet</a>.</p>");
    reply(StatusCode::NOT_FOUND, HTML, body)
}

/// `POST /preview`: the report pasted or chosen in the form. Only from the console's own pages
/// (a browser says where a form was sent from).
async fn post_preview(c: &Console, req: Request<Incoming>) -> Response<Body> {
    let cross_site = req.headers().get("sec-fetch-site").is_some_and(|v| v != "same-origin" && v != "none");
    let origin_ok = match (
        req.headers().get(header::ORIGIN).and_then(|o| o.to_str().ok()),
        req.headers().get(header::HOST).and_then(|h| h.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => origin == format!("http://{host}"),
        (None, _) => true,
        (Some(_), None) => false,
    };
    if cross_site || !origin_ok {
        return reply(StatusCode::FORBIDDEN, "text/plain", "a report is only taken from the console's own page\n");
    }
    let form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let body = match tokio::time::timeout(READ_TIMEOUT * 3, Limited::new(req.into_body(), preview::MAX_REPORT_BYTES).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "text/plain", "the report is larger than 32 MiB\n"),
        Err(_) => return reply(StatusCode::REQUEST_TIMEOUT, "text/plain", "the report did not arrive in time\n"),
    };
    let text = if form {
        form_urlencoded::parse(&body).find(|(k, _)| k == "report").map(|(_, v)| v.into_owned()).unwrap_or_default()
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    let parsed = preview::parse(&text).map_err(|e| e.to_string());
    let report = Some(parsed.as_ref().map_err(String::as_str));
    page(c, false, "Preview", Nav::Preview, "", |_| Some(preview::content(report)))
}

/// `GET /events`: one `change` event per change of a watched object (`data: <kind> <key>`),
/// `* *` when this stream fell behind; a comment every [`KEEPALIVE`]. The browser reconnects
/// by itself after `retry`.
fn events(c: &Console) -> Response<Body> {
    let rx = c.stores.subscribe();
    let first = Bytes::from_static(b"retry: 1000\n: connected\n\n");
    let stream = futures_util::stream::unfold((rx, Some(first)), |(mut rx, first)| async move {
        if let Some(first) = first {
            return Some((Ok::<_, Infallible>(Frame::data(first)), (rx, None)));
        }
        let message = tokio::select! {
            r = rx.recv() => match r {
                Ok(change) => format!("event: change\ndata: {} {}\n\n", change.kind, change.key),
                Err(broadcast::error::RecvError::Lagged(_)) => "event: change\ndata: * *\n\n".to_owned(),
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            () = tokio::time::sleep(KEEPALIVE) => ": keep-alive\n\n".to_owned(),
        };
        Some((Ok(Frame::data(Bytes::from(message))), (rx, None)))
    });
    let mut r = Response::new(StreamBody::new(stream.boxed()).boxed_unsync());
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r
}
