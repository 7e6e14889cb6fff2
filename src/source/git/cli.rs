//! Git over SSH and HTTP(S) through the `git` binary, with credentials.
//!
//! gix fetches `file://` and `git://` in-process, but this build carries no HTTP transport and
//! gix's SSH transport spawns `ssh` anyway; the `git` binary (and OpenSSH's `ssh` for SSH) is
//! the transport every Git host is tested against. Credentials never reach the command line or
//! the mirror's `config`:
//!
//! - SSH: `GIT_SSH_COMMAND` runs `ssh` with host key checking forced on against the configured
//!   `known_hosts` only, the configured key only (no agent, no `~/.ssh`), and batch mode.
//! - HTTPS with a password: a credential helper given as configuration through the child's
//!   environment (`GIT_CONFIG_*`) prints username and password from the child's environment.
//! - A bearer token: an `http.extraHeader`, again set through the child's environment.
//!
//! Every secret is read at each fetch, so a rotated file or variable is used from the next poll.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::model::source::TokenSource;
use crate::source::github::{Secret, TokenError};

use crate::model::source::{GitAuth, is_scp_like};

/// Largest private key read (an OpenSSH RSA-16384 key is well below).
const MAX_KEY_BYTES: u64 = 64 << 10;
/// Name prefix of the per-fetch copies of an SSH key, beside the mirrors.
const KEY_PREFIX: &str = ".ssh-key-";
/// Older than any fetch can run: left by a killed process.
const STALE_KEY_AGE: Duration = Duration::from_secs(600);
/// How much of git's stderr is kept for the error message.
const MAX_STDERR_BYTES: usize = 16 << 10;

/// Why a fetch through the `git` binary failed. Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The deadline passed and git was killed (the caller names the deadline).
    #[error("git did not finish before the deadline")]
    TimedOut,
    #[error("privateKey file {}: {source}", path.display())]
    ReadKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("privateKey file {} is larger than {MAX_KEY_BYTES} bytes", path.display())]
    KeyTooLarge { path: PathBuf },
    #[error("writing a private copy of the key in {}: {source}", dir.display())]
    CopyKey {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("knownHosts file {} is missing", path.display())]
    KnownHostsMissing { path: PathBuf },
    #[error("reading the {what}: {source}")]
    ReadSecret {
        what: &'static str,
        #[source]
        source: TokenError,
    },
    /// A secret or the username would break the credential helper's lines.
    #[error("the {what} contains a line break")]
    LineBreak { what: &'static str },
    #[error("running git (is Git installed?): {0}")]
    Spawn(#[source] std::io::Error),
    #[error("starting the git stderr reader: {0}")]
    Reader(#[source] std::io::Error),
    #[error("waiting for git: {0}")]
    Wait(#[source] std::io::Error),
    /// git ran and failed: its last lines, after what they mean when that is known.
    #[error("{}", failure_message(*hint, said, status))]
    Failed { hint: Hint, said: String, status: std::process::ExitStatus },
}

/// What a failed `git fetch` means, read from its stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    HostKeyUnknown,
    KeyRefused,
    CredentialsRefused,
    NotFound,
    Other,
}

impl Hint {
    fn text(self) -> &'static str {
        match self {
            Hint::HostKeyUnknown => "the server's host key is not in `auth.ssh.knownHosts` (host key checking is always on)",
            Hint::KeyRefused => "the server refused `auth.ssh.privateKey`",
            Hint::CredentialsRefused => "the server refused the credentials (`auth.https` or `auth.bearerToken`)",
            Hint::NotFound => "the repository was not found (or the credentials may not read it)",
            Hint::Other => "git fetch failed",
        }
    }
}

fn failure_message(hint: Hint, said: &str, status: &std::process::ExitStatus) -> String {
    if said.is_empty() { format!("{} (git exited with {status})", hint.text()) } else { format!("{}: {said}", hint.text()) }
}

impl Error {
    /// Whether trying again soon may succeed with nothing changed: a refused key or
    /// credentials, an unknown host key, a missing repository or unusable credential files wait
    /// for someone to change them; a remote that did not answer, or git's own trouble, may pass.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::TimedOut | Error::Spawn(_) | Error::Reader(_) | Error::Wait(_) | Error::CopyKey { .. } => true,
            Error::ReadKey { .. } | Error::ReadSecret { .. } => true,
            Error::KeyTooLarge { .. } | Error::KnownHostsMissing { .. } | Error::LineBreak { .. } => false,
            Error::Failed { hint, .. } => *hint == Hint::Other,
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::TimedOut => "Timeout",
            Error::ReadKey { .. } | Error::KeyTooLarge { .. } | Error::CopyKey { .. } => "PrivateKey",
            Error::KnownHostsMissing { .. } => "KnownHostsMissing",
            Error::ReadSecret { .. } | Error::LineBreak { .. } => "Credentials",
            Error::Spawn(_) | Error::Reader(_) | Error::Wait(_) => "GitBinary",
            Error::Failed { hint, .. } => match hint {
                Hint::HostKeyUnknown => "HostKeyUnknown",
                Hint::KeyRefused | Hint::CredentialsRefused => "Unauthorized",
                Hint::NotFound => "RepositoryNotFound",
                Hint::Other => "GitFetchFailed",
            },
        }
    }

    /// Whether the failure points at the mirror rather than the remote (then the mirror is
    /// cloned again).
    pub fn is_local_damage(&self) -> bool {
        matches!(self, Error::Failed { said, .. } if is_local_damage(said))
    }
}

