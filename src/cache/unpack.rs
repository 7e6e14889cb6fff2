//! Safe unpacking of release archives (tar, tar.gz / tgz). Archives come from the network and are
//! untrusted: absolute paths, `..`, links that could escape the root, device files and
//! decompression bombs are refused, and every error names the archive entry.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Caps on what one archive may expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bytes: crate::model::source::DEFAULT_MAX_UNPACKED_BYTES, max_entries: 20_000 }
    }
}

/// Why an archive was not unpacked. Names and messages that come from the archive are shown
/// with [`shown`]: control characters escaped, long ones cut (the whole error stays short
/// enough for a status message whatever the archive holds).
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("entry \"{}\": {}", shown(entry), shown(reason))]
    Entry { entry: String, reason: String },
    #[error("entry \"{}\": archive unpacks to more than {limit} bytes (decompression bomb?)", shown(entry))]
    TooLarge { entry: String, limit: u64 },
    #[error("has more than {limit} entries")]
    TooManyEntries { limit: u64 },
    /// The archive file could not be read (the OS said why: the volume's trouble).
    #[error("cannot be read: {0}")]
    Read(#[source] std::io::Error),
    /// What was read is no gzip or tar stream, or a damaged one. Described, never quoted: the
    /// reader's complaint carries the archive's header bytes (`\u{fffd}` once made text), which
    /// say nothing to a reader of a log or a status and are the archive's, not ours.
    #[error("is not a gzip/tar archive, or a damaged one ({})", not_archive(*bytes, *gzip, *entries))]
    NotArchive {
        /// The archive's size, when it is a file.
        bytes: Option<u64>,
        /// Whether it starts as gzip does, when known.
        gzip: Option<bool>,
        /// Entries read before the stream stopped making sense.
        entries: u64,
    },
    #[error("cannot write {}: {}", shown(path), shown(&source.to_string()))]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl UnpackError {
    /// Whether unpacking the same archive again may succeed: only when the volume could not be
    /// written (full, read-only, failing). What the archive itself decides — a path too long
    /// for the file system, a file where its own entries need a directory — fails the same way
    /// every time.
    pub fn is_transient(&self) -> bool {
        use std::io::ErrorKind;
        let UnpackError::Write { source, .. } = self else { return false };
        // ENAMETOOLONG (36 on Linux) has no stable ErrorKind of its own on every toolchain.
        let name_too_long = source.raw_os_error() == Some(36);
        !(name_too_long
            || matches!(
                source.kind(),
                ErrorKind::NotADirectory | ErrorKind::IsADirectory | ErrorKind::AlreadyExists | ErrorKind::InvalidFilename
            ))
    }
}

/// What is known of an archive that is none: its size, its compression, how far it was read.
fn not_archive(bytes: Option<u64>, gzip: Option<bool>, entries: u64) -> String {
    let mut said = Vec::new();
    if let Some(bytes) = bytes {
        said.push(format!("{bytes} bytes"));
    }
    match gzip {
        Some(true) => said.push("gzip-compressed".to_owned()),
        Some(false) => said.push("not gzip-compressed".to_owned()),
        None => {}
    }
    said.push(match entries {
        0 => "no readable tar header".to_owned(),
        1 => "unreadable after its first entry".to_owned(),
        n => format!("unreadable after {n} entries"),
    });
    said.join(", ")
}

/// A read of the archive that failed: the OS error when the OS raised one anywhere in the
/// chain (the reader wraps it), otherwise the stream is no archive. The reader's own text,
/// which may quote the archive's bytes, is dropped.
fn read_failed(e: &std::io::Error, entries: u64) -> UnpackError {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = next {
        let Some(io) = c.downcast_ref::<std::io::Error>() else {
            next = c.source();
            continue;
        };
        if let Some(code) = io.raw_os_error() {
            return UnpackError::Read(std::io::Error::from_raw_os_error(code));
        }
        // The error an I/O error wraps is not its `source()` (that is the wrapped one's).
        next = io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static));
    }
    UnpackError::NotArchive { bytes: None, gzip: None, entries }
}

/// At most this many characters of a name or message from an archive go into an error.
const SHOWN: usize = 160;

/// Text that came from an archive, fit for a log line and a status message: control characters
/// escaped (`\u{1b}`), at most [`SHOWN`] characters, the rest counted.
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(SHOWN) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    let rest = chars.count();
    if rest > 0 {
        out.push_str(&format!("… ({rest} more characters)"));
    }
    out
}

/// Whether a file name looks like an archive this module unpacks.
pub fn is_archive(name: &str) -> bool {
    name.ends_with(".tar.gz") || name.ends_with(".tgz") || name.ends_with(".tar")
}

/// The directory name an archive unpacks into: its name without the archive extension.
pub fn stem(name: &str) -> &str {
    name.strip_suffix(".tar.gz").or_else(|| name.strip_suffix(".tgz")).or_else(|| name.strip_suffix(".tar")).unwrap_or(name)
}

