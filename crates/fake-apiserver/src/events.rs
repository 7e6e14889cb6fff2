//! One store behind both Event APIs, as on the real server: an Event written through
//! `events.k8s.io/v1` is also a core `v1` Event (what `kubectl get events` lists) and the other
//! way round. Each write to one view is mirrored, converted, into the other.
//!
//! What differs from the real server: the two views get consecutive resourceVersions (the real
//! server stores one object under one resourceVersion).

use serde_json::{Map, Value};

/// Field names of the core view and of the `events.k8s.io` view that say the same thing.
const RENAMED: [(&str, &str); 6] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("reportingComponent", "reportingController"),
];

/// `count` (core) is `deprecatedCount` (events.k8s.io).
const COUNT: (&str, &str) = ("count", "deprecatedCount");

/// The group and the object of the other view of an object of resource `group`/`plural` (same
/// namespace and name), or `None` for anything but an Event.
pub fn other_view(group: &str, plural: &str, obj: &Value) -> Option<(&'static str, Value)> {
    if plural != "events" {
        return None;
    }
    let (to_group, api_version) = match group {
        "" => ("events.k8s.io", "events.k8s.io/v1"),
        "events.k8s.io" => ("", "v1"),
        _ => return None,
    };
    let from_core = group.is_empty();
    let mut out = Map::new();
    for (k, v) in obj.as_object()? {
        let renamed = RENAMED.iter().chain(std::iter::once(&COUNT)).find_map(|(core, events)| match from_core {
            true if k == core => Some(*events),
            false if k == events => Some(*core),
            _ => None,
        });
        out.insert(renamed.unwrap_or(k).to_owned(), v.clone());
    }
    out.insert("apiVersion".into(), Value::from(api_version));
    out.insert("kind".into(), Value::from("Event"));
    Some((to_group, Value::Object(out)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_two_views_convert_into_each_other() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reportingController": "c", "deprecatedCount": 2, "reason": "R"});
        let (core_group, core) = other_view("events.k8s.io", "events", &new).expect("an event");
        assert_eq!(core_group, "");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["count"], 2);
        assert_eq!(core["apiVersion"], "v1");
        let (back_group, back) = other_view(core_group, "events", &core).expect("an event");
        assert_eq!(back_group, "events.k8s.io");
        assert_eq!(back, new);
        assert!(other_view("", "configmaps", &new).is_none());
    }
}
