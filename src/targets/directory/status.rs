//! The directory target's status files, `<root>/status/<namespace>/<cluster>.yaml`: read back
//! before a sync and written after it, only when their bytes change. The writer only says where
//! the file is ([`DirectoryTarget::status_path`]).

use std::path::Path;

use super::writer::DirectoryTarget;
use crate::cache::write_atomic;
use crate::model::cluster::ClusterConfig;
use crate::status::ClusterStatus;

impl DirectoryTarget {
    /// The status written by the last sync, if any and readable.
    pub fn read_status(&self, cluster: &ClusterConfig) -> Option<ClusterStatus> {
        let text = std::fs::read_to_string(self.status_path(cluster)).ok()?;
        serde_saphyr::from_str(&text).ok()
    }

    /// Writes the status file if its content changed. Returns whether it was written.
    ///
    /// # Errors
    /// The file cannot be serialised or written.
    pub fn write_status(&self, cluster: &ClusterConfig, status: &ClusterStatus) -> Result<bool, StatusFileError> {
        let path = self.status_path(cluster);
        let text = serde_saphyr::to_string(status).map_err(StatusFileError::Serialise)?;
        if let Some(dir) = path.parent().filter(|d| *d != Path::new("")) {
            std::fs::create_dir_all(dir).map_err(|source| StatusFileError::CreateDir { dir: dir.to_owned(), source })?;
        }
        write_atomic(&path, text.as_bytes()).map_err(StatusFileError::Write)
    }
}

/// Why a status file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StatusFileError {
    #[error("serialising status: {0}")]
    Serialise(#[source] serde_saphyr::ser::Error),
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Write(#[source] crate::cache::Error),
}
