//! Validation of `sources[]`: Git repositories, GitHub release assets and OCI registries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use verify::TrustFiles;

use super::validate::{Cx, Fields, Invalid, check_git_url};
use super::yaml::{Node, Value};
use super::{GitSourceConfig, GithubSourceConfig, OciSourceConfig, SourceConfig, SourceKind};
use crate::model::Sha256Digest;
use crate::model::source::{self, GitAuth, OciAuth, Repository, TokenSource, Verify};

/// GitHub's public API; GitHub Enterprise Server uses `https://<host>/api/v3`.
pub const GITHUB_API: &str = "https://api.github.com";

impl Cx {
    pub(super) fn source(&mut self, node: &Node, i: usize, base: &Path) -> Option<SourceConfig> {
        let path = format!("sources[{i}]");
        let f = self.fields(node, &path, &["name", "git", "github", "oci"])?;
        let name = self.name(&f, "name");
        let kinds: Vec<(&str, &Node)> = ["git", "github", "oci"].into_iter().filter_map(|k| f.get(k).map(|n| (k, n))).collect();
        let kind = match kinds.as_slice() {
            [("git", git)] => self.git(git, &format!("{path}.git"), base).map(SourceKind::Git),
            [("github", gh)] => self.github(gh, &format!("{path}.github"), base).map(SourceKind::Github),
            [(_, oci)] => self.oci(oci, &format!("{path}.oci"), base).map(SourceKind::Oci),
            [] => {
                self.error(node.mark, &path, "a source needs a kind: `git`, `github` or `oci`");
                None
            }
            [_, (_, second), ..] => {
                let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
                self.error(second.mark, &path, format!("a source has exactly one kind, found {}", names.join(" and ")));
                None
            }
        };
        Some(SourceConfig { name: name?, kind: kind? })
    }

    fn git(&mut self, node: &Node, path: &str, base: &Path) -> Option<GitSourceConfig> {
        let g = self.fields(node, path, &["url", "allowMovedTags", "pins", "auth", "verify"])?;
        let url = self.required_string(&g, "url");
        let allow_moved_tags = self.bool(&g, "allowMovedTags", false);
        let pins = match g.get("pins") {
            Some(p) => self.string_map(p, &g.path("pins"), |commit| {
                (commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| commit.to_ascii_lowercase())
                    .ok_or_else(|| Invalid(format!("expected a full 40-hex commit id, found `{commit}`")))
            }),
            None => BTreeMap::new(),
        };
        let auth = match g.get("auth") {
            Some(a) => Some(self.git_auth(a, &g.path("auth"), base)?),
            None => None,
        };
        let signatures = match g.get("verify") {
            Some(v) => self.trust(v, &g.path("verify"), base, &[("ssh", "allowedSigners"), ("openpgp", "keyring")]),
            None => TrustFiles::default(),
        };
        let mut url = url?;
        if auth.is_some() || source::is_scp_like(&url) || url.starts_with("ssh://") {
            if let Err(msg) = check_private_url(&url, auth.as_ref()) {
                let mark = g.get("url").map_or(node.mark, |n| n.mark);
                self.error(mark, &g.path("url"), msg);
                return None;
            }
            return Some(GitSourceConfig { url, allow_moved_tags, pins, auth, signatures });
        }
        if url.starts_with("./") || url.starts_with("../") || url.starts_with('/') {
            // A local path (relative to the config file): served over file://.
            let path: PathBuf = base.join(&url).components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect();
            url = format!("file://{}", path.display());
        }
        if let Err(msg) = check_git_url(&url) {
            let mark = g.get("url").map_or(node.mark, |n| n.mark);
            self.error(mark, &g.path("url"), msg);
            return None;
        }
        Some(GitSourceConfig { url, allow_moved_tags, pins, auth: None, signatures })
    }

