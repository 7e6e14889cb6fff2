//! Release versions read from tag names, and the constraints a subscription puts on them.
//!
//! Two tag families are releases: SovereignCloudStack cluster-stack tags
//! `<provider>-<name>-<k8s major>-<k8s minor>-<version>` where the version is `v<N>` or the hash
//! form `v0-sha-<hash>`, and plain semver tags (`v1.2.3`, `1.2.3-rc.1`). Anything else is not a
//! release and is ignored.

use std::cmp::Ordering;
use std::fmt;

/// The version part of a release tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// A cluster-stack tag; `stack` is `<provider>-<name>-<major>-<minor>`.
    Scs {
        stack: String,
        version: ScsVersion,
    },
    Semver(semver::Version),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScsVersion {
    /// `v<N>`, ordered numerically (`v10` > `v9`).
    Number(u64),
    /// `v0-sha-<hash>`: a development build. Not ordered; only an exact pin selects one.
    Hash(String),
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Scs { version: ScsVersion::Number(n), .. } => write!(f, "v{n}"),
            // The dotted form is what ClusterClass and chart names use.
            Version::Scs { version: ScsVersion::Hash(h), .. } => write!(f, "v0-sha.{h}"),
            Version::Semver(v) => write!(f, "{v}"),
        }
    }
}

impl Version {
    /// Reads a tag name; `None` when the tag is not a release.
    pub fn from_tag(tag: &str) -> Option<Version> {
        Self::scs(tag).or_else(|| {
            let plain = tag.strip_prefix('v').unwrap_or(tag);
            semver::Version::parse(plain).ok().map(Version::Semver)
        })
    }

    fn scs(tag: &str) -> Option<Version> {
        let parts: Vec<&str> = tag.split('-').collect();
        let (version, stack_len) = match parts.as_slice() {
            [.., "v0", "sha", hash] if is_lower_alnum(hash) => (ScsVersion::Hash((*hash).to_owned()), parts.len() - 3),
            [.., last] => (ScsVersion::Number(parse_vn(last)?), parts.len() - 1),
            [] => return None,
        };
        // provider, name (which may itself hold dashes), k8s major, k8s minor.
        let stack = &parts[..stack_len];
        if stack.len() < 4 {
            return None;
        }
        let (names, k8s) = stack.split_at(stack.len() - 2);
        if !k8s.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) || !names.iter().all(|p| is_lower_alnum(p)) {
            return None;
        }
        Some(Version::Scs { stack: stack.join("-"), version })
    }

    /// Orders two versions of the same family; `None` when they are not comparable
    /// (different families or stacks, or a hash version).
    pub fn compare(&self, other: &Version) -> Option<Ordering> {
        match (self, other) {
            (Version::Semver(a), Version::Semver(b)) => Some(a.cmp(b)),
            (Version::Scs { stack: sa, version: ScsVersion::Number(a) }, Version::Scs { stack: sb, version: ScsVersion::Number(b) })
                if sa == sb =>
            {
                Some(a.cmp(b))
            }
            _ => None,
        }
    }
}

impl Version {
    /// The family of a cluster-stack version (`<provider>-<name>-<major>-<minor>`).
    pub fn family(&self) -> Option<&str> {
        match self {
            Version::Scs { stack, .. } => Some(stack),
            Version::Semver(_) => None,
        }
    }

    /// Orders two releases of one family ([`Version::compare`]), or of one line of families
    /// across Kubernetes minors: the older minor first, then `v<N>`. `None` when they are not
    /// comparable (other lines, hash versions, semver against a cluster stack).
    pub fn order(&self, other: &Version) -> Option<Ordering> {
        if let Some(o) = self.compare(other) {
            return Some(o);
        }
        match (self, other) {
            (Version::Scs { stack: sa, version: ScsVersion::Number(a) }, Version::Scs { stack: sb, version: ScsVersion::Number(b) }) => {
                let (la, ka) = family_parts(sa)?;
                let (lb, kb) = family_parts(sb)?;
                (la == lb).then(|| ka.cmp(&kb).then(a.cmp(b)))
            }
            _ => None,
        }
    }
}

