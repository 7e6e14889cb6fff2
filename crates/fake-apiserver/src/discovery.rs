//! Discovery: aggregated (`apidiscovery.k8s.io/v2`, answered only under its exact content type)
//! and legacy (`APIVersions`, `APIGroupList`, `APIResourceList`), plus `/version`.

use serde_json::{Value, json};

use super::registry::{Registry, ResourceType};

/// The content type kubectl requires to read an aggregated discovery answer.
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an Accept header prefers aggregated discovery.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("as=APIGroupDiscoveryList") && first.contains("v=v2"))
}

fn verbs(rt: &ResourceType) -> Vec<&'static str> {
    if rt.custom {
        return vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
    }
    super::kinds::verbs(&rt.group, &rt.plural)
}

/// `GET /api` or `GET /apis` in the aggregated form: `core` selects the legacy group only.
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let items: Vec<Value> = reg
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .in_group_version(&group, v)
                        .map(|rt| {
                            let kind = json!({"group": rt.group, "version": v, "kind": rt.kind});
                            let mut r = json!({
                                "resource": rt.plural,
                                "responseKind": kind,
                                "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": rt.singular,
                                "verbs": verbs(rt),
                            });
                            if !rt.short_names.is_empty() {
                                r["shortNames"] = json!(rt.short_names);
                            }
                            if !rt.categories.is_empty() {
                                r["categories"] = json!(rt.categories);
                            }
                            if rt.has_status(v) {
                                r["subresources"] =
                                    json!([{"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}]);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// `GET /api` (legacy).
pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `GET /apis` (legacy).
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg.groups().into_iter().filter(|(g, _)| !g.is_empty()).map(|(g, vs)| group_json(&g, &vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`.
pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    let (g, vs) = reg.groups().into_iter().find(|(g, _)| g == group)?;
    let mut v = group_json(&g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`: resources and subresources sorted by name,
/// each stored resource with its `storageVersionHash`; the core list has no `apiVersion`.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for rt in reg.in_group_version(group, version) {
        let mut r = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs(rt),
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        let stored = if rt.custom {
            rt.versions.iter().find(|v| v.storage).map(|v| (rt.group.as_str(), v.name.as_str()))
        } else {
            super::kinds::storage_version(&rt.group, version, &rt.plural)
        };
        if let Some((g, v)) = stored {
            r["storageVersionHash"] = json!(storage_version_hash(g, v, &rt.kind));
        }
        resources.push(r);
        let sub = |name: &str, kind: &str, verbs: &[&str]| json!({"name": format!("{}/{name}", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs});
        if rt.has_status(version) {
            resources.push(sub("status", &rt.kind, &["get", "patch", "update"]));
        }
        if !rt.custom {
            for s in super::kinds::other_subresources(&rt.group, &rt.plural) {
                let mut r = sub(s.name, s.kind, s.verbs);
                if let Some((g, v)) = s.group_version {
                    r["group"] = json!(g);
                    r["version"] = json!(v);
                }
                resources.push(r);
            }
        }
    }
    if resources.is_empty() {
        return None;
    }
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    if group.is_empty() {
        return Some(json!({"kind": "APIResourceList", "groupVersion": version, "resources": resources}));
    }
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": resources}))
}

/// The real server's hash of the group/version/kind a resource is stored as: the first eight
/// bytes of its SHA-256, base64.
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// `GET /version`: a 1.35 server, as the kubectl the tests use expects.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "emulationMajor": "1",
        "emulationMinor": "35",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "34",
        "gitVersion": "v1.35.0-testkit",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
