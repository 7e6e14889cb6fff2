//! Real Git for tests: Debian's `git daemon` on 127.0.0.1 and a free port, and a release
//! repository builder that commits, tags, moves tags and force-pushes with the `git` CLI.
//!
//! The daemon runs in inetd mode behind a listener bound to `127.0.0.1:0`: the port is truly
//! free (no bind-then-release race) and every connection is counted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpListener;
use tokio::process::Command;
use tokio::task::JoinHandle;

/// The `git` binary: Debian's when present, else whatever is on PATH.
pub fn git_bin() -> PathBuf {
    let debian = Path::new("/usr/bin/git");
    if debian.exists() { debian.to_path_buf() } else { PathBuf::from("git") }
}

/// A `git daemon` serving every repository under a base directory.
pub struct GitDaemon {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
    sessions: Arc<tokio::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl GitDaemon {
    /// Serves `base` (read-only, every repository exported) on `127.0.0.1:<free port>`.
    pub async fn start(base: &Path) -> std::io::Result<GitDaemon> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicUsize::new(0));
        let sessions: Arc<tokio::sync::Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (base, count, tasks) = (base.to_path_buf(), connections.clone(), sessions.clone());
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let base = base.clone();
                let session = tokio::spawn(async move {
                    let _ = serve(stream, &base).await;
                });
                tasks.lock().await.push(session);
            }
        });
        Ok(GitDaemon { addr, connections, accept, sessions })
    }

    /// `git://127.0.0.1:<port>/<repo>`.
    pub fn url(&self, repo: &str) -> String {
        format!("git://{}/{repo}", self.addr)
    }

    /// Connections accepted so far (each fetch or ls-remote is one).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Stops accepting and waits for every session to end.
    pub async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
        let sessions = std::mem::take(&mut *self.sessions.lock().await);
        for s in sessions {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s).await;
        }
    }
}

async fn serve(stream: tokio::net::TcpStream, base: &Path) -> std::io::Result<()> {
    let mut cmd = Command::new(git_bin());
    cmd.args(["daemon", "--inetd", "--export-all", "--reuseaddr"])
        .arg(format!("--base-path={}", base.display()))
        .arg(base)
        .stderr(Stdio::null());
    proxy(stream, &mut cmd).await
}

/// Runs an inetd-style server (`cmd` talks the protocol on stdin/stdout) for one connection.
pub(crate) async fn proxy(stream: tokio::net::TcpStream, cmd: &mut Command) -> std::io::Result<()> {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).kill_on_drop(true).spawn()?;
    let (mut stdin, mut stdout) = (child.stdin.take(), child.stdout.take());
    let (mut read, mut write) = stream.into_split();
    let to_git = async {
        if let Some(stdin) = stdin.as_mut() {
            let _ = tokio::io::copy(&mut read, stdin).await;
        }
        drop(stdin.take());
    };
    let from_git = async {
        if let Some(stdout) = stdout.as_mut() {
            let _ = tokio::io::copy(stdout, &mut write).await;
        }
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut write).await;
    };
    // The session is over when git has written its last byte; the client may keep its end open.
    tokio::select! {
        _ = async { tokio::join!(to_git, from_git) } => {}
        _ = child.wait() => {}
    }
    let _ = child.kill().await;
    Ok(())
}

/// A release repository: a bare repo (what the daemon serves) plus a work tree to build commits.
pub struct ReleaseRepo {
    pub bare: PathBuf,
    work: PathBuf,
}

impl ReleaseRepo {
    /// Creates `<dir>/<name>.git` (bare) and a work tree beside it.
    pub fn create(dir: &Path, name: &str) -> std::io::Result<ReleaseRepo> {
        let bare = dir.join(format!("{name}.git"));
        let work = dir.join(format!("{name}.work"));
        run(dir, &["init", "-q", "--bare", "-b", "main", &bare.to_string_lossy()])?;
        run(dir, &["init", "-q", "-b", "main", &work.to_string_lossy()])?;
        let repo = ReleaseRepo { bare, work };
        repo.git(&["remote", "add", "origin", &repo.bare.to_string_lossy()])?;
        Ok(repo)
    }

    /// `file://` URL of the bare repository.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    /// Writes a file in the work tree (parents created).
    pub fn write(&self, path: &str, content: &str) -> &Self {
        let p = self.work.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(p, content).expect("write file");
        self
    }

    pub fn remove(&self, path: &str) -> &Self {
        std::fs::remove_file(self.work.join(path)).expect("remove file");
        self
    }

    /// Commits everything and pushes `main`; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]).expect("git add");
        self.git(&["commit", "-q", "--allow-empty", "-m", message]).expect("git commit");
        self.git(&["push", "-q", "origin", "main"]).expect("git push");
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).expect("rev-parse").trim().to_owned()
    }

    /// Tags HEAD (annotated) and pushes the tag.
    pub fn tag(&self, tag: &str) -> &Self {
        self.git(&["tag", "-a", "-m", tag, tag]).expect("git tag");
        self.git(&["push", "-q", "origin", tag]).expect("push tag");
        self
    }

    /// Commits, then tags: the usual way a release is cut.
    pub fn release(&self, tag: &str, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            self.write(path, content);
        }
        let commit = self.commit(&format!("release {tag}"));
        self.tag(tag);
        commit
    }

    /// Re-points `tag` at HEAD and force-pushes it.
    pub fn move_tag(&self, tag: &str) -> &Self {
        self.git(&["tag", "-f", "-a", "-m", tag, tag]).expect("git tag -f");
        self.git(&["push", "-q", "-f", "origin", tag]).expect("force push tag");
        self
    }

    pub fn delete_tag(&self, tag: &str) -> &Self {
        self.git(&["push", "-q", "origin", &format!(":refs/tags/{tag}")]).expect("delete remote tag");
        self.git(&["tag", "-d", tag]).expect("delete local tag");
        self
    }

    /// Rewrites the last commit and force-pushes `main`.
    pub fn force_push_amend(&self, message: &str) -> String {
        self.git(&["commit", "-q", "--amend", "--allow-empty", "-m", message]).expect("amend");
        self.git(&["push", "-q", "-f", "origin", "main"]).expect("force push");
        self.head()
    }

    pub fn git(&self, args: &[&str]) -> std::io::Result<String> {
        run(&self.work, args)
    }
}

fn run(dir: &Path, args: &[&str]) -> std::io::Result<String> {
    let out = std::process::Command::new(git_bin())
        .current_dir(dir)
        .args([
            "-c",
            "user.name=testkit",
            "-c",
            "user.email=testkit@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
