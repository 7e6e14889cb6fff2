//! The built-in kinds of Kubernetes 1.35, from real sources: which kinds and versions exist and
//! their schemas come from the 1.35 definitions ([`super::schema`]); each kind's plural and scope
//! from k8s-openapi's `Resource` metadata. What neither carries (short names, categories, verbs
//! of the few non-CRUD kinds, generation, printer columns) is stated below as the real 1.35
//! discovery answers it (create-only kinds such as `bindings` and the reviews are listed with
//! that verb, but nothing acts on them). Only GA versions are served, as a cluster with default feature gates does.

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource, SubResourceScope};

use super::registry::{Cell, Column, Generation, Registry, ResourceType, Version, age};
use super::schema::Node;

/// Scope as k8s-openapi types it: `None` for subresource kinds (Scale, Eviction, TokenRequest, Binding).
trait ScopeName {
    const NAMESPACED: Option<bool>;
}

impl ScopeName for NamespaceResourceScope {
    const NAMESPACED: Option<bool> = Some(true);
}

impl ScopeName for ClusterResourceScope {
    const NAMESPACED: Option<bool> = Some(false);
}

impl ScopeName for SubResourceScope {
    const NAMESPACED: Option<bool> = None;
}

/// One kind as k8s-openapi describes it.
struct Meta {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: Option<bool>,
}

fn meta<T: Resource>() -> Meta
where
    T::Scope: ScopeName,
{
    Meta {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        namespaced: <T::Scope as ScopeName>::NAMESPACED,
    }
}

macro_rules! metas {
    ($($t:ty),* $(,)?) => { vec![$(meta::<$t>()),*] };
}

/// Every top-level kind k8s-openapi knows (GA versions; the schemas decide which 1.35 serves).
fn k8s_openapi_kinds() -> Vec<Meta> {
    metas![
        k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
        k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
        k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        k8s_openapi::api::apps::v1::ControllerRevision,
        k8s_openapi::api::apps::v1::DaemonSet,
        k8s_openapi::api::apps::v1::Deployment,
        k8s_openapi::api::apps::v1::ReplicaSet,
        k8s_openapi::api::apps::v1::StatefulSet,
        k8s_openapi::api::authentication::v1::SelfSubjectReview,
        k8s_openapi::api::authentication::v1::TokenRequest,
        k8s_openapi::api::authentication::v1::TokenReview,
        k8s_openapi::api::authorization::v1::LocalSubjectAccessReview,
        k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
        k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
        k8s_openapi::api::authorization::v1::SubjectAccessReview,
        k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler,
        k8s_openapi::api::autoscaling::v1::Scale,
        k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
        k8s_openapi::api::batch::v1::CronJob,
        k8s_openapi::api::batch::v1::Job,
        k8s_openapi::api::certificates::v1::CertificateSigningRequest,
        k8s_openapi::api::certificates::v1::ClusterTrustBundle,
        k8s_openapi::api::certificates::v1::PodCertificateRequest,
        k8s_openapi::api::coordination::v1::Lease,
        k8s_openapi::api::core::v1::Binding,
        k8s_openapi::api::core::v1::ComponentStatus,
        k8s_openapi::api::core::v1::ConfigMap,
        k8s_openapi::api::core::v1::Endpoints,
        k8s_openapi::api::core::v1::Event,
        k8s_openapi::api::core::v1::LimitRange,
        k8s_openapi::api::core::v1::Namespace,
        k8s_openapi::api::core::v1::Node,
        k8s_openapi::api::core::v1::PersistentVolume,
        k8s_openapi::api::core::v1::PersistentVolumeClaim,
        k8s_openapi::api::core::v1::Pod,
        k8s_openapi::api::core::v1::PodTemplate,
        k8s_openapi::api::core::v1::ReplicationController,
        k8s_openapi::api::core::v1::ResourceQuota,
        k8s_openapi::api::core::v1::Secret,
        k8s_openapi::api::core::v1::Service,
        k8s_openapi::api::core::v1::ServiceAccount,
        k8s_openapi::api::discovery::v1::EndpointSlice,
        k8s_openapi::api::events::v1::Event,
        k8s_openapi::api::flowcontrol::v1::FlowSchema,
        k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration,
        k8s_openapi::api::networking::v1::IPAddress,
        k8s_openapi::api::networking::v1::Ingress,
        k8s_openapi::api::networking::v1::IngressClass,
        k8s_openapi::api::networking::v1::NetworkPolicy,
        k8s_openapi::api::networking::v1::ServiceCIDR,
        k8s_openapi::api::node::v1::RuntimeClass,
        k8s_openapi::api::policy::v1::Eviction,
        k8s_openapi::api::policy::v1::PodDisruptionBudget,
        k8s_openapi::api::rbac::v1::ClusterRole,
        k8s_openapi::api::rbac::v1::ClusterRoleBinding,
        k8s_openapi::api::rbac::v1::Role,
        k8s_openapi::api::rbac::v1::RoleBinding,
        k8s_openapi::api::resource::v1::DeviceClass,
        k8s_openapi::api::resource::v1::DeviceTaintRule,
        k8s_openapi::api::resource::v1::ResourceClaim,
        k8s_openapi::api::resource::v1::ResourceClaimTemplate,
        k8s_openapi::api::resource::v1::ResourceSlice,
        k8s_openapi::api::scheduling::v1::PriorityClass,
        k8s_openapi::api::storage::v1::CSIDriver,
        k8s_openapi::api::storage::v1::CSINode,
        k8s_openapi::api::storage::v1::CSIStorageCapacity,
        k8s_openapi::api::storage::v1::StorageClass,
        k8s_openapi::api::storage::v1::VolumeAttachment,
        k8s_openapi::api::storage::v1::VolumeAttributesClass,
        k8s_openapi::api::storagemigration::v1::StorageVersionMigration,
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService
    ]
}