/// A family's line and Kubernetes version: `openstack-scs-1-31` is line `openstack-scs` at
/// Kubernetes 1.31.
pub fn family_parts(family: &str) -> Option<(&str, (u64, u64))> {
    let (rest, minor) = family.rsplit_once('-')?;
    let (line, major) = rest.rsplit_once('-')?;
    Some((line, (major.parse().ok()?, minor.parse().ok()?)))
}

/// The cluster-stack families a subscription follows: one (`stack: docker-ferrol-1-27`), or a
/// line across a range of Kubernetes minors (`stack: docker-ferrol` with `kubernetes: ">=1.30,
/// <1.33"`: every `docker-ferrol-1-<minor>` in the range).
#[derive(Debug, Clone, Copy)]
pub struct Families<'a> {
    pub stack: &'a str,
    pub kubernetes: Option<&'a semver::VersionReq>,
}

impl Families<'_> {
    /// Whether `family` (`<provider>-<name>-<major>-<minor>`) is one of them.
    pub fn covers(&self, family: &str) -> bool {
        match self.kubernetes {
            None => family == self.stack,
            Some(range) => family_parts(family)
                .is_some_and(|(line, (major, minor))| line == self.stack && range.matches(&semver::Version::new(major, minor, 0))),
        }
    }

    /// Whether `v` is a cluster-stack version of one of them.
    pub fn covers_version(&self, v: &Version) -> bool {
        v.family().is_some_and(|f| self.covers(f))
    }

    /// Whether a ClusterClass (named like its release tag) is a release of one of them.
    pub fn covers_class(&self, class: &str) -> bool {
        Version::from_tag(class).is_some_and(|v| self.covers_version(&v))
    }

    /// What they are, for messages: `docker-ferrol-1-27`, or `docker-ferrol (Kubernetes >=1.30, <1.33)`.
    pub fn describe(&self) -> String {
        match self.kubernetes {
            None => self.stack.to_owned(),
            Some(r) => format!("{} (Kubernetes {r})", self.stack),
        }
    }
}

fn is_lower_alnum(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn parse_vn(s: &str) -> Option<u64> {
    let digits = s.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Which versions a subscription accepts.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// Every ordered version (never a hash version, which must be pinned).
    Any,
    Semver(semver::VersionReq),
    /// Comparators over SCS `v<N>`, all of which must hold.
    Scs(Vec<(Op, u64)>),
    /// Exactly one SCS hash version.
    ScsHash(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Gt,
    Ge,
    Lt,
    Le,
}

/// A constraint that could not be parsed; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintError(pub String);

impl Constraint {
    /// Parses `*`, an SCS constraint (`v3`, `>=v2, <v5`, `v0-sha-abc123`) or a semver range
    /// (`^1.2`, `>=1.0.0, <2`; a leading `v` on versions is accepted).
    ///
    /// # Errors
    /// When the text is neither form.
    pub fn parse(text: &str) -> Result<Constraint, ConstraintError> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(Constraint::Any);
        }
        let pin = text.strip_prefix('=').unwrap_or(text).trim();
        if let Some(hash) = pin.strip_prefix("v0-sha-").or_else(|| pin.strip_prefix("v0-sha."))
            && is_lower_alnum(hash)
        {
            return Ok(Constraint::ScsHash(hash.to_owned()));
        }
        if let Some(scs) = text.split(',').map(parse_scs_comparator).collect::<Option<Vec<_>>>() {
            return Ok(Constraint::Scs(scs));
        }
        semver::VersionReq::parse(&strip_v(text)).map(Constraint::Semver).map_err(|e| {
            ConstraintError(format!("expected a semver range such as `>=1.2, <2` or a cluster-stack constraint such as `>=v2` ({e})"))
        })
    }

    /// Whether `version` satisfies the constraint.
    pub fn matches(&self, version: &Version) -> bool {
        match (self, version) {
            (Constraint::Any, Version::Scs { version: ScsVersion::Hash(_), .. }) => false,
            (Constraint::Any, _) => true,
            (Constraint::Semver(req), Version::Semver(v)) => req.matches(v),
            (Constraint::Scs(cmps), Version::Scs { version: ScsVersion::Number(n), .. }) => cmps.iter().all(|(op, want)| match op {
                Op::Eq => n == want,
                Op::Gt => n > want,
                Op::Ge => n >= want,
                Op::Lt => n < want,
                Op::Le => n <= want,
            }),
            (Constraint::ScsHash(want), Version::Scs { version: ScsVersion::Hash(h), .. }) => want == h,
            _ => false,
        }
    }

    /// Whether this constraint is written for SCS versions (or accepts any).
    pub fn is_scs_or_any(&self) -> bool {
        !matches!(self, Constraint::Semver(_))
    }
}

