//! Values a chart generates at render time (helm's `genCA`, `randAlphaNum`, a checksum of
//! either): two renders of the same inputs differ there, so a render applied over a live object
//! would replace its certificates and passwords (and a pod template's checksum annotation would
//! restart its pods). `stacksync adopt` finds them by rendering twice and records them in the
//! Cluster's `ClusterSync` (`status.generated`, one `group|kind|namespace|name|pointer` line per
//! field), and so does every first render of a chart by the daemon; every sync then keeps the
//! live values there ([`keep_live`]) while the render still has the field, and leaves them out
//! of the object's digest ([`without`]), so a render with new random values is the same
//! manifest. Certificates among them are renewed on purpose ([`soonest_renewal`],
//! [`Validity::renew_at`]): the caller syncs without keeping once one is due.

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

/// The generated fields recorded for the object `e` names. A render does not know which kinds
/// are cluster-scoped and records every object without a namespace under the one it renders for
/// (`default_namespace`): a cluster-scoped object (`e` without a namespace) matches that record
/// too (its kind and name alone name it).
pub fn of<'a>(recorded: &'a Recorded, e: &InventoryEntry, default_namespace: &str) -> &'a [String] {
    if recorded.is_empty() {
        // Nearly every Cluster: no key is built.
        return &[];
    }
    let mut key = (e.group.clone(), e.kind.clone(), e.namespace.clone(), e.name.clone());
    if let Some(found) = recorded.get(&key) {
        return found;
    }
    if e.namespace.is_some() {
        return &[];
    }
    key.2 = Some(default_namespace.to_owned());
    recorded.get(&key).map_or(&[], Vec::as_slice)
}

/// `body` without the fields at `pointers`: what a generated value must not change (the
/// inventory's digest of an object, so a render with new random values is not a new manifest).
pub fn without(body: &Value, pointers: &[String]) -> Value {
    let mut out = body.clone();
    for p in pointers {
        let Some((parent, last)) = p.rsplit_once('/') else { continue };
        match out.pointer_mut(parent) {
            Some(Value::Object(m)) => {
                m.remove(&unescape(last));
            }
            Some(Value::Array(a)) => {
                if let Some(item) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    *item = Value::Null;
                }
            }
            _ => {}
        }
    }
    out
}

/// When a certificate is valid: `notBefore` and `notAfter`, in seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// `notBefore`.
    pub not_before: i64,
    /// `notAfter`.
    pub not_after: i64,
}

impl Validity {
    /// When it is renewed: once two thirds of its lifetime have passed (as cert-manager renews
    /// by default), so a certificate is never kept into its last third, and a new one is
    /// never due at once.
    pub fn renew_at(&self) -> i64 {
        self.not_after - (self.not_after - self.not_before).max(0) / 3
    }
}

/// The validity of the certificate soonest due for renewal among the values at `pointers` of
/// `body`: a PEM `CERTIFICATE` block as text, or base64 of one (a Secret's `data`). Values that
/// hold none, or that do not parse, are not certificates.
pub fn soonest_renewal(body: &Value, pointers: &[String]) -> Option<Validity> {
    use base64::Engine as _;
    let mut soonest: Option<Validity> = None;
    for p in pointers {
        let Some(Value::String(text)) = body.pointer(p) else { continue };
        let decoded;
        let pem = if text.contains(PEM_BEGIN) {
            text.as_str()
        } else {
            decoded = base64::engine::general_purpose::STANDARD.decode(text.trim()).ok().and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref() {
                Some(d) if d.contains(PEM_BEGIN) => d,
                _ => continue,
            }
        };
        for validity in pem_certificates(pem).filter_map(|der| certificate_validity(&der)) {
            if soonest.is_none_or(|s| validity.renew_at() < s.renew_at()) {
                soonest = Some(validity);
            }
        }
    }
    soonest
}

const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const PEM_END: &str = "-----END CERTIFICATE-----";