/// Short names as 1.35's discovery lists them.
fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "configmaps") => &["cm"],
        ("", "componentstatuses") => &["cs"],
        ("", "endpoints") => &["ep"],
        ("", "events") | ("events.k8s.io", "events") => &["ev"],
        ("", "limitranges") => &["limits"],
        ("", "namespaces") => &["ns"],
        ("", "nodes") => &["no"],
        ("", "persistentvolumeclaims") => &["pvc"],
        ("", "persistentvolumes") => &["pv"],
        ("", "pods") => &["po"],
        ("", "replicationcontrollers") => &["rc"],
        ("", "resourcequotas") => &["quota"],
        ("", "serviceaccounts") => &["sa"],
        ("", "services") => &["svc"],
        ("apiextensions.k8s.io", "customresourcedefinitions") => &["crd", "crds"],
        ("apps", "daemonsets") => &["ds"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "replicasets") => &["rs"],
        ("apps", "statefulsets") => &["sts"],
        ("autoscaling", "horizontalpodautoscalers") => &["hpa"],
        ("batch", "cronjobs") => &["cj"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["csr"],
        ("networking.k8s.io", "ingresses") => &["ing"],
        ("networking.k8s.io", "ipaddresses") => &["ip"],
        ("networking.k8s.io", "networkpolicies") => &["netpol"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        ("scheduling.k8s.io", "priorityclasses") => &["pc"],
        ("storage.k8s.io", "storageclasses") => &["sc"],
        ("storage.k8s.io", "volumeattributesclasses") => &["vac"],
        _ => &[],
    }
}

/// The fields a kind's field selectors accept and how the rest are refused: the field label
/// conversion a kind registers in 1.35 (`pkg/apis/*/v1/conversion.go`), or, for the kinds that
/// register none, runtime's default (`metadata.name`, `metadata.namespace`).
pub fn field_labels(group: &str, kind: &str) -> FieldLabels {
    const META: [&str; 2] = ["metadata.name", "metadata.namespace"];
    let (fields, refusal): (&[&str], Refusal) = match (group, kind) {
        ("", "Secret") => (&["type"], Refusal::NotSupported),
        // Only the name: a namespace has no namespace.
        ("", "Namespace") => {
            return FieldLabels { fields: vec!["metadata.name".into(), "status.phase".into()], refusal: Refusal::NotSupported };
        }
        ("", "Node") => (&["spec.unschedulable"], Refusal::NotSupported),
        ("", "ReplicationController") => (&["status.replicas"], Refusal::NotSupported),
        ("", "Service") => (&["spec.clusterIP", "spec.type"], Refusal::NotSupported),
        ("", "Pod") => (
            &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ],
            Refusal::NotSupported,
        ),
        ("", "Event") => (
            &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            Refusal::NotSupported,
        ),
        // events.k8s.io names the same indexed fields after its own shape.
        ("events.k8s.io", "Event") => (
            &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "type",
            ],
            Refusal::NotSupported,
        ),
        ("batch", "Job") => (&["status.successful"], Refusal::NotSupportedFor("Job")),
        ("certificates.k8s.io", "CertificateSigningRequest") => (&["spec.signerName"], Refusal::NotSupported),
        _ => (&[], Refusal::Unknown),
    };
    FieldLabels { fields: META.iter().chain(fields).map(|f| f.to_string()).collect(), refusal }
}

