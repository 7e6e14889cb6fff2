//! Values a chart generates at render time (helm's `genCA`, `randAlphaNum`, a checksum of
//! either): two renders of the same inputs differ there, so a render applied over a live object
//! would replace its certificates and passwords (and a pod template's checksum annotation would
//! restart its pods). `stacksync adopt` finds them by rendering twice and records them in the
//! Cluster's `ClusterSync` (`status.generated`, one `group|kind|namespace|name|pointer` line per
//! field); every sync then keeps the live values there ([`keep_live`]). Removing a line lets
//! the next sync render that field anew.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::InventoryEntry;

/// The generated fields (JSON pointers) of each object, by `(group, kind, namespace, name)`.
pub type Recorded = BTreeMap<(String, String, Option<String>, String), Vec<String>>;

/// The record's lines (`group|kind|namespace|name|pointer`); a line that is not one is skipped.
pub fn parse(lines: &[String]) -> Recorded {
    let mut out = Recorded::new();
    for line in lines {
        let mut parts = line.splitn(5, '|');
        let (Some(group), Some(kind), Some(ns), Some(name), Some(pointer)) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !pointer.starts_with('/') {
            continue;
        }
        let ns = (!ns.is_empty()).then(|| ns.to_owned());
        out.entry((group.to_owned(), kind.to_owned(), ns, name.to_owned())).or_default().push(pointer.to_owned());
    }
    out
}

/// The record's line of one generated field of the object `e` names.
pub fn line(e: &InventoryEntry, pointer: &str) -> String {
    format!("{}|{}|{}|{}|{pointer}", e.group, e.kind, e.namespace.as_deref().unwrap_or_default(), e.name)
}

/// The generated fields recorded for the object `e` names.
pub fn of<'a>(recorded: &'a Recorded, e: &InventoryEntry) -> &'a [String] {
    if recorded.is_empty() {
        // Nearly every Cluster: no key is built.
        return &[];
    }
    recorded.get(&(e.group.clone(), e.kind.clone(), e.namespace.clone(), e.name.clone())).map_or(&[], Vec::as_slice)
}

/// JSON pointers of the fields whose values differ between two renders of one object (`a`,
/// `b`): maps are compared key by key, lists of the same length item by item; anything else
/// that differs is one field. Empty when the renders agree.
pub fn differing(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(a, b, &mut String::new(), &mut out);
    out
}

fn walk(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))).collect();
            keys.sort();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => walk(p, q, path, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(p, q, path, out);
                path.truncate(len);
            }
        }
        _ => out.push(path.clone()),
    }
}

/// `body` with the live value at each of `pointers`. A Secret's `/stringData/<key>` (the server
/// never shows `stringData`) gets the live `/data/<key>` decoded, so the apply sets the same
/// field as before; when that is not UTF-8 text, the live `/data/<key>` itself. `None` when
/// nothing changed.
pub fn keep_live(body: &Value, live: &Value, pointers: &[String]) -> Option<Value> {
    use base64::Engine as _;
    let mut out = body.clone();
    for p in pointers {
        if let Some(key) = p.strip_prefix("/stringData/") {
            let Some(value) = live.pointer(&format!("/data/{key}")) else { continue };
            let text = value
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|b| String::from_utf8(b).ok());
            match text {
                Some(text) => set(&mut out, p, Value::String(text)),
                None => {
                    if let Some(Value::Object(s)) = out.get_mut("stringData") {
                        s.remove(&unescape(key));
                    }
                    set(&mut out, &format!("/data/{key}"), value.clone());
                }
            }
        } else if let Some(value) = live.pointer(p) {
            set(&mut out, p, value.clone());
        }
    }
    (&out != body).then_some(out)
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Sets the value at pointer `p` of `v`, making maps on the way; a list index that is not there,
/// or a step through a scalar, leaves `v` as it is.
fn set(v: &mut Value, p: &str, value: Value) {
    let segments: Vec<String> = p.split('/').skip(1).map(unescape).collect();
    let Some((last, parents)) = segments.split_last() else { return };
    let mut at = v;
    for s in parents {
        at = match at {
            Value::Object(m) => m.entry(s.clone()).or_insert_with(|| Value::Object(Map::new())),
            Value::Array(a) => match s.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(item) => item,
                None => return,
            },
            _ => return,
        };
    }
    match at {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if let Some(item) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *item = value;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn two_renders_differ_where_a_chart_generates() {
        let a = json!({"kind": "Secret", "data": {"ca.crt": "A", "x": "1"}, "stringData": {"p/w": "a"}, "list": [1, {"c": "a"}]});
        let b = json!({"kind": "Secret", "data": {"ca.crt": "B", "x": "1"}, "stringData": {"p/w": "b"}, "list": [1, {"c": "b"}]});
        assert_eq!(differing(&a, &b), ["/data/ca.crt", "/list/1/c", "/stringData/p~1w"]);
        assert!(differing(&a, &a).is_empty());
    }

    #[test]
    fn the_live_values_are_kept_where_recorded() {
        let lines: Vec<String> = [
            "|Secret|ns|s|/data/ca.crt",
            "|Secret|ns|s|/stringData/pw",
            "|Secret|ns|s|/spec/template/metadata/annotations/checksum~1s",
            "apps|Deployment||d|no pointer",
            "short",
        ]
        .map(String::from)
        .to_vec();
        let recorded = parse(&lines);
        let entry = InventoryEntry {
            group: String::new(),
            kind: "Secret".into(),
            namespace: Some("ns".into()),
            name: "s".into(),
            version: "v1".into(),
            digest: String::new(),
            fields: String::new(),
        };
        let pointers = of(&recorded, &entry).to_vec();
        assert_eq!(pointers.len(), 3);
        assert_eq!(line(&entry, &pointers[0]), lines[0]);
        assert_eq!(recorded.len(), 1);
        let live = json!({
            "data": {"ca.crt": "TElWRQ==", "pw": "bGl2ZQ==", "bin": "/w=="},
            "spec": {"template": {"metadata": {"annotations": {"checksum/s": "live"}}}},
        });
        let body = json!({"data": {"ca.crt": "TkVX"}, "stringData": {"pw": "new"}, "spec": {"template": {"metadata": {"annotations": {"checksum/s": "new"}}}}});
        let kept = keep_live(&body, &live, &pointers).expect("changed");
        assert_eq!(kept["data"], json!({"ca.crt": "TElWRQ=="}));
        assert_eq!(kept["stringData"], json!({"pw": "live"}));
        // Not text: the live bytes as data.
        let binary = keep_live(&json!({"stringData": {"bin": "x"}}), &live, &["/stringData/bin".to_owned()]).expect("changed");
        assert_eq!(binary, json!({"stringData": {}, "data": {"bin": "/w=="}}));
        assert_eq!(kept["spec"]["template"]["metadata"]["annotations"]["checksum/s"], "live");
        assert_eq!(keep_live(&kept, &live, &pointers), None);
    }
}
