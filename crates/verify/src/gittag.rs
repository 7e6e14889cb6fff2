//! An annotated Git tag object split into what was signed and the signature. Git appends the
//! signature block (`-----BEGIN SSH SIGNATURE-----`, `-----BEGIN PGP SIGNATURE-----`) to the tag
//! message; the signed payload is the object up to that line. Pure.

use super::Refusal;

/// What signed a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignatureKind {
    Ssh,
    OpenPgp,
    /// X.509 (gpgsm) or anything else Git may write: reported, never trusted.
    Other(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature<'a> {
    pub kind: SignatureKind,
    /// The armoured block, from its BEGIN line to the end of the object.
    pub armored: &'a str,
}

/// A tag object's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagObject<'a> {
    /// The `tag` header: the name the tagger gave the tag.
    pub name: &'a [u8],
    /// The `object` header (hex id of what the tag points at).
    pub object: &'a [u8],
    /// The bytes the signature covers.
    pub payload: &'a [u8],
    pub(crate) signature: Option<Signature<'a>>,
}

const BEGINS: [(&str, SignatureKind); 4] = [
    ("-----BEGIN SSH SIGNATURE-----", SignatureKind::Ssh),
    ("-----BEGIN PGP SIGNATURE-----", SignatureKind::OpenPgp),
    ("-----BEGIN PGP MESSAGE-----", SignatureKind::OpenPgp),
    ("-----BEGIN SIGNED MESSAGE-----", SignatureKind::Other("x509")),
];

/// Splits a raw tag object (as stored, without the `tag <len>\0` header).
///
/// # Errors
/// Not a tag object (no `object`/`tag` headers), or a signature block that is not text.
pub fn split(object: &[u8]) -> Result<TagObject<'_>, Refusal> {
    let bad = |message: &str| Refusal::Malformed { signer: "unsigned".into(), message: message.to_owned() };
    let headers_end = find(object, b"\n\n").unwrap_or(object.len());
    let header = |key: &[u8]| {
        object[..headers_end].split(|b| *b == b'\n').find_map(|line| line.strip_prefix(key).and_then(|r| r.strip_prefix(b" ")))
    };
    let name = header(b"tag").ok_or_else(|| bad("not a tag object (no `tag` header)"))?;
    let target = header(b"object").ok_or_else(|| bad("not a tag object (no `object` header)"))?;
    // The signature is the last block whose BEGIN line starts a line of the message.
    let mut found: Option<(usize, SignatureKind)> = None;
    let mut at = headers_end;
    while at < object.len() {
        let line_start = at;
        let line_end = find(&object[at..], b"\n").map_or(object.len(), |i| at + i);
        let line = &object[line_start..line_end];
        if let Some((_, kind)) = BEGINS.iter().find(|(begin, _)| line.starts_with(begin.as_bytes())) {
            found = Some((line_start, *kind));
        }
        at = line_end + 1;
    }
    let signature = match found {
        None => None,
        Some((start, kind)) => {
            let armored = std::str::from_utf8(&object[start..]).map_err(|_| bad("the signature block is not text"))?;
            Some(Signature { kind, armored })
        }
    };
    let payload = found.map_or(object, |(start, _)| &object[..start]);
    Ok(TagObject { name, object: target, payload, signature })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJ: &str =
        "object 0123456789012345678901234567890123456789\ntype commit\ntag v1.0.0\ntagger T <t@x> 1700000000 +0000\n\nrelease v1.0.0\n";

    #[test]
    fn payload_is_the_object_before_the_signature_block() {
        let signed = format!("{OBJ}-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n");
        let t = split(signed.as_bytes()).unwrap();
        assert_eq!(t.payload, OBJ.as_bytes());
        assert_eq!(t.name, b"v1.0.0");
        assert_eq!(t.object, b"0123456789012345678901234567890123456789");
        let sig = t.signature.unwrap();
        assert_eq!(sig.kind, SignatureKind::Ssh);
        assert!(sig.armored.starts_with("-----BEGIN SSH SIGNATURE-----"));

        let pgp = format!("{OBJ}-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n");
        assert_eq!(split(pgp.as_bytes()).unwrap().signature.unwrap().kind, SignatureKind::OpenPgp);
    }

    #[test]
    fn unsigned_and_not_a_tag() {
        let t = split(OBJ.as_bytes()).unwrap();
        assert!(t.signature.is_none());
        assert_eq!(t.payload, OBJ.as_bytes());
        assert!(matches!(split(b"tree abc\n\nmsg\n"), Err(Refusal::Malformed { .. })));
    }

    #[test]
    fn a_begin_line_quoted_inside_the_message_is_not_the_signature_when_one_follows() {
        let quoted =
            format!("{OBJ}  -----BEGIN SSH SIGNATURE----- (quoted)\n-----BEGIN PGP SIGNATURE-----\nX\n-----END PGP SIGNATURE-----\n");
        let t = split(quoted.as_bytes()).unwrap();
        assert_eq!(t.signature.unwrap().kind, SignatureKind::OpenPgp);
    }
}
