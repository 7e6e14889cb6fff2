//! Push webhooks, the pure part: verifying a GitHub delivery's signature, reading what it
//! announces, matching it to the configured sources, and the replay window. The listener
//! (`admin.rs`) does the I/O and triggers the pollers of the sources returned here.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::config::Config;

/// Largest delivery body accepted (GitHub caps payloads at 25 MB, but a push or release event
/// is a few KiB; anything near 1 MiB is not one we act on).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How long a delivery id is remembered: a replay within this window triggers nothing.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(3600);

/// Delivery ids remembered at most (a flood of signed deliveries must not grow memory).
const REPLAY_CAPACITY: usize = 10_000;

/// Whether `signature` (the `X-Hub-Signature-256` header, `sha256=<hex>`) is the HMAC-SHA256 of
/// `body` under `secret`. The comparison is constant-time (`Mac::verify_slice`).
pub fn verify_signature(secret: &[u8], body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex_sig) = signature.and_then(|s| s.strip_prefix("sha256=")) else { return false };
    let Ok(expected) = hex::decode(hex_sig.trim()) else { return false };
    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Whether `presented` equals `token`, in time independent of where they differ (both are
/// hashed first, so the length does not leak either).
pub fn token_matches(token: &[u8], presented: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(token), Sha256::digest(presented));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a GitHub delivery asks of us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GithubEvent {
    /// `ping`: answered 200, nothing else.
    Ping,
    /// A push of a branch or tag, or a release published: poll the sources of this repository.
    Changed(Repository),
    /// A release action that announces nothing new (`created` as a draft, `edited`, `deleted`).
    IgnoredAction(String),
    /// An event we do not act on.
    Other,
}

impl GithubEvent {
    /// The bounded `event` label of the webhook metric.
    pub fn label(&self, header: &str) -> &'static str {
        match (self, header) {
            (GithubEvent::Ping, _) => "ping",
            (_, "push") => "push",
            (_, "release") => "release",
            _ => "other",
        }
    }
}

/// The repository a delivery is about, as GitHub names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Repository {
    #[serde(default)]
    pub full_name: String,
    #[serde(default)]
    pub clone_url: Option<String>,
    #[serde(default)]
    pub ssh_url: Option<String>,
    #[serde(default)]
    pub git_url: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
}

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    repository: Option<Repository>,
}

/// A delivery whose body is not what GitHub sends for its event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// serde's words for where the JSON breaks (kept as text: the error compares by value).
    #[error("the {event} payload is not valid JSON: {why}")]
    Json { event: String, why: String },
    #[error("the {event} payload has no `repository`")]
    NoRepository { event: String },
}

/// Reads a delivery of event `event` (the `X-GitHub-Event` header).
///
/// # Errors
/// The body of a `push` or `release` is not the JSON GitHub sends (no `repository`).
pub fn parse_github(event: &str, body: &[u8]) -> Result<GithubEvent, PayloadError> {
    match event {
        "ping" => Ok(GithubEvent::Ping),
        "push" | "release" => {
            let p: Payload =
                serde_json::from_slice(body).map_err(|source| PayloadError::Json { event: event.to_owned(), why: source.to_string() })?;
            let repo = p.repository.ok_or_else(|| PayloadError::NoRepository { event: event.to_owned() })?;
            if event == "release" {
                let action = p.action.unwrap_or_default();
                if !matches!(action.as_str(), "published" | "released" | "prereleased") {
                    return Ok(GithubEvent::IgnoredAction(action));
                }
            }
            Ok(GithubEvent::Changed(repo))
        }
        _ => Ok(GithubEvent::Other),
    }
}

/// The sources a change of `repo` concerns: GitHub sources by `owner/name` (case-insensitive,
/// as GitHub treats them), Git sources whose URL is one of the repository's clone URLs
/// (compared by [`normalise_url`]).
pub fn matching_sources(config: &Config, repo: &Repository) -> Vec<String> {
    let urls: Vec<String> =
        [&repo.clone_url, &repo.ssh_url, &repo.git_url, &repo.html_url].into_iter().flatten().map(|u| normalise_url(u)).collect();
    crate::controller::concerned(config, &repo.full_name, &urls)
}

pub use crate::controller::normalise_url;

/// Delivery ids seen in the last [`REPLAY_WINDOW`], oldest first.
#[derive(Default)]
pub struct ReplayWindow {
    seen: HashMap<String, Instant>,
    order: VecDeque<(Instant, String)>,
}

