//! deploy/ as an install: the real `kubectl kustomize` builds the base (and the base with the
//! ServiceMonitor component, with the runtime-hooks component, and with the monitoring component
//! whose dashboard ConfigMap is generated from its JSON file), the Deployment is highly
//! available and survives a read-only root filesystem (every path the process writes is a
//! volume), the config in the ConfigMap is valid for the binary, and the runtime hook's
//! ExtensionConfig, Service, Certificate and listener flags agree with each other. Applying it to an API server is testkit's
//! `kubectl::the_deploy_manifests_dry_run_apply_and_diff_cleanly`.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn kubectl() -> PathBuf {
    fake_apiserver::kubectl::tools_bin_dir().join("kubectl")
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = std::process::Command::new(kubectl()).arg("kustomize").arg(dir).output().expect("run kubectl (scripts/install-tools.sh)");
    assert!(out.status.success(), "kubectl kustomize {}:\n{}", dir.display(), String::from_utf8_lossy(&out.stderr));
    serde_saphyr::from_multiple(&String::from_utf8(out.stdout).expect("utf-8")).expect("YAML")
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind}/{name}"))
}

#[test]
fn the_kustomize_base_builds_a_highly_available_read_only_deployment() {
    let objects = kustomize(&deploy_dir());
    let deployment = find(&objects, "Deployment", "stacksync");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert!(args.contains(&"--leader-elect") && args.contains(&"--admin-addr=:8080"), "{args:?}");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(c["resources"]["requests"]["cpu"].is_string() && c["resources"]["requests"]["memory"].is_string());

    // Every place the process writes is a writable volume: the cache dir of the config, TMPDIR
    // (the work directory and helm's home).
    let config = find(&objects, "ConfigMap", "stacksync-config")["data"]["stacksync.yaml"].as_str().expect("config").to_owned();
    let cache_dir = config.lines().find_map(|l| l.trim().strip_prefix("dir: ")).expect("cache.dir").to_owned();
    let tmpdir = c["env"].as_array().and_then(|e| e.iter().find(|e| e["name"] == "TMPDIR")).expect("TMPDIR")["value"].clone();
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    for path in [cache_dir.as_str(), tmpdir.as_str().expect("TMPDIR value")] {
        let m = mounts.iter().find(|m| m["mountPath"] == path).unwrap_or_else(|| panic!("{path} is not a volume"));
        assert_ne!(m["readOnly"], true, "{path} is read-only");
    }

    // The config the pod reads is valid for this binary.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("stacksync.yaml");
    std::fs::write(&file, &config).expect("write");
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_stacksync")).arg("check-config").arg(&file).output().expect("run");
    assert!(check.status.success(), "{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));

    // Leader election may use its Lease, and nothing else in coordination.k8s.io.
    let role = find(&objects, "Role", "stacksync-leader-election");
    assert_eq!(role["rules"][0]["resources"][0], "leases");
    assert_eq!(find(&objects, "Service", "stacksync")["spec"]["ports"][0]["targetPort"], "admin");
    for kind in ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "CustomResourceDefinition"] {
        assert!(objects.iter().any(|o| o["kind"] == kind), "no {kind}");
    }
}

/// The base with one of deploy/components, as an overlay would include it.
fn with_component(component: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    // kustomize takes only relative paths: up to `/` from the overlay, then down to deploy/.
    let up = "../".repeat(dir.path().components().count() - 1);
    let deploy = PathBuf::from(format!("{up}{}", deploy_dir().display().to_string().trim_start_matches('/')));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            deploy.display(),
            deploy.join("components").join(component).display()
        ),
    )
    .expect("overlay");
    kustomize(dir.path())
}