/// Unpacks `archive` (gzip detected by magic bytes) into the existing directory `dest`.
/// Symlinks inside the root are skipped (a release is plain files); anything else unsafe is an
/// error. On error `dest` may hold a partial tree: callers unpack into a temp dir they discard.
///
/// Returns the number of files written.
///
/// # Errors
/// See [`UnpackError`].
pub fn unpack(archive: &Path, dest: &Path, limits: Limits) -> Result<u64, UnpackError> {
    let mut file = std::fs::File::open(archive).map_err(UnpackError::Read)?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let file = std::fs::File::open(archive).map_err(UnpackError::Read)?;
    let bytes = file.metadata().ok().map(|m| m.len());
    let result = if gz { unpack_from(flate2::read::GzDecoder::new(file), dest, limits) } else { unpack_from(file, dest, limits) };
    result.map_err(|e| match e {
        UnpackError::NotArchive { entries, .. } => UnpackError::NotArchive { bytes, gzip: Some(gz), entries },
        other => other,
    })
}

/// [`unpack`] from a reader of an uncompressed tar stream (for callers that hold the bytes).
///
/// # Errors
/// See [`UnpackError`].
pub fn unpack_from(reader: impl Read, dest: &Path, limits: Limits) -> Result<u64, UnpackError> {
    let mut archive = tar::Archive::new(reader);
    let mut total: u64 = 0;
    let mut entries_seen: u64 = 0;
    let mut files = 0;
    for entry in archive.entries().map_err(|e| read_failed(&e, 0))? {
        let mut entry = entry.map_err(|e| read_failed(&e, entries_seen))?;
        entries_seen += 1;
        if entries_seen > limits.max_entries {
            return Err(UnpackError::TooManyEntries { limit: limits.max_entries });
        }
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let bad = |reason: &str| UnpackError::Entry { entry: name.clone(), reason: reason.to_owned() };
        let rel = safe_relative(&name).ok_or_else(|| bad("absolute path or `..` escapes the archive root"))?;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => {
                let path = dest.join(&rel);
                std::fs::create_dir_all(&path).map_err(|e| write_err(&path, e))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if rel.as_os_str().is_empty() {
                    return Err(bad("a file entry with an empty name"));
                }
                let path = dest.join(&rel);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e))?;
                }
                // Count real bytes as they stream: header sizes can lie.
                let remaining = limits.max_bytes.saturating_sub(total);
                let mut out = std::fs::File::create(&path).map_err(|e| write_err(&path, e))?;
                let copied = std::io::copy(&mut (&mut entry).take(remaining + 1), &mut out).map_err(|e| write_err(&path, e))?;
                total += copied;
                if total > limits.max_bytes {
                    return Err(UnpackError::TooLarge { entry: name.clone(), limit: limits.max_bytes });
                }
                files += 1;
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry.link_name_bytes().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
                let base = Path::new(&name).parent().unwrap_or(Path::new("")).join(&target);
                if Path::new(&target).is_absolute() || safe_relative(&base.to_string_lossy()).is_none() {
                    return Err(bad(&format!("link to {target:?} escapes the archive root")));
                }
                tracing::warn!(entry = %name, target = %target, "skipping link in archive");
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {}
            other => return Err(bad(&format!("unsupported entry type {other:?} (devices, fifos and the like are refused)"))),
        }
    }
    Ok(files)
}

fn write_err(path: &Path, source: std::io::Error) -> UnpackError {
    UnpackError::Write { path: path.display().to_string(), source }
}

