//! Benchmarks against peers run in the same process tree, printed as ratios (stacksync ÷ peer),
//! because these machines are noisy: a ratio survives a busy neighbour better than seconds.
//! Everything runs on loopback. Run: `cargo bench --bench peers` (needs git, curl, sha256sum and
//! the kubectl from scripts/install-tools.sh on PATH).
//!
//! | case | stacksync | peer |
//! |---|---|---|
//! | verify a 64 MiB asset | blob writer (stream + sha256 + fsync + rename) | `sha256sum` |
//! | download + verify a 32 MiB GitHub asset (302 to storage) | `github::Client::download` | `curl -sL … \| sha256sum` |
//! | mirror a release repo with 200 tags | `source::git::fetch` (first fetch) | `git clone --mirror` |
//! | poll it again, nothing new | `source::git::fetch` | `git fetch` in the mirror |
//! | apply 300 ConfigMaps, then re-apply unchanged | `apply::ssa::Applier` | `kubectl apply --server-side` |
//! | render a cluster stack's addons for 500 Clusters | `clusterstack::Layout::render_addons` | 500 `helm template` runs |
//! | render them again, nothing changed | the same (memoised: 0 helm runs) | 500 `helm template` runs |
//!
//! Every case is appended to `target/bench/results.json` (`BENCH_OUT`) with its environment;
//! `scripts/bench.sh` runs the fleet bench first, which starts that file.

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use applier::ssa::{Applier, ApplyOptions, Inventory, Stage, StageAction};
use stacksync::cache::blobs::Blobs;
use stacksync::model::Sha256Digest;

const RUNS: usize = 5;
/// Clusters of the render case.
const RENDER_CLUSTERS: usize = 500;

/// The cases so far, written to the results file at the end.
static CASES: Mutex<Vec<Value>> = Mutex::new(Vec::new());
static MACHINE: Mutex<Option<Value>> = Mutex::new(None);

/// Median wall time of `RUNS` runs of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

async fn median_async<F: std::future::Future<Output = ()>>(mut f: impl FnMut() -> F) -> Duration {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        f().await;
        times.push(t.elapsed());
    }
    times.sort();
    times[RUNS / 2]
}

fn report(case: &str, ours: Duration, peer: Duration, peer_name: &str) {
    let machine = MACHINE.lock().expect("machine").clone().unwrap_or(Value::Null);
    let v = common::case(case, ours.as_secs_f64(), Some((peer.as_secs_f64(), peer_name)), "s", &machine, json!({"bench": "peers"}));
    CASES.lock().expect("cases").push(v);
    println!(
        "{case:<48} stacksync {:>8.1} ms   {peer_name:<22} {:>8.1} ms   ratio {:>5.2}",
        ours.as_secs_f64() * 1e3,
        peer.as_secs_f64() * 1e3,
        ours.as_secs_f64() / peer.as_secs_f64()
    );
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("peer runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn verify_asset(dir: &Path) {
    let file = dir.join("asset.bin");
    let data: Vec<u8> = (0..64 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&file, &data).expect("asset");
    let expected = Sha256Digest::of(&data);
    drop(data);
    let blobs = Blobs::open(&dir.join("cache")).expect("blobs");
    let ours = median(|| {
        use std::io::Read;
        let _ = blobs.remove(&expected);
        let mut writer = blobs.writer(u64::MAX).expect("writer");
        let mut f = std::fs::File::open(&file).expect("open");
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            writer.write(&buf[..n]).expect("write");
        }
        writer.finish(&blobs, Some(&expected)).expect("verified");
    });
    let peer = median(|| run(Command::new("sha256sum").arg(&file)));
    report("verify a 64 MiB asset", ours, peer, "sha256sum");
}

