//! The real Helm 4.1 against testkit's API server: install (server-side apply of the chart's
//! objects, release Secrets sent as protobuf), upgrade and uninstall work as on a real cluster.
//! Helm comes from scripts/install-tools.sh; without it this test fails.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use fake_apiserver::ApiServer;
use fake_apiserver::kubectl::tools_bin_dir;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};

async fn helm(home: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let bin = tools_bin_dir().join("helm");
    assert!(bin.is_file(), "helm not found at {}: run scripts/install-tools.sh", bin.display());
    let child = tokio::process::Command::new(bin)
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.expect("helm finishes").unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "helm {} failed:\n{stdout}\n{stderr}", args.join(" "));
    stdout.into_owned()
}

fn write_chart(dir: &Path) {
    let files = [
        ("Chart.yaml", "apiVersion: v2\nname: demo\nversion: 0.1.0\n"),
        ("values.yaml", "replicas: 1\ngreeting: hello\n"),
        (
            "templates/configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
        ),
        (
            "templates/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels: {app: demo}\n  template:\n    metadata:\n      labels: {app: demo}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_a_chart() {
    let server = ApiServer::start().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let chart = home.path().join("demo");
    write_chart(&chart);
    let chart = chart.to_str().unwrap();
    let client = server.client().unwrap();
    let (deployments, configmaps, secrets): (Api<Deployment>, Api<ConfigMap>, Api<Secret>) =
        (Api::default_namespaced(client.clone()), Api::default_namespaced(client.clone()), Api::default_namespaced(client));

    helm(home.path(), server.kubeconfig(), &["install", "demo", chart]).await;
    assert_eq!(configmaps.get("demo-settings").await.unwrap().data.unwrap()["greeting"], "hello");
    let releases = ListParams::default().labels("owner=helm,name=demo");
    assert_eq!(secrets.list(&releases).await.unwrap().items.len(), 1, "one release Secret");

    helm(home.path(), server.kubeconfig(), &["upgrade", "demo", chart, "--set", "replicas=3"]).await;
    let deployment = deployments.get("demo").await.unwrap();
    assert_eq!(deployment.spec.replicas, Some(3));
    assert_eq!(deployment.metadata.generation, Some(2));
    let listed = helm(home.path(), server.kubeconfig(), &["list", "-o", "json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(
        (listed[0]["name"].as_str(), listed[0]["revision"].as_str(), listed[0]["status"].as_str()),
        (Some("demo"), Some("2"), Some("deployed"))
    );

    helm(home.path(), server.kubeconfig(), &["uninstall", "demo"]).await;
    assert!(deployments.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(secrets.list(&releases).await.unwrap().items.is_empty(), "release Secrets are purged");
    server.stop().await;
}