fn parse_scs_comparator(part: &str) -> Option<(Op, u64)> {
    let part = part.trim();
    let (op, rest) = [(">=", Op::Ge), ("<=", Op::Le), (">", Op::Gt), ("<", Op::Lt), ("=", Op::Eq)]
        .into_iter()
        .find_map(|(p, op)| part.strip_prefix(p).map(|r| (op, r)))
        .unwrap_or((Op::Eq, part));
    parse_vn(rest.trim()).map(|n| (op, n))
}

/// Drops a `v` written in front of a version number (`>=v1.2` -> `>=1.2`).
fn strip_v(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let at_boundary = prev.is_none_or(|p| matches!(p, ' ' | ',' | '=' | '<' | '>' | '~' | '^'));
        if c == 'v' && at_boundary && chars.peek().is_some_and(char::is_ascii_digit) {
            prev = Some(c);
            continue;
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scs(stack: &str, n: u64) -> Version {
        Version::Scs { stack: stack.into(), version: ScsVersion::Number(n) }
    }

    #[test]
    fn tags_map_to_versions() {
        let table: &[(&str, Option<Version>)] = &[
            ("docker-ferrol-1-27-v2", Some(scs("docker-ferrol-1-27", 2))),
            ("openstack-scs-1-30-v12", Some(scs("openstack-scs-1-30", 12))),
            ("openstack-scs-ha-1-30-v1", Some(scs("openstack-scs-ha-1-30", 1))),
            (
                "docker-ferrol-1-27-v0-sha-hipstsw",
                Some(Version::Scs { stack: "docker-ferrol-1-27".into(), version: ScsVersion::Hash("hipstsw".into()) }),
            ),
            ("v1.2.3", Some(Version::Semver(semver::Version::new(1, 2, 3)))),
            ("1.2.3-rc.1", Some(Version::Semver(semver::Version::parse("1.2.3-rc.1").unwrap()))),
            ("docker-ferrol-1-v2", None),
            ("latest", None),
            ("v1.2", None),
            ("Docker-ferrol-1-27-v2", None),
            ("docker-ferrol-1-27-2", None),
        ];
        for (tag, want) in table {
            assert_eq!(&Version::from_tag(tag), want, "tag {tag}");
        }
    }

    #[test]
    fn scs_versions_order_numerically() {
        assert_eq!(scs("a-b-1-2", 10).compare(&scs("a-b-1-2", 9)), Some(Ordering::Greater));
        assert_eq!(scs("a-b-1-2", 1).compare(&scs("a-b-1-3", 1)), None);
    }

    #[test]
    fn constraints_select_versions() {
        let v = |t: &str| Version::from_tag(t).unwrap();
        let table: &[(&str, &str, bool)] = &[
            ("*", "a-b-1-27-v3", true),
            ("*", "a-b-1-27-v0-sha-abc", false),
            (">=v2", "a-b-1-27-v10", true),
            (">=v2, <v5", "a-b-1-27-v5", false),
            ("v3", "a-b-1-27-v3", true),
            ("v3", "a-b-1-27-v4", false),
            ("v0-sha-abc", "a-b-1-27-v0-sha-abc", true),
            ("v0-sha.abc", "a-b-1-27-v0-sha-abd", false),
            ("^1.2", "v1.9.0", true),
            (">=v1.0.0, <2", "v2.0.0", false),
            (">=1.0.0", "v1.1.0-rc.1", false),
            (">=v2", "v3.0.0", false),
            ("^1", "a-b-1-27-v1", false),
        ];
        for (c, tag, want) in table {
            let constraint = Constraint::parse(c).unwrap();
            assert_eq!(constraint.matches(&v(tag)), *want, "{c} vs {tag}");
        }
    }

    #[test]
    fn bad_constraints_say_what_was_expected() {
        let err = Constraint::parse(">= banana").unwrap_err();
        assert!(err.0.contains("semver range"), "{}", err.0);
    }
}
