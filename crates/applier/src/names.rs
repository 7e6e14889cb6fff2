//! Object identities checked as the API server would, before any request URL is built from them:
//! kube appends names and namespaces to the URL path as they are, so a name such as
//! `x/../../secrets/victim` would otherwise reach another resource.

/// Longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;
/// Longest namespace (a DNS label).
const MAX_NAMESPACE: usize = 63;

/// An identity the API server would refuse, or that would reach another resource's URL. The
/// text quotes what was checked (it came from a manifest or a Cluster, never a Secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs, reason = "each variant is its message, which says what the API server would refuse")]
pub enum NameError {
    #[error("the object has no name")]
    Empty,
    #[error("name is {0} characters long; the API server allows at most {MAX_NAME}")]
    TooLong(usize),
    #[error("name {0:?} is not a valid path segment")]
    PathSegment(String),
    #[error("name {name:?} contains {c:?}; the API server would refuse it (names are DNS subdomains)")]
    Character { name: String, c: char },
    #[error("namespace {0:?} is not a DNS label (lowercase letters, digits and `-`, at most {MAX_NAMESPACE})")]
    Namespace(String),
    #[error("kind {0:?} is not a valid kind name")]
    Kind(String),
}

/// Checks an object name. The API server's floor for every kind is a valid path segment (not
/// `.` or `..`, no `/` or `%`); most kinds also require a DNS subdomain. The check here is the
/// floor plus characters that never need escaping in a URL path (letters, digits, `-`, `.`,
/// `_`, `:` as RBAC names use, `@`, `~`), so what is sent is exactly the name — escaping is a
/// no-op by construction.
///
/// # Errors
/// A message saying what is wrong, quoting the name (it came from a manifest, not a Secret).
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(NameError::PathSegment(name.to_owned()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '@' | '~'))) {
        return Err(NameError::Character { name: name.to_owned(), c });
    }
    Ok(())
}

/// Checks a namespace: a DNS label (RFC 1123), as the API server requires.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_namespace(namespace: &str) -> Result<(), NameError> {
    let b = namespace.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_NAMESPACE
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    if ok { Ok(()) } else { Err(NameError::Namespace(namespace.to_owned())) }
}

/// Checks a kind: an identifier (`ConfigMap`), as every served kind is.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_kind(kind: &str) -> Result<(), NameError> {
    let mut chars = kind.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric()) && kind.len() <= 63;
    if ok { Ok(()) } else { Err(NameError::Kind(kind.to_owned())) }
}

/// Checks a whole identity.
///
/// # Errors
/// The first problem found.
pub fn check(kind: &str, namespace: Option<&str>, name: &str) -> Result<(), NameError> {
    check_kind(kind)?;
    if let Some(ns) = namespace {
        check_namespace(ns)?;
    }
    check_name(name)
}

/// Checks a label: the key a qualified name (an optional DNS-subdomain prefix and `/`, then at
/// most 63 of letters, digits, `-`, `_`, `.`, beginning and ending with a letter or digit), the
/// value empty or at most 63 of the same characters, as the API server requires.
///
/// # Errors
/// A message saying what is wrong, quoting the label (it came from a config, not a Secret).
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    fn segment(s: &str) -> bool {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    }
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        p.len() <= 253
            && p.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    if !prefix_ok || !segment(name) {
        return Err(format!("`{key}` is not a label key (an optional DNS prefix and `/`, then up to 63 letters, digits, `-`, `_`, `.`)"));
    }
    if !value.is_empty() && !segment(value) {
        return Err(format!(
            "`{value}` is not a label value (up to 63 letters, digits, `-`, `_`, `.`, beginning and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// `text` when it is at most `max` bytes; otherwise its first bytes, `-` and 16 hex digits of a
/// digest of the whole, `max` bytes in all. For names made from what a release or Cluster is
/// called (a tag is as long as a ClusterClass name, 253 characters) where a shorter limit
/// applies: a file name (255 bytes), an object name with a suffix to come (an Event's). Distinct
/// texts stay distinct, the same text always gives the same name, and a short one is unchanged.
pub fn bounded(text: String, max: usize) -> String {
    use sha2::{Digest, Sha256};
    if text.len() <= max {
        // Returned as it is: nothing allocated for the names that fit (every one, nearly).
        return text;
    }
    let digest = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
    let mut keep = max.saturating_sub(digest.len() + 1);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let prefix = text[..keep].trim_end_matches(['-', '.', '_', '@']);
    format!("{prefix}-{digest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_checked_as_the_api_server_checks_them() {
        for (k, v) in [("clusterstack.x-k8s.io/instance", "owned"), ("app", ""), ("a.b/c_d.e", "x-1.2_3")] {
            assert_eq!(check_label(k, v), Ok(()), "{k}={v}");
        }
        for (k, v) in [("", "x"), ("/a", "x"), ("A.b/c", "x"), ("a/-b", "x"), ("a", "-x"), ("a", &"x".repeat(64)), ("a/b/c", "x")] {
            assert!(check_label(k, v).is_err(), "{k}={v}");
        }
    }

    #[test]
    fn identities_that_would_escape_the_url_are_refused() {
        for name in ["x/../../secrets/victim", "..", ".", "", "a%2Fb", "a?dryRun=All", "a#b", "a b", "é", &"a".repeat(254)] {
            assert!(check_name(name).is_err(), "{name:?}");
        }
        for name in ["web", "system:controller:foo", "v1.example.com", "Upper_Case-1", "user@example.com"] {
            assert!(check_name(name).is_ok(), "{name:?}");
        }
        for ns in ["kube-system", "a", "team-1"] {
            assert!(check_namespace(ns).is_ok(), "{ns}");
        }
        for ns in ["", "-a", "a-", "A", "a/b", "..", "a.b", &"a".repeat(64)] {
            assert!(check_namespace(ns).is_err(), "{ns:?}");
        }
        assert!(check_kind("ConfigMap").is_ok());
        for kind in ["", "Config/Map", "1Map", "Config Map"] {
            assert!(check_kind(kind).is_err(), "{kind:?}");
        }
    }

    #[test]
    fn bounded_names_keep_short_ones_and_tell_long_ones_apart() {
        assert_eq!(bounded("ferrol.v1.0.0".into(), 236), "ferrol.v1.0.0");
        let long = format!("v1.0.0-{}", "a".repeat(246));
        let other = format!("v1.0.0-{}b", "a".repeat(245));
        let (a, b) = (bounded(long.clone(), 236), bounded(other, 236));
        assert!(a.len() <= 236 && b.len() <= 236, "{} {}", a.len(), b.len());
        assert_ne!(a, b, "two tags that differ only at the end");
        assert_eq!(a, bounded(long, 236), "stable");
        assert!(a.starts_with("v1.0.0-aaaa") && a.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()), "{a}");
        // Never cut inside a character.
        assert!(bounded("é".repeat(200), 255).len() <= 255);
    }
}
