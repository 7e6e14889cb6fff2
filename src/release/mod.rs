//! Releases: tag names read as versions, and the choice of which release a subscription runs.

pub mod metadata;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use crate::model::version::{Constraint, Families, Version};

use crate::model::Wanted;

/// The release a subscription adopted earlier (in use): tag and commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adopted<'a> {
    pub source: &'a str,
    pub tag: &'a str,
    pub commit: &'a str,
}

/// One release of a source: a tag at a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub source: String,
    pub tag: String,
    pub commit: String,
    pub version: Version,
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.tag, short(&self.commit))
    }
}

/// The first 12 hex digits of a commit, for humans.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// The release chosen for a subscription, and why when it is not simply the newest match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub release: Release,
    pub note: Option<String>,
}

/// Why no release can be chosen. Permanent: it changes only when the source advertises another
/// tag or the config another constraint (both retry the selection by themselves).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Nothing the source advertises fits the stack and constraint.
    #[error("no release matches: looking for {family} satisfying `{version}`; tags seen: {seen}", family = family(stack.as_deref()), seen = seen(tags, *more))]
    NoMatch {
        source_name: String,
        stack: Option<String>,
        /// The constraint as written.
        version: String,
        /// The first tags seen (at most 10), and how many more there were.
        tags: Vec<String>,
        more: usize,
    },
}

impl Error {
    /// Never: see the type.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NoMatch { .. } => "NoReleaseMatches",
        }
    }
}

fn family(stack: Option<&str>) -> String {
    match stack {
        Some(s) => format!("cluster-stack tags of `{s}`"),
        None => "semver tags".to_owned(),
    }
}

fn seen(tags: &[String], more: usize) -> String {
    if tags.is_empty() {
        return "none".to_owned();
    }
    tags.join(", ") + &if more > 0 { format!(" and {more} more") } else { String::new() }
}

/// Picks the release `sub` should run from a source's accepted `tags` (tag -> commit).
///
/// The newest version matching the stack and constraint wins, except:
/// - with `autoUpgrade: false`, an adopted release that still matches is kept;
/// - an adopted release newer than anything advertised (its tag was deleted) is kept rather than
///   silently downgrading.
///
/// # Errors
/// [`Error::NoMatch`] when nothing matches.
pub fn select(sub: &Wanted<'_>, tags: &BTreeMap<String, String>, adopted: Option<Adopted<'_>>) -> Result<Selection, Error> {
    let fits = |v: &Version| sub.kind_of(v) && sub.constraint.matches(v);
    let release = |tag: &str, commit: &str, version: Version| Release {
        source: sub.source.to_owned(),
        tag: tag.to_owned(),
        commit: commit.to_owned(),
        version,
    };
    let newest = tags
        .iter()
        .filter_map(|(tag, commit)| Version::from_tag(tag).filter(|v| fits(v)).map(|v| release(tag, commit, v)))
        .max_by(|a, b| a.version.order(&b.version).unwrap_or(Ordering::Equal).then_with(|| a.tag.cmp(&b.tag)));
    let adopted = adopted
        .filter(|a| a.source == sub.source)
        .and_then(|a| Version::from_tag(a.tag).filter(|v| fits(v)).map(|v| release(a.tag, a.commit, v)));

    match (newest, adopted) {
        (None, None) => Err(no_match(sub, tags)),
        (Some(n), None) => Ok(Selection { release: n, note: None }),
        (None, Some(a)) => {
            let note = format!("tag {} is no longer advertised; staying on it", a.tag);
            Ok(Selection { release: a, note: Some(note) })
        }
        (Some(n), Some(a)) => {
            let still_there = tags.get(&a.tag) == Some(&a.commit);
            if !sub.auto_upgrade && still_there {
                let note = (n.tag != a.tag).then(|| format!("{} is available; autoUpgrade is off", n.tag));
                return Ok(Selection { release: a, note });
            }
            if !still_there && a.version.order(&n.version) == Some(Ordering::Greater) {
                let note = format!("tag {} is no longer advertised; staying on it rather than downgrading to {}", a.tag, n.tag);
                return Ok(Selection { release: a, note: Some(note) });
            }
            Ok(Selection { release: n, note: None })
        }
    }
}

