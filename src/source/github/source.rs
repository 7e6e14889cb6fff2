//! GitHub release assets as a release source: the releases API listed with conditional
//! requests (the listing is this kind's own state), each release's assets downloaded into the
//! blob store, verified against their digests (and `.sig` signatures with `verify` keys), and
//! unpacked into the release's tree.

use std::collections::{BTreeMap, BTreeSet};

use super::super::signed::{remember, remembered};
use super::super::trees::materialise_blobs;
use super::super::{At, BoxFuture, Materialised, Polled, ReleaseError, Source};
use super::materialise;
use crate::cache::blobs::Blobs;
use crate::cache::{Index, SourceState};
use crate::config::{GithubSourceConfig, tag_matches};
use crate::model::Sha256Digest;
use crate::model::published::{GhRelease, GithubState};
use crate::model::verification::AssetRecord;
use crate::release::Release;
use crate::source::{self as source, Push, STAYS};
use verify::{Refusal, Trust, TrustFiles, Verified};

impl Source for GithubSourceConfig {
    fn location(&self) -> String {
        format!("{}#{}", self.api_url, self.repo)
    }

    fn allow_moved_tags(&self) -> bool {
        self.allow_moved_tags
    }

    fn trust_files(&self) -> &TrustFiles {
        &self.signatures
    }

    fn poll<'a>(&'a self, at: At<'a>, previous: &'a SourceState, trust: Option<&'a Trust>) -> BoxFuture<'a, source::Result<Polled>> {
        Box::pin(async move {
            let wrap = |source| source::Error::Github { source_name: at.name.to_owned(), source: Box::new(source) };
            let mut state = listing(previous);
            let client = client(self).map_err(wrap)?;
            let (releases, _stats) = client.list(&mut state.pages).await.map_err(wrap)?;
            let mut by_tag = BTreeMap::new();
            for r in releases {
                if self.tag_pattern.as_deref().is_none_or(|p| tag_matches(p, &r.tag)) {
                    by_tag.entry(r.tag.clone()).or_insert(r);
                }
            }
            let refs = source::RemoteRefs { tags: by_tag.iter().map(|(t, r)| (t.clone(), r.revision())).collect(), heads: BTreeMap::new() };
            tracing::debug!(source = at.name, releases = refs.tags.len(), "listed GitHub releases");
            let prereleases = by_tag.values().filter(|r| r.prerelease).map(|r| r.tag.clone()).collect();
            let verdicts = trust.map(|t| {
                let blobs = Blobs::open(at.cache.root()).ok();
                verdicts(&self.location(), &by_tag, blobs.as_ref(), t)
            });
            state.releases = by_tag;
            Ok(Polled { refs, verdicts, prereleases, own: serde_json::to_value(&state).ok() })
        })
    }

    fn pin_mismatch(&self, source: &str, rel: &Release, assets: &[AssetRecord]) -> Option<String> {
        assets.iter().find_map(|a| {
            let key = format!("{}/{}", rel.tag, a.name);
            let pin = self.digests.get(&key)?;
            (Sha256Digest::parse(&a.digest).as_ref() != Some(pin)).then(|| {
                format!(
                    "asset {} of release {} is pinned to {pin} (github.digests `{key}` of source {source}) but the release in use has {}; {STAYS} (fix the pin, or publish a release whose asset matches it)",
                    a.name, rel.tag, a.digest
                )
            })
        })
    }

    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        state: &'a SourceState,
        index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)> {
        Box::pin(async move {
            let location = self.location();
            // Signatures are checked on every use, a cached tree included: a key rotated out
            // since the tree was cached no longer vouches for it.
            let check = |records: &[AssetRecord], blobs: &Blobs| -> Result<Option<String>, ReleaseError> {
                if !self.signatures.is_set() {
                    return Ok(None);
                }
                let trust = self.signatures.load().map_err(ReleaseError::TrustFiles)?;
                assets_verdict(&location, &rel.tag, &rel.commit, records, blobs, &trust)
                    .map(|v| Some(v.signer))
                    .map_err(|r| ReleaseError::Signature(super::super::signed::refusal_message(&rel.source, &rel.tag, &r, &trust)))
            };
            let bring = async |blobs: &Blobs| {
                let Some(release) = listing(state).releases.remove(&rel.tag) else {
                    return Err(ReleaseError::NotListed { tag: rel.tag.clone(), repo: self.repo.clone() });
                };
                if release.revision() != rel.commit {
                    return Err(ReleaseError::AssetsMoved { tag: rel.tag.clone() });
                }
                let client = client(self).map_err(ReleaseError::Github)?;
                materialise::download_all(&client, blobs, &release, &options(self)).await.map_err(ReleaseError::Download)
            };
            materialise_blobs(at, index, rel, options(self).unpack, bring, check).await
        })
    }

    fn refusal(&self, rel: &Release) -> Option<(Refusal, Trust)> {
        if !self.signatures.is_set() {
            return None;
        }
        let trust = self.signatures.load().ok()?;
        match remembered(&memo_key(&self.location(), &rel.tag, &rel.commit, &trust.id()))? {
            Err(r) => Some((r, trust)),
            Ok(_) => None,
        }
    }

    /// A push to the repository, by `owner/name` (case-insensitive, as GitHub treats them).
    fn concerns(&self, push: &Push<'_>) -> bool {
        !push.full_name.is_empty() && self.repo.eq_ignore_ascii_case(push.full_name)
    }
}

