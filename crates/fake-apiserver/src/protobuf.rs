//! Request bodies in Kubernetes' protobuf encoding, for the clients that send them: kubectl's
//! `create namespace|configmap|secret` generators and Helm's release storage (Secrets and their
//! DeleteOptions). Only those kinds are decoded, into the JSON every handler takes; responses stay JSON, which the
//! same clients accept. Field numbers are those of k8s.io/api's generated.proto.

use serde_json::{Map, Value, json};

use super::status::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the JSON object it encodes.
///
/// # Errors
/// 415 for a kind this server does not decode, 400 for a malformed body.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let unsupported = |what: &str| {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "testkit decodes protobuf bodies of Namespace, ConfigMap, Secret and DeleteOptions only, not {what}; send JSON (kubectl create -f, apply)"
            ),
        )
    };
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| ApiError::bad_request("protobuf body without the k8s magic prefix"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (field, value) in fields(envelope)? {
        match (field, value) {
            (1, Wire::Bytes(type_meta)) => {
                for (f, v) in fields(type_meta)? {
                    match (f, v) {
                        (1, Wire::Bytes(b)) => api_version = text(b)?,
                        (2, Wire::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let mut obj = json!({"apiVersion": api_version, "kind": kind});
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            for (f, v) in fields(raw)? {
                match (f, v) {
                    (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                    (2, Wire::Bytes(spec)) => {
                        let finalizers = strings(spec, 1)?;
                        if !finalizers.is_empty() {
                            obj["spec"] = json!({"finalizers": finalizers});
                        }
                    }
                    _ => {}
                }
            }
        }
        ("v1", "ConfigMap") => {
            for (f, v) in fields(raw)? {
                match (f, v) {
                    (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                    (2, Wire::Bytes(b)) => insert_entry(&mut obj, "data", b, false)?,
                    (3, Wire::Bytes(b)) => insert_entry(&mut obj, "binaryData", b, true)?,
                    (4, Wire::Varint(n)) => obj["immutable"] = json!(n != 0),
                    _ => {}
                }
            }
        }
        ("v1", "Secret") => {
            for (f, v) in fields(raw)? {
                match (f, v) {
                    (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                    (2, Wire::Bytes(b)) => insert_entry(&mut obj, "data", b, true)?,
                    (3, Wire::Bytes(b)) => obj["type"] = json!(text(b)?),
                    (4, Wire::Bytes(b)) => insert_entry(&mut obj, "stringData", b, false)?,
                    (5, Wire::Varint(n)) => obj["immutable"] = json!(n != 0),
                    _ => {}
                }
            }
        }
        (_, "DeleteOptions") => {
            for (f, v) in fields(raw)? {
                match (f, v) {
                    (1, Wire::Varint(n)) => obj["gracePeriodSeconds"] = json!(n),
                    (2, Wire::Bytes(b)) => {
                        for (pf, pv) in fields(b)? {
                            match (pf, pv) {
                                (1, Wire::Bytes(uid)) => obj["preconditions"]["uid"] = json!(text(uid)?),
                                (2, Wire::Bytes(rv)) => obj["preconditions"]["resourceVersion"] = json!(text(rv)?),
                                _ => {}
                            }
                        }
                    }
                    (4, Wire::Bytes(b)) => obj["propagationPolicy"] = json!(text(b)?),
                    (5, Wire::Bytes(b)) => {
                        if !obj["dryRun"].is_array() {
                            obj["dryRun"] = json!([]);
                        }
                        if let Some(list) = obj["dryRun"].as_array_mut() {
                            list.push(json!(text(b)?));
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => return Err(unsupported(&format!("{api_version} {kind}"))),
    }
    Ok(obj)
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn malformed() -> ApiError {
    ApiError::bad_request("malformed protobuf body")
}

fn varint(buf: &[u8], pos: &mut usize) -> ApiResult<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos).ok_or_else(malformed)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(malformed())
}

fn fields(buf: &[u8]) -> ApiResult<Vec<(u64, Wire<'_>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let tag = varint(buf, &mut pos)?;
        let value = match tag & 7 {
            0 => Wire::Varint(varint(buf, &mut pos)?),
            1 => {
                pos += 8;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|_| malformed())?;
                let bytes = buf.get(pos..pos + len).ok_or_else(malformed)?;
                pos += len;
                Wire::Bytes(bytes)
            }
            5 => {
                pos += 4;
                Wire::Fixed
            }
            _ => return Err(malformed()),
        };
        out.push((tag >> 3, value));
    }
    if pos > buf.len() {
        return Err(malformed());
    }
    Ok(out)
}

fn text(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec()).map_err(|_| malformed())
}

fn strings(buf: &[u8], field: u64) -> ApiResult<Vec<String>> {
    fields(buf)?.into_iter().filter_map(|(f, v)| if let (true, Wire::Bytes(b)) = (f == field, v) { Some(text(b)) } else { None }).collect()
}

/// One `map<string, string|bytes>` entry (key = 1, value = 2) into `obj[field]`.
fn insert_entry(obj: &mut Value, field: &str, entry: &[u8], binary: bool) -> ApiResult<()> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for (f, v) in fields(entry)? {
        match (f, v) {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, Wire::Bytes(b)) => value = Value::String(if binary { base64(b) } else { text(b)? }),
            _ => {}
        }
    }
    if !obj[field].is_object() {
        obj[field] = Value::Object(Map::new());
    }
    obj[field][key] = value;
    Ok(())
}

/// The ObjectMeta fields a create or update carries.
fn object_meta(buf: &[u8]) -> ApiResult<Value> {
    let mut meta = json!({});
    for (f, v) in fields(buf)? {
        match (f, v) {
            (1, Wire::Bytes(b)) => meta["name"] = json!(text(b)?),
            (2, Wire::Bytes(b)) => meta["generateName"] = json!(text(b)?),
            (3, Wire::Bytes(b)) => meta["namespace"] = json!(text(b)?),
            (5, Wire::Bytes(b)) => meta["uid"] = json!(text(b)?),
            (6, Wire::Bytes(b)) => meta["resourceVersion"] = json!(text(b)?),
            (11, Wire::Bytes(b)) => insert_entry(&mut meta, "labels", b, false)?,
            (12, Wire::Bytes(b)) => insert_entry(&mut meta, "annotations", b, false)?,
            (14, Wire::Bytes(b)) => {
                if !meta["finalizers"].is_array() {
                    meta["finalizers"] = json!([]);
                }
                if let Some(list) = meta["finalizers"].as_array_mut() {
                    list.push(json!(text(b)?));
                }
            }
            _ => {}
        }
    }
    if let Some(m) = meta.as_object_mut() {
        m.retain(|_, v| v.as_str() != Some(""));
    }
    Ok(meta)
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_kubectl_create_namespace_sends() {
        // Captured from kubectl 1.35.2: `kubectl create namespace team`.
        let body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1c\n\x14\n\x04team\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        assert_eq!(decode(body).expect("decodes"), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    }

    #[test]
    fn base64_pads_like_the_standard_encoding() {
        let cases: [(&[u8], &str); 4] = [(b"", ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foobar", "Zm9vYmFy")];
        for (input, want) in cases {
            assert_eq!(base64(input), want);
        }
    }
}
