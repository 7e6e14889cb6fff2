//! Which digest each release asset must have, decided before anything is downloaded: the
//! asset's published `digest`, else a checksums asset of the release, else a pin in the config.
//! Fail closed: with `verify: required` an asset with none of these refuses the whole release.
//! Pure functions.

use std::collections::BTreeMap;

use super::GhAsset;
use crate::model::Sha256Digest;

/// Names of release assets that hold checksums of the others (GNU coreutils format).
pub fn is_checksums_asset(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(lower.as_str(), "sha256sums" | "sha256sums.txt" | "checksums.txt" | "checksums.sha256") || lower.ends_with(".sha256")
}

use crate::model::source::Verify;
use crate::model::verification::VerifiedBy;

/// How a release's content was verified, in one short string for a printer column: `git` for a
/// Git release (no assets: content-addressed objects), else the distinct asset verifications
/// joined with `+` (`published+checksums`). The checksums file itself (`reference`) is left
/// out: it is what the `checksums` assets were checked against. Pure.
pub fn summary(by: impl IntoIterator<Item = VerifiedBy>) -> String {
    let mut words: Vec<&str> = by.into_iter().filter(|b| *b != VerifiedBy::Reference).map(VerifiedBy::word).collect();
    words.sort_unstable();
    words.dedup();
    if words.is_empty() { "git".to_owned() } else { words.join("+") }
}

/// Parses GNU coreutils checksum lines (`<hex>  <name>` or `<hex> *<name>`), or a `.sha256` file
/// holding only the hex for `single_name`.
pub fn parse_checksums(text: &str, single_name: Option<&str>) -> BTreeMap<String, Sha256Digest> {
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut parts = line.splitn(2, char::is_whitespace);
        let (Some(hex), rest) = (parts.next(), parts.next()) else { continue };
        let Some(digest) = Sha256Digest::parse(hex) else { continue };
        match rest.map(|r| r.trim_start().trim_start_matches('*').trim()) {
            Some(name) if !name.is_empty() => {
                out.insert(name.trim_start_matches("./").to_owned(), digest);
            }
            _ => {
                if let Some(n) = single_name {
                    out.insert(n.to_owned(), digest);
                }
            }
        }
    }
    out
}

/// The digest an asset must match, or why the release is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub digest: Option<Sha256Digest>,
    pub by: VerifiedBy,
}

/// Why an asset has no digest it can be verified against: the release is refused (permanent
/// until the release or the config's pins change).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("asset {asset} has a malformed digest {digest:?}")]
    Malformed { asset: String, digest: String },
    /// Two places name different digests: a red flag, whichever would have been used.
    #[error("asset {asset}: {by} {digest} disagrees with {other_by} {other}")]
    Disagree { asset: String, by: VerifiedBy, digest: Sha256Digest, other_by: VerifiedBy, other: Sha256Digest },
    #[error(
        "asset {asset} of release {tag} has no digest: GitHub published none, no checksums asset lists it and the config pins none (verify: required)"
    )]
    Missing { asset: String, tag: String },
}

impl DigestError {
    /// Never: see the type.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            DigestError::Malformed { .. } => "MalformedDigest",
            DigestError::Disagree { .. } => "DigestsDisagree",
            DigestError::Missing { .. } => "NoDigest",
        }
    }
}

