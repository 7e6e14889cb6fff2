//! Release sources: where the scheduler's polls go. Each source reports the tags it advertises;
//! [`reconcile`] turns that into the accepted tag set, applying the moved/deleted-tag policy.

pub mod git;
pub mod git_cli;
pub mod github;
pub mod oci;

use std::collections::BTreeMap;

use crate::cache::SourceState;

/// Why polling a source failed; the previous tag set stays.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("source {source_name} ({url}): {source}")]
    Git {
        source_name: String,
        url: String,
        #[source]
        source: Box<git::Error>,
    },
    /// The blocking fetch task panicked or was cancelled.
    #[error("source {source_name} ({url}): poll task failed: {source}")]
    Task {
        source_name: String,
        url: String,
        #[source]
        source: tokio::task::JoinError,
    },
    /// The source's trusted keys (`verify:`) cannot be read or parsed.
    #[error("source {source_name} ({}): {source}", source.path.display())]
    Keys {
        source_name: String,
        #[source]
        source: verify::KeyFileError,
    },
    #[error("source {source_name}: poll did not finish within {seconds}s")]
    Timeout { source_name: String, seconds: u64 },
    #[error("source {source_name}: {source}")]
    Github {
        source_name: String,
        // Boxed: the GitHub error is large and would bloat every source result.
        #[source]
        source: Box<github::Error>,
    },
    #[error("source {source_name}: {source}")]
    Oci {
        source_name: String,
        #[source]
        source: Box<oci::Error>,
    },
}

impl Error {
    /// Whether polling again soon may succeed with nothing changed: the remote's and the cache
    /// volume's trouble passes; a URL, credentials or keys the remote or stacksync refuse wait
    /// for someone to change them. (Polls run on their schedule either way.)
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Git { source, .. } => source.is_transient(),
            Error::Task { .. } | Error::Timeout { .. } => true,
            Error::Keys { source, .. } => source.is_transient(),
            Error::Github { source, .. } => source.is_transient(),
            Error::Oci { source, .. } => source.is_transient(),
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Git { source, .. } => source.reason(),
            Error::Task { .. } => "PollTask",
            Error::Keys { source, .. } => source.reason(),
            Error::Timeout { .. } => "Timeout",
            Error::Github { source, .. } => source.reason(),
            Error::Oci { source, .. } => source.reason(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Refs as a remote advertises them, peeled to commits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteRefs {
    pub tags: BTreeMap<String, String>,
    pub heads: BTreeMap<String, String>,
}

/// Something about a source's tags worth telling an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagEvent {
    New {
        tag: String,
        commit: String,
    },
    /// The tag now points elsewhere. `accepted` is false when policy kept the old commit.
    Moved {
        tag: String,
        old: String,
        new: String,
        accepted: bool,
    },
    Deleted {
        tag: String,
        commit: String,
    },
}

/// Merges what the remote advertises now into the previous state.
///
/// A moved tag keeps its old commit unless `allow_moved_tags`; a deleted tag is dropped. Pure.
pub fn reconcile(previous: &SourceState, url: &str, remote: &RemoteRefs, allow_moved_tags: bool) -> (SourceState, Vec<TagEvent>) {
    let mut next = SourceState { url: url.to_owned(), heads: remote.heads.clone(), ..SourceState::default() };
    let mut events = Vec::new();
    for (tag, new) in &remote.tags {
        match previous.tags.get(tag) {
            None => {
                events.push(TagEvent::New { tag: tag.clone(), commit: new.clone() });
                next.tags.insert(tag.clone(), new.clone());
            }
            Some(old) if old == new => {
                next.tags.insert(tag.clone(), new.clone());
            }
            Some(old) => {
                events.push(TagEvent::Moved { tag: tag.clone(), old: old.clone(), new: new.clone(), accepted: allow_moved_tags });
                if allow_moved_tags {
                    next.tags.insert(tag.clone(), new.clone());
                } else {
                    next.tags.insert(tag.clone(), old.clone());
                    next.refused.insert(tag.clone(), new.clone());
                }
            }
        }
    }
    for (tag, commit) in &previous.tags {
        if !remote.tags.contains_key(tag) {
            events.push(TagEvent::Deleted { tag: tag.clone(), commit: commit.clone() });
        }
    }
    // A source seen for the first time: every tag is "new", which is noise, not news.
    if previous.tags.is_empty() {
        events.retain(|e| !matches!(e, TagEvent::New { .. }));
    }
    (next, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(tags: &[(&str, &str)]) -> RemoteRefs {
        RemoteRefs { tags: tags.iter().map(|(t, c)| ((*t).into(), (*c).into())).collect(), heads: BTreeMap::new() }
    }

    #[test]
    fn moved_tag_is_refused_unless_allowed() {
        let (first, events) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        assert!(events.is_empty());
        let (refused, events) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), false);
        assert_eq!(refused.tags["v1.0.0"], "aaa");
        assert_eq!(refused.refused["v1.0.0"], "bbb");
        assert_eq!(events, vec![TagEvent::Moved { tag: "v1.0.0".into(), old: "aaa".into(), new: "bbb".into(), accepted: false }]);
        let (allowed, _) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), true);
        assert_eq!(allowed.tags["v1.0.0"], "bbb");
    }

    #[test]
    fn refused_tag_stays_refused_on_later_polls() {
        let (first, _) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        let (second, _) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), false);
        let (third, events) = reconcile(&second, "u", &refs(&[("v1.0.0", "bbb")]), false);
        assert_eq!(third.tags["v1.0.0"], "aaa");
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn new_and_deleted_tags_are_reported() {
        let (first, _) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        let (next, events) = reconcile(&first, "u", &refs(&[("v1.1.0", "ccc")]), false);
        assert_eq!(next.tags.len(), 1);
        assert_eq!(
            events,
            vec![
                TagEvent::New { tag: "v1.1.0".into(), commit: "ccc".into() },
                TagEvent::Deleted { tag: "v1.0.0".into(), commit: "aaa".into() }
            ]
        );
    }
}
