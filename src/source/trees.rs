//! Release trees of sources whose releases are verified blobs (GitHub assets, OCI layers): a
//! verified tree of exactly this revision is used as it is — a restart asks the source nothing
//! for it, and a release deleted upstream stays usable; otherwise the kind brings the release's
//! blobs into the store (verified) and the tree is filled from them.

use super::github::materialise;
use super::{At, Materialised, ReleaseError};
use crate::cache::blobs::Blobs;
use crate::cache::{Index, unpack};
use crate::model::verification::AssetRecord;
use crate::release::Release;

/// `bring` puts the release's blobs into the store and says what they are; `check` judges them
/// (signatures) and says who signed.
pub(super) async fn materialise_blobs(
    at: At<'_>,
    index: Index,
    rel: &Release,
    unpack: unpack::Limits,
    bring: impl AsyncFnOnce(&Blobs) -> Result<Vec<AssetRecord>, ReleaseError>,
    check: impl FnOnce(&[AssetRecord], &Blobs) -> Result<Option<String>, ReleaseError>,
) -> (Index, Result<Materialised, ReleaseError>) {
    let blobs = match Blobs::open(at.cache.root()) {
        Ok(b) => b,
        Err(e) => return (index, Err(ReleaseError::Blobs(e))),
    };
    let tree = at.cache.release_path(at.key, &rel.tag, &rel.commit);
    let cached = if tree.is_dir() { materialise::verify_cached(&tree, &blobs) } else { None };
    let records = match cached {
        Some(records) => records,
        None => {
            if tree.is_dir() {
                let _ = std::fs::remove_dir_all(&tree);
            }
            match bring(&blobs).await {
                Ok(r) => r,
                Err(e) => return (index, Err(e)),
            }
        }
    };
    let signed_by = match check(&records, &blobs) {
        Ok(s) => s,
        Err(e) => return (index, Err(e)),
    };
    let (cache, key, rel) = (at.cache.clone(), at.key.to_owned(), rel.clone());
    let task = tokio::task::spawn_blocking(move || {
        let mut index = index;
        let fill = |tmp: &std::path::Path| materialise::fill(&blobs, &records, tmp, unpack);
        let result = cache.release(&mut index, &rel.source, &key, &rel.tag, &rel.commit, fill);
        let result = result.map(|(tree, fetched)| Materialised { tree, fetched, assets: records.clone(), signed_by });
        (index, result.map_err(ReleaseError::Cache))
    });
    match task.await {
        Ok(pair) => pair,
        Err(join) => (Index::default(), Err(ReleaseError::Task(join))),
    }
}
