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

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use stacksync::apply::ssa::{Applier, ApplyOptions, Inventory, Stage, StageAction};
use stacksync::cache::blobs::{Blobs, Sha256Digest};

const RUNS: usize = 5;

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
    let (first_ours, first_peer, noop_ours, noop_peer) = tokio::task::spawn_blocking(move || {
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
        (first_ours, first_peer, noop_ours, noop_peer)
    })
    .await
    .expect("git bench");
    report("mirror a repo with 200 tags (git://)", first_ours, first_peer, "git clone --mirror");
    report("poll it again, nothing new", noop_ours, noop_peer, "git fetch");
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
    let objects: Vec<stacksync::render::Object> = stacksync::render::Manifests::from_files([("m/cms.yaml".to_owned(), docs.join("---\n"))])
        .render(
            &stacksync::release::Release {
                source: "b".into(),
                tag: "v1.0.0".into(),
                commit: "c".into(),
                version: stacksync::release::version::Version::from_tag("v1.0.0").expect("version"),
            },
            &stacksync::config::ClusterConfig {
                name: "a".into(),
                namespace: "default".into(),
                values: Default::default(),
                objects: Default::default(),
            },
        )
        .expect("render");

    let mut times = Vec::new();
    for _ in 0..RUNS {
        let ours_server = testkit::apiserver::ApiServer::start().await.expect("server");
        let peer_server = testkit::apiserver::ApiServer::start().await.expect("server");
        let applier =
            Applier::new(ours_server.client().expect("client"), ApplyOptions { owner: "bench".into(), ..ApplyOptions::default() });
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

fn kubectl() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/stacksync-tools")))?;
    Some(dir.join("bin/kubectl")).filter(|p| p.exists())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!("median of {RUNS} runs; ratio = stacksync / peer (below 1: stacksync is faster)");
    verify_asset(dir.path());
    download_asset(dir.path()).await;
    git_fetch(dir.path()).await;
    apply(dir.path()).await;
}