/// What a kind's field selectors accept ([`field_labels`]).
#[derive(Debug, Clone)]
pub struct FieldLabels {
    pub fields: Vec<String>,
    pub refusal: Refusal,
}

/// How a field label a kind does not index is refused (400 BadRequest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// runtime's `DefaultMetaV1FieldSelectorConversion`, for kinds without a conversion of their own.
    Unknown,
    /// `field label not supported: <label>` (core kinds, custom resources).
    NotSupported,
    /// `field label "<label>" not supported for <Kind>` (Jobs).
    NotSupportedFor(&'static str),
}

impl Refusal {
    pub fn message(self, label: &str) -> String {
        match self {
            Refusal::Unknown => format!("{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""),
            Refusal::NotSupported => format!("field label not supported: {label}"),
            Refusal::NotSupportedFor(kind) => format!("field label {label:?} not supported for {kind}"),
        }
    }
}

/// A kind's categories: `all` for the workloads kubectl lists with `get all`, `api-extensions`
/// for what extends the API.
fn categories(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods" | "replicationcontrollers" | "services")
        | ("apps", "daemonsets" | "deployments" | "replicasets" | "statefulsets")
        | ("autoscaling", "horizontalpodautoscalers")
        | ("batch", "cronjobs" | "jobs") => &["all"],
        ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("apiregistration.k8s.io", "apiservices")
        | (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations"
            | "validatingwebhookconfigurations"
            | "validatingadmissionpolicies"
            | "validatingadmissionpolicybindings",
        ) => &["api-extensions"],
        _ => &[],
    }
}

/// A subresource discovery lists besides `status`: its name, its kind (and the group/version
/// that kind is of, when another) and its verbs, as 1.35 serves them.
pub struct Subresource {
    pub name: &'static str,
    pub kind: &'static str,
    pub group_version: Option<(&'static str, &'static str)>,
    pub verbs: &'static [&'static str],
}

/// The subresources of a kind other than `status` (testkit serves none of them; discovery lists
/// them as the real server does, for clients that look for them).
pub fn other_subresources(group: &str, plural: &str) -> Vec<Subresource> {
    const READ_WRITE: &[&str] = &["get", "patch", "update"];
    const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];
    const STREAM: &[&str] = &["create", "get"];
    let sub = |name, kind, group_version, verbs| Subresource { name, kind, group_version, verbs };
    let scale = |name| sub(name, "Scale", Some(("autoscaling", "v1")), READ_WRITE);
    match (group, plural) {
        ("", "namespaces") => vec![sub("finalize", "Namespace", None, &["update"])],
        ("", "nodes") => vec![sub("proxy", "NodeProxyOptions", None, PROXY)],
        ("", "pods") => vec![
            sub("attach", "PodAttachOptions", None, STREAM),
            sub("binding", "Binding", None, &["create"]),
            sub("ephemeralcontainers", "Pod", None, READ_WRITE),
            sub("eviction", "Eviction", Some(("policy", "v1")), &["create"]),
            sub("exec", "PodExecOptions", None, STREAM),
            sub("log", "Pod", None, &["get"]),
            sub("portforward", "PodPortForwardOptions", None, STREAM),
            sub("proxy", "PodProxyOptions", None, PROXY),
            sub("resize", "Pod", None, READ_WRITE),
        ],
        ("", "replicationcontrollers") | ("apps", "deployments" | "replicasets" | "statefulsets") => vec![scale("scale")],
        ("", "serviceaccounts") => vec![sub("token", "TokenRequest", Some(("authentication.k8s.io", "v1")), &["create"])],
        ("", "services") => vec![sub("proxy", "ServiceProxyOptions", None, PROXY)],
        ("certificates.k8s.io", "certificatesigningrequests") => vec![sub("approval", "CertificateSigningRequest", None, READ_WRITE)],
        _ => Vec::new(),
    }
}