    /// `auth`: exactly one of `ssh`, `https` or `bearerToken`.
    fn git_auth(&mut self, node: &Node, path: &str, base: &Path) -> Option<GitAuth> {
        let f = self.fields(node, path, &["ssh", "https", "bearerToken"])?;
        match (f.get("ssh"), f.get("https"), f.get("bearerToken")) {
            (Some(ssh), None, None) => {
                let s = self.fields(ssh, &f.path("ssh"), &["privateKey", "knownHosts"])?;
                let file = |cx: &mut Cx, key: &str| {
                    let Some(n) = s.get(key) else {
                        cx.error(ssh.mark, &s.path(key), "required: `{file: …}`");
                        return None;
                    };
                    let inner = cx.fields(n, &s.path(key), &["file"])?;
                    cx.required_string(&inner, "file").map(|p| base.join(p))
                };
                let private_key = file(self, "privateKey");
                let known_hosts = file(self, "knownHosts");
                Some(GitAuth::Ssh { private_key: private_key?, known_hosts: known_hosts? })
            }
            (None, Some(https), None) => {
                let h = self.fields(https, &f.path("https"), &["username", "password"])?;
                let username = self.required_string(&h, "username");
                let password = match h.get("password") {
                    Some(p) => self.token(p, &h.path("password"), base),
                    None => {
                        self.error(https.mark, &h.path("password"), "required: `{file: …}` or `{env: …}`");
                        None
                    }
                };
                Some(GitAuth::Https { username: username?, password: password? })
            }
            (None, None, Some(token)) => self.token(token, &f.path("bearerToken"), base).map(GitAuth::Bearer),
            _ => {
                self.error(node.mark, path, "set exactly one of `ssh`, `https` or `bearerToken`");
                None
            }
        }
    }

    fn github(&mut self, node: &Node, path: &str, base: &Path) -> Option<GithubSourceConfig> {
        let g = self.fields(node, path, GITHUB_FIELDS)?;
        let repo = self.required_string(&g, "repo");
        if let Some(r) = &repo
            && !is_repo(r)
        {
            let mark = g.get("repo").map_or(node.mark, |n| n.mark);
            self.error(mark, &g.path("repo"), format!("expected `owner/name`, found `{r}`"));
        }
        let api_url = self.string(&g, "apiUrl").unwrap_or_else(|| GITHUB_API.to_owned());
        if let Err(msg) = check_api_url(&api_url) {
            let mark = g.get("apiUrl").map_or(node.mark, |n| n.mark);
            self.error(mark, &g.path("apiUrl"), msg);
        }
        let token = g.get("token").and_then(|t| self.token(t, &g.path("token"), base));
        let tag_pattern = self.string(&g, "tagPattern");
        let (verify, signatures) = self.github_verify(&g, base);
        let digests = self.digest_pins(&g);
        let max_asset_bytes = self.size(&g, "maxAssetSize").unwrap_or(source::DEFAULT_MAX_ASSET_BYTES);
        let max_release_bytes = self.size(&g, "maxReleaseSize").unwrap_or(source::DEFAULT_MAX_RELEASE_BYTES);
        let max_unpacked_bytes = self.size(&g, "maxUnpackedSize").unwrap_or(source::DEFAULT_MAX_UNPACKED_BYTES);
        let allow_moved_tags = self.bool(&g, "allowMovedTags", false);
        Some(GithubSourceConfig {
            repo: repo?,
            api_url,
            token,
            tag_pattern,
            verify,
            digests,
            max_asset_bytes,
            max_release_bytes,
            max_unpacked_bytes,
            allow_moved_tags,
            signatures,
        })
    }

