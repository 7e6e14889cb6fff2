//! Signed releases in the fetch half: after a source's poll, every tag whose signature does not
//! verify against the source's `verify` keys (read again at every poll) leaves the accepted tag
//! set — it is never selected, cached or applied — and is recorded with why; the signer of every
//! accepted tag is recorded for the `VERIFIEDBY` column. The checks themselves are
//! [`verify`]'s pure functions; this module fetches what they need (tag objects from the
//! mirror, cosign signature manifests from the registry, `.sig` assets from the blob store).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::{error, info};
use verify::{self, Refusal, Trust, TrustFiles, Verified};

use crate::cache::blobs::Blobs;
use crate::cache::{SignatureRefusal, SourceState};
use crate::model::Sha256Digest;
use crate::model::verification::AssetRecord;
use crate::source::{self, oci};

/// Loads a source's keys for this poll.
///
/// # Errors
/// A key file cannot be read or parsed: the poll fails and the previous tag set stays.
pub(super) fn load(name: &str, files: &TrustFiles) -> source::Result<Trust> {
    files.load().map_err(|source| source::Error::Keys { source_name: name.to_owned(), source })
}

/// The whole refusal message: the tag, why, the signer found and the trusted keys.
pub fn refusal_message(source: &str, tag: &str, refusal: &Refusal, trust: &Trust) -> String {
    let keys = trust.fingerprints();
    format!(
        "tag {tag} of source {source} is refused: {refusal}; signer: {}; trusted keys: {}",
        refusal.signer(),
        if keys.is_empty() { "none".to_owned() } else { keys.join(", ") }
    )
}

/// Applies one verdict per tag to `next`: a refused tag leaves `tags` (into `unsigned`), a
/// verified one gets its signer. A refusal is logged once per tag and commit (not again at every
/// poll while it stays the same). Tags without a verdict are refused as unsigned.
pub(super) fn apply(
    source: &str,
    previous: &SourceState,
    next: &mut SourceState,
    trust: &Trust,
    mut verdicts: BTreeMap<String, Result<Verified, Refusal>>,
) {
    next.signers.clear();
    next.unsigned.clear();
    let tags: Vec<(String, String)> = next.tags.iter().map(|(t, c)| (t.clone(), c.clone())).collect();
    for (tag, commit) in tags {
        let verdict =
            verdicts.remove(&tag).unwrap_or_else(|| Err(Refusal::Unsigned { what: format!("no signature was found for tag {tag}") }));
        match verdict {
            Ok(v) => {
                // GitHub's `pending` (every asset has a `.sig`; checked when cached) is not news.
                if v.signer != "pending" && (previous.unsigned.contains_key(&tag) || previous.signers.get(&tag) != Some(&v.signer)) {
                    info!(source, tag, signer = %v.signer, "release signature verified");
                }
                next.signers.insert(tag, v.signer);
            }
            Err(refusal) => {
                let message = refusal_message(source, &tag, &refusal, trust);
                let record = SignatureRefusal { commit: commit.clone(), signer: refusal.signer().to_owned(), message };
                if previous.unsigned.get(&tag) != Some(&record) {
                    error!(source, tag, commit = %crate::release::short(&commit), reason = refusal.kind(), "{}", record.message);
                }
                next.tags.remove(&tag);
                next.unsigned.insert(tag, record);
            }
        }
    }
}

/// Git: each accepted tag must be an annotated tag object, signed by a trusted key, naming
/// itself and pointing at the accepted commit.
pub(super) fn git_verdicts(
    tags: &BTreeMap<String, String>,
    objects: &BTreeMap<String, Vec<u8>>,
    trust: &Trust,
    now: i64,
) -> BTreeMap<String, Result<Verified, Refusal>> {
    tags.iter()
        .map(|(tag, commit)| {
            let verdict = match objects.get(tag) {
                None => Err(Refusal::Unsigned { what: format!("{tag} is a lightweight tag (a release must be a signed annotated tag)") }),
                Some(object) => trust.verify_git_tag(tag, object, now).and_then(|v| {
                    let target = verify::gittag::split(object).map(|t| String::from_utf8_lossy(t.object).into_owned()).unwrap_or_default();
                    if target == *commit {
                        Ok(v)
                    } else {
                        Err(Refusal::WrongSubject {
                            signer: v.signer,
                            signed: format!("object {target}"),
                            expected: format!("commit {commit}"),
                        })
                    }
                }),
            };
            (tag.clone(), verdict)
        })
        .collect()
}