/// Why an SSH URL is refused (`sources[].git.url` with `auth.ssh`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshUrlError {
    #[error("`{0}` is not an SSH URL; expected ssh://[user@]host[:port]/path or user@host:path")]
    NotSsh(String),
    #[error("a password must not be written into the URL; SSH authenticates with `auth.ssh.privateKey`")]
    Password,
    #[error("`{0}` has no host or path")]
    NoHostOrPath(String),
}

/// Whether `url` goes through the `git` binary rather than gix.
pub fn uses_cli(url: &str) -> bool {
    is_scp_like(url) || ["http://", "https://", "ssh://"].iter().any(|s| url.starts_with(s))
}

/// Fetches every branch and tag of `url` into the bare mirror `dir` with `git fetch --prune`, so
/// the mirror's refs are then exactly the remote's. Blocking; killed at `deadline`.
///
/// # Errors
/// [`Error::TimedOut`] when the deadline passed; else what failed (credentials unreadable, host
/// key unknown, authentication refused, the remote unreachable), never containing a secret.
pub fn fetch(url: &str, auth: Option<&GitAuth>, dir: &Path, deadline: Instant) -> Result<(), Error> {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(dir)
        .args(["fetch", "--prune", "--no-tags", "--update-head-ok", "--no-write-fetch-head", "--quiet", "--"])
        .arg(url)
        .args(["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // Nothing from the host's or user's Git and SSH setup leaks in; no prompt can block.
    for var in ["SSH_AUTH_SOCK", "SSH_ASKPASS", "GIT_ASKPASS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_DIR", "GIT_CONFIG_PARAMETERS"] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ALLOW_PROTOCOL", "http:https:ssh")
        .env("LC_ALL", "C");
    // A silent server fails the fetch long before the deadline kills it.
    let mut config: Vec<(&str, String)> =
        vec![("http.lowSpeedLimit", "1".into()), ("http.lowSpeedTime", "30".into()), ("credential.helper", String::new())];
    // Kept alive until git exits: ssh reads the key from it.
    let mut _key_file = None;
    match auth {
        None => {}
        Some(GitAuth::Ssh { private_key, known_hosts }) => {
            let key = copy_private_key(private_key, dir)?;
            if !known_hosts.is_file() {
                return Err(Error::KnownHostsMissing { path: known_hosts.clone() });
            }
            cmd.env("GIT_SSH_COMMAND", ssh_command(key.path(), known_hosts)).env("GIT_SSH_VARIANT", "ssh");
            _key_file = Some(key);
        }
        Some(GitAuth::Https { username, password }) => {
            let password = read_secret(password, "password")?;
            if username.contains(['\n', '\0']) {
                return Err(Error::LineBreak { what: "username" });
            }
            config.push((
                "credential.helper",
                r#"!f() { test "$1" = get && printf 'username=%s\npassword=%s\n' "$STACKSYNC_GIT_USERNAME" "$STACKSYNC_GIT_PASSWORD"; }; f"#
                    .into(),
            ));
            cmd.env("STACKSYNC_GIT_USERNAME", username).env("STACKSYNC_GIT_PASSWORD", password.expose());
        }
        Some(GitAuth::Bearer(token)) => {
            let token = read_secret(token, "bearer token")?;
            config.push(("http.extraHeader", format!("Authorization: Bearer {}", token.expose())));
        }
    }
    cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (key, value)) in config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    run(cmd, deadline)
}

fn read_secret(source: &TokenSource, what: &'static str) -> Result<Secret, Error> {
    let secret = source.read().map_err(|source| Error::ReadSecret { what, source })?;
    if secret.expose().contains(['\n', '\0']) {
        return Err(Error::LineBreak { what });
    }
    Ok(secret)
}

/// ssh refuses a key readable by others, and Kubernetes mounts Secrets 0644 by default: the key
/// is copied into a 0600 file next to the mirror for the length of one fetch.
fn copy_private_key(path: &Path, dir: &Path) -> Result<tempfile::NamedTempFile, Error> {
    let mut key = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEY_BYTES + 1).read_to_end(&mut key))
        .map_err(|source| Error::ReadKey { path: path.to_owned(), source })?;
    if key.len() as u64 > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge { path: path.to_owned() });
    }
    if !key.ends_with(b"\n") {
        // OpenSSH rejects a key whose last line is not terminated ("invalid format").
        key.push(b'\n');
    }
    let parent = dir.parent().unwrap_or(dir);
    remove_stale_keys(parent);
    let copy_err = |source| Error::CopyKey { dir: parent.to_owned(), source };
    let mut file = tempfile::Builder::new().prefix(KEY_PREFIX).tempfile_in(parent).map_err(copy_err)?;
    std::io::Write::write_all(&mut file, &key).map_err(copy_err)?;
    Ok(file)
}

