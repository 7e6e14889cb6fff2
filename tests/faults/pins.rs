//! A release accepted earlier that no longer verifies — a `git.pins` entry or a
//! `github.digests` pin added later that it does not satisfy — was applied again and reported
//! Ready. Now it is reported (`PinMismatch`, naming the pin and both digests) and what is in
//! place stays (no silent rollback) until a release that verifies is available.

use testkit::git::ReleaseRepo;
use testkit::github::GithubServer;

use serde_json::json;

use crate::common::{assert_exit, configmap, git_config, github_config, run_once, status, targz};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_pin_added_later_left_the_release_ready() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    let commit = repo.release("v1.0.0", &[("manifests/cm.yaml", &configmap("cm", "one"))]);
    let git = git_config(dir.path(), &repo.file_url());
    let config = git.clone().write();
    assert_exit(&run_once(&config).await, 0);
    let applied = dir.path().join("out/team-a/alpha/01-configmap-cm.yaml");
    let before = std::fs::read_to_string(&applied).unwrap();

    let pin = "2".repeat(40);
    git.clone().source_set("stacks", "pins", json!({"v1.0.0": pin})).write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!(st["ready"], false, "{st:?}");
    assert_eq!(st["reason"], "PinMismatch", "{st:?}");
    let message = st["message"].as_str().unwrap_or_default();
    assert!(message.contains(&pin) && message.contains(commit.as_str()) && message.contains("git.pins"), "{message}");
    assert_eq!(st["appliedRelease"]["commit"], commit.as_str());
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), before, "what was applied stays");

    // A release at the pinned commit is what verifies: here, the pin fixed to the tag's commit.
    git.source_set("stacks", "pins", json!({"v1.0.0": commit})).write();
    assert_exit(&run_once(&config).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_pin_added_later_left_the_cached_release_ready() {
    let dir = tempfile::tempdir().unwrap();
    let server = GithubServer::start().await.unwrap();
    let asset = targz(&[("cm.yaml", &configmap("cm", "one"))]);
    let digest = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&asset)));
    server.add_release("acme/stacks", "v1.0.0", &[("manifests.tar.gz".into(), asset)], false, false);
    let config = github_config(dir.path(), "acme/stacks", &server.api_url()).write();
    assert_exit(&run_once(&config).await, 0);
    let applied = dir.path().join("out/team-a/alpha/01-configmap-cm.yaml");
    let before = std::fs::read_to_string(&applied).unwrap();

    // The release is cached (verified by its published digest); a pin added later disagrees.
    let pin = format!("sha256:{}", "3".repeat(64));
    let config = github_config(dir.path(), "acme/stacks", &server.api_url())
        .source_set("gh", "digests", json!({"v1.0.0/manifests.tar.gz": pin}))
        .write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!(st["reason"], "PinMismatch", "{st:?}");
    let message = st["message"].as_str().unwrap_or_default();
    assert!(message.contains(&pin) && message.contains(&digest) && message.contains("manifests.tar.gz"), "{message}");
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), before, "what was applied stays");
    server.stop().await;
}