async fn download_asset(dir: &Path) {
    let server = testkit::github::GithubServer::start().await.expect("server");
    let data: Vec<u8> = (0..32 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    server.add_release("acme/stacks", "v1.0.0", &[("big.bin".to_owned(), data.clone())], false, false);
    let digest = Sha256Digest::of(&data);
    let client = stacksync::source::github::Client::new(&server.api_url(), "acme/stacks", None).expect("client");
    let mut pages = Default::default();
    let (releases, _) = client.list(&mut pages).await.expect("list");
    let asset = releases[0].assets[0].clone();
    let blobs = Blobs::open(&dir.join("dl")).expect("blobs");
    let ours = median_async(|| async {
        let _ = blobs.remove(&digest);
        client.download("v1.0.0", &asset, &blobs, Some(&digest), u64::MAX).await.expect("download");
    })
    .await;
    let url = asset.url.clone();
    let peer = tokio::task::spawn_blocking(move || {
        median(|| {
            run(Command::new("sh").arg("-c").arg(format!("curl -sSfL -H 'Accept: application/octet-stream' '{url}' | sha256sum")));
        })
    })
    .await
    .expect("peer");
    report("download + verify a 32 MiB asset", ours, peer, "curl | sha256sum");
    server.stop().await;
}

async fn git_fetch(dir: &Path) {
    let served = dir.join("served");
    std::fs::create_dir_all(&served).expect("mkdir");
    let repo = testkit::git::ReleaseRepo::create(&served, "stacks").expect("repo");
    for i in 0..200 {
        repo.write("manifests/cm.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{i: \"{i}\"}}\n"));
        repo.write(&format!("manifests/file-{i}.yaml"), &"# padding\n".repeat(50));
        repo.commit(&format!("release {i}"));
        repo.tag(&format!("v1.{i}.0"));
    }
    let daemon = testkit::git::GitDaemon::start(&served).await.expect("daemon");
    let url = daemon.url("stacks.git");
    let (d, u) = (dir.to_path_buf(), url.clone());
    let (first_ours, first_peer, noop_ours, noop_peer, inc_ours, inc_peer) = tokio::task::spawn_blocking(move || {
        let heads = Default::default();
        let mut n = 0;
        let first_ours = median(|| {
            n += 1;
            stacksync::source::git::fetch("bench", &u, &d.join(format!("ours-{n}.git")), &heads).expect("fetch");
        });
        let mut m = 0;
        let first_peer = median(|| {
            m += 1;
            run(Command::new("git").args(["clone", "-q", "--mirror", &u]).arg(d.join(format!("peer-{m}.git"))));
        });
        let noop_ours = median(|| {
            stacksync::source::git::fetch("bench", &u, &d.join("ours-1.git"), &heads).expect("fetch");
        });
        let noop_peer = median(|| run(Command::new("git").args(["-C"]).arg(d.join("peer-1.git")).args(["fetch", "-q", "--prune"])));
        // Incremental: a new release (commit and tag) before each fetch, fetched by both.
        let (mut inc_ours, mut inc_peer) = (Vec::new(), Vec::new());
        for i in 0..RUNS {
            repo.write("manifests/cm.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{i: \"new-{i}\"}}\n"));
            repo.commit(&format!("release new {i}"));
            repo.tag(&format!("v2.{i}.0"));
            let t = Instant::now();
            stacksync::source::git::fetch("bench", &u, &d.join("ours-1.git"), &heads).expect("fetch");
            inc_ours.push(t.elapsed());
            let t = Instant::now();
            run(Command::new("git").args(["-C"]).arg(d.join("peer-1.git")).args(["fetch", "-q", "--prune"]));
            inc_peer.push(t.elapsed());
        }
        inc_ours.sort();
        inc_peer.sort();
        (first_ours, first_peer, noop_ours, noop_peer, inc_ours[RUNS / 2], inc_peer[RUNS / 2])
    })
    .await
    .expect("git bench");
    report("mirror a repo with 200 tags (git://)", first_ours, first_peer, "git clone --mirror");
    report("poll it again, nothing new", noop_ours, noop_peer, "git fetch");
    report("incremental fetch of one new tag", inc_ours, inc_peer, "git fetch");
    daemon.stop().await;
}

