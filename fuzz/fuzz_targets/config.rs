//! The config parser and validator: any bytes give a config or errors, never a panic, an abort
//! or unbounded memory (alias bombs included).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = stacksync::config::Config::parse(std::path::Path::new("/fuzz/stacksync.yaml"), text);
    }
});