/// The DER bytes of each `CERTIFICATE` block of `pem` (at most 16: a chain, not a bundle).
fn pem_certificates(pem: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    use base64::Engine as _;
    pem.split(PEM_BEGIN).skip(1).take(16).filter_map(|rest| {
        let body = &rest[..rest.find(PEM_END)?];
        let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        base64::engine::general_purpose::STANDARD.decode(b64).ok()
    })
}

/// `notBefore` and `notAfter` of a DER X.509 certificate: Certificate ::= SEQUENCE { tbs
/// SEQUENCE { [0] version OPTIONAL, serial INTEGER, signature SEQUENCE, issuer SEQUENCE,
/// validity SEQUENCE { notBefore Time, notAfter Time }, ... }, ... }.
fn certificate_validity(der: &[u8]) -> Option<Validity> {
    let (tag, cert, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, mut tbs, _) = tlv(cert)?;
    if tag != 0x30 {
        return None;
    }
    let mut next = |expected: Option<u8>| {
        let (tag, content, rest) = tlv(tbs)?;
        tbs = rest;
        expected.is_none_or(|e| e == tag).then_some((tag, content))
    };
    let (mut tag, mut content) = next(None)?;
    if tag == 0xa0 {
        // The explicit version: the serial follows.
        (tag, content) = next(None)?;
    }
    let _ = content;
    if tag != 0x02 {
        return None;
    }
    next(Some(0x30))?; // signature algorithm
    next(Some(0x30))?; // issuer
    let (_, validity) = next(Some(0x30))?;
    let (t1, before, rest) = tlv(validity)?;
    let (t2, after, _) = tlv(rest)?;
    Some(Validity { not_before: time(t1, before)?, not_after: time(t2, after)? })
}