async fn apply(dir: &Path) {
    let Some(kubectl) = kubectl() else {
        println!("apply: skipped, kubectl not found (run scripts/install-tools.sh)");
        return;
    };
    let docs: Vec<String> = (0..300)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\n  namespace: default\ndata:\n  i: \"{i}\"\n"))
        .collect();
    let file = dir.join("cms.yaml");
    std::fs::write(&file, docs.join("---\n")).expect("manifests");
    let objects: Vec<stacksync::model::Object> = stacksync::render::Manifests::from_files([("m/cms.yaml".to_owned(), docs.join("---\n"))])
        .render(
            &stacksync::release::Release {
                source: "b".into(),
                tag: "v1.0.0".into(),
                commit: "c".into(),
                version: stacksync::model::version::Version::from_tag("v1.0.0").expect("version"),
            },
            &stacksync::model::cluster::ClusterConfig {
                name: "a".into(),
                namespace: "default".into(),
                values: Default::default(),
                objects: Default::default(),
            },
        )
        .expect("render");

    let mut times = Vec::new();
    for _ in 0..RUNS {
        let ours_server = fake_apiserver::ApiServer::start().await.expect("server");
        let peer_server = fake_apiserver::ApiServer::start().await.expect("server");
        let applier = Applier::new(
            ours_server.client().expect("client"),
            ApplyOptions { owner: "bench".into(), ..ApplyOptions::new(stacksync::model::manager::manager()) },
        );
        let stage = [Stage { name: "m".into(), action: StageAction::Apply, objects: objects.clone() }];
        let t = Instant::now();
        let first = applier.sync(&stage, &Inventory::default()).await;
        let first_ours = t.elapsed();
        let t = Instant::now();
        let _ = applier.sync(&stage, &first.inventory).await;
        let noop_ours = t.elapsed();
        let (k, f, kc) = (kubectl.clone(), file.clone(), peer_server.kubeconfig().to_path_buf());
        let (first_peer, noop_peer) = tokio::task::spawn_blocking(move || {
            let apply = || {
                let t = Instant::now();
                run(Command::new(&k)
                    .arg("--kubeconfig")
                    .arg(&kc)
                    .args(["apply", "--server-side", "-f"])
                    .arg(&f)
                    .env("HOME", f.parent().unwrap_or(Path::new("."))));
                t.elapsed()
            };
            (apply(), apply())
        })
        .await
        .expect("kubectl");
        times.push((first_ours, first_peer, noop_ours, noop_peer));
    }
    let pick = |i: usize| {
        let mut v: Vec<Duration> = times.iter().map(|t| [t.0, t.1, t.2, t.3][i]).collect();
        v.sort();
        v[RUNS / 2]
    };
    report("apply 300 ConfigMaps (first pass)", pick(0), pick(1), "kubectl apply --ss");
    report("re-apply them unchanged (0 writes)", pick(2), pick(3), "kubectl apply --ss");
}

