//! An OCI registry repository as a release source: its release tags resolved to manifest
//! digests (the "commit" of a release: the tree is pulled by that digest, never by the tag),
//! cosign signatures checked at the poll, and the artifact's layers pulled into the blob store.

use std::collections::{BTreeMap, BTreeSet};

use tracing::info;

use super::super::signed::{remember, remembered};
use super::super::trees::materialise_blobs;
use super::super::{At, BoxFuture, Materialised, Polled, ReleaseError, Source};
use super::client::Client;
use crate::cache::blobs::Blobs;
use crate::cache::{Index, SourceState};
use crate::config::{OciSourceConfig, tag_matches};
use crate::model::Sha256Digest;
use crate::model::verification::AssetRecord;
use crate::release::Release;
use crate::source::{self as source, POLL_TIMEOUT, RemoteRefs};
use verify::{Refusal, Trust, TrustFiles, Verified};

type Verdicts = BTreeMap<String, Result<Verified, Refusal>>;

impl Source for OciSourceConfig {
    fn location(&self) -> String {
        format!("oci://{}/{}", self.repository.registry, self.repository.name)
    }

    fn allow_moved_tags(&self) -> bool {
        self.allow_moved_tags
    }

    fn trust_files(&self) -> &TrustFiles {
        &self.signatures
    }

    fn poll<'a>(&'a self, at: At<'a>, previous: &'a SourceState, trust: Option<&'a Trust>) -> BoxFuture<'a, source::Result<Polled>> {
        Box::pin(async move {
            let (refs, verdicts) = poll(self, at, previous, trust)
                .await
                .map_err(|source| source::Error::Oci { source_name: at.name.to_owned(), source: Box::new(source) })?;
            Ok(Polled { refs, verdicts, ..Polled::default() })
        })
    }

    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        _state: &'a SourceState,
        index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)> {
        Box::pin(async move {
            let unpack = crate::cache::unpack::Limits { max_bytes: self.max_unpacked_bytes, ..Default::default() };
            let bring = async |blobs: &Blobs| pull(self, blobs, rel).await.map_err(ReleaseError::Oci);
            materialise_blobs(at, index, rel, unpack, bring, |_: &[AssetRecord], _: &Blobs| Ok(None)).await
        })
    }

    // A GitHub delivery names a Git repository, never a registry's: the generic webhook (by
    // source name) triggers OCI sources.
}

fn client(o: &OciSourceConfig) -> super::Result<Client> {
    let limits = super::client::Limits {
        page_size: o.page_size,
        request_deadline: o.timeout,
        download_deadline: o.timeout * super::client::DOWNLOAD_FACTOR,
        ..Default::default()
    };
    Client::new(&o.repository, o.insecure, o.ca_file.as_deref(), o.auth.as_ref(), limits)
}

/// Lists the repository's tags and resolves each release tag to its manifest digest. Tags that
/// are not release tags (no version in them, or outside `tagPattern`) are not resolved.
async fn poll(
    o: &OciSourceConfig,
    at: At<'_>,
    previous: &SourceState,
    trust: Option<&Trust>,
) -> super::Result<(RemoteRefs, Option<Verdicts>)> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    let client = client(o)?;
    let location = o.location();
    let bounded = async {
        let (all, pages) = client.tags().await?;
        let wanted: Vec<String> = all
            .iter()
            .filter(|t| crate::model::version::Version::from_tag(t).is_some())
            .filter(|t| o.tag_pattern.as_deref().is_none_or(|p| tag_matches(p, t)))
            .cloned()
            .collect();
        let all: BTreeSet<String> = all.into_iter().collect();
        let client = &client;
        let resolved: Vec<(String, String)> = stream::iter(wanted)
            .map(|tag| async move { client.resolve(&tag).await.map(|d| (tag, d.hex().to_owned())) })
            .buffer_unordered(super::client::RESOLVE_CONCURRENCY)
            .try_collect()
            .await?;
        let resolved: BTreeMap<String, String> = resolved.into_iter().collect();
        let verdicts = match trust {
            Some(trust) => {
                let blobs = Blobs::open(at.cache.root()).map_err(|e| super::Error::Tags {
                    repo: location.clone(),
                    message: format!("cannot open the blob store for signatures: {e}"),
                })?;
                Some(verdicts(client, &location, &blobs, &resolved, &all, trust).await)
            }
            None => None,
        };
        Ok::<_, super::Error>((resolved, pages, verdicts))
    };
    let (resolved, pages, verdicts) = match tokio::time::timeout(POLL_TIMEOUT, bounded).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(super::Error::Tags {
                repo: location,
                message: format!("the poll did not finish within {}s", POLL_TIMEOUT.as_secs()),
            });
        }
    };
    tracing::debug!(source = at.name, tags = resolved.len(), pages, known = previous.tags.len(), "listed OCI tags");
    Ok((RemoteRefs { tags: resolved, heads: BTreeMap::new() }, verdicts))
}

