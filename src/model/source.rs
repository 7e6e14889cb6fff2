//! How a source is reached and what it must prove, as the config states it and the sources use
//! it: credentials (where a secret comes from, never the secret), OCI repository references,
//! Git URL forms, the verification policy of release assets, and the default limits. Plain data
//! and pure parsing; reading a token is `source`'s job.

use std::path::PathBuf;
use std::time::Duration;

/// Where a token or password comes from; read at every poll so rotations are picked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    File(PathBuf),
    Env(String),
}

/// How a private Git repository is reached (`sources[].git.auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAuth {
    /// `ssh://` or `user@host:path`: this key, and only hosts listed in `known_hosts`.
    Ssh { private_key: PathBuf, known_hosts: PathBuf },
    /// HTTP basic authentication.
    Https { username: String, password: TokenSource },
    /// `Authorization: Bearer …` on every request.
    Bearer(TokenSource),
}

/// `user@host:path` (Git's scp-like SSH syntax): no scheme, a colon before any slash.
pub fn is_scp_like(url: &str) -> bool {
    if url.contains("://") {
        return false;
    }
    match url.split_once(':') {
        Some((host, path)) => !host.is_empty() && !host.contains('/') && !path.is_empty(),
        None => false,
    }
}

/// What is wrong with an SSH URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SshUrlError(String);

/// Checks an SSH URL (`ssh://[user@]host[:port]/path` or `[user@]host:path`).
///
/// # Errors
/// Not an SSH URL, no host or path, or a password in it.
pub fn check_ssh_url(url: &str) -> Result<(), SshUrlError> {
    let (authority, path) = if let Some(rest) = url.strip_prefix("ssh://") {
        rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p))
    } else if is_scp_like(url) {
        url.split_once(':').unwrap_or((url, ""))
    } else {
        return Err(SshUrlError(format!("`{url}` is not an SSH URL; expected ssh://[user@]host[:port]/path or user@host:path")));
    };
    let (user, host) = authority.rsplit_once('@').map_or((None, authority), |(u, h)| (Some(u), h));
    if user.is_some_and(|u| u.contains(':')) {
        return Err(SshUrlError("a password must not be written into the URL; SSH authenticates with `auth.ssh.privateKey`".to_owned()));
    }
    if host.is_empty() || host.starts_with('-') || path.is_empty() {
        return Err(SshUrlError(format!("`{url}` has no host or path")));
    }
    Ok(())
}

/// How an OCI source authenticates (`sources[].oci.auth`); anonymous without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciAuth {
    /// A user name and password (or access token used as one): sent to the token service of a
    /// `Bearer` challenge, or as HTTP basic authentication to a registry that asks for it.
    Basic { username: String, password: TokenSource },
    /// An already issued registry token, sent as `Authorization: Bearer`.
    Bearer(TokenSource),
    /// A Docker config file (`.dockerconfigjson`, as Kubernetes mounts an image pull Secret):
    /// the entry of the registry's host in `auths` gives the credentials.
    DockerConfig(PathBuf),
}

/// Tags asked for per `tags/list` page unless `pageSize` says otherwise.
pub const OCI_DEFAULT_PAGE_SIZE: u32 = 100;
/// Largest `pageSize`.
pub const OCI_MAX_PAGE_SIZE: u32 = 1000;
/// Default of an OCI source's `timeout`: the deadline of one registry API call.
pub const OCI_DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest `timeout`.
pub const OCI_MIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest `timeout`: a whole poll is bounded by two minutes anyway.
pub const OCI_MAX_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest repository reference.
const MAX_REFERENCE_LEN: usize = 512;

/// A repository reference that is not `host[:port]/path`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("repository `{reference}`: {message}")]
pub struct ReferenceError {
    pub reference: String,
    pub message: &'static str,
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
    pub fn parse(reference: &str) -> Result<Self, ReferenceError> {
        let err = |message| ReferenceError { reference: reference.to_owned(), message };
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
}

fn is_name_component(c: &str) -> bool {
    !c.is_empty()
        && c.split(['.', '_', '-']).all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Verification policy of a GitHub source's assets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Every asset must have a digest from one of the three places (the default).
    #[default]
    Required,
    /// Verify when a digest is known; accept (and report `unverified`) otherwise.
    Optional,
}

/// Default `maxAssetSize`: the largest release asset (or OCI layer) downloaded.
pub const DEFAULT_MAX_ASSET_BYTES: u64 = 256 * 1024 * 1024;
/// Default `maxReleaseSize`: the most one release downloads in all.
pub const DEFAULT_MAX_RELEASE_BYTES: u64 = 1024 * 1024 * 1024;
/// Default `maxUnpackedSize`: the most one archive may unpack to (decompression bombs).
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 512 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls() {
        assert!(check_ssh_url("ssh://git@example.org/org/stacks.git").is_ok());
        assert!(check_ssh_url("ssh://git@example.org:2222/org/stacks.git").is_ok());
        assert!(check_ssh_url("git@example.org:org/stacks.git").is_ok());
        assert!(check_ssh_url("ssh://git:secret@example.org/org/stacks.git").is_err());
        assert!(check_ssh_url("ssh://example.org").is_err());
        assert!(check_ssh_url("ssh://-oProxyCommand=x/path").is_err());
        assert!(check_ssh_url("https://example.org/x.git").is_err());
        assert!(is_scp_like("git@example.org:org/stacks.git"));
        assert!(!is_scp_like("./local/path"));
        assert!(!is_scp_like("file:///x"));
    }
}