/// The addons of a real-format cluster stack (testdata: metadata.yaml, ClusterClass chart,
/// cluster-addon chart with its values template) rendered for 500 Clusters, each with its own
/// name, endpoint and pod CIDR, so each needs its own `helm template` run; the peer runs the same
/// 500 `helm template` commands (same chart, flags and values files) with the same parallelism.
/// Then the same render again: nothing changed, so stacksync runs helm zero times.
async fn render(dir: &Path) {
    use stacksync::config::HelmConfig;
    use stacksync::model::cluster::{ClusterConfig, ClusterObjects};
    use stacksync::render::clusterstack::Layout;
    use stacksync::render::helm::Helm;
    let Some(helm_path) = tool("helm") else {
        println!("render: skipped, helm not found (run scripts/install-tools.sh)");
        return;
    };
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/clusterstack/docker-ferrol-1-27-v2");
    let release = stacksync::release::Release {
        source: "stacks".into(),
        tag: "docker-ferrol-1-27-v2".into(),
        commit: "0".repeat(40),
        version: stacksync::model::version::Version::from_tag("docker-ferrol-1-27-v2").expect("version"),
    };
    let work = dir.join("render");
    let layout = Layout::load(&fixture, ".", &release, &work).expect("layout");
    let config = HelmConfig { path: Some(helm_path.clone()), ..HelmConfig::default() };
    let parallelism = config.parallelism;
    let helm = Helm::locate(&config).await.expect("helm");
    let clusters: Vec<ClusterConfig> = (0..RENDER_CLUSTERS)
        .map(|i| ClusterConfig {
            name: format!("c{i:03}"),
            namespace: "fleet".into(),
            values: Default::default(),
            objects: ClusterObjects {
                cluster: Some(json!({"spec": {"controlPlaneEndpoint": {"host": format!("10.1.{}.{}", i / 250, i % 250 + 1), "port": 6443},
                    "clusterNetwork": {"pods": {"cidrBlocks": [format!("10.{}.0.0/16", 100 + i % 100)]}}}})),
                control_plane: Some(json!({"kind": "KubeadmControlPlane", "spec": {"replicas": 1 + i % 3}})),
                infra_cluster: None,
            },
        })
        .collect();
    let render_all = || {
        futures_util::StreamExt::collect::<Vec<_>>(futures_util::StreamExt::buffer_unordered(
            futures_util::stream::iter(clusters.iter().map(|c| {
                let (helm, layout, work) = (&helm, &layout, &work);
                async move { layout.render_addons(helm, c, work).await.expect("render").len() }
            })),
            parallelism,
        ))
    };
    let t = Instant::now();
    let stages = render_all().await;
    let ours = t.elapsed();
    let runs = helm.runs();
    assert_eq!(stages.len(), RENDER_CLUSTERS);
    let t = Instant::now();
    render_all().await;
    let again = t.elapsed();
    let runs_again = helm.runs() - runs;
    // The peer: the same helm commands, values files as stacksync wrote them.
    let chart = match &layout.addon {
        stacksync::render::clusterstack::Addon::Single { chart, .. } => chart.path.clone(),
        stacksync::render::clusterstack::Addon::Staged { .. } => unreachable!("a single-chart fixture"),
    };
    let kube_version = layout.metadata.kubernetes.clone();
    let values: Vec<std::path::PathBuf> =
        clusters.iter().map(|c| work.join("values").join(&c.namespace).join(&c.name).join("cluster-addon.yaml")).collect();
    let home = dir.join("helm-home");
    let peer = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        std::thread::scope(|s| {
            for part in values.chunks(values.len().div_ceil(parallelism)) {
                let (helm_path, chart, kube_version, home) = (&helm_path, &chart, &kube_version, &home);
                s.spawn(move || {
                    for v in part {
                        let out = Command::new(helm_path)
                            .args(["template", "--include-crds", "--kube-version", kube_version, "cluster-addon"])
                            .arg(chart)
                            .args(["--namespace", "kube-system", "-f"])
                            .arg(v)
                            .env("HELM_CACHE_HOME", home.join("cache"))
                            .env("HELM_CONFIG_HOME", home.join("config"))
                            .env("HELM_DATA_HOME", home.join("data"))
                            .output()
                            .expect("helm runs");
                        assert!(out.status.success(), "helm: {}", String::from_utf8_lossy(&out.stderr));
                    }
                });
            }
        });
        t.elapsed()
    })
    .await
    .expect("peer");
    let name = format!("{RENDER_CLUSTERS} `helm template`, {parallelism} at once");
    report(&format!("render addons of {RENDER_CLUSTERS} Clusters ({runs} helm runs)"), ours, peer, &name);
    report(&format!("render them again unchanged ({runs_again} helm runs)"), again, peer, &name);
}

/// A tool of scripts/install-tools.sh (`STACKSYNC_TOOLS_DIR`, else `~/.cache/stacksync-tools`).
fn tool(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/stacksync-tools")))?;
    Some(dir.join("bin").join(name)).filter(|p| p.exists())
}

fn kubectl() -> Option<std::path::PathBuf> {
    tool("kubectl")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tools: Vec<(&str, std::path::PathBuf)> = ["kubectl", "helm"].iter().filter_map(|t| Some((*t, tool(t)?))).collect();
    tools.extend([("git", "git".into()), ("curl", "curl".into()), ("sha256sum", "sha256sum".into())]);
    let listed: Vec<(&str, &Path)> = tools.iter().map(|(n, p)| (*n, p.as_path())).collect();
    *MACHINE.lock().expect("machine") = Some(common::machine(&listed));
    println!("median of {RUNS} runs (render: one run each); ratio = stacksync / peer (below 1: stacksync is faster)");
    verify_asset(dir.path());
    download_asset(dir.path()).await;
    git_fetch(dir.path()).await;
    apply(dir.path()).await;
    render(dir.path()).await;
    let out = common::out_path();
    common::write(&out, &CASES.lock().expect("cases"), false);
    println!("results appended to {}", out.display());
}
