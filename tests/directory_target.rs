//! The directory target and `run --once`: idempotent writes, pruning of dropped objects, a bad
//! release that leaves the last good one in place, and exit codes.

mod common;

use common::{Sub, assert_exit, configmap, git_config, run_once, snapshot, status, stdout};
use testkit::git::ReleaseRepo;

struct Env {
    dir: tempfile::TempDir,
    repo: ReleaseRepo,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
        Env { dir, repo }
    }

    fn config(&self) -> std::path::PathBuf {
        git_config(self.dir.path(), &self.repo.file_url()).write()
    }

    fn out(&self) -> std::path::PathBuf {
        self.dir.path().join("out")
    }

    fn cluster_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.out().join("team-a/alpha"))
            .expect("cluster dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ccm\n  namespace: kube-system\nspec:\n  replicas: 1\n";
const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: addons\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_rewrites_nothing() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/all.yaml", &format!("{DEPLOYMENT}---\n{}---\n{NAMESPACE}", configmap("cfg", "x")))]);
    let config = env.config();
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(env.cluster_files(), ["01-namespace-addons.yaml", "02-configmap-cfg.yaml", "03-deployment-ccm.yaml"]);
    let before = snapshot(&env.out());
    assert_eq!(before.len(), 4, "three manifests and one status file");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(snapshot(&env.out()), before, "a pass with no change rewrote files");
    assert!(common::stderr(&o).contains("synced: 3 unchanged"), "{}", common::stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_dropped_by_a_newer_release_are_removed() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x")), ("manifests/ccm.yaml", DEPLOYMENT)]);
    let config = env.config();
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(env.cluster_files(), ["01-configmap-cfg.yaml", "02-deployment-ccm.yaml"]);

    env.repo.remove("manifests/ccm.yaml");
    env.repo.release("v1.1.0", &[]);
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(env.cluster_files(), ["01-configmap-cfg.yaml"]);
    assert!(common::stderr(&o).contains("1 unchanged, 1 pruned"), "{}", common::stderr(&o));
    let st = status(&env.out(), "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], "v1.1.0");
    assert_eq!((st["synced"].as_u64(), st["total"].as_u64()), (Some(1), Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_fails_to_render_leaves_the_last_good_one() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "good"))]);
    let config = env.config();
    assert_exit(&run_once(&config).await, 0);
    let before = snapshot(&env.out().join("team-a"));

    env.repo.release("v1.1.0", &[("manifests/cfg.yaml", &format!("{}  broken: ${{zone}}\n", configmap("cfg", "bad")))]);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("NOT SYNCED: 0/1 clusters ready"), "{out}");
    assert!(out.contains("manifests/cfg.yaml:10:11: unknown variable `zone`"), "{out}");
    assert_eq!(snapshot(&env.out().join("team-a")), before, "manifests of the good release were touched");
    let st = status(&env.out(), "team-a", "alpha");
    assert_eq!(st["reason"], "RenderFailed");
    assert_eq!(st["ready"], false);
    assert_eq!(st["wantedRelease"]["tag"], "v1.1.0");
    assert_eq!(st["appliedRelease"]["tag"], "v1.0.0");
    assert!(st["message"].as_str().is_some_and(|m| m.contains("unknown variable `zone`")), "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_exit_codes() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    // 0: everything synced.
    assert_exit(&run_once(&env.config()).await, 0);

    // 1: nothing matches the constraint; the summary says why.
    let config = git_config(env.dir.path(), &env.repo.file_url())
        .edit_sub("stack", |_| Sub::new("stack", "stacks").version(">=2").cluster("team-a", "alpha", &[]))
        .write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("ReleaseNotAvailable: no release matches"), "{}", stdout(&o));
    assert!(stdout(&o).contains("tags seen: v1.0.0"), "{}", stdout(&o));

    // 2: the config is invalid.
    std::fs::write(&config, "apiVersion: stacksync.io/v1alpha1\nkind: Config\n").expect("write");
    let o = run_once(&config).await;
    assert_exit(&o, 2);
    assert!(common::stderr(&o).contains("missing required field `cache`"), "{}", common::stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_command_writes_manifests_without_status() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let config = env.config();
    let preview = env.dir.path().join("preview");
    let o = common::stacksync(&["render", "--config", &config.to_string_lossy(), "--out", &preview.to_string_lossy()]).await;
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(preview.join("team-a/alpha/01-configmap-cfg.yaml")).expect("rendered");
    assert!(text.contains("cluster: alpha") && text.contains("region: eu-1"), "{text}");
    assert!(!preview.join("status").exists());
    assert!(!env.out().exists(), "render wrote to the target");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_compares_the_next_pass_with_the_directory() {
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let config = env.config();
    let cfg = config.to_string_lossy().into_owned();
    assert_exit(&run_once(&config).await, 0);
    let o = common::stacksync(&["diff", "--config", &cfg]).await;
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "", "nothing would change");

    // A hand edit of a written file, and a new release with one more object.
    let file = env.out().join("team-a/alpha/01-configmap-cfg.yaml");
    let edited = std::fs::read_to_string(&file).expect("read").replace("extra: x", "extra: edited");
    std::fs::write(&file, edited).expect("write");
    env.repo.release("v1.1.0", &[("manifests/ns.yaml", NAMESPACE)]);
    let before = snapshot(&env.out());
    let o = common::stacksync(&["diff", "--config", &cfg]).await;
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert!(text.contains("update team-a/alpha/"), "{text}");
    assert!(text.contains("-  extra: edited\n+  extra: x\n"), "{text}");
    assert!(text.contains("create team-a/alpha/01-namespace-addons.yaml"), "{text}");
    assert_eq!(snapshot(&env.out()), before, "diff wrote to the directory");
}