/// The preview component's identity reads and nothing else: get and list, named resources, no
/// wildcard, bound to its own ServiceAccount (the controller's is untouched).
#[test]
fn the_preview_component_grants_get_and_list_only() {
    let objects = with_component("preview");
    let role = find(&objects, "ClusterRole", "stacksync-preview");
    for rule in role["rules"].as_array().expect("rules") {
        let verbs: Vec<&str> = rule["verbs"].as_array().expect("verbs").iter().filter_map(Value::as_str).collect();
        assert!(verbs.iter().all(|v| matches!(*v, "get" | "list")), "{rule}");
        assert!(!rule.to_string().contains("\"*\""), "{rule}");
    }
    let binding = find(&objects, "ClusterRoleBinding", "stacksync-preview");
    assert_eq!(binding["subjects"][0]["name"], "stacksync-preview");
    let sa = find(&objects, "ServiceAccount", "stacksync-preview");
    assert_eq!(sa["metadata"]["namespace"], "stacksync-system");
    assert_eq!(find(&objects, "ClusterRoleBinding", "stacksync")["subjects"][0]["name"], "stacksync");
}

#[test]
fn the_servicemonitor_component_adds_a_scrape_of_the_admin_port() {
    let objects = with_component("servicemonitor");
    let sm = find(&objects, "ServiceMonitor", "stacksync");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "admin");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert!(objects.iter().any(|o| o["kind"] == "Deployment"));
}

/// The provider components add a ClusterRole (and its binding to the ServiceAccount) for the
/// provider's template kinds and infrastructure cluster, named, never a wildcard; the base
/// grants no provider's kinds and no wildcard either.
#[test]
fn the_provider_components_grant_their_kinds_by_name() {
    let base = kustomize(&deploy_dir());
    for role in base.iter().filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role") {
        let text = role["rules"].to_string();
        assert!(!text.contains("\"*\"") && !text.contains("docker") && !text.contains("openstack"), "{text}");
    }
    for (component, kinds) in [
        ("provider-docker", ["dockerclustertemplates", "dockermachinetemplates", "dockerclusters"]),
        ("provider-openstack", ["openstackclustertemplates", "openstackmachinetemplates", "openstackclusters"]),
    ] {
        let objects = with_component(component);
        let role = find(&objects, "ClusterRole", &format!("stacksync-{component}"));
        let text = role["rules"].to_string();
        assert!(kinds.iter().all(|k| text.contains(&format!("\"{k}\""))) && !text.contains("\"*\""), "{component}: {text}");
        let binding = find(&objects, "ClusterRoleBinding", &format!("stacksync-{component}"));
        assert_eq!(binding["subjects"][0]["name"], "stacksync");
        assert_eq!(binding["subjects"][0]["namespace"], "stacksync-system");
        assert!(objects.iter().any(|o| o["kind"] == "Deployment"));
    }
}