/// Fetches the manifest of `rel` by its pinned digest (verified), then every layer the blob
/// store lacks (each verified while streaming), within the size limits.
async fn pull(o: &OciSourceConfig, blobs: &Blobs, rel: &Release) -> super::Result<Vec<AssetRecord>> {
    let repo = o.location();
    let manifest_err = |message: String| super::Error::Manifest { repo: repo.clone(), reference: format!("release {}", rel.tag), message };
    let digest = Sha256Digest::parse(&rel.commit).ok_or_else(|| manifest_err(format!("`{}` is not a manifest digest", rel.commit)))?;
    let client = client(o)?;
    let bytes = client.manifest(&rel.tag, &digest).await?;
    let artifact = super::parse_manifest(&bytes).map_err(|e| super::Error::Artifact {
        repo: repo.clone(),
        reference: format!("release {}", rel.tag),
        source: Box::new(e),
    })?;
    let declared: u64 = artifact.layers.iter().map(|l| l.size).fold(0, u64::saturating_add);
    if declared > o.max_release_bytes {
        return Err(manifest_err(format!("the layers declare {declared} bytes, more than maxReleaseSize {}", o.max_release_bytes)));
    }
    info!(source = %rel.source, tag = %rel.tag, layers = artifact.layers.len(), artifact_type = artifact.artifact_type.as_deref().unwrap_or("-"), "pulling OCI artifact");
    let mut records = Vec::with_capacity(artifact.layers.len());
    let mut received: u64 = 0;
    for layer in &artifact.layers {
        let cached = blobs.verify(&layer.digest).unwrap_or(false);
        if !cached {
            let left = o.max_release_bytes.saturating_sub(received);
            client.blob(&rel.tag, &layer.title, &layer.digest, blobs, o.max_asset_bytes.min(left)).await?;
        }
        let size = std::fs::metadata(blobs.path(&layer.digest)).map(|m| m.len()).unwrap_or(layer.size);
        received = received.saturating_add(size);
        records.push(AssetRecord {
            name: layer.title.clone(),
            digest: layer.digest.to_string(),
            verified_by: crate::model::verification::VerifiedBy::Registry,
            size,
        });
    }
    if received > o.max_release_bytes {
        return Err(manifest_err(format!("the layers hold {received} bytes, more than maxReleaseSize {}", o.max_release_bytes)));
    }
    Ok(records)
}

/// OCI: the cosign signature of each release tag's manifest (`sha256-<hex>.sig`, listed in
/// `all_tags`), each simple-signing layer checked until one verifies for the digest pulled.
pub(crate) async fn verdicts(
    client: &Client,
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
                            let v = one(client, blobs, &sig_tag, &sig_digest, &hex, trust).await;
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
    stream::iter(owned).map(one).buffer_unordered(super::client::RESOLVE_CONCURRENCY).collect().await
}

async fn one(
    client: &Client,
    blobs: &Blobs,
    sig_tag: &str,
    sig_digest: &Sha256Digest,
    hex: &str,
    trust: &Trust,
) -> Result<Verified, Refusal> {
    let Some(cosign) = &trust.cosign else { return Err(Refusal::NoKeysForKind { kind: "cosign" }) };
    let fetch_err = |e: super::Error| Refusal::Malformed { signer: "unknown".into(), message: format!("cannot fetch {sig_tag}: {e}") };
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

#[cfg(test)]
mod tests {
    use super::*;
    use ::verify;

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