fn no_match(sub: &Wanted<'_>, tags: &BTreeMap<String, String>) -> Error {
    Error::NoMatch {
        source_name: sub.source.to_owned(),
        stack: sub.stack.map(str::to_owned),
        version: sub.version.to_owned(),
        tags: tags.keys().take(10).cloned().collect(),
        more: tags.len().saturating_sub(10),
    }
}

/// The releases a cluster-stack subscription offers, newest first: of each family it follows
/// (one, or a line's families in its Kubernetes range), the newest `count` tags that
/// `constraint` allows. Pure: `tags` is what the source advertised (tag -> commit).
pub fn offered(
    source: &str,
    tags: &BTreeMap<String, String>,
    families: Families<'_>,
    constraint: &Constraint,
    count: usize,
) -> Vec<Release> {
    let mut all: Vec<Release> = tags
        .iter()
        .filter_map(|(tag, commit)| {
            let v = Version::from_tag(tag)?;
            let fits = families.covers_version(&v) && constraint.matches(&v);
            fits.then(|| Release { source: source.to_owned(), tag: tag.clone(), commit: commit.clone(), version: v })
        })
        .collect();
    all.sort_by(|a, b| b.version.order(&a.version).unwrap_or(Ordering::Equal).then_with(|| b.tag.cmp(&a.tag)));
    let mut per_family: BTreeMap<String, usize> = BTreeMap::new();
    all.retain(|r| {
        let n = per_family.entry(r.version.family().unwrap_or_default().to_owned()).or_default();
        *n += 1;
        *n <= count
    });
    all
}

/// Why a Cluster's class names no release this subscription can give it. Permanent: the
/// Cluster's class, the source's tags or the config must change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassError {
    /// The class is not `<stack>-<version>` of this stack (`expected` says what is).
    OtherStack { class: String, stack: String, expected: String },
    /// The class names a release the source does not advertise (or the constraint excludes).
    NotAvailable { class: String },
}

impl std::error::Error for ClassError {}

impl ClassError {
    /// Never: see the type.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ClassError::OtherStack { .. } => "ClassOfOtherStack",
            ClassError::NotAvailable { .. } => "ClassNotAvailable",
        }
    }
}

impl fmt::Display for ClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassError::OtherStack { class, stack, expected } => {
                write!(f, "ClusterClass `{class}` is not a release of cluster stack `{stack}` (expected {expected})")
            }
            ClassError::NotAvailable { class } => write!(f, "ClusterClass `{class}` names a release that is not available"),
        }
    }
}

