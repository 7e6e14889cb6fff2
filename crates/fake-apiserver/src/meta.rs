//! Object metadata the server owns: uids, timestamps, names from generateName, and accessors
//! for the identity fields every handler reads.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// RFC 3339 with second precision, as `metav1.Time` serialises.
pub fn now() -> String {
    let ts = jiff::Timestamp::now();
    format!("{:.0}", ts)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let (a, b) = (random_u64(), random_u64());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    // Version 4, RFC 4122 variant.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut uid = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            uid.push('-');
        }
        uid.push(char::from(HEX[usize::from(b >> 4)]));
        uid.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    uid
}

/// Five lowercase alphanumerics, the suffix `generateName` gets.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn resource_version(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"].as_str().filter(|s| !s.is_empty())
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"].as_array().map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect()).unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// Seconds since an RFC 3339 timestamp, if it parses.
pub fn age_seconds(ts: &str) -> Option<i64> {
    let then: jiff::Timestamp = ts.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - then.as_second())
}

/// `metadata` with `labels` as a map, for selectors.
pub fn labels(obj: &Value) -> Option<&serde_json::Map<String, Value>> {
    obj["metadata"]["labels"].as_object()
}
