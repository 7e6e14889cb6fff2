//! Unpacking untrusted release archives (tar, and tar.gz when the input starts with gzip's
//! magic): refused or unpacked inside the destination, within the limits, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stacksync::cache::unpack::{Limits, unpack, unpack_from};

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    let out = dir.path().join("out");
    if std::fs::create_dir(&out).is_err() {
        return;
    }
    let limits = Limits { max_bytes: 1 << 20, max_entries: 256 };
    if data.starts_with(&[0x1f, 0x8b]) {
        // Through the file entry point, which detects gzip by its magic bytes.
        let archive = dir.path().join("a.tar.gz");
        if std::fs::write(&archive, data).is_ok() {
            let _ = unpack(&archive, &out, limits);
        }
    } else {
        let _ = unpack_from(data, &out, limits);
    }
});