/// The release a Cluster whose `spec.topology.class` is `class` runs: a cluster stack's
/// ClusterClass is named like its release tag (`<provider>-<name>-<k8s major>-<k8s minor>-<version>`).
/// `known` are the tags the source advertised plus the releases still cached (tag -> commit).
///
/// # Errors
/// The class belongs to another stack, or its release is not known.
pub fn for_class(source: &str, class: &str, families: Families<'_>, known: &BTreeMap<String, String>) -> Result<Release, ClassError> {
    let stack = families.describe();
    let expected = match families.kubernetes {
        None => format!("`{stack}-<version>`"),
        Some(range) => format!("`{}-<k8s major>-<k8s minor>-<version>` with Kubernetes {range}", families.stack),
    };
    match Version::from_tag(class) {
        Some(v @ Version::Scs { .. }) if families.covers_version(&v) => match known.get(class) {
            Some(commit) => Ok(Release { source: source.to_owned(), tag: class.to_owned(), commit: commit.clone(), version: v }),
            None => Err(ClassError::NotAvailable { class: class.to_owned() }),
        },
        _ => Err(ClassError::OtherStack { class: class.to_owned(), stack, expected }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaks: test fixtures live for the whole test process.
    fn sub(stack: Option<&str>, version: &str, auto_upgrade: bool) -> Wanted<'static> {
        Wanted {
            source: "src",
            stack: stack.map(|s| &*Box::leak(s.to_owned().into_boxed_str())),
            kubernetes: None,
            version: Box::leak(version.to_owned().into_boxed_str()),
            constraint: Box::leak(Box::new(Constraint::parse(version).unwrap())),
            auto_upgrade,
        }
    }

    fn one(stack: &'static str) -> Families<'static> {
        Families { stack, kubernetes: None }
    }

    fn tags(list: &[&str]) -> BTreeMap<String, String> {
        list.iter().map(|t| ((*t).to_owned(), format!("c-{t}"))).collect()
    }

    fn adopted(tag: &str) -> Adopted<'static> {
        Adopted { source: "src", tag: Box::leak(tag.to_owned().into_boxed_str()), commit: Box::leak(format!("c-{tag}").into_boxed_str()) }
    }

    #[test]
    fn newest_matching_release_wins() {
        let all = tags(&[
            "docker-ferrol-1-27-v2",
            "docker-ferrol-1-27-v10",
            "docker-ferrol-1-27-v9",
            "docker-ferrol-1-28-v11",
            "docker-ferrol-1-27-v0-sha-abc",
            "v1.0.0",
            "v1.4.0",
            "v2.0.0",
            "v1.5.0-rc.1",
        ]);
        let table: &[(Option<&str>, &str, &str)] = &[
            (Some("docker-ferrol-1-27"), "*", "docker-ferrol-1-27-v10"),
            (Some("docker-ferrol-1-27"), "<v10", "docker-ferrol-1-27-v9"),
            (Some("docker-ferrol-1-27"), "v2", "docker-ferrol-1-27-v2"),
            (Some("docker-ferrol-1-27"), "v0-sha-abc", "docker-ferrol-1-27-v0-sha-abc"),
            (Some("docker-ferrol-1-28"), ">=v1", "docker-ferrol-1-28-v11"),
            (None, "*", "v2.0.0"),
            (None, "^1", "v1.4.0"),
            (None, ">=1.5.0-rc.1, <2", "v1.5.0-rc.1"),
        ];
        for (stack, version, want) in table {
            let got = select(&sub(*stack, version, true), &all, None).unwrap();
            assert_eq!(&got.release.tag, want, "{stack:?} {version}");
        }
        let err = select(&sub(Some("docker-ferrol-1-29"), "*", true), &all, None).unwrap_err();
        assert!(err.to_string().contains("docker-ferrol-1-29"), "{err}");
        assert_eq!(err.reason(), "NoReleaseMatches");
    }

    #[test]
    fn auto_upgrade_off_keeps_the_adopted_release() {
        let all = tags(&["v1.0.0", "v1.1.0"]);
        let got = select(&sub(None, "*", false), &all, Some(adopted("v1.0.0"))).unwrap();
        assert_eq!(got.release.tag, "v1.0.0");
        assert!(got.note.unwrap().contains("v1.1.0 is available"));
        let got = select(&sub(None, "*", true), &all, Some(adopted("v1.0.0"))).unwrap();
        assert_eq!(got.release.tag, "v1.1.0");
    }

    #[test]
    fn deleted_tag_does_not_downgrade() {
        let all = tags(&["v1.0.0"]);
        let got = select(&sub(None, "*", true), &all, Some(adopted("v1.1.0"))).unwrap();
        assert_eq!(got.release.tag, "v1.1.0");
        // ...unless the constraint no longer allows it: an explicit downgrade.
        let got = select(&sub(None, "<1.1", true), &all, Some(adopted("v1.1.0"))).unwrap();
        assert_eq!(got.release.tag, "v1.0.0");
    }

    #[test]
    fn offered_is_the_newest_allowed_releases_of_the_stack() {
        let t = tags(&["docker-ferrol-1-27-v1", "docker-ferrol-1-27-v2", "docker-ferrol-1-27-v3", "docker-ferrol-1-28-v9", "v1.0.0"]);
        let any = Constraint::parse("*").unwrap();
        let names = |rs: Vec<Release>| rs.into_iter().map(|r| r.tag).collect::<Vec<_>>();
        assert_eq!(names(offered("src", &t, one("docker-ferrol-1-27"), &any, 2)), ["docker-ferrol-1-27-v3", "docker-ferrol-1-27-v2"]);
        let upto2 = Constraint::parse("<=v2").unwrap();
        assert_eq!(names(offered("src", &t, one("docker-ferrol-1-27"), &upto2, 3)), ["docker-ferrol-1-27-v2", "docker-ferrol-1-27-v1"]);
    }

    #[test]
    fn a_class_names_its_release() {
        let t = tags(&["docker-ferrol-1-27-v2"]);
        let r = for_class("src", "docker-ferrol-1-27-v2", one("docker-ferrol-1-27"), &t).unwrap();
        assert_eq!((r.tag.as_str(), r.commit.as_str()), ("docker-ferrol-1-27-v2", "c-docker-ferrol-1-27-v2"));
        assert_eq!(
            for_class("src", "docker-ferrol-1-27-v7", one("docker-ferrol-1-27"), &t),
            Err(ClassError::NotAvailable { class: "docker-ferrol-1-27-v7".into() })
        );
        assert!(matches!(for_class("src", "openstack-alpha-1-29-v1", one("docker-ferrol-1-27"), &t), Err(ClassError::OtherStack { .. })));
        assert!(matches!(for_class("src", "my-own-class", one("docker-ferrol-1-27"), &t), Err(ClassError::OtherStack { .. })));
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    fn line(range: &str) -> Families<'static> {
        Families { stack: "openstack-scs", kubernetes: Some(Box::leak(Box::new(semver::VersionReq::parse(range).unwrap()))) }
    }

    fn tags(list: &[&str]) -> BTreeMap<String, String> {
        list.iter().map(|t| ((*t).to_owned(), format!("c-{t}"))).collect()
    }

    #[test]
    fn a_line_offers_the_newest_of_each_family_in_its_kubernetes_range() {
        let t = tags(&[
            "openstack-scs-1-29-v9",
            "openstack-scs-1-30-v1",
            "openstack-scs-1-30-v2",
            "openstack-scs-1-30-v3",
            "openstack-scs-1-31-v1",
            "openstack-scs-1-32-v4",
            "openstack-scs-1-33-v1",
            "openstack-other-1-31-v5",
            "openstack-scs-1-31-v0-sha-abc",
        ]);
        let names = |rs: Vec<Release>| rs.into_iter().map(|r| r.tag).collect::<Vec<_>>();
        assert_eq!(
            names(offered("src", &t, line(">=1.30, <1.33"), &Constraint::Any, 2)),
            ["openstack-scs-1-32-v4", "openstack-scs-1-31-v1", "openstack-scs-1-30-v3", "openstack-scs-1-30-v2"],
            "newest first, two of each family, nothing of 1.29, 1.33 or another line"
        );
        assert!(line(">=1.30, <1.33").covers_class("openstack-scs-1-31-v1"));
        assert!(!line(">=1.30, <1.33").covers_class("openstack-scs-1-33-v1"));
        let r = for_class("src", "openstack-scs-1-31-v1", line(">=1.30, <1.33"), &t).unwrap();
        assert_eq!(r.commit, "c-openstack-scs-1-31-v1");
        let e = for_class("src", "openstack-scs-1-29-v9", line(">=1.30, <1.33"), &t).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ClusterClass `openstack-scs-1-29-v9` is not a release of cluster stack `openstack-scs (Kubernetes >=1.30, <1.33)` \
             (expected `openstack-scs-<k8s major>-<k8s minor>-<version>` with Kubernetes >=1.30, <1.33)"
        );
    }

    #[test]
    fn releases_of_a_line_are_ordered_by_kubernetes_minor_then_version() {
        let v = |t: &str| Version::from_tag(t).unwrap();
        assert_eq!(v("openstack-scs-1-31-v1").order(&v("openstack-scs-1-30-v9")), Some(Ordering::Greater));
        assert_eq!(v("openstack-scs-1-30-v2").order(&v("openstack-scs-1-30-v10")), Some(Ordering::Less));
        assert_eq!(v("openstack-scs-1-30-v2").order(&v("openstack-other-1-31-v1")), None);
        let wanted = Wanted {
            source: "src",
            stack: Some("openstack-scs"),
            kubernetes: line(">=1.30, <1.33").kubernetes,
            version: "*",
            constraint: &Constraint::Any,
            auto_upgrade: true,
        };
        let t = tags(&["openstack-scs-1-30-v3", "openstack-scs-1-32-v1", "openstack-scs-1-33-v1"]);
        assert_eq!(select(&wanted, &t, None).unwrap().release.tag, "openstack-scs-1-32-v1");
    }
}
