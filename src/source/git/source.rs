//! A Git repository as a release source: its tags, fetched into a mirror in the cache; a
//! release's tree read from the mirror at the tag's commit.

use std::collections::BTreeMap;

use tracing::{error, warn};

use super::super::{At, BoxFuture, Materialised, Polled, ReleaseError, Source};
use crate::cache::{Index, SourceState};
use crate::config::GitSourceConfig;
use crate::release::{Release, short};
use crate::source::{self as source, POLL_TIMEOUT, Push, normalise_url};
use verify::{Refusal, Trust, TrustFiles, Verified};

impl Source for GitSourceConfig {
    fn location(&self) -> String {
        self.url.clone()
    }

    fn allow_moved_tags(&self) -> bool {
        self.allow_moved_tags
    }

    fn trust_files(&self) -> &TrustFiles {
        &self.signatures
    }

    fn poll<'a>(&'a self, at: At<'a>, previous: &'a SourceState, trust: Option<&'a Trust>) -> BoxFuture<'a, source::Result<Polled>> {
        Box::pin(async move {
            let (url, dir, heads, name, auth) =
                (self.url.clone(), at.cache.git_dir(at.key), previous.heads.clone(), at.name.to_owned(), self.auth.clone());
            let task = tokio::task::spawn_blocking(move || super::fetch_with_auth(&name, &url, auth.as_ref(), &dir, &heads));
            let fetched = match tokio::time::timeout(POLL_TIMEOUT, task).await {
                Ok(Ok(result)) => result?,
                Ok(Err(join)) => return Err(source::Error::Task { source_name: at.name.into(), url: self.url.clone(), source: join }),
                Err(_) => return Err(source::Error::Timeout { source_name: at.name.into(), seconds: POLL_TIMEOUT.as_secs() }),
            };
            for (branch, old, new) in &fetched.force_pushed {
                warn!(source = at.name, branch, old = short(old), new = short(new), "branch was force-pushed");
            }
            for tag in &fetched.not_commits {
                warn!(source = at.name, tag, "tag does not point at a commit; ignored");
            }
            let verdicts = trust.map(|t| verdicts(&fetched.refs.tags, &fetched.tag_objects, t, verify::unix_now()));
            Ok(Polled { refs: fetched.refs, verdicts, ..Polled::default() })
        })
    }

    /// A pinned tag pointing anywhere but its pin is not a release.
    fn refuse_unpinned(&self, source: &str, state: &mut SourceState) {
        for (tag, pin) in &self.pins {
            if let Some(commit) = state.tags.get(tag)
                && commit != pin
            {
                error!(source, tag, pinned = short(pin), actual = short(commit), "tag does not point at its pinned commit; refused");
                state.refused.insert(tag.clone(), commit.clone());
                state.tags.remove(tag);
            }
        }
    }

    fn pin_mismatch(&self, source: &str, rel: &Release, _assets: &[crate::model::verification::AssetRecord]) -> Option<String> {
        let pin = self.pins.get(&rel.tag).filter(|pin| **pin != rel.commit)?;
        Some(format!(
            "tag {} is pinned to commit {pin} (git.pins of source {source}) but the release in use is commit {}; {} (fix the pin, or publish a tag at the pinned commit)",
            rel.tag,
            rel.commit,
            source::STAYS
        ))
    }

    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        _state: &'a SourceState,
        mut index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)> {
        let (cache, git_dir, key, commit, source_name, tag) =
            (at.cache.clone(), at.cache.git_dir(at.key), at.key.to_owned(), rel.commit.clone(), rel.source.clone(), rel.tag.clone());
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || {
                let result = cache.release(&mut index, &source_name, &key, &tag, &commit, |tmp| super::materialise(&git_dir, &commit, tmp));
                let result = result.map(|(tree, fetched)| Materialised { tree, fetched, assets: Vec::new(), signed_by: None });
                (index, result.map_err(ReleaseError::Cache))
            });
            match task.await {
                Ok(pair) => pair,
                Err(join) => (Index::default(), Err(ReleaseError::Task(join))),
            }
        })
    }

    /// A push to one of the repository's clone URLs.
    fn concerns(&self, push: &Push<'_>) -> bool {
        push.urls.contains(&normalise_url(&self.url))
    }
}

/// Each accepted tag must be an annotated tag object, signed by a trusted key, naming itself
/// and pointing at the accepted commit.
pub(crate) fn verdicts(
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