impl ReplayWindow {
    /// Records `id` at `now`; `false` when it was already seen within the window (a replay).
    pub fn first_seen(&mut self, id: &str, now: Instant) -> bool {
        while let Some((at, old)) = self.order.front() {
            if now.duration_since(*at) < REPLAY_WINDOW && self.order.len() < REPLAY_CAPACITY {
                break;
            }
            if self.seen.get(old) == Some(at) {
                self.seen.remove(old);
            }
            self.order.pop_front();
        }
        if self.seen.contains_key(id) {
            return false;
        }
        self.seen.insert(id.to_owned(), now);
        self.order.push_back((now, id.to_owned()));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &[u8], body: &[u8]) -> String {
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn signature_is_checked_over_the_raw_body() {
        let body = br#"{"zen":"Keep it logically awesome."}"#;
        let sig = sign(b"s3cret", body);
        assert!(verify_signature(b"s3cret", body, Some(&sig)));
        for (secret, body, sig) in [
            (&b"other"[..], &body[..], Some(sig.as_str())),
            (b"s3cret", b"{\"zen\":\"changed\"}", Some(sig.as_str())),
            (b"s3cret", body, None),
            (b"s3cret", body, Some("sha1=0123")),
            (b"s3cret", body, Some("sha256=zz")),
            (b"s3cret", body, Some("sha256=")),
        ] {
            assert!(!verify_signature(secret, body, sig), "{sig:?} accepted");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abc", b"abcd"));
        assert!(!token_matches(b"abc", b""));
    }

    #[test]
    fn events_by_kind_and_action() {
        let repo = br#"{"repository":{"full_name":"o/r","clone_url":"https://github.com/o/r.git"}}"#;
        assert_eq!(parse_github("ping", b"{}"), Ok(GithubEvent::Ping));
        assert!(matches!(parse_github("push", repo), Ok(GithubEvent::Changed(r)) if r.full_name == "o/r"));
        for (action, acts) in [("published", true), ("released", true), ("prereleased", true), ("created", false), ("edited", false)] {
            let body = format!(r#"{{"action":"{action}","repository":{{"full_name":"o/r"}}}}"#);
            let ev = parse_github("release", body.as_bytes()).unwrap();
            assert_eq!(matches!(ev, GithubEvent::Changed(_)), acts, "{action}");
        }
        assert_eq!(parse_github("issues", b"not json"), Ok(GithubEvent::Other));
        assert!(parse_github("push", b"not json").unwrap_err().to_string().contains("not valid JSON"));
        assert!(parse_github("push", b"{}").unwrap_err().to_string().contains("no `repository`"));
    }

    #[test]
    fn clone_urls_normalise_to_host_and_path() {
        for url in [
            "https://github.com/Org/Repo.git",
            "https://github.com/org/repo",
            "https://github.com/org/repo/",
            "http://user@github.com:443/org/repo.git/",
            "git@github.com:org/repo.git",
            "ssh://git@github.com:22/org/repo",
            "git://github.com/org/repo.git",
        ] {
            assert_eq!(normalise_url(url), "github.com/org/repo", "{url}");
        }
        assert_ne!(normalise_url("https://github.com/org/repo2"), normalise_url("https://github.com/org/repo"));
    }

    #[test]
    fn replays_within_the_window_are_refused_and_forgotten_after() {
        let mut w = ReplayWindow::default();
        let t0 = Instant::now();
        assert!(w.first_seen("a", t0));
        assert!(!w.first_seen("a", t0 + Duration::from_secs(3599)));
        assert!(w.first_seen("b", t0 + Duration::from_secs(10)));
        assert!(w.first_seen("a", t0 + Duration::from_secs(3601)));
        assert!(!w.first_seen("b", t0 + Duration::from_secs(3601)));
    }

    #[test]
    fn replay_window_is_bounded() {
        let mut w = ReplayWindow::default();
        let t0 = Instant::now();
        for i in 0..REPLAY_CAPACITY + 10 {
            assert!(w.first_seen(&i.to_string(), t0));
        }
        assert!(w.seen.len() <= REPLAY_CAPACITY + 1);
    }

    /// GitHub's own example payloads (shared beside the repository), when present.
    #[test]
    fn github_example_payloads_are_read() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/github/webhook-payloads");
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let event = name.split(['-', '.']).next().unwrap_or_default().to_owned();
            let body = std::fs::read(e.path()).unwrap();
            let ev = parse_github(&event, &body).unwrap_or_else(|err| panic!("{name}: {err}"));
            match name.as_str() {
                "ping-payload.json" => assert_eq!(ev, GithubEvent::Ping),
                "release-created.payload.json" | "release-edited.payload.json" => {
                    assert!(matches!(ev, GithubEvent::IgnoredAction(_)), "{name}")
                }
                _ => assert!(matches!(&ev, GithubEvent::Changed(r) if r.full_name == "Codertocat/Hello-World"), "{name}: {ev:?}"),
            }
        }
    }
}
