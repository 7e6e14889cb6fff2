//! The values-template engine (Go text/template subset): parse, then execute against a fixed
//! cluster's data.
#![no_main]

use libfuzzer_sys::fuzz_target;
use gotemplate::Template;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Template::parse("values.yaml", text) {
        let data = serde_json::json!({
            "Cluster": {"metadata": {"name": "alpha", "namespace": "team-a", "labels": {"a": "b"}},
                        "spec": {"topology": {"version": "v1.27.3", "variables": [{"name": "x", "value": 1}]}}},
            "Values": {"list": [1, 2, 3], "map": {"k": "v"}, "s": "text", "n": null}
        });
        let _ = t.execute(&data);
    }
});