/// Verdicts already reached, so an unchanged signature is not fetched and checked at every poll:
/// by source location, tag, what the tag names, the signature's own digest and the key set.
fn memo() -> &'static Mutex<HashMap<String, Result<Verified, Refusal>>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Result<Verified, Refusal>>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

fn remembered(key: &str) -> Option<Result<Verified, Refusal>> {
    memo().lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
}

fn remember(key: String, verdict: &Result<Verified, Refusal>) {
    let mut m = memo().lock().unwrap_or_else(PoisonError::into_inner);
    // Bounded: a long-running daemon forgets everything at once rather than growing forever.
    if m.len() > 50_000 {
        m.clear();
    }
    m.insert(key, verdict.clone());
}

/// OCI: the cosign signature of each release tag's manifest (`sha256-<hex>.sig`, listed in
/// `all_tags`), each simple-signing layer checked until one verifies for the digest pulled.
pub(super) async fn oci_verdicts(
    client: &oci::client::Client,
    location: &str,
    blobs: &Blobs,
    resolved: &BTreeMap<String, String>,
    all_tags: &std::collections::BTreeSet<String>,
    trust: &Trust,
) -> BTreeMap<String, Result<Verified, Refusal>> {
    use futures_util::stream::{self, StreamExt};
    let trust_id = trust.id();
    let trust_id = &trust_id;
    let one = |(tag, hex): (String, String)| {
        async move {
            let sig_tag = verify::cosign::signature_tag(&hex);
            if !all_tags.contains(&sig_tag) {
                return (tag, Err(Refusal::Unsigned { what: format!("no cosign signature (tag {sig_tag} does not exist)") }));
            }
            let verdict = match client.resolve(&sig_tag).await {
                Err(e) => Err(Refusal::Malformed { signer: "unknown".into(), message: format!("cannot resolve {sig_tag}: {e}") }),
                Ok(sig_digest) => {
                    let key = format!("{location}\0{tag}\0{hex}\0{sig_digest}\0{trust_id}");
                    match remembered(&key) {
                        Some(v) => v,
                        None => {
                            let v = oci_one(client, blobs, &sig_tag, &sig_digest, &hex, trust).await;
                            // A registry that failed to answer decides nothing: asked again next poll.
                            if !matches!(&v, Err(Refusal::Malformed { message, .. }) if message.starts_with("cannot fetch")) {
                                remember(key, &v);
                            }
                            v
                        }
                    }
                }
            };
            (tag, verdict)
        }
    };
    // As many at once as tags are resolved: one HEAD per signed tag, the rest only when new.
    let owned: Vec<(String, String)> = resolved.iter().map(|(t, h)| (t.clone(), h.clone())).collect();
    stream::iter(owned).map(one).buffer_unordered(oci::client::RESOLVE_CONCURRENCY).collect().await
}