/// The group/version a built-in kind is stored in, which discovery's `storageVersionHash`
/// names: its own, but for the kinds 1.35 stores in another; `None` for kinds without storage
/// (the reviews, bindings, component statuses).
pub fn storage_version<'a>(group: &'a str, version: &'a str, plural: &str) -> Option<(&'a str, &'a str)> {
    match (group, plural) {
        ("", "bindings" | "componentstatuses") => None,
        ("authentication.k8s.io" | "authorization.k8s.io", p) if p.ends_with("reviews") => None,
        ("events.k8s.io", "events") => Some(("", "v1")),
        ("autoscaling", "horizontalpodautoscalers") => Some(("autoscaling", "v2")),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Some(("apiextensions.k8s.io", "v1beta1")),
        ("storage.k8s.io", "volumeattributesclasses") => Some(("storage.k8s.io", "v1beta1")),
        _ => Some((group, version)),
    }
}

/// Kinds whose objects carry `metadata.generation`, and what an update bumps it for, as their
/// 1.35 strategies' PrepareForCreate and PrepareForUpdate do (HorizontalPodAutoscaler,
/// ResourceClaim and ResourceClaimTemplate carry none).
fn generation(group: &str, plural: &str) -> Option<Generation> {
    match (group, plural) {
        ("apps", "deployments") => Some(Generation::SpecAndAnnotations),
        ("discovery.k8s.io", "endpointslices") => Some(Generation::SpecAndLabels),
        ("scheduling.k8s.io", "priorityclasses") => Some(Generation::OnCreate),
        ("", "pods" | "podtemplates" | "replicationcontrollers")
        | ("apps", "daemonsets" | "replicasets" | "statefulsets")
        | ("batch", "cronjobs" | "jobs")
        | ("policy", "poddisruptionbudgets")
        | ("networking.k8s.io", "ingresses" | "ingressclasses" | "networkpolicies")
        | ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("flowcontrol.apiserver.k8s.io", "flowschemas" | "prioritylevelconfigurations")
        | (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies"
            | "validatingadmissionpolicybindings"
            | "mutatingadmissionpolicies"
            | "mutatingadmissionpolicybindings"
            | "validatingwebhookconfigurations"
            | "mutatingwebhookconfigurations",
        )
        | ("resource.k8s.io", "deviceclasses" | "devicetaintrules" | "resourceslices") => Some(Generation::Spec),
        _ => None,
    }
}

/// The verbs a kind serves: the review kinds only answer create, ComponentStatus is read-only,
/// namespaces have no deletecollection; everything else has all eight.
pub fn verbs(group: &str, plural: &str) -> Vec<&'static str> {
    if plural.ends_with("reviews") && (group == "authentication.k8s.io" || group == "authorization.k8s.io") {
        return vec!["create"];
    }
    if group.is_empty() && plural == "bindings" {
        return vec!["create"];
    }
    if group.is_empty() && plural == "componentstatuses" {
        return vec!["get", "list"];
    }
    ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        .into_iter()
        .filter(|v| !(group.is_empty() && plural == "namespaces" && *v == "deletecollection"))
        .collect()
}

/// Printer columns of the kinds kubectl's tests look at (others print NAME and AGE).
fn columns(group: &str, kind: &str) -> Vec<Column> {
    let path = Column::path;
    match (group, kind) {
        ("", "Namespace") => vec![path("Status", "string", ".status.phase"), age()],
        ("", "ConfigMap") => vec![Column::computed("Data", "string", Cell::DataCount), age()],
        ("", "Secret") => vec![path("Type", "string", ".type"), Column::computed("Data", "string", Cell::DataCount), age()],
        ("", "Service") => vec![path("Type", "string", ".spec.type"), path("Cluster-IP", "string", ".spec.clusterIP"), age()],
        ("", "PersistentVolumeClaim") => vec![
            path("Status", "string", ".status.phase"),
            path("Volume", "string", ".spec.volumeName"),
            path("Capacity", "string", ".status.capacity.storage"),
            path("StorageClass", "string", ".spec.storageClassName"),
            age(),
        ],
        ("coordination.k8s.io", "Lease") => vec![path("Holder", "string", ".spec.holderIdentity"), age()],
        ("apps", "Deployment") => vec![
            Column::computed("Ready", "string", Cell::Ready),
            path("Up-to-date", "string", ".status.updatedReplicas"),
            path("Available", "string", ".status.availableReplicas"),
            age(),
        ],
        ("storage.k8s.io", "StorageClass") => vec![
            path("Provisioner", "string", ".provisioner"),
            path("ReclaimPolicy", "string", ".reclaimPolicy"),
            path("VolumeBindingMode", "string", ".volumeBindingMode"),
            path("AllowVolumeExpansion", "string", ".allowVolumeExpansion"),
            age(),
        ],
        ("apiextensions.k8s.io", "CustomResourceDefinition") => vec![path("Created At", "date", ".metadata.creationTimestamp")],
        _ => vec![age()],
    }
}