/// Key copies a killed process left behind (a fetch deletes its own when it ends).
fn remove_stale_keys(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let stale = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_KEY_AGE));
        if entry.file_name().to_string_lossy().starts_with(KEY_PREFIX) && stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn ssh_command(key: &Path, known_hosts: &Path) -> String {
    let quote = |p: &Path| format!("'{}'", p.to_string_lossy().replace('\'', r"'\''"));
    format!(
        "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} \
         -o GlobalKnownHostsFile=/dev/null -o UpdateHostKeys=no -o IdentitiesOnly=yes -o IdentityAgent=none \
         -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -i {} \
         -o ConnectTimeout=15 -o ServerAliveInterval=15 -o ServerAliveCountMax=2 -o LogLevel=ERROR",
        quote(known_hosts),
        quote(key)
    )
}

/// Runs git, keeping the end of its stderr, and kills it when the deadline passes.
fn run(mut cmd: Command, deadline: Instant) -> Result<(), Error> {
    let mut child = cmd.spawn().map_err(Error::Spawn)?;
    let stderr = child.stderr.take();
    let reader = std::thread::Builder::new()
        .name("git-stderr".into())
        .spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut s) = stderr {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    kept.extend_from_slice(&buf[..n]);
                    if kept.len() > MAX_STDERR_BYTES {
                        kept.drain(..kept.len() - MAX_STDERR_BYTES);
                    }
                }
            }
            kept
        })
        .map_err(Error::Reader)?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Wait(e));
            }
        }
    };
    let Some(status) = status else {
        // Not joined: an `ssh` git started may still hold the stderr pipe until its own
        // timeouts end it; the reader thread ends with it.
        drop(reader);
        return Err(Error::TimedOut);
    };
    let stderr = reader.join().unwrap_or_default();
    if status.success() { Ok(()) } else { Err(explain(&String::from_utf8_lossy(&stderr), status)) }
}

