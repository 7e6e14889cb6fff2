//! The fetch half, over every source kind alike: which release of a source is in use and
//! whether it still verifies (pins, moved tags, signatures), which cached releases garbage
//! collection keeps, and which sources a webhook delivery concerns. What differs per kind is
//! behind [`crate::source::Source`].

use std::collections::BTreeSet;

use super::{Mismatch, PreparedRelease};
use crate::cache::{Cache, Index, SourceState};
use crate::config::{Config, SourceKind};
use crate::model::verification::AssetRecord;
use crate::release::{Release, short};
use crate::source::{self, Source};
use crate::status::Reason;

pub use crate::source::normalise_url;

/// The cache key of a configured source: its name plus a hash of where it points.
pub fn source_key(name: &str, kind: &SourceKind) -> String {
    source::key(name, source::of(kind))
}

/// The sources a push to a repository concerns (`full_name` `owner/name`, `urls` its clone URLs
/// reduced by [`normalise_url`]), by name.
pub fn concerned(config: &Config, full_name: &str, urls: &[String]) -> Vec<String> {
    let push = source::Push { full_name, urls };
    config.sources.iter().filter(|s| source::of(&s.kind).concerns(&push)).map(|s| s.name.clone()).collect()
}

/// Whether a release accepted earlier still verifies, now: against the config's pins (a Git
/// tag's commit, a GitHub asset's digest) and against what the source claims for its tag
/// (`claimed`: the commit or revision a moved tag now points at, which was refused). Pure.
/// `None` when it verifies; otherwise the reason (`PinMismatch`, `TagRefused`) and a message
/// naming the tag, the pin and both digests.
pub fn mismatch(name: &str, source: &dyn Source, rel: &Release, claimed: Option<&str>, assets: &[AssetRecord]) -> Option<Mismatch> {
    if let Some(message) = source.pin_mismatch(name, rel, assets) {
        return Some(Mismatch { reason: Reason::PinMismatch, message });
    }
    let claimed = claimed.filter(|c| *c != rel.commit)?;
    Some(Mismatch {
        reason: Reason::TagRefused,
        message: format!(
            "tag {} now points at {} in source {name}; refused, {} stays applied (set allowMovedTags, or fix the pin, to accept it)",
            rel.tag,
            short(claimed),
            short(&rel.commit)
        ),
    })
}

/// Whether `rel` is a tag that a target recorded as applied at another commit (`applied`: the
/// tag and commit in a Cluster's `ClusterSync` or the directory target's status file): the tag
/// moved since it was put in place. What was applied lasts where the cache does not — the cache
/// of the shipped Deployment is an emptyDir, and deleting it is always allowed — so this refuses
/// a moved tag however little the cache remembers. `None` for the same commit, another tag, or
/// a source that accepts moved tags. Pure.
pub fn moved_since_applied(name: &str, accepted: bool, applied: Option<(&str, &str)>, rel: &Release) -> Option<Mismatch> {
    let (tag, commit) = applied?;
    if accepted || tag != rel.tag || commit == rel.commit {
        return None;
    }
    Some(Mismatch {
        reason: Reason::TagRefused,
        message: format!(
            "tag {tag} now points at {} in source {name}, but {} is what was applied; refused, {} stays applied (set allowMovedTags to accept it, or publish a new tag)",
            short(&rel.commit),
            short(commit),
            short(commit)
        ),
    })
}

/// What the last poll said about the signature of `rel` (sources with `verify`): who signed it,
/// and — when it is refused now (a key rotated out, a tag re-signed badly) while it is still the
/// release selected (in use: never downgraded silently) — a `SignatureInvalid` mismatch: it is
/// not applied again and what is in place stays. Pure.
pub fn signature(state: Option<&SourceState>, rel: &Release) -> (Option<String>, Option<Mismatch>) {
    let Some(state) = state else { return (None, None) };
    let signer = state.signers.get(&rel.tag).filter(|s| *s != "pending").cloned();
    let refused = state.unsigned.get(&rel.tag).filter(|r| r.commit == rel.commit).map(|r| Mismatch {
        reason: Reason::SignatureInvalid,
        message: format!(
            "{}; the release in use is not applied again and what is in place stays until a signed release is available",
            r.message
        ),
    });
    (signer, refused)
}