#[test]
fn the_runtime_hooks_component_registers_a_tls_listener_cluster_api_can_reach() {
    let objects = with_component("runtime-hooks");
    let deployment = find(&objects, "Deployment", "stacksync");
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    let arg = |flag: &str| args.iter().find_map(|a| a.strip_prefix(flag)).unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    // The base's arguments stay; the listener's are added.
    assert!(args.contains(&"--leader-elect") && args.contains(&"--admin-addr=:8080"), "{args:?}");
    let port: u16 = arg("--hooks-addr=:").parse().expect("port");
    let (cert, key) = (arg("--hooks-cert-file="), arg("--hooks-key-file="));
    let hooks_port = c["ports"].as_array().expect("ports").iter().find(|p| p["name"] == "hooks").expect("hooks port");
    assert_eq!(hooks_port["containerPort"], port);

    // The certificate files come read-only from cert-manager's Secret.
    let certificate = find(&objects, "Certificate", "stacksync-hooks");
    let secret = certificate["spec"]["secretName"].as_str().expect("secretName");
    let volume = pod["volumes"].as_array().expect("volumes").iter().find(|v| v["secret"]["secretName"] == secret).expect("secret volume");
    let mount = c["volumeMounts"].as_array().expect("mounts").iter().find(|m| m["name"] == volume["name"]).expect("mount");
    assert_eq!(mount["readOnly"], true);
    let dir = mount["mountPath"].as_str().expect("mountPath");
    assert_eq!((cert, key), (format!("{dir}/tls.crt").as_str(), format!("{dir}/tls.key").as_str()));
    let issuer = &certificate["spec"]["issuerRef"];
    find(&objects, issuer["kind"].as_str().expect("issuer kind"), issuer["name"].as_str().expect("issuer name"));

    // Cluster API calls https://<service>.<namespace>.svc:<port>: the Service exists, forwards
    // to the listener, and the certificate names it; the CA comes from the same Secret.
    let ext = find(&objects, "ExtensionConfig", "stacksync");
    assert_eq!(ext["apiVersion"], "runtime.cluster.x-k8s.io/v1alpha1");
    let svc_ref = &ext["spec"]["clientConfig"]["service"];
    let (svc_name, svc_ns) = (svc_ref["name"].as_str().expect("name"), svc_ref["namespace"].as_str().expect("namespace"));
    let service = find(&objects, "Service", svc_name);
    assert_eq!(service["metadata"]["namespace"], svc_ns);
    let sp = service["spec"]["ports"].as_array().expect("ports").iter().find(|p| p["port"] == svc_ref["port"]).expect("service port");
    assert_eq!(sp["targetPort"], "hooks");
    assert_eq!(service["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"]);
    let dns: Vec<&str> = certificate["spec"]["dnsNames"].as_array().expect("dnsNames").iter().filter_map(Value::as_str).collect();
    assert!(dns.contains(&format!("{svc_name}.{svc_ns}.svc").as_str()), "{dns:?}");
    assert_eq!(
        ext["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"],
        format!("{}/{secret}", certificate["metadata"]["namespace"].as_str().expect("namespace"))
    );
    assert!(ext["spec"]["namespaceSelector"].is_object());

    // The flags are this binary's: with a missing certificate file it names the file (it does
    // not stop at an unknown argument).
    let dir = tempfile::tempdir().expect("tempdir");
    let config = find(&objects, "ConfigMap", "stacksync-config")["data"]["stacksync.yaml"].as_str().expect("config").to_owned();
    let file = dir.path().join("stacksync.yaml");
    std::fs::write(&file, config).expect("write");
    let missing = dir.path().join("tls.crt");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
        .args(["run", "--admin-addr=0", "--hooks-addr=127.0.0.1:0", "--config"])
        .arg(&file)
        .arg(format!("--hooks-cert-file={}", missing.display()))
        .arg(format!("--hooks-key-file={}", dir.path().join("tls.key").display()))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && stderr.contains(&missing.display().to_string()), "{stderr}");
}

#[test]
fn the_monitoring_component_adds_the_alerts_and_the_dashboard_from_its_one_file() {
    let objects = with_component("monitoring");
    assert!(objects.iter().any(|o| o["kind"] == "Deployment"));
    let rule = find(&objects, "PrometheusRule", "stacksync");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.contains(&"StacksyncClusterSyncStalled") && alerts.len() >= 12, "{alerts:?}");

    // kube-prometheus-stack's Grafana sidecar loads ConfigMaps labelled grafana_dashboard: "1";
    // the JSON in it is the file, byte for byte (generated from it).
    let cm = find(&objects, "ConfigMap", "stacksync-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], "stacksync-system");
    let file = std::fs::read_to_string(deploy_dir().join("components/monitoring/stacksync-fleet.json")).expect("dashboard");
    assert_eq!(cm["data"]["stacksync-fleet.json"].as_str(), Some(file.as_str()));
    let dashboard: Value = serde_json::from_str(&file).expect("dashboard JSON");
    assert_eq!(dashboard["uid"], "stacksync-fleet");
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().expect("variables").iter().filter_map(|v| v["name"].as_str()).collect();
    assert!(variables.contains(&"namespace") && variables.contains(&"subscription"), "{variables:?}");
}