async fn oci_one(
    client: &oci::client::Client,
    blobs: &Blobs,
    sig_tag: &str,
    sig_digest: &Sha256Digest,
    hex: &str,
    trust: &Trust,
) -> Result<Verified, Refusal> {
    let Some(cosign) = &trust.cosign else { return Err(Refusal::NoKeysForKind { kind: "cosign" }) };
    let fetch_err = |e: oci::Error| Refusal::Malformed { signer: "unknown".into(), message: format!("cannot fetch {sig_tag}: {e}") };
    let bytes = client.manifest(sig_tag, sig_digest).await.map_err(fetch_err)?;
    let layers = signature_layers(&bytes)?;
    if layers.is_empty() {
        return Err(Refusal::Unsigned { what: format!("{sig_tag} holds no cosign signature layer") });
    }
    let mut last = None;
    for (digest, signature) in layers {
        if !blobs.verify(&digest).unwrap_or(false) {
            client.blob(sig_tag, "simple-signing payload", &digest, blobs, verify::MAX_SIGNATURE_BYTES).await.map_err(fetch_err)?;
        }
        let payload = std::fs::read(blobs.path(&digest)).map_err(|e| Refusal::Malformed {
            signer: "unknown".into(),
            message: format!("cannot fetch {sig_tag}: reading the payload: {e}"),
        })?;
        match cosign.verify_payload(&payload, &signature, &format!("sha256:{hex}")) {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(Refusal::Unsigned { what: sig_tag.to_owned() }))
}

/// The simple-signing layers of a cosign signature manifest: (payload digest, base64 signature).
fn signature_layers(manifest: &[u8]) -> Result<Vec<(Sha256Digest, String)>, Refusal> {
    let malformed = |message: String| Refusal::Malformed { signer: "unknown".into(), message };
    let v: serde_json::Value =
        serde_json::from_slice(manifest).map_err(|e| malformed(format!("the signature manifest is not JSON: {e}")))?;
    let mut out = Vec::new();
    for layer in v["layers"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(sig) = layer["annotations"][verify::cosign::SIGNATURE_ANNOTATION].as_str() else { continue };
        let digest = layer["digest"]
            .as_str()
            .and_then(|d| d.strip_prefix("sha256:"))
            .and_then(Sha256Digest::parse)
            .ok_or_else(|| malformed("a signature layer's digest is not sha256".into()))?;
        let size = layer["size"].as_u64().unwrap_or(0);
        if size > verify::MAX_SIGNATURE_BYTES {
            return Err(malformed(format!("a signature payload of {size} bytes is larger than {}", verify::MAX_SIGNATURE_BYTES)));
        }
        out.push((digest, sig.to_owned()));
    }
    Ok(out)
}

/// GitHub, at poll time: every asset of each release needs a `<asset>.sig` beside it. A release
/// whose signatures were already checked under these keys keeps its verdict; one whose assets
/// (with published digests) are all in the blob store already is checked now, locally — so a key
/// rotated out counts at this poll for a release already cached; any other is checked when it is
/// downloaded (`pending`).
pub(super) fn github_verdicts(
    location: &str,
    releases: &BTreeMap<String, crate::source::github::GhRelease>,
    blobs: Option<&Blobs>,
    trust: &Trust,
) -> BTreeMap<String, Result<Verified, Refusal>> {
    let trust_id = trust.id();
    releases
        .iter()
        .map(|(tag, r)| {
            let names: std::collections::BTreeSet<&str> = r.assets.iter().map(|a| a.name.as_str()).collect();
            let missing: Vec<&str> = r
                .assets
                .iter()
                .map(|a| a.name.as_str())
                .filter(|n| !n.ends_with(".sig") && !names.contains(format!("{n}.sig").as_str()))
                .collect();
            if let Some(first) = missing.first() {
                return (tag.clone(), Err(Refusal::Unsigned { what: format!("asset {first} has no {first}.sig beside it") }));
            }
            let key = github_key(location, tag, &r.revision(), &trust_id);
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
                records.map(|records| github_check(&records, b, trust))
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

/// GitHub: after a failed materialisation of `rel`, its signature refusal under the keys as the
/// files say now — `None` when it failed for another reason (a download, a digest).
pub fn github_refusal(g: &crate::config::GithubSourceConfig, tag: &str, revision: &str) -> Option<(Refusal, Trust)> {
    if !g.signatures.is_set() {
        return None;
    }
    let trust = g.signatures.load().ok()?;
    let location = format!("{}#{}", g.api_url, g.repo);
    match remembered(&github_key(&location, tag, revision, &trust.id()))? {
        Err(r) => Some((r, trust)),
        Ok(_) => None,
    }
}

/// Takes a tag out of the accepted set of `state` for `refusal` (logged once, like a poll's).
/// Returns whether it was there (whether anything changed).
pub fn refuse(source: &str, state: &mut SourceState, tag: &str, refusal: &Refusal, trust: &Trust) -> bool {
    let Some(commit) = state.tags.remove(tag) else { return false };
    state.signers.remove(tag);
    let message = refusal_message(source, tag, refusal, trust);
    error!(source, tag, commit = %crate::release::short(&commit), reason = refusal.kind(), "{message}");
    state.unsigned.insert(tag.to_owned(), SignatureRefusal { commit, signer: refusal.signer().to_owned(), message });
    true
}

fn github_key(location: &str, tag: &str, revision: &str, trust_id: &str) -> String {
    format!("{location}\0{tag}\0{revision}\0{trust_id}")
}

/// GitHub, once the assets are in the blob store: each asset against its `.sig` (cosign
/// `sign-blob`, or SSH `-n file`). The verdict is remembered for the poll.
///
/// # Errors
/// The refusal of the first asset that does not verify.
pub(super) fn github_assets(
    location: &str,
    tag: &str,
    revision: &str,
    records: &[AssetRecord],
    blobs: &Blobs,
    trust: &Trust,
) -> Result<Verified, Refusal> {
    let key = github_key(location, tag, revision, &trust.id());
    let verdict = github_check(records, blobs, trust);
    remember(key, &verdict);
    verdict
}

fn github_check(records: &[AssetRecord], blobs: &Blobs, trust: &Trust) -> Result<Verified, Refusal> {
    let read = |r: &AssetRecord| -> Result<Vec<u8>, Refusal> {
        let bad = |m: String| Refusal::Malformed { signer: "unknown".into(), message: format!("asset {}: {m}", r.name) };
        let digest = Sha256Digest::parse(&r.digest).ok_or_else(|| bad("no sha256 digest".into()))?;
        std::fs::read(blobs.path(&digest)).map_err(|e| bad(e.to_string()))
    };
    let by_name: BTreeMap<&str, &AssetRecord> = records.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut signers = std::collections::BTreeSet::new();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_tags_leave_the_tag_set_and_are_logged_once() {
        let mut next = SourceState::default();
        next.tags.insert("v1.0.0".into(), "a".repeat(40));
        next.tags.insert("v2.0.0".into(), "b".repeat(40));
        let trust = Trust::default();
        let verdicts: BTreeMap<_, _> = [("v1.0.0".to_owned(), Ok(Verified { signer: "ssh:SHA256:x".into() }))].into_iter().collect();
        apply("s", &SourceState::default(), &mut next, &trust, verdicts);
        assert_eq!(next.tags.keys().collect::<Vec<_>>(), vec!["v1.0.0"]);
        assert_eq!(next.signers["v1.0.0"], "ssh:SHA256:x");
        let r = &next.unsigned["v2.0.0"];
        assert_eq!(r.signer, "unsigned");
        assert!(r.message.contains("tag v2.0.0 of source s is refused") && r.message.contains("trusted keys: none"), "{}", r.message);
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
            (rel("v2.0.0", "c2"), None, Some(crate::status::Reason::SignatureInvalid)),
            (rel("v2.0.0", "c9"), None, None),
        ];
        for (r, signer, reason) in table {
            let (s, m) = super::super::fetch::signature(Some(&state), &r);
            assert_eq!(s.as_deref(), signer, "{r:?}");
            assert_eq!(m.as_ref().map(|m| m.reason), reason, "{r:?}");
            assert!(m.is_none_or(|m| m.message.starts_with("why; the release in use is not applied again")));
        }
        assert_eq!(super::super::fetch::signature(None, &rel("v1.0.0", "c1")), (None, None));
    }

    #[test]
    fn signature_layers_of_a_cosign_manifest() {
        let hex = "a".repeat(64);
        let m = format!(
            r#"{{"schemaVersion":2,"layers":[{{"mediaType":"{}","digest":"sha256:{hex}","size":250,"annotations":{{"{}":"MEUC"}}}},{{"digest":"sha256:{hex}","size":1}}]}}"#,
            verify::cosign::SIMPLE_SIGNING,
            verify::cosign::SIGNATURE_ANNOTATION
        );
        let layers = signature_layers(m.as_bytes()).unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].1, "MEUC");
    }
}