/// The release in use whose signature is refused now: held — never materialised (whatever its
/// kind: a GitHub release's assets would be refused again), never applied; what is in place
/// stays and the status says why (`m`). The tree path is where it would be; nothing reads it.
pub fn held(cache: &Cache, key: &str, rel: &Release, m: Mismatch) -> PreparedRelease {
    PreparedRelease {
        release: rel.clone(),
        tree: cache.release_path(key, &rel.tag, &rel.commit),
        fetched: false,
        note: None,
        assets: Vec::new(),
        unverified: Some(m),
        signed_by: None,
        moved_tags_accepted: false,
    }
}

/// The cached releases garbage collection must keep: for every subscription, the release it
/// adopted (in use) plus the `cache.keepReleases` newest cached releases it could select.
pub fn releases_to_keep(config: &Config, index: &Index) -> BTreeSet<String> {
    use crate::model::version::Version;
    let mut keep = BTreeSet::new();
    for sub in &config.subscriptions {
        let Some(src) = config.source(&sub.source) else { continue };
        let key = source_key(&src.name, &src.kind);
        if let Some(a) = index.adopted.get(&sub.name) {
            keep.insert(crate::cache::ReleaseEntry::id(&key, &a.tag, &a.commit));
        }
        let mut mine: Vec<(Version, String)> = index
            .releases
            .iter()
            .filter(|(id, _)| id.starts_with(&format!("{key}/")))
            .filter_map(|(id, e)| Version::from_tag(&e.tag).map(|v| (v, id.clone())))
            .filter(|(v, _)| sub.wanted().kind_of(v))
            .collect();
        mine.sort_by(|a, b| b.0.order(&a.0).unwrap_or(std::cmp::Ordering::Equal).then_with(|| b.1.cmp(&a.1)));
        keep.extend(mine.into_iter().take(config.cache.keep_releases).map(|(_, id)| id));
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::SignatureRefusal;
    use crate::config::{GitSourceConfig, GithubSourceConfig};
    use crate::model::source::Verify;
    use crate::model::verification::VerifiedBy;

    fn rel(tag: &str, commit: &str) -> Release {
        Release {
            source: "s".into(),
            tag: tag.into(),
            commit: commit.into(),
            version: crate::model::version::Version::from_tag(tag).unwrap(),
        }
    }

    fn git(pins: &[(&str, &str)]) -> SourceKind {
        SourceKind::Git(GitSourceConfig {
            url: "file:///r".into(),
            allow_moved_tags: false,
            pins: pins.iter().map(|(t, c)| ((*t).to_owned(), (*c).to_owned())).collect(),
            auth: None,
            signatures: Default::default(),
        })
    }

    fn github(pins: &[(&str, &str)]) -> SourceKind {
        SourceKind::Github(GithubSourceConfig {
            repo: "acme/stacks".into(),
            api_url: "http://127.0.0.1/".into(),
            token: None,
            tag_pattern: None,
            verify: Verify::Required,
            digests: pins.iter().map(|(k, d)| ((*k).to_owned(), crate::model::Sha256Digest::parse(d).unwrap())).collect(),
            max_asset_bytes: 0,
            max_release_bytes: 0,
            max_unpacked_bytes: 0,
            allow_moved_tags: false,
            signatures: Default::default(),
        })
    }

    fn asset(name: &str, digest: &str) -> AssetRecord {
        AssetRecord { name: name.into(), digest: format!("sha256:{digest}"), verified_by: VerifiedBy::Published, size: 1 }
    }

    #[test]
    fn a_tag_recorded_as_applied_at_another_commit_is_refused_unless_moved_tags_are_accepted() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        // (accepted, applied, release, refused)
        let table = [
            (false, None, rel("v1.0.0", &b), false),
            (false, Some(("v1.0.0", a.as_str())), rel("v1.0.0", &a), false),
            (false, Some(("v1.0.0", a.as_str())), rel("v1.0.0", &b), true),
            (true, Some(("v1.0.0", a.as_str())), rel("v1.0.0", &b), false),
            (false, Some(("v0.9.0", a.as_str())), rel("v1.0.0", &b), false),
        ];
        for (accepted, applied, r, refused) in table {
            let got = moved_since_applied("s", accepted, applied, &r);
            assert_eq!(got.is_some(), refused, "{applied:?} {r:?}");
            if let Some(m) = got {
                assert_eq!(m.reason, Reason::TagRefused);
                assert!(
                    m.message.contains("tag v1.0.0 now points at bbbbbbbbbbbb in source s, but aaaaaaaaaaaa is what was applied"),
                    "{}",
                    m.message
                );
                assert!(m.message.contains("allowMovedTags"), "{}", m.message);
            }
        }
    }

    #[test]
    fn a_release_in_use_that_no_longer_verifies_says_which_pin_and_both_digests() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let (x, y) = ("1".repeat(64), "2".repeat(64));
        let assets = [asset("m.tar.gz", &x)];
        let (pin_names, digest_names) =
            ([b.as_str(), a.as_str(), "git.pins", "v1.0.0"], [x.as_str(), y.as_str(), "github.digests", "m.tar.gz"]);
        // (source, release commit, what the source now claims, assets, reason, the message names)
        type Case<'a> = (SourceKind, &'a str, Option<&'a str>, &'a [AssetRecord], Option<Reason>, &'a [&'a str]);
        let table: Vec<Case> = vec![
            (git(&[]), &a, None, &[], None, &[]),
            (git(&[("v1.0.0", &a)]), &a, None, &[], None, &[]),
            (git(&[("v2.0.0", &b)]), &a, None, &[], None, &[]),
            (git(&[("v1.0.0", &b)]), &a, Some(&a), &[], Some(Reason::PinMismatch), &pin_names),
            (git(&[]), &a, Some(&b), &[], Some(Reason::TagRefused), &["bbbbbbbbbbbb", "aaaaaaaaaaaa", "allowMovedTags"]),
            (git(&[]), &a, Some(&a), &[], None, &[]),
            (github(&[("v1.0.0/m.tar.gz", &x)]), &a, None, &assets, None, &[]),
            (github(&[("v1.0.0/other", &y)]), &a, None, &assets, None, &[]),
            (github(&[("v1.0.0/m.tar.gz", &y)]), &a, None, &assets, Some(Reason::PinMismatch), &digest_names),
            (github(&[]), &a, Some(&b), &assets, Some(Reason::TagRefused), &["bbbbbbbbbbbb"]),
        ];
        for (kind, commit, claimed, assets, reason, names) in table {
            let got = mismatch("s", source::of(&kind), &rel("v1.0.0", commit), claimed, assets);
            assert_eq!(got.as_ref().map(|m| m.reason), reason, "{got:?}");
            let message = got.map(|m| m.message).unwrap_or_default();
            for name in names {
                assert!(message.contains(name), "{message} should name {name}");
            }
        }
    }

    #[test]
    fn the_release_in_use_is_held_only_while_its_own_commit_is_refused() {
        use crate::release::Release;
        let rel = |tag: &str, commit: &str| Release {
            source: "s".into(),
            tag: tag.into(),
            commit: commit.into(),
            version: crate::model::version::Version::from_tag(tag).expect("version"),
        };
        let mut state = SourceState::default();
        state.signers.insert("v1.0.0".into(), "ssh:SHA256:a".into());
        state.signers.insert("v1.1.0".into(), "pending".into());
        state.unsigned.insert("v2.0.0".into(), SignatureRefusal { commit: "c2".into(), signer: "unsigned".into(), message: "why".into() });
        let table = [
            (rel("v1.0.0", "c1"), Some("ssh:SHA256:a"), None),
            (rel("v1.1.0", "c3"), None, None),
            (rel("v2.0.0", "c2"), None, Some(Reason::SignatureInvalid)),
            (rel("v2.0.0", "c9"), None, None),
        ];
        for (r, signer, reason) in table {
            let (s, m) = signature(Some(&state), &r);
            assert_eq!(s.as_deref(), signer, "{r:?}");
            assert_eq!(m.as_ref().map(|m| m.reason), reason, "{r:?}");
            assert!(m.is_none_or(|m| m.message.starts_with("why; the release in use is not applied again")));
        }
        assert_eq!(signature(None, &rel("v1.0.0", "c1")), (None, None));
    }
}
