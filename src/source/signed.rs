//! The signature policy of every source kind: after a source's poll, every tag whose signature
//! does not verify against the source's `verify` keys (read again at every poll) leaves the
//! accepted tag set — it is never selected, cached or applied — and is recorded with why; the
//! signer of every accepted tag is recorded for the `VERIFIEDBY` column. The checks are
//! [`verify`]'s pure functions; each kind fetches what they need (tag objects from the
//! mirror in `git/`, cosign signature manifests from the registry in `oci/`, `.sig` assets from
//! the blob store in `github/`) and hands its verdicts here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use tracing::{error, info};

use crate::cache::{SignatureRefusal, SourceState};
use crate::model::sync::MutexExt;
use crate::source;
use verify::{Refusal, Trust, TrustFiles, Verified};

/// Loads a source's keys for this poll.
///
/// # Errors
/// A key file cannot be read or parsed: the poll fails and the previous tag set stays.
pub fn load(name: &str, files: &TrustFiles) -> source::Result<Trust> {
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
pub fn apply(
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

/// Verdicts already reached, so an unchanged signature is not fetched and checked at every poll:
/// by source location, tag, what the tag names, the signature's own digest and the key set.
fn memo() -> &'static Mutex<HashMap<String, Result<Verified, Refusal>>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Result<Verified, Refusal>>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

pub(crate) fn remembered(key: &str) -> Option<Result<Verified, Refusal>> {
    memo().locked().get(key).cloned()
}

pub(crate) fn remember(key: String, verdict: &Result<Verified, Refusal>) {
    let mut m = memo().locked();
    // Bounded: a long-running daemon forgets everything at once rather than growing forever.
    if m.len() > 50_000 {
        m.clear();
    }
    m.insert(key, verdict.clone());
}

pub fn refuse(source: &str, state: &mut SourceState, tag: &str, refusal: &Refusal, trust: &Trust) -> bool {
    let Some(commit) = state.tags.remove(tag) else { return false };
    state.signers.remove(tag);
    let message = refusal_message(source, tag, refusal, trust);
    error!(source, tag, commit = %crate::release::short(&commit), reason = refusal.kind(), "{message}");
    state.unsigned.insert(tag.to_owned(), SignatureRefusal { commit, signer: refusal.signer().to_owned(), message });
    true
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
}