/// A path made only of normal components (`./` dropped); `None` for absolute paths or `..`.
fn safe_relative(name: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a tar with raw headers, so hostile names can be written (the tar crate's safe
    /// builders refuse them).
    fn tar_with(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            let mut header = tar::Header::new_gnu();
            let bytes = name.as_bytes();
            header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            if let Some(l) = link {
                header.as_old_mut().linkname[..l.len()].copy_from_slice(l.as_bytes());
            }
            header.set_cksum();
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn run(bytes: &[u8], limits: Limits) -> (tempfile::TempDir, Result<u64, UnpackError>) {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar");
        std::fs::write(&archive, bytes).unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let r = unpack(&archive, &dest, limits);
        (dir, r)
    }

    #[test]
    fn plain_and_gzip_archives_unpack() {
        let tar = tar_with(&[
            ("chart/", tar::EntryType::Directory, b"", None),
            ("chart/Chart.yaml", tar::EntryType::Regular, b"name: x\n", None),
        ]);
        let (dir, r) = run(&tar, Limits::default());
        assert_eq!(r.unwrap(), 1);
        assert_eq!(std::fs::read_to_string(dir.path().join("out/chart/Chart.yaml")).unwrap(), "name: x\n");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        let (_dir, r) = run(&gz.finish().unwrap(), Limits::default());
        assert_eq!(r.unwrap(), 1);
    }

    #[test]
    fn hostile_entries_are_refused_by_name() {
        let table: &[(&str, tar::EntryType, Option<&str>, &str)] = &[
            ("../evil", tar::EntryType::Regular, None, "escapes"),
            ("/etc/evil", tar::EntryType::Regular, None, "escapes"),
            ("a/../../evil", tar::EntryType::Regular, None, "escapes"),
            ("link", tar::EntryType::Symlink, Some("/etc/passwd"), "escapes"),
            ("dir/link", tar::EntryType::Symlink, Some("../../x"), "escapes"),
            ("hard", tar::EntryType::Link, Some("../x"), "escapes"),
            ("dev", tar::EntryType::Char, None, "unsupported entry type"),
            ("fifo", tar::EntryType::Fifo, None, "unsupported entry type"),
        ];
        for (name, kind, link, want) in table {
            let (_dir, r) = run(&tar_with(&[(name, *kind, b"", *link)]), Limits::default());
            let err = r.unwrap_err().to_string();
            assert!(err.contains(&format!("{name:?}")) && err.contains(want), "{name}: {err}");
        }
    }

    #[test]
    fn decompression_bombs_are_capped() {
        let big = vec![0u8; 10_000];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &tar_with(&[("zeros", tar::EntryType::Regular, &big, None)])).unwrap();
        let (_dir, r) = run(&gz.finish().unwrap(), Limits { max_bytes: 4096, max_entries: 10 });
        assert!(matches!(&r, Err(UnpackError::TooLarge { entry, limit: 4096 }) if entry == "zeros"), "{r:?}");
        let many: Vec<(String, tar::EntryType, &[u8], Option<&str>)> =
            (0..5).map(|i| (format!("f{i}"), tar::EntryType::Regular, &b"x"[..], None)).collect();
        let refs: Vec<(&str, tar::EntryType, &[u8], Option<&str>)> = many.iter().map(|(n, k, d, l)| (n.as_str(), *k, *d, *l)).collect();
        let (_dir, r) = run(&tar_with(&refs), Limits { max_bytes: 4096, max_entries: 3 });
        assert!(matches!(r, Err(UnpackError::TooManyEntries { limit: 3 })), "{r:?}");
    }

    /// Regression: what the archive decides (a path deeper than the file system takes, a file
    /// where its own entries need a directory) was reported as a transient failure, with the
    /// whole path — thousands of characters — in the status message.
    #[test]
    fn hostile_content_fails_for_good_with_a_short_message() {
        let deep = "d/".repeat(3000) + "f";
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        builder.append_data(&mut header, &deep, &b"x"[..]).unwrap();
        let deep_tar = builder.into_inner().unwrap();
        let collision = tar_with(&[("x", tar::EntryType::Regular, b"x", None), ("x/y", tar::EntryType::Regular, b"y", None)]);
        for (what, bytes) in [("a path too deep", deep_tar), ("a file where a directory must go", collision)] {
            let (_dir, r) = run(&bytes, Limits::default());
            let err = r.unwrap_err();
            assert!(!err.is_transient(), "{what}: {err:?}");
            assert!(err.to_string().len() < 600, "{what}: {} characters: {err}", err.to_string().len());
        }
    }

    /// Regression: a garbage archive's control bytes reached the log and the status message;
    /// then its header bytes still did, as U+FFFD characters.
    #[test]
    fn a_garbage_archive_is_described_not_quoted() {
        let mut control = vec![0x1b_u8, b'[', b'3', b'1', b'm', 0x07, 0x08];
        control.resize(1024, 0x01);
        let mut high = vec![0xff_u8, 0xfe, b'P', b'K'];
        high.resize(1024, 0xc3);
        let mut gzip_garbage = vec![0x1f_u8, 0x8b, 0x08, 0x00];
        gzip_garbage.resize(700, 0xfd);
        let good = tar_with(&[("ok", tar::EntryType::Regular, b"x", None)]);
        // Its header and data block, then a block of garbage where the next header goes.
        let truncated = [&good[..good.len() - 1024], &[0xff; 512][..]].concat();
        let table: [(&str, &[u8], &str); 4] = [
            ("control bytes", &control, "(1024 bytes, not gzip-compressed, no readable tar header)"),
            ("bytes that are no UTF-8", &high, "(1024 bytes, not gzip-compressed, no readable tar header)"),
            ("a gzip header, then garbage", &gzip_garbage, "(700 bytes, gzip-compressed, no readable tar header)"),
            ("a good entry, then garbage", &truncated, "(1536 bytes, not gzip-compressed, unreadable after its first entry)"),
        ];
        for (name, bytes, want) in table {
            let (_dir, r) = run(bytes, Limits::default());
            let err = r.unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, UnpackError::NotArchive { .. }), "{name}: {text}");
            assert!(text.starts_with("is not a gzip/tar archive, or a damaged one (") && text.ends_with(want), "{name}: {text}");
            assert!(text.is_ascii(), "{name}: {text:?}");
            assert!(!err.is_transient(), "{name}");
        }
        assert_eq!(shown("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(shown(&"x".repeat(200)), format!("{}… (40 more characters)", "x".repeat(160)));
    }
}
