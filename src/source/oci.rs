//! Groundwork for `oci:` sources (issue 16, item 2): the pure parts of talking to an OCI
//! distribution registry — repository references, the plain-HTTP policy, `Link` pagination of
//! `GET /v2/<name>/tags/list` and `WWW-Authenticate: Bearer` challenges. No network here: the
//! client that uses these is not written yet, so nothing in the controller reaches this module.

use thiserror::Error;

/// The OCI media types a manifest request accepts (image manifest and image index).
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

/// Longest repository reference accepted; registries cap names well below this.
const MAX_REFERENCE_LEN: usize = 512;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("repository `{reference}`: {message}")]
    Reference { reference: String, message: &'static str },
    #[error("repository `{reference}`: plain HTTP is allowed only for a loopback registry or with `insecure: true`")]
    Insecure { reference: String },
}

/// `host[:port]/path` split into its registry and its repository name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository name inside the registry, e.g. `scs/openstack-scs`.
    pub name: String,
}

impl Repository {
    /// Parses `host[:port]/path` (no scheme, no tag, no digest).
    ///
    /// # Errors
    /// The reference is empty, too long, has a scheme, tag or digest, or a name component
    /// outside the distribution grammar (`[a-z0-9]+([._-][a-z0-9]+)*`).
    pub fn parse(reference: &str) -> Result<Self, Error> {
        let err = |message| Error::Reference { reference: reference.to_owned(), message };
        if reference.is_empty() || reference.len() > MAX_REFERENCE_LEN {
            return Err(err("expected `host[:port]/path` of at most 512 characters"));
        }
        if reference.contains("://") {
            return Err(err("no scheme: write `host[:port]/path` (set `insecure: true` for plain HTTP)"));
        }
        if reference.contains('@') {
            return Err(err("no digest: releases are the repository's tags"));
        }
        let Some((registry, name)) = reference.split_once('/') else {
            return Err(err("expected `host[:port]/path`"));
        };
        let (host, port) = match registry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (registry, None),
        };
        if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') {
            return Err(err("the registry host is not a host name or IPv4 address"));
        }
        if let Some(p) = port
            && p.parse::<u16>().map_or(true, |p| p == 0)
        {
            return Err(err("the registry port is not a number from 1 to 65535"));
        }
        if name.contains(':') {
            return Err(err("no tag: releases are the repository's tags"));
        }
        if !name.split('/').all(is_name_component) {
            return Err(err("each path component must match `[a-z0-9]+([._-][a-z0-9]+)*`"));
        }
        Ok(Self { registry: registry.to_owned(), name: name.to_owned() })
    }

    /// Whether the registry host is loopback (`localhost`, `127.x.y.z`).
    pub fn is_loopback(&self) -> bool {
        let host = self.registry.rsplit_once(':').map_or(self.registry.as_str(), |(h, _)| h);
        host == "localhost" || host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The base URL of the registry: `https://` unless plain HTTP is allowed.
    ///
    /// # Errors
    /// Plain HTTP asked for a non-loopback registry without `insecure: true`.
    pub fn base_url(&self, plain_http: bool, insecure: bool) -> Result<String, Error> {
        if plain_http && !insecure && !self.is_loopback() {
            return Err(Error::Insecure { reference: format!("{}/{}", self.registry, self.name) });
        }
        let scheme = if plain_http { "http" } else { "https" };
        Ok(format!("{scheme}://{}", self.registry))
    }
}

fn is_name_component(c: &str) -> bool {
    !c.is_empty()
        && c.split(['.', '_', '-']).all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// The target of `rel="next"` in a `Link` header, resolved against `base` (`scheme://host`) when
/// relative, as registries answer `Link: </v2/x/tags/list?n=100&last=v1>; rel="next"`.
pub fn next_link(header: &str, base: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let is_next = params.split(';').any(|p| {
            p.trim().split_once('=').is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case("rel") && v.trim().trim_matches('"') == "next")
        });
        if !is_next {
            return None;
        }
        Some(if target.starts_with('/') { format!("{base}{target}") } else { target.to_owned() })
    })
}

/// A `WWW-Authenticate: Bearer realm=…,service=…,scope=…` challenge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BearerChallenge {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// Parses a Bearer challenge; `None` for another scheme or without a realm. Quoted values may
/// hold commas (`scope="repository:a/b:pull,push"`), so the split honours quotes.
pub fn parse_bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let (scheme, rest) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut out = BearerChallenge::default();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "realm" => value.clone_into(&mut out.realm),
            "service" => out.service = Some(value.to_owned()),
            "scope" => out.scope = Some(value.to_owned()),
            _ => {}
        }
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    (!out.realm.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_references_parse_and_bad_ones_are_refused() {
        let r = Repository::parse("registry.example:5000/scs/openstack-scs").unwrap();
        assert_eq!(r.registry, "registry.example:5000");
        assert_eq!(r.name, "scs/openstack-scs");
        assert!(!r.is_loopback());
        for bad in [
            "",
            "https://r.example/a",
            "r.example",
            "r.example/a:v1",
            "r.example/a@sha256:00",
            "r.example:0/a",
            "r.example/A",
            "r.example/a//b",
        ] {
            assert!(Repository::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_only_for_loopback_or_insecure() {
        let local = Repository::parse("127.0.0.1:5000/a").unwrap();
        assert_eq!(local.base_url(true, false).unwrap(), "http://127.0.0.1:5000");
        let remote = Repository::parse("r.example/a").unwrap();
        assert!(matches!(remote.base_url(true, false), Err(Error::Insecure { .. })));
        assert_eq!(remote.base_url(true, true).unwrap(), "http://r.example");
        assert_eq!(remote.base_url(false, false).unwrap(), "https://r.example");
    }

    #[test]
    fn link_pagination_next_is_resolved() {
        let h = r#"</v2/a/tags/list?n=2&last=v2>; rel="next""#;
        assert_eq!(next_link(h, "http://127.0.0.1:5000").as_deref(), Some("http://127.0.0.1:5000/v2/a/tags/list?n=2&last=v2"));
        assert_eq!(next_link(r#"<https://x/y>; rel="prev""#, "http://b"), None);
        assert_eq!(next_link("garbage", "http://b"), None);
    }

    #[test]
    fn bearer_challenge_with_commas_in_scope() {
        let c = parse_bearer_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://auth.example/token");
        assert_eq!(c.service.as_deref(), Some("registry.example"));
        assert_eq!(c.scope.as_deref(), Some("repository:a/b:pull,push"));
        assert_eq!(parse_bearer_challenge(r#"Basic realm="x""#), None);
        assert_eq!(parse_bearer_challenge("Bearer service=x"), None);
    }
}
