//! The README's first command: `examples/quickstart/run.sh` (run on a copy of the example
//! directory, with the binary under test) renders the ClusterClass per namespace and the addon
//! stages per cluster, each cluster's values from its `.Cluster`.

use std::path::Path;
use std::time::Duration;

#[tokio::test]
async fn the_quickstart_renders_cluster_classes_per_namespace_and_addons_per_cluster() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let copy = tmp.path().join("quickstart");
    let cp = std::process::Command::new("cp").arg("-R").arg(root.join("examples/quickstart")).arg(&copy).status().expect("cp");
    assert!(cp.success());
    // A .work left by a manual run of the example is not part of it.
    let _ = std::fs::remove_dir_all(copy.join(".work"));
    let run = tokio::process::Command::new("bash")
        .arg(copy.join("run.sh"))
        .env("STACKSYNC_ROOT", root)
        .env("STACKSYNC_BIN", env!("CARGO_BIN_EXE_stacksync"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run).await.expect("quickstart in time").expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "quickstart failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    let out_dir = copy.join(".work/out");
    let read = |p: &str| std::fs::read_to_string(out_dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}\n{stdout}"));
    for ns in ["team-a", "team-b"] {
        assert!(read(&format!("{ns}/cluster-class/01-clusterclass-docker-ferrol-1-27-v2.yaml")).contains("kind: ClusterClass"));
    }
    assert!(read("team-a/alpha/cni/01-configmap-cni-config.yaml").contains("10.1.0.0/16"));
    assert!(read("team-b/beta/cni/01-configmap-cni-config.yaml").contains("10.2.0.0/16"));
    assert!(read("team-b/beta/metrics-server/01-deployment-metrics-server.yaml").contains("beta.example.test"));
    assert!(stdout.contains("team-a/alpha/cni/01-configmap-cni-config.yaml"), "{stdout}");
}
