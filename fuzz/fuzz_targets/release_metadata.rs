//! A cluster-stack release's `metadata.yaml` and `clusteraddon.yaml`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stacksync::model::version::Version;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some(tag) = Version::from_tag("docker-ferrol-1-27-v1") {
        let _ = stacksync::release::metadata::parse("metadata.yaml", text, &tag);
    }
    let _ = stacksync::render::clusterstack::parse_addon_config("clusteraddon.yaml", text);
});