/// Whether git's words point at the mirror rather than the remote (then the mirror is cloned
/// again).
fn is_local_damage(stderr: &str) -> bool {
    ["not a git repository", "bad object", "unable to read", "fatal: loose object", "is corrupt", "did not send all necessary objects"]
        .iter()
        .any(|m| stderr.contains(m))
}

/// git's own words (its last lines), with what they mean for the operator when that is known.
fn explain(stderr: &str, status: std::process::ExitStatus) -> Error {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let said = lines[lines.len().saturating_sub(4)..].join("; ");
    let hint = if stderr.contains("Host key verification failed") {
        Hint::HostKeyUnknown
    } else if stderr.contains("Permission denied (publickey") {
        Hint::KeyRefused
    } else if stderr.contains("Authentication failed") || stderr.contains("could not read Username") || stderr.contains(" 401") {
        Hint::CredentialsRefused
    } else if stderr.contains("not found") || stderr.contains("does not appear to be a git repository") {
        Hint::NotFound
    } else {
        Hint::Other
    };
    Error::Failed { hint, said, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls() {
        assert!(uses_cli("git@example.org:org/stacks.git"));
        assert!(!uses_cli("git://127.0.0.1/x"));
    }

    #[test]
    fn what_git_said_decides_the_message_and_whether_to_retry() {
        use std::os::unix::process::ExitStatusExt;
        let failed = std::process::ExitStatus::from_raw(128 << 8);
        // (git's stderr, the message starts with, transient, the mirror is damaged, reason)
        let table = [
            (
                "Host key verification failed.\nfatal: Could not read from remote repository.",
                "the server's host key",
                false,
                false,
                "HostKeyUnknown",
            ),
            ("git@h: Permission denied (publickey).", "the server refused `auth.ssh.privateKey`", false, false, "Unauthorized"),
            ("fatal: Authentication failed for 'https://h/r.git/'", "the server refused the credentials", false, false, "Unauthorized"),
            (
                "remote: Repository not found.\nfatal: repository 'https://h/r.git/' not found",
                "the repository was not found",
                false,
                false,
                "RepositoryNotFound",
            ),
            (
                "fatal: unable to access 'https://h/': Could not resolve host: h",
                "git fetch failed: fatal: unable to access",
                true,
                false,
                "GitFetchFailed",
            ),
            (
                "error: object file ./objects/ab/cd is empty\nfatal: loose object abcd is corrupt",
                "git fetch failed",
                true,
                true,
                "GitFetchFailed",
            ),
            ("", "git fetch failed (git exited with", true, false, "GitFetchFailed"),
        ];
        for (stderr, starts, transient, damage, reason) in table {
            let e = explain(stderr, failed);
            assert!(e.to_string().starts_with(starts), "{stderr}: {e}");
            assert_eq!((e.is_transient(), e.is_local_damage(), e.reason()), (transient, damage, reason), "{stderr}");
        }
        assert!(Error::TimedOut.is_transient());
        assert!(!Error::LineBreak { what: "password" }.is_transient());
    }

    #[test]
    fn ssh_command_quotes_paths() {
        let cmd = ssh_command(Path::new("/k/it's"), Path::new("/k/known hosts"));
        assert!(cmd.contains(r"-i '/k/it'\''s'"), "{cmd}");
        assert!(cmd.contains("UserKnownHostsFile='/k/known hosts'"), "{cmd}");
        assert!(cmd.contains("StrictHostKeyChecking=yes"));
    }
}
