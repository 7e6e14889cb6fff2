//! Hot reload: watches the config file's directory, so editors that save by writing a new file
//! and renaming it over the old one (vim, sed -i, Kubernetes ConfigMap volume updates) are seen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How long to wait for an editor's burst of events to settle before reading the file.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Delivers a notice each time the config file may have changed.
pub struct ConfigWatcher {
    // Dropping the watcher stops it; kept for its lifetime only.
    _watcher: notify::RecommendedWatcher,
    rx: mpsc::UnboundedReceiver<()>,
    /// A change was seen and is being debounced; survives cancellation of [`Self::changed`].
    pending: bool,
}

impl ConfigWatcher {
    /// Starts watching the directory that holds `file`.
    ///
    /// # Errors
    /// When the platform watcher cannot be created or the directory cannot be watched.
    pub fn new(file: &Path) -> notify::Result<ConfigWatcher> {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let name = file.file_name().map(ToOwned::to_owned);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else { return };
            // `..data` is the symlink Kubernetes swaps when a mounted ConfigMap changes.
            let relevant = event.paths.iter().any(|p| {
                let f = p.file_name();
                f == name.as_deref() || f.and_then(|f| f.to_str()).is_some_and(|f| f.starts_with(".."))
            });
            if relevant && !event.kind.is_access() {
                let _ = tx.send(());
            }
        })?;
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        Ok(ConfigWatcher { _watcher: watcher, rx, pending: false })
    }

    /// Waits for a change, then for [`DEBOUNCE`] of quiet. Cancellation safe.
    pub async fn changed(&mut self) -> Option<()> {
        if !self.pending {
            self.rx.recv().await?;
            self.pending = true;
        }
        while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, self.rx.recv()).await {}
        self.pending = false;
        Some(())
    }
}