/// Decides the expected digest of `asset`.
///
/// `checksums` maps asset names to digests read from the release's checksum assets; `pins` maps
/// `<tag>/<asset>` to digests from the config.
///
/// # Errors
/// A published digest that is malformed, digests that disagree, or an asset with no digest under
/// `Verify::Required`.
pub fn expected(
    tag: &str,
    asset: &GhAsset,
    checksums: &BTreeMap<String, Sha256Digest>,
    pins: &BTreeMap<String, Sha256Digest>,
    verify: Verify,
) -> Result<Expected, DigestError> {
    let pin = pins.get(&format!("{tag}/{}", asset.name));
    let published = match asset.digest.as_deref().filter(|d| !d.is_empty()) {
        Some(d) => Some(Sha256Digest::parse(d).ok_or_else(|| DigestError::Malformed { asset: asset.name.clone(), digest: d.to_owned() })?),
        None => None,
    };
    let from_sums = checksums.get(&asset.name);
    let found = [(published.as_ref(), VerifiedBy::Published), (from_sums, VerifiedBy::Checksums), (pin, VerifiedBy::Pinned)];
    // Any two sources that disagree are a red flag, whichever would have been used.
    let known: Vec<_> = found.iter().filter_map(|(d, by)| d.map(|d| (d, *by))).collect();
    if let Some((first, by)) = known.first() {
        for (other, other_by) in &known[1..] {
            if other != first {
                return Err(DigestError::Disagree {
                    asset: asset.name.clone(),
                    by: *by,
                    digest: (*first).clone(),
                    other_by: *other_by,
                    other: (*other).clone(),
                });
            }
        }
        return Ok(Expected { digest: Some((*first).clone()), by: *by });
    }
    if is_checksums_asset(&asset.name) {
        return Ok(Expected { digest: None, by: VerifiedBy::Reference });
    }
    match verify {
        Verify::Required => Err(DigestError::Missing { asset: asset.name.clone(), tag: tag.to_owned() }),
        Verify::Optional => Ok(Expected { digest: None, by: VerifiedBy::Unverified }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset(name: &str, digest: Option<&str>) -> GhAsset {
        GhAsset { id: 1, name: name.into(), size: 1, digest: digest.map(Into::into), url: String::new() }
    }

    #[test]
    fn checksum_files_parse() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let sums = parse_checksums(&format!("{a}  chart.tgz\n{b} *values.yaml\n# comment\nnot a line\n"), None);
        assert_eq!(sums["chart.tgz"].hex(), a);
        assert_eq!(sums["values.yaml"].hex(), b);
        let single = parse_checksums(&format!("{a}\n"), Some("chart.tgz"));
        assert_eq!(single["chart.tgz"].hex(), a);
    }

    #[test]
    fn unsigned_checksums_file_showed_verified_true() {
        assert_eq!(summary([]), "git");
        assert_eq!(summary([VerifiedBy::Checksums, VerifiedBy::Reference]), "checksums");
        assert_eq!(summary([VerifiedBy::Published, VerifiedBy::Checksums, VerifiedBy::Published]), "checksums+published");
        assert_eq!(summary([VerifiedBy::Unverified, VerifiedBy::Pinned]), "pinned+unverified");
    }

    #[test]
    fn digest_sources_in_order_and_fail_closed() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = Sha256Digest::parse(&"b".repeat(64)).unwrap();
        let none = BTreeMap::new();
        let sums: BTreeMap<String, Sha256Digest> = [("x.tgz".to_owned(), b.clone())].into();
        let pins: BTreeMap<String, Sha256Digest> = [("v1/x.tgz".to_owned(), b.clone())].into();

        assert_eq!(expected("v1", &asset("x.tgz", Some(&a)), &none, &none, Verify::Required).unwrap().by, VerifiedBy::Published);
        assert_eq!(expected("v1", &asset("x.tgz", None), &sums, &none, Verify::Required).unwrap().by, VerifiedBy::Checksums);
        assert_eq!(expected("v1", &asset("x.tgz", None), &none, &pins, Verify::Required).unwrap().by, VerifiedBy::Pinned);
        let err = expected("v1", &asset("x.tgz", None), &none, &none, Verify::Required).unwrap_err().to_string();
        assert!(err.contains("has no digest") && err.contains("verify: required"), "{err}");
        assert_eq!(expected("v1", &asset("x.tgz", None), &none, &none, Verify::Optional).unwrap().by, VerifiedBy::Unverified);
        let err = expected("v1", &asset("x.tgz", Some(&a)), &none, &pins, Verify::Required).unwrap_err();
        assert!(err.to_string().contains("disagrees"), "{err}");
    }
}