    fn oci(&mut self, node: &Node, path: &str, base: &Path) -> Option<OciSourceConfig> {
        let o = self.fields(node, path, OCI_FIELDS)?;
        let signatures = match o.get("verify") {
            Some(v) => self.trust(v, &o.path("verify"), base, &[("cosign", "publicKey")]),
            None => TrustFiles::default(),
        };
        let repository = self.required_string(&o, "repository").and_then(|r| match Repository::parse(&r) {
            Ok(repo) => Some(repo),
            Err(e) => {
                let mark = o.get("repository").map_or(node.mark, |n| n.mark);
                self.error(mark, &o.path("repository"), e.to_string());
                None
            }
        });
        let insecure = self.bool(&o, "insecure", false);
        let auth = match o.get("auth") {
            Some(a) => Some(self.oci_auth(a, &o.path("auth"), base)?),
            None => None,
        };
        if let Some(repo) = &repository
            && auth.is_some()
            && insecure
            && !repo.is_loopback()
        {
            let mark = o.get("insecure").map_or(node.mark, |n| n.mark);
            self.error(
                mark,
                &o.path("insecure"),
                "credentials are sent only over https:// (`insecure: true` with `auth` only for a loopback registry)",
            );
        }
        let ca_file = self.string(&o, "caFile").map(|f| base.join(f));
        if ca_file.is_some() && insecure {
            let mark = o.get("caFile").map_or(node.mark, |n| n.mark);
            self.error(mark, &o.path("caFile"), "`caFile` is for https; `insecure: true` means plain HTTP: set one of them");
        }
        let timeout = self.positive_duration(&o, "timeout", source::OCI_DEFAULT_TIMEOUT, source::OCI_MIN_TIMEOUT);
        if timeout > source::OCI_MAX_TIMEOUT {
            let mark = o.get("timeout").map_or(node.mark, |n| n.mark);
            self.error(mark, &o.path("timeout"), format!("at most {}s", source::OCI_MAX_TIMEOUT.as_secs()));
        }
        let tag_pattern = self.string(&o, "tagPattern");
        let page_size = self.page_size(&o);
        let max_asset_bytes = self.size(&o, "maxAssetSize").unwrap_or(source::DEFAULT_MAX_ASSET_BYTES);
        let max_release_bytes = self.size(&o, "maxReleaseSize").unwrap_or(source::DEFAULT_MAX_RELEASE_BYTES);
        let max_unpacked_bytes = self.size(&o, "maxUnpackedSize").unwrap_or(source::DEFAULT_MAX_UNPACKED_BYTES);
        let allow_moved_tags = self.bool(&o, "allowMovedTags", false);
        Some(OciSourceConfig {
            repository: repository?,
            insecure,
            ca_file,
            auth,
            timeout,
            tag_pattern,
            page_size,
            max_asset_bytes,
            max_release_bytes,
            max_unpacked_bytes,
            allow_moved_tags,
            signatures,
        })
    }

    /// A GitHub source's `verify`: `required`/`optional` (the digest policy), or a mapping with
    /// `digests` and the signature keys.
    fn github_verify(&mut self, g: &Fields<'_>, base: &Path) -> (Verify, TrustFiles) {
        let (verify_digests, signatures) = match g.get("verify") {
            Some(v) if matches!(v.value, Value::Map(_)) => {
                let f = self.fields(v, &g.path("verify"), &["digests", "cosign", "ssh"]);
                let digests = f.as_ref().and_then(|f| f.get("digests").map(|d| (d, f.path("digests"))));
                let signatures = self.trust(v, &g.path("verify"), base, &[("cosign", "publicKey"), ("ssh", "allowedSigners")]);
                (digests, signatures)
            }
            Some(v) => (Some((v, g.path("verify"))), TrustFiles::default()),
            None => (None, TrustFiles::default()),
        };
        let verify = match verify_digests.as_ref().map(|(n, p)| (n.scalar_text(), n.mark, p)) {
            None | Some((Some("required"), _, _)) => Verify::Required,
            Some((Some("optional"), _, _)) => Verify::Optional,
            Some((other, mark, path)) => {
                self.error(mark, path, format!("expected `required` or `optional`, found `{}`", other.unwrap_or("a mapping")));
                Verify::Required
            }
        };
        (verify, signatures)
    }

