//! Private Git servers for tests, both on loopback and started by the test itself:
//!
//! - [`SshServer`]: Debian's OpenSSH `sshd` in inetd mode (`sshd -i`) behind a listener bound to
//!   `127.0.0.1:0`, with its own config, host key, authorized key and client key in a tempdir.
//!   It logs in as the user the test runs as.
//! - [`HttpGitServer`]: Debian's `lighttpd` running `git http-backend` as CGI behind basic
//!   authentication, on a free loopback port.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Debian's `sshd`.
pub const SSHD: &str = "/usr/sbin/sshd";
/// Debian's `lighttpd`.
pub const LIGHTTPD: &str = "/usr/sbin/lighttpd";
/// Git's CGI program (Debian's git).
pub const GIT_HTTP_BACKEND: &str = "/usr/lib/git-core/git-http-backend";

fn keygen(path: &Path) -> std::io::Result<()> {
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "stacksync-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()?;
    if status.success() { Ok(()) } else { Err(std::io::Error::other(format!("ssh-keygen failed: {status}"))) }
}

/// The login the tests run as (sshd logs in as this user).
pub fn current_user() -> String {
    std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| {
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|_| "root".into())
    })
}

/// An `sshd` on `127.0.0.1:<free port>` accepting one generated client key.
pub struct SshServer {
    addr: std::net::SocketAddr,
    dir: PathBuf,
    accept: JoinHandle<()>,
}

impl SshServer {
    /// Generates host and client keys under `dir` and starts serving.
    pub async fn start(dir: &Path) -> std::io::Result<SshServer> {
        std::fs::create_dir_all(dir)?;
        keygen(&dir.join("host_key"))?;
        keygen(&dir.join("client_key"))?;
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))?;
        let config = format!(
            "HostKey {dir}/host_key\nAuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config)?;
        if current_user() == "root" {
            // sshd's privilege separation directory, which the package's service would create.
            std::fs::create_dir_all("/run/sshd")?;
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let config = dir.join("sshd_config");
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let config = config.clone();
                tokio::spawn(async move {
                    let mut cmd = Command::new(SSHD);
                    cmd.arg("-i").arg("-f").arg(&config).stderr(Stdio::null());
                    let _ = crate::git::proxy(stream, &mut cmd).await;
                });
            }
        });
        Ok(SshServer { addr, dir: dir.to_path_buf(), accept })
    }

    /// `ssh://<user>@127.0.0.1:<port><absolute path>`.
    pub fn url(&self, repo: &Path) -> String {
        format!("ssh://{}@{}{}", current_user(), self.addr, repo.display())
    }

    /// The client's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client_key")
    }

    /// Writes a `known_hosts` file naming this server's host key, or with `trusted: false` a
    /// freshly generated key the server does not have.
    pub fn known_hosts(&self, trusted: bool) -> std::io::Result<PathBuf> {
        let public = if trusted {
            self.dir.join("host_key.pub")
        } else {
            let other = self.dir.join("other_host_key");
            if !other.exists() {
                keygen(&other)?;
            }
            self.dir.join("other_host_key.pub")
        };
        let key = std::fs::read_to_string(public)?;
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        let path = self.dir.join(if trusted { "known_hosts" } else { "known_hosts.wrong" });
        std::fs::write(&path, format!("[127.0.0.1]:{} {}\n", self.addr.port(), key.join(" ")))?;
        Ok(path)
    }

    pub async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
    }
}

/// `lighttpd` serving `git http-backend` for every repository under a base directory, behind
/// basic authentication with one user.
pub struct HttpGitServer {
    port: u16,
    child: Child,
}

impl HttpGitServer {
    /// Serves the repositories under `base` at `http://127.0.0.1:<port>/git/<repo>`; its config
    /// and password file go in `dir`.
    pub async fn start(dir: &Path, base: &Path, user: &str, password: &str) -> std::io::Result<HttpGitServer> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("users"), format!("{user}:{password}\n"))?;
        let mut last = std::io::Error::other("lighttpd did not start");
        // lighttpd cannot take a listening socket: a free port is picked, and picked again if
        // someone else takes it before lighttpd binds it.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let config = format!(
                "server.document-root = \"{dir}\"\nserver.bind = \"127.0.0.1\"\nserver.port = {port}\n\
                 server.errorlog = \"{dir}/error.log\"\n\
                 server.modules = (\"mod_alias\", \"mod_auth\", \"mod_authn_file\", \"mod_cgi\", \"mod_setenv\")\n\
                 alias.url = (\"/git\" => \"{GIT_HTTP_BACKEND}\")\n\
                 $HTTP[\"url\"] =~ \"^/git\" {{\n  cgi.assign = (\"\" => \"\")\n  \
                 setenv.add-environment = (\"GIT_PROJECT_ROOT\" => \"{base}\", \"GIT_HTTP_EXPORT_ALL\" => \"\")\n}}\n\
                 auth.backend = \"plain\"\nauth.backend.plain.userfile = \"{dir}/users\"\n\
                 auth.require = (\"/git\" => (\"method\" => \"basic\", \"realm\" => \"git\", \"require\" => \"valid-user\"))\n",
                dir = dir.display(),
                base = base.display(),
            );
            let conf = dir.join("lighttpd.conf");
            std::fs::write(&conf, config)?;
            let mut child = Command::new(LIGHTTPD)
                .arg("-D")
                .arg("-f")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = child.try_wait()? {
                    last = std::io::Error::other(format!("lighttpd exited with {status}"));
                    break;
                }
                if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                    // Someone else may have the port, and lighttpd be about to fail to bind it:
                    // it is ours if lighttpd still runs a moment later.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Some(status) = child.try_wait()? {
                        last = std::io::Error::other(format!("lighttpd exited with {status}"));
                        break;
                    }
                    return Ok(HttpGitServer { port, child });
                }
                if tokio::time::Instant::now() > deadline {
                    let _ = child.kill().await;
                    return Err(std::io::Error::other("lighttpd did not listen within 10s"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Err(last)
    }

    /// `http://127.0.0.1:<port>/git/<repo>`.
    pub fn url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/git/{repo}", self.port)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