/// The harness's config builder (tests/common/config.rs) writes YAML that reads back as the tree
/// it was given, and that `check-config` accepts: the other tests' configs mean what they say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_writes_configs_that_read_back_and_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = common::git_config(dir.path(), "file:///srv/stacks.git")
        .source_set("stacks", "allowMovedTags", true)
        .github("gh", "acme/stacks", "http://127.0.0.1:1/")
        .sub(Sub::new("odd", "gh").version("<1.3.0").cluster("team-c", "gamma", &[("n", "2"), ("flag", "true"), ("empty", "")]))
        .edit_sub("stack", |s| s.stack("docker-ferrol-1-27").cluster("team-b", "beta", &[("note", "a: b # c")]));
    let text = config.text();
    let back: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    assert_eq!(back, common::config::tree(&config), "{text}");
    assert!(text.starts_with("apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n"), "{text}");
    let o = common::check_config(&config.write()).await;
    assert_exit(&o, 0);
}

/// What every Cluster's reconcile asks of the context (the tags, the selection, the prepared
/// release) is worked out once and handed out again, and never outlives what it was worked out
/// from: a reloaded config, a poll that saw a new tag, a cached tree edited on the volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_answers_follow_the_config_and_the_polls() {
    use stacksync::config::Config as Loaded;
    let env = Env::new();
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &configmap("cm", "one"))]);
    env.repo.release("v1.1.0", &[("manifests/cm.yaml", &configmap("cm", "two"))]);
    let config = env.config();
    let ctx = stacksync::controller::Context::new(Loaded::load(&config).expect("config")).expect("context");
    assert!(ctx.poll_all().await.is_empty());
    let selected = async |ctx: &stacksync::controller::Context| {
        let config = ctx.config();
        ctx.select(&config.subscriptions[0]).await.expect("selection").release.tag
    };
    assert_eq!(selected(&ctx).await, "v1.1.0");
    assert_eq!(selected(&ctx).await, "v1.1.0", "the same answer again");

    // A reload that narrows the constraint: the next selection follows it, at once.
    let narrowed = git_config(env.dir.path(), &env.repo.file_url()).edit_sub("stack", |s| s.version("~1.0.0")).write();
    ctx.set_config(Loaded::load(&narrowed).expect("narrowed config"));
    assert_eq!(selected(&ctx).await, "v1.0.0");

    // A new tag: the poll that sees it is the next selection's input.
    env.repo.release("v1.0.1", &[("manifests/cm.yaml", &configmap("cm", "three"))]);
    assert!(ctx.poll_all().await.is_empty());
    assert_eq!(selected(&ctx).await, "v1.0.1");

    // The prepared release: checked and handed out again without reading the tree; a tree
    // edited on the volume is found once the answers are forgotten (here by a poll).
    let rel = ctx.select(&ctx.config().subscriptions[0]).await.expect("selection").release;
    let first = ctx.prepare(&rel).await.expect("prepared");
    let again = ctx.prepare(&rel).await.expect("prepared again");
    assert_eq!((again.tree.clone(), again.fetched), (first.tree.clone(), false));
    std::fs::write(first.tree.join("manifests/cm.yaml"), configmap("cm", "edited")).expect("edit the tree");
    assert!(ctx.poll_all().await.is_empty());
    let healed = ctx.prepare(&rel).await.expect("materialised again");
    assert!(healed.fetched, "the edited tree was handed out as checked");
    let text = std::fs::read_to_string(healed.tree.join("manifests/cm.yaml")).expect("tree");
    assert!(text.contains("three") && !text.contains("edited"), "{text}");
}