    /// A GitHub source's `digests`: pinned `sha256:` digests by `<tag>/<asset name>`.
    fn digest_pins(&mut self, g: &Fields<'_>) -> BTreeMap<String, Sha256Digest> {
        match g.get("digests") {
            Some(d) => {
                let map = self.string_map(d, &g.path("digests"), |v| {
                    Sha256Digest::parse(v).ok_or_else(|| Invalid(format!("expected `sha256:<64 hex digits>`, found `{v}`")))
                });
                for key in map.keys() {
                    if !key.contains('/') {
                        self.error(d.mark, &format!("{}.{key}", g.path("digests")), "keys are `<tag>/<asset name>`");
                    }
                }
                map
            }
            None => BTreeMap::new(),
        }
    }

    /// An OCI source's `pageSize`: tags asked for per page, 1 to the registry's maximum.
    fn page_size(&mut self, o: &Fields<'_>) -> u32 {
        let Some(n) = o.get("pageSize") else { return source::OCI_DEFAULT_PAGE_SIZE };
        match n.scalar_text().and_then(|t| t.parse::<u32>().ok()).filter(|n| (1..=source::OCI_MAX_PAGE_SIZE).contains(n)) {
            Some(n) => n,
            None => {
                self.error(n.mark, &o.path("pageSize"), format!("expected a number from 1 to {}", source::OCI_MAX_PAGE_SIZE));
                source::OCI_DEFAULT_PAGE_SIZE
            }
        }
    }