/// The last listing, from the source's own state (empty when there is none, or it is from
/// another version of stacksync).
fn listing(state: &SourceState) -> GithubState {
    state.own.as_deref().and_then(|v| serde::Deserialize::deserialize(v).ok()).unwrap_or_default()
}

fn client(g: &GithubSourceConfig) -> super::Result<super::Client> {
    let token = match &g.token {
        Some(t) => Some(t.read().map_err(|source| super::Error::Token { repo: g.repo.clone(), source })?),
        None => None,
    };
    super::Client::new(&g.api_url, &g.repo, token)
}

fn options(g: &GithubSourceConfig) -> materialise::Options {
    materialise::Options {
        verify: g.verify,
        pins: g.digests.clone(),
        max_asset_bytes: g.max_asset_bytes,
        max_release_bytes: g.max_release_bytes,
        unpack: crate::cache::unpack::Limits { max_bytes: g.max_unpacked_bytes, ..Default::default() },
    }
}

/// GitHub, at poll time: every asset of each release needs a `<asset>.sig` beside it. A release
/// whose signatures were already checked under these keys keeps its verdict; one whose assets
/// (with published digests) are all in the blob store already is checked now, locally — so a key
/// rotated out counts at this poll for a release already cached; any other is checked when it is
/// downloaded (`pending`).
fn verdicts(
    location: &str,
    releases: &BTreeMap<String, GhRelease>,
    blobs: Option<&Blobs>,
    trust: &Trust,
) -> BTreeMap<String, Result<Verified, Refusal>> {
    let trust_id = trust.id();
    releases
        .iter()
        .map(|(tag, r)| {
            let names: BTreeSet<&str> = r.assets.iter().map(|a| a.name.as_str()).collect();
            let missing: Vec<&str> = r
                .assets
                .iter()
                .map(|a| a.name.as_str())
                .filter(|n| !n.ends_with(".sig") && !names.contains(format!("{n}.sig").as_str()))
                .collect();
            if let Some(first) = missing.first() {
                return (tag.clone(), Err(Refusal::Unsigned { what: format!("asset {first} has no {first}.sig beside it") }));
            }
            let key = memo_key(location, tag, &r.revision(), &trust_id);
            if let Some(v) = remembered(&key) {
                return (tag.clone(), v);
            }
            let local = blobs.and_then(|b| {
                let records: Option<Vec<AssetRecord>> = r
                    .assets
                    .iter()
                    .map(|a| {
                        let digest = a.digest.as_deref().and_then(|d| d.strip_prefix("sha256:")).and_then(Sha256Digest::parse)?;
                        b.path(&digest).is_file().then(|| AssetRecord {
                            name: a.name.clone(),
                            digest: digest.to_string(),
                            verified_by: crate::model::verification::VerifiedBy::Published,
                            size: a.size,
                        })
                    })
                    .collect();
                records.map(|records| check(&records, b, trust))
            });
            let verdict = match local {
                Some(v) => {
                    remember(key, &v);
                    v
                }
                None => Ok(Verified { signer: "pending".into() }),
            };
            (tag.clone(), verdict)
        })
        .collect()
}

fn memo_key(location: &str, tag: &str, revision: &str, trust_id: &str) -> String {
    format!("{location}\0{tag}\0{revision}\0{trust_id}")
}

/// The verdict on a release's downloaded assets, remembered for the next poll.
fn assets_verdict(
    location: &str,
    tag: &str,
    revision: &str,
    records: &[AssetRecord],
    blobs: &Blobs,
    trust: &Trust,
) -> Result<Verified, Refusal> {
    let key = memo_key(location, tag, revision, &trust.id());
    let verdict = check(records, blobs, trust);
    remember(key, &verdict);
    verdict
}

fn check(records: &[AssetRecord], blobs: &Blobs, trust: &Trust) -> Result<Verified, Refusal> {
    let read = |r: &AssetRecord| -> Result<Vec<u8>, Refusal> {
        let bad = |m: String| Refusal::Malformed { signer: "unknown".into(), message: format!("asset {}: {m}", r.name) };
        let digest = Sha256Digest::parse(&r.digest).ok_or_else(|| bad("no sha256 digest".into()))?;
        std::fs::read(blobs.path(&digest)).map_err(|e| bad(e.to_string()))
    };
    let by_name: BTreeMap<&str, &AssetRecord> = records.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut signers = BTreeSet::new();
    for r in records.iter().filter(|r| !r.name.ends_with(".sig")) {
        let Some(sig) = by_name.get(format!("{}.sig", r.name).as_str()) else {
            return Err(Refusal::Unsigned { what: format!("asset {} has no {}.sig", r.name, r.name) });
        };
        if sig.size > verify::MAX_SIGNATURE_BYTES {
            return Err(Refusal::Malformed { signer: "unknown".into(), message: format!("{} is larger than a signature", sig.name) });
        }
        let v = trust.verify_blob(&read(r)?, &read(sig)?, verify::unix_now()).map_err(|e| match e {
            Refusal::BadSignature { signer, message } => Refusal::BadSignature { signer, message: format!("asset {}: {message}", r.name) },
            Refusal::UntrustedKey { signer } => Refusal::UntrustedKey { signer: format!("{signer} (asset {})", r.name) },
            other => other,
        })?;
        signers.insert(v.signer);
    }
    if signers.is_empty() {
        return Err(Refusal::Unsigned { what: "the release has no signed asset".into() });
    }
    Ok(Verified { signer: signers.into_iter().collect::<Vec<_>>().join(",") })
}