/// One DER tag-length-value: the tag, the content and what follows it.
fn tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// An X.509 time (UTCTime `YYMMDDHHMMSSZ`, GeneralizedTime `YYYYMMDDHHMMSSZ`) in Unix seconds.
fn time(tag: u8, bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        // RFC 5280: a two-digit year YY is 19YY from 50 on, 20YY below.
        0x17 if text.len() == 12 => {
            let yy: i64 = text[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        0x18 if text.len() == 14 => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
        if body.pointer(p).is_none() {
            // The render no longer has the field (a new release dropped it): nothing to keep.
            continue;
        }
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

/// The `pointers` that `body` has and that [`keep_live`] would find no live value for in `live`
/// (all of them when there is no live object).
pub fn unkept(body: &Value, live: Option<&Value>, pointers: &[String]) -> Vec<String> {
    let live_at = |p: &str| match p.strip_prefix("/stringData/") {
        Some(key) => live.and_then(|l| l.pointer(&format!("/data/{key}"))).is_some(),
        None => live.and_then(|l| l.pointer(p)).is_some(),
    };
    pointers.iter().filter(|p| body.pointer(p).is_some() && !live_at(p)).cloned().collect()
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

    /// A self-signed P-256 CA made for this test by `openssl req -x509 -days 30`
    /// (notBefore 2026-12-07T15:11:24Z, notAfter 2027-01-06T15:11:24Z).
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBgDCCASWgAwIBAgIUO+peioTD6oQ4l8HQThclJTl8TRIwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKZml4dHVyZS1jYTAeFw0yNjEyMDcxNTExMjRaFw0yNzAxMDYx
NTExMjRaMBUxEzARBgNVBAMMCmZpeHR1cmUtY2EwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASCF5lR1KioaatSROEogsmIziQOH7ixtIs5v0bMbYWD1gptnvzyw+5M
1OA2jRaUbgVLE6pG8Aq19llwvcskRrCBo1MwUTAdBgNVHQ4EFgQUNce1xPu6eWzK
Mn7DP+AUB5Wi1bkwHwYDVR0jBBgwFoAUNce1xPu6eWzKMn7DP+AUB5Wi1bkwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEA/GqwRHePuGncRKci6tzh
1wAKr0h1xNssWtx2s6+e5QQCIQDj32GkCJRiGGvGreIGFNq1mJiCVIet8JGh9hgh
iCJvNw==
-----END CERTIFICATE-----
";

    #[test]
    fn a_generated_certificate_is_renewed_two_thirds_into_its_life() {
        use base64::Engine as _;
        let want = Validity { not_before: 1_796_656_284, not_after: 1_799_248_284 };
        let b64 = base64::engine::general_purpose::STANDARD.encode(CA);
        let body = json!({"data": {"ca.crt": b64, "ca.key": "bm90IGEgY2VydA=="}, "stringData": {"tls.crt": CA, "pw": "x"}});
        let all = ["/data/ca.crt", "/data/ca.key", "/stringData/tls.crt", "/stringData/pw", "/missing"].map(String::from);
        assert_eq!(soonest_renewal(&body, &all), Some(want));
        assert_eq!(soonest_renewal(&body, &all[3..]), None, "a password is not a certificate");
        assert_eq!(want.renew_at(), want.not_after - 10 * 86_400, "30 days: renewed 10 days before the end");
        // A damaged block, a truncated one and garbage are no certificate (and no panic).
        let damaged = CA.replace("MIIBgDCC", "MIIBgDCD");
        for text in [damaged.as_str(), &CA[..200], "-----BEGIN CERTIFICATE-----\n////\n-----END CERTIFICATE-----", PEM_BEGIN] {
            let _ = soonest_renewal(&json!({"v": text}), &["/v".to_owned()]);
        }
        assert_eq!(time(0x17, b"500101000000Z"), Some(-631_152_000), "UTCTime 50 is 1950");
        assert_eq!(time(0x18, b"20270106151124Z"), Some(1_799_248_284));
        assert_eq!(time(0x18, b"2027010615112Z"), None);
    }

    #[test]
    fn a_generated_value_is_not_part_of_the_digest_and_a_dropped_field_is_not_kept() {
        let body = json!({"data": {"ca.crt": "A", "x": "1"}, "list": [1, 2]});
        let without = without(&body, &["/data/ca.crt".to_owned(), "/list/1".to_owned(), "/none/x".to_owned()]);
        assert_eq!(without, json!({"data": {"x": "1"}, "list": [1, null]}));
        let live = json!({"data": {"ca.crt": "LIVE", "gone": "LIVE"}});
        let kept = keep_live(&body, &live, &["/data/ca.crt".to_owned(), "/data/gone".to_owned()]).expect("kept");
        assert_eq!(kept["data"], json!({"ca.crt": "LIVE", "x": "1"}));
    }

    #[test]
    fn a_cluster_scoped_object_matches_the_record_a_render_made_in_its_namespace() {
        let recorded = parse(&[
            "admissionregistration.k8s.io|ValidatingWebhookConfiguration|kube-system|hook|/webhooks/0/clientConfig/caBundle".to_owned(),
        ]);
        let entry = |namespace: Option<&str>| InventoryEntry {
            group: "admissionregistration.k8s.io".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            namespace: namespace.map(str::to_owned),
            name: "hook".into(),
            version: "v1".into(),
            digest: String::new(),
            fields: String::new(),
        };
        assert_eq!(of(&recorded, &entry(None), "kube-system").len(), 1);
        assert!(of(&recorded, &entry(Some("other")), "kube-system").is_empty());
        assert!(of(&recorded, &entry(None), "default").is_empty());
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
        let pointers = of(&recorded, &entry, "kube-system").to_vec();
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

    #[test]
    fn a_field_with_no_live_value_is_told_where_a_render_has_it() {
        let pointers = ["/data/ca.crt", "/stringData/pw", "/data/gone"].map(String::from).to_vec();
        let body = json!({"data": {"ca.crt": "STAND-IN"}, "stringData": {"pw": "STAND-IN"}});
        // Live has both (a `stringData` key as its `data`); the render no longer has `gone`.
        let live = json!({"data": {"ca.crt": "TElWRQ==", "pw": "bGl2ZQ=="}});
        assert!(unkept(&body, Some(&live), &pointers).is_empty());
        let partial = json!({"data": {"ca.crt": "TElWRQ=="}});
        assert_eq!(unkept(&body, Some(&partial), &pointers), ["/stringData/pw"]);
        assert_eq!(unkept(&body, None, &pointers), ["/data/ca.crt", "/stringData/pw"]);
    }
}