    /// `verify:` of a source: the key files of the `kinds` allowed here (`(kind, field)`, e.g.
    /// `("ssh", "allowedSigners")`), each `{file: …}`. Each file is read and parsed now, so
    /// check-config names the file, its line and the field of a key that cannot be used; the
    /// daemon reads them again at every poll.
    fn trust(&mut self, node: &Node, path: &str, base: &Path, kinds: &[(&'static str, &'static str)]) -> TrustFiles {
        let mut out = TrustFiles::default();
        let Value::Map(entries) = &node.value else {
            self.error(node.mark, path, format!("expected a mapping, found {}", node.type_name()));
            return out;
        };
        let mut any = false;
        for (k, v) in entries {
            let Some(kind) = k.scalar_text() else { continue };
            if kind == "digests" {
                continue;
            }
            let Some((_, field)) = kinds.iter().find(|(name, _)| *name == kind) else {
                let known: Vec<&str> = kinds.iter().map(|(n, _)| *n).collect();
                self.error(k.mark, &format!("{path}.{kind}"), format!("unknown field; expected {}", known.join(" or ")));
                continue;
            };
            let kind_path = format!("{path}.{kind}");
            let known: &'static [&'static str] = match *field {
                "allowedSigners" => &["allowedSigners"],
                "keyring" => &["keyring"],
                _ => &["publicKey"],
            };
            let Some(f) = self.fields(v, &kind_path, known) else { continue };
            let Some(file_node) = f.get(field) else {
                self.error(v.mark, &f.path(field), "required: `{file: …}`");
                continue;
            };
            let field_path = f.path(field);
            let Some(inner) = self.fields(file_node, &field_path, &["file"]) else { continue };
            let Some(file) = self.required_string(&inner, "file") else { continue };
            let mark = inner.get("file").map_or(file_node.mark, |n| n.mark);
            let one = (field_path.clone(), base.join(file));
            let mut single = TrustFiles::default();
            match *field {
                "allowedSigners" => single.ssh_allowed_signers = Some(one),
                "keyring" => single.openpgp_keyring = Some(one),
                _ => single.cosign_public_keys = Some(one),
            }
            if let Err(e) = single.load() {
                self.error(
                    mark,
                    &field_path,
                    format!("{}{}: {}", e.path.display(), if e.line > 0 { format!(":{}", e.line) } else { String::new() }, e.problem),
                );
            }
            any = true;
            out.ssh_allowed_signers = out.ssh_allowed_signers.or(single.ssh_allowed_signers);
            out.openpgp_keyring = out.openpgp_keyring.or(single.openpgp_keyring);
            out.cosign_public_keys = out.cosign_public_keys.or(single.cosign_public_keys);
        }
        if !any && !entries.iter().any(|(k, _)| k.scalar_text() == Some("digests")) {
            let want: Vec<String> = kinds.iter().map(|(k, f)| format!("`{k}.{f}`")).collect();
            self.error(node.mark, path, format!("set at least one of {}", want.join(", ")));
        }
        out
    }

    /// `auth`: `username` with `password`, `bearerToken`, or `dockerConfig: {file: …}`.
    fn oci_auth(&mut self, node: &Node, path: &str, base: &Path) -> Option<OciAuth> {
        let f = self.fields(node, path, &["username", "password", "bearerToken", "dockerConfig"])?;
        if let Some(d) = f.get("dockerConfig") {
            if f.get("username").is_some() || f.get("password").is_some() || f.get("bearerToken").is_some() {
                self.error(node.mark, path, "set `username` and `password`, `bearerToken` or `dockerConfig` (only one)");
                return None;
            }
            let d = self.fields(d, &f.path("dockerConfig"), &["file"])?;
            let file = self.required_string(&d, "file")?;
            return Some(OciAuth::DockerConfig(base.join(file)));
        }
        match (f.get("username"), f.get("password"), f.get("bearerToken")) {
            (Some(_), Some(p), None) => {
                let username = self.required_string(&f, "username");
                let password = self.token(p, &f.path("password"), base);
                Some(OciAuth::Basic { username: username?, password: password? })
            }
            (None, None, Some(token)) => self.token(token, &f.path("bearerToken"), base).map(OciAuth::Bearer),
            (Some(_), None, None) => {
                self.error(node.mark, &f.path("password"), "required with `username`: `{file: …}` or `{env: …}`");
                None
            }
            (None, Some(_), None) => {
                self.error(node.mark, &f.path("username"), "required with `password`");
                None
            }
            _ => {
                self.error(node.mark, path, "set `username` and `password`, or `bearerToken` (not both)");
                None
            }
        }
    }

    fn token(&mut self, node: &Node, path: &str, base: &Path) -> Option<TokenSource> {
        let f = self.fields(node, path, &["file", "env"])?;
        match (self.string(&f, "file"), self.string(&f, "env")) {
            (Some(file), None) => Some(TokenSource::File(base.join(file))),
            (None, Some(env)) => Some(TokenSource::Env(env)),
            _ => {
                self.error(node.mark, path, "set exactly one of `file` (a file holding the token) or `env` (an environment variable)");
                None
            }
        }
    }

    /// A size such as `512Mi`, `2Gi`, `100Ki` or plain bytes.
    fn size(&mut self, f: &super::validate::Fields<'_>, key: &str) -> Option<u64> {
        let node = f.get(key)?;
        let text = node.scalar_text().unwrap_or_default();
        match parse_size(text) {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.error(node.mark, &f.path(key), format!("expected a size such as `256Mi` or `2Gi`, found `{text}`"));
                None
            }
        }
    }

    /// A mapping of string keys to values checked by `parse`.
    fn string_map<T>(&mut self, node: &Node, path: &str, parse: impl Fn(&str) -> Result<T, Invalid>) -> BTreeMap<String, T> {
        let mut out = BTreeMap::new();
        let Value::Map(entries) = &node.value else {
            self.error(node.mark, path, format!("expected a mapping, found {}", node.type_name()));
            return out;
        };
        for (k, v) in entries {
            let (Some(key), Some(value)) = (k.scalar_text(), v.scalar_text()) else {
                self.error(v.mark, path, "expected `key: value` strings");
                continue;
            };
            match parse(value) {
                Ok(t) => {
                    out.insert(key.to_owned(), t);
                }
                Err(msg) => self.error(v.mark, &format!("{path}.{key}"), msg),
            }
        }
        out
    }
}

