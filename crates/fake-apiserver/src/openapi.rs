//! OpenAPI v3: an index of every served group-version and per-group-version documents with the
//! operations kubectl looks for before it applies (`x-kubernetes-group-version-kind` on a
//! `patch` that takes `fieldValidation`). Schemas are a CRD's own or left open: the server does
//! not validate against them.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value, json};

use super::registry::{Registry, ResourceType};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// `GET /openapi/v3`: the hash in each URL changes whenever the document does, so kubectl's
/// disk cache never serves a stale one.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, versions) in reg.groups() {
        for v in versions {
            let path = gv_path(&group, &v);
            let doc = document(reg, &group, &v).unwrap_or(Value::Null);
            let mut h = DefaultHasher::new();
            doc.to_string().hash(&mut h);
            paths.insert(path.clone(), json!({"serverRelativeURL": format!("/{path}?hash={:016X}", h.finish())}));
        }
    }
    let mut fixed = Map::new();
    for (k, v) in paths {
        fixed.insert(k, json!({"serverRelativeURL": format!("/openapi/v3{}", v["serverRelativeURL"].as_str().unwrap_or_default())}));
    }
    json!({"paths": fixed})
}

/// `GET /openapi/v3/<api/v1 | apis/g/v>`.
pub fn document(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in reg.in_group_version(group, version) {
        let gvk = json!({"group": rt.group, "version": version, "kind": rt.kind});
        let schema_name = schema_name(rt, version);
        let mut schema = rt
            .version(version)
            .and_then(|v| v.schema.clone())
            .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name.clone(), schema);
        let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        let collection =
            if rt.namespaced { format!("{base}/namespaces/{{namespace}}/{}", rt.plural) } else { format!("{base}/{}", rt.plural) };
        let item = format!("{collection}/{{name}}");
        let op = |verb: &str, action: &str| {
            json!({
                "operationId": format!("{verb}{}", rt.kind),
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                               {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                               {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        paths.insert(collection, json!({"get": op("list", "list"), "post": op("create", "post")}));
        paths.insert(
            item.clone(),
            json!({"get": op("read", "get"), "put": op("replace", "put"), "patch": op("patch", "patch"), "delete": op("delete", "delete")}),
        );
        if rt.has_status(version) {
            paths.insert(
                format!("{item}/status"),
                json!({"get": op("read", "get"), "put": op("replace", "put"), "patch": op("patch", "patch")}),
            );
        }
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0-testkit"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The content type `/openapi/v2` answers in (kubectl asks for `…spec.v2@v1.0+protobuf`; Go's
/// MIME parser rejects the `@`, so the real server answers with a `.`).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `GET /openapi/v2`: an empty Swagger 2.0 document (gnostic `Document{swagger, info}`).
/// kubectl falls back to it for a kind missing from v3 (a custom resource whose CRD is applied
/// in the same file); finding nothing there, it leaves the kind to the REST mapping, which then
/// reports "no matches for kind" as against a real server.
pub fn v2_protobuf() -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2, u8::try_from(bytes.len()).unwrap_or(u8::MAX)];
        out.extend_from_slice(bytes);
        out
    }
    let info = [field(1, b"Kubernetes"), field(2, b"v1.35.0-testkit")].concat();
    [field(1, b"2.0"), field(2, &info)].concat()
}

fn schema_name(rt: &ResourceType, version: &str) -> String {
    let reversed: Vec<&str> = rt.group.split('.').rev().collect();
    match rt.group.as_str() {
        "" => format!("io.k8s.api.core.{version}.{}", rt.kind),
        g if !g.contains('.') || g.ends_with(".k8s.io") => format!("io.k8s.api.{}.{version}.{}", g.split('.').next().unwrap_or(g), rt.kind),
        _ => format!("{}.{version}.{}", reversed.join("."), rt.kind),
    }
}