fn is_ga(version: &str) -> bool {
    version.strip_prefix('v').is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The registry a new server starts with: the built-in resources.
pub fn registry() -> Registry {
    Registry { types: builtin_types() }
}

/// The served built-in resources: every GA kind of the 1.35 schemas that has object metadata
/// and is a top-level resource in k8s-openapi, its versions merged into one resource.
pub fn builtin_types() -> Vec<ResourceType> {
    let Some(defs) = super::schema::defs() else { return Vec::new() };
    let metas = k8s_openapi_kinds();
    let mut out: Vec<ResourceType> = Vec::new();
    let mut names: Vec<&String> = defs.defs.keys().collect();
    names.sort();
    for name in names {
        let Some(node) = Node::definition(name) else { continue };
        let is_object = node.property("metadata").is_some_and(|m| m.v.get("properties").is_some_and(|p| p.get("uid").is_some()));
        let Some(gvks) = node.v.get("x-kubernetes-group-version-kind").and_then(|g| g.as_array()) else { continue };
        if !is_object || gvks.len() != 1 {
            continue;
        }
        let gvk = &gvks[0];
        let (group, version, kind) = (
            gvk["group"].as_str().unwrap_or_default(),
            gvk["version"].as_str().unwrap_or_default(),
            gvk["kind"].as_str().unwrap_or_default(),
        );
        if !is_ga(version) {
            continue;
        }
        let Some(m) = metas.iter().find(|m| m.group == group && m.version == version && m.kind == kind) else { continue };
        let Some(namespaced) = m.namespaced else { continue };
        let served = Version {
            name: version.into(),
            // Create-only kinds (the reviews) answer their status in the create response only.
            status: node.property("status").is_some() && verbs(group, m.plural).len() > 1,
            columns: columns(group, kind),
            schema: None,
            definition: Some(name.clone()),
            selectable: Vec::new(),
            storage: false,
        };
        if let Some(existing) = out.iter_mut().find(|t| t.group == group && t.plural == m.plural) {
            existing.versions.push(served);
            existing.versions.sort_by_key(|v| std::cmp::Reverse(super::registry::version_priority(&v.name)));
            continue;
        }
        out.push(ResourceType {
            group: group.into(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: m.plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: short_names(group, m.plural).iter().map(|s| s.to_string()).collect(),
            categories: categories(group, m.plural).iter().map(|c| c.to_string()).collect(),
            versions: vec![served],
            generation: generation(group, m.plural),
            custom: false,
        });
    }
    // Discovery order: core first, then groups as the schemas name them.
    out.sort_by_key(|t| !t.group.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ga_kind_of_the_schemas_is_served_with_its_scope() {
        let types = builtin_types();
        let find = |g: &str, p: &str| types.iter().find(|t| t.group == g && t.plural == p).unwrap_or_else(|| panic!("{g}/{p} served"));
        assert!(!find("storage.k8s.io", "storageclasses").namespaced);
        assert!(find("", "persistentvolumeclaims").namespaced);
        assert_eq!(find("", "persistentvolumeclaims").short_names, vec!["pvc"]);
        assert!(find("", "persistentvolumeclaims").has_status("v1"));
        assert!(!find("", "configmaps").has_status("v1"));
        let hpa = find("autoscaling", "horizontalpodautoscalers");
        assert_eq!(hpa.versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), vec!["v2", "v1"]);
        assert!(types.len() > 55, "{} kinds", types.len());
        assert!(types.iter().all(|t| !matches!(t.kind.as_str(), "Scale" | "Eviction" | "TokenRequest")));
        assert_eq!(verbs("", "bindings"), vec!["create"]);
    }
}