fn is_repo(r: &str) -> bool {
    let ok =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) && s != "." && s != "..";
    matches!(r.split_once('/'), Some((owner, name)) if ok(owner) && ok(name))
}

/// The URL of a Git source that has `auth` or is an SSH URL: the scheme must match the kind of
/// credentials, and SSH always needs them (a known host key, a private key).
fn check_private_url(url: &str, auth: Option<&GitAuth>) -> Result<(), Invalid> {
    let ssh = url.starts_with("ssh://") || source::is_scp_like(url);
    match auth {
        Some(GitAuth::Ssh { .. }) if ssh => source::check_ssh_url(url).map_err(|e| Invalid(e.to_string())),
        Some(GitAuth::Ssh { .. }) => {
            Err(Invalid(format!("`auth.ssh` needs an SSH URL (ssh://[user@]host[:port]/path or user@host:path), found `{url}`")))
        }
        None => {
            Err(Invalid(format!("`{url}` is an SSH URL: set `auth.ssh` with `privateKey` and `knownHosts` (host keys are always checked)")))
        }
        Some(_) if ssh || !(url.starts_with("https://") || url.starts_with("http://")) => {
            Err(Invalid(format!("`auth.https` and `auth.bearerToken` need an https:// URL, found `{url}`")))
        }
        Some(_) if url.starts_with("http://") && !is_loopback_url(url) => {
            Err(Invalid("credentials are sent only over https:// (http:// only to a loopback address, for testing)".to_owned()))
        }
        Some(_) => check_git_url(url),
    }
}

fn is_loopback_url(url: &str) -> bool {
    let authority = url.split_once("://").map_or("", |(_, r)| r.split('/').next().unwrap_or_default());
    let host = authority.rsplit_once(':').filter(|(h, _)| !h.ends_with('[')).map_or(authority, |(h, _)| h);
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// The fields of a GitHub source.
const GITHUB_FIELDS: &[&str] =
    &["repo", "apiUrl", "token", "tagPattern", "verify", "digests", "maxAssetSize", "maxReleaseSize", "maxUnpackedSize", "allowMovedTags"];

/// The fields of an OCI source.
const OCI_FIELDS: &[&str] = &[
    "repository",
    "insecure",
    "caFile",
    "timeout",
    "auth",
    "tagPattern",
    "pageSize",
    "maxAssetSize",
    "maxReleaseSize",
    "maxUnpackedSize",
    "allowMovedTags",
    "verify",
];

fn check_api_url(url: &str) -> Result<(), Invalid> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Invalid(format!("`{url}` is not a URL; expected https://… (http:// only for loopback testing)")));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(Invalid(format!("unsupported scheme `{scheme}`; expected https")));
    }
    if rest.split('/').next().unwrap_or_default().contains('@') {
        return Err(Invalid("credentials must not be written into the URL: use `token`".to_owned()));
    }
    Ok(())
}

/// Parses `512Mi`, `2Gi`, `100Ki`, `1G`, `10M`, `5000`.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = t[..digits].parse().ok()?;
    let mult: u64 = match &t[digits..] {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Whether `tag` matches a pattern where `*` stands for any run of characters.
pub fn tag_matches(pattern: &str, tag: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == tag;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !tag.starts_with(first) || !tag[first.len()..].ends_with(last) || tag.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &tag[first.len()..tag.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_sources(dir: &Path, source: &str) -> Result<crate::config::Config, crate::config::ConfigErrors> {
        let text = format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {{dir: c}}\nsources:\n  - name: s\n{source}subscriptions:\n  - name: a\n    source: s\n    interval: 1h\n    clusters: [{{name: x, namespace: y}}]\ntarget: {{directory: out}}\n"
        );
        crate::config::Config::parse(&dir.join("c.yaml"), &text)
    }

    #[test]
    fn verify_key_files_are_read_by_check_config_naming_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let signers = include_str!("../../crates/verify/testdata/allowed_signers");
        std::fs::write(dir.path().join("signers"), format!("# keys\n{signers}")).unwrap();
        std::fs::write(dir.path().join("bad"), format!("# keys\n{signers}oops ssh-ed25519 AAAA\n")).unwrap();
        std::fs::write(dir.path().join("cosign.pub"), include_str!("../../crates/verify/testdata/cosign.pub")).unwrap();
        let git = "    git:\n      url: https://example.test/s.git\n      verify:\n        ssh: {allowedSigners: {file: signers}}\n";
        let c = parse_sources(dir.path(), git).unwrap();
        let SourceKind::Git(g) = &c.sources[0].kind else { panic!() };
        assert_eq!(g.signatures.ssh_allowed_signers.as_ref().map(|(_, p)| p.clone()), Some(dir.path().join("signers")));
        let gh = "    github:\n      repo: a/b\n      verify: {digests: optional, cosign: {publicKey: {file: cosign.pub}}}\n";
        let c = parse_sources(dir.path(), gh).unwrap();
        let SourceKind::Github(g) = &c.sources[0].kind else { panic!() };
        assert_eq!(g.verify, Verify::Optional);
        assert!(g.signatures.cosign_public_keys.is_some());
        let table = [
            (
                "    git:\n      url: https://example.test/s.git\n      verify:\n        ssh: {allowedSigners: {file: bad}}\n",
                "c.yaml:9:",
                "sources[0].git.verify.ssh.allowedSigners: ",
                "bad:3: not an OpenSSH public key",
            ),
            (
                "    git:\n      url: https://example.test/s.git\n      verify:\n        openpgp: {keyring: {file: missing.asc}}\n",
                "c.yaml:9:",
                "sources[0].git.verify.openpgp.keyring: ",
                "missing.asc: cannot read",
            ),
            (
                "    oci:\n      repository: 127.0.0.1:5000/a\n      verify: {ssh: {allowedSigners: {file: signers}}}\n",
                "c.yaml:8:",
                "sources[0].oci.verify.ssh: ",
                "expected cosign",
            ),
            (
                "    oci:\n      repository: 127.0.0.1:5000/a\n      verify: {cosign: {publicKey: {file: signers}}}\n",
                "c.yaml:8:",
                "oci.verify.cosign.publicKey: ",
                "holds no `-----BEGIN PUBLIC KEY-----`",
            ),
            (
                "    git:\n      url: https://example.test/s.git\n      verify: {}\n",
                "c.yaml:8:",
                "sources[0].git.verify: ",
                "set at least one of",
            ),
            (
                "    github:\n      repo: a/b\n      verify: {digests: sometimes}\n",
                "c.yaml:8:",
                "github.verify.digests: ",
                "expected `required` or `optional`",
            ),
        ];
        for (source, at, field, says) in table {
            let e = parse_sources(dir.path(), source).unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(field) && e.contains(says), "{source}\n=> {e}");
        }
    }

    #[test]
    fn sizes_and_patterns() {
        assert_eq!(parse_size("256Mi"), Some(256 << 20));
        assert_eq!(parse_size("10"), Some(10));
        assert_eq!(parse_size("1.5Gi"), None);
        assert!(tag_matches("docker-ferrol-*", "docker-ferrol-1-27-v2"));
        assert!(tag_matches("*-1-27-*", "docker-ferrol-1-27-v2"));
        assert!(!tag_matches("*-1-28-*", "docker-ferrol-1-27-v2"));
        assert!(tag_matches("v1.0.0", "v1.0.0"));
        assert!(!tag_matches("a*a", "a"));
    }
}
