//! Who signed a release: signature verification of Git tags, release assets and OCI artifacts
//! against trusted key files. stacksync runs it between a source's poll and the cache: a release
//! whose signature does not verify against a trusted key is not a release (never selected, never
//! cached, never applied). Pure functions over bytes and parsed keys, importing nothing of
//! stacksync; reading the key files is [`TrustFiles::load`], which stacksync calls at every poll
//! so a rotated file counts from the next poll.
//!
//! What it is not: it signs nothing, fetches nothing (the caller brings tag objects, signature
//! layers and `.sig` assets), and supports no keyless signing (Fulcio certificates, Rekor), no
//! X.509 (gpgsm) tags, no SSH certificates (`cert-authority`), and no OpenPGP expiry or revocation
//! inside the keyring (a key is trusted while it is in the file).
//!
//! What is verified, and with which crate (each chosen because it is the maintained, pure-Rust
//! implementation made for that format, with verification usable without the rest):
//!
//! - **SSH signatures** ([`sshsig`]): Git tags signed with `gpg.format=ssh` and release assets
//!   signed with `ssh-keygen -Y sign -n file`, checked against an OpenSSH `allowed_signers` file.
//!   `ssh-key` (RustCrypto) decodes and verifies the SSHSIG format itself (ed25519, ECDSA
//!   P-256/P-384, RSA with SHA-2) with default features off: no key encryption, no agent. The
//!   `allowed_signers` grammar is parsed here (ssh-key has no parser for it).
//! - **OpenPGP signatures** ([`openpgp`]): Git tags signed by `gpg`. `pgp` (rpgp) parses
//!   armoured transferable public keys and detached signatures and verifies them in pure Rust
//!   (Sequoia needs Nettle or OpenSSL through C); default features off (no bzip2).
//! - **cosign signatures** ([`cosign`]): OCI artifacts (`cosign sign`, the simple-signing
//!   payload under the `sha256-<digest>.sig` tag) and blobs (`cosign sign-blob`). cosign's
//!   generated keys are ECDSA P-256 over SHA-256 with the signature in ASN.1 DER: `p256`
//!   (RustCrypto, the same version `ssh-key` and `pgp` already pull in) verifies exactly that; the
//!   `sigstore` crate would bring an OCI client, TUF and Rekor we do not use.
//! - **Git tag objects** ([`gittag`]): the signed payload is the tag object without the
//!   signature block that Git appends to the message.

#![warn(missing_docs)]

pub mod cosign;
pub mod gittag;
pub mod openpgp;
pub mod sshsig;

use std::fmt;
use std::path::{Path, PathBuf};

/// Largest key file read (allowed signers, keyring, PEM keys).
pub const MAX_KEY_FILE_BYTES: u64 = 1 << 20;
/// Largest signature read (a `.sig` asset, a signature block, a simple-signing payload).
pub const MAX_SIGNATURE_BYTES: u64 = 64 << 10;

/// A signature that verified: who signed, as the `VERIFIEDBY` column shows it —
/// `ssh:SHA256:<base64>`, `openpgp:<FINGERPRINT>` or `cosign:SHA256:<base64>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signing key's fingerprint, prefixed by its kind.
    pub signer: String,
}

/// Why a signature was refused. Every variant names the signer found (or `unsigned`).
#[allow(missing_docs, reason = "the fields are the ones the variant's doc and message name: the signer found, what it signed")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No signature at all (a lightweight tag, an unsigned annotated tag, no `.sig`).
    #[error("unsigned: {what}")]
    Unsigned { what: String },
    /// Signed, but by a key that is not trusted.
    #[error("signed by {signer}, which is not a trusted key")]
    UntrustedKey { signer: String },
    /// Signed by a trusted key, but the signature does not match the content (tampered payload
    /// or signature).
    #[error("signature by {signer} does not verify: {message}")]
    BadSignature { signer: String, message: String },
    /// A trusted key, outside its `valid-after`/`valid-before` window or its namespaces.
    #[error("signed by {signer}, which is not valid here: {message}")]
    KeyNotValid { signer: String, message: String },
    /// The signature or the signed payload cannot be read.
    #[error("malformed signature ({signer}): {message}")]
    Malformed { signer: String, message: String },
    /// The signature is good but signs something else (another manifest digest, another tag).
    #[error("signed by {signer}, but for {signed}, not {expected}")]
    WrongSubject { signer: String, signed: String, expected: String },
    /// The source has signatures of a kind no trusted key of this source can check.
    #[error("signed with {kind}, but no {kind} keys are configured for this source")]
    NoKeysForKind { kind: &'static str },
}

impl Refusal {
    /// The signer found, or `unsigned`.
    pub fn signer(&self) -> &str {
        match self {
            Refusal::Unsigned { .. } | Refusal::NoKeysForKind { .. } => "unsigned",
            Refusal::UntrustedKey { signer }
            | Refusal::BadSignature { signer, .. }
            | Refusal::KeyNotValid { signer, .. }
            | Refusal::Malformed { signer, .. }
            | Refusal::WrongSubject { signer, .. } => signer,
        }
    }

    /// Never: a refused signature stays refused until the release or the trusted keys change.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable CamelCase name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Unsigned { .. } => "Unsigned",
            Refusal::UntrustedKey { .. } => "UntrustedKey",
            Refusal::BadSignature { .. } => "BadSignature",
            Refusal::KeyNotValid { .. } => "KeyNotValid",
            Refusal::Malformed { .. } => "MalformedSignature",
            Refusal::WrongSubject { .. } => "WrongSubject",
            Refusal::NoKeysForKind { .. } => "NoKeysForKind",
        }
    }

    /// A short, bounded word for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Unsigned { .. } => "unsigned",
            Refusal::UntrustedKey { .. } => "untrusted_key",
            Refusal::BadSignature { .. } => "bad_signature",
            Refusal::KeyNotValid { .. } => "key_not_valid",
            Refusal::Malformed { .. } => "malformed",
            Refusal::WrongSubject { .. } => "wrong_subject",
            Refusal::NoKeysForKind { .. } => "no_keys_for_kind",
        }
    }
}

/// A key file that cannot be used: the file, the line (1-based; 0 for the whole file) and why.
#[derive(Debug, thiserror::Error)]
#[error("{field} {}{}: {problem}", path.display(), if *line > 0 { format!(":{line}") } else { String::new() })]
pub struct KeyFileError {
    /// The config field naming the file (`git.verify.ssh.allowedSigners`).
    pub field: String,
    /// The file.
    pub path: PathBuf,
    /// 1-based line; 0 for the whole file.
    pub line: usize,
    /// Why it cannot be used.
    #[source]
    pub problem: KeyFileProblem,
}

impl KeyFileError {
    /// Whether reading the file again soon may succeed: an I/O error (a mounted Secret being
    /// rotated); a file too large or holding no usable key waits for someone to change it.
    pub fn is_transient(&self) -> bool {
        matches!(self.problem, KeyFileProblem::Read(ReadError::Io(_)))
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self.problem {
            KeyFileProblem::Read(_) => "KeyFileUnreadable",
            KeyFileProblem::Parse(_) => "KeyFileInvalid",
        }
    }
}

/// What is wrong with a key file: it cannot be read, or a line of it is not a usable key.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileProblem {
    /// The file cannot be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// What is wrong at the line (`KeyFileError::line`), or with the whole file (line 0).
    /// Boxed: pgp's error is large, and every poll's result would carry it.
    #[error(transparent)]
    Parse(Box<KeyParseError>),
}

/// What is wrong with a key file's content: an entry that is not a usable public key, or no key
/// at all. Each parser returns it with the line it concerns.
#[allow(missing_docs, reason = "each variant is its message, which says what the file should hold instead")]
#[derive(Debug, thiserror::Error)]
pub enum KeyParseError {
    /// An `allowed_signers` line.
    #[error(transparent)]
    AllowedSigners(#[from] sshsig::LineError),
    #[error("holds no key (expected lines `principals [options] keytype base64-key`)")]
    NoSshKey,
    #[error("a private key: give the public key (`cosign.pub`)")]
    CosignPrivateKey,
    #[error("PUBLIC KEY block without its END line")]
    CosignUnterminated,
    #[error("not an ECDSA P-256 public key (cosign's key type): {0}")]
    NotP256(#[source] p256::pkcs8::spki::Error),
    #[error("bad base64: {0}")]
    Base64(#[source] base64::DecodeError),
    #[error("holds no `-----BEGIN PUBLIC KEY-----` block (cosign's `cosign.pub`)")]
    NoCosignKey,
    #[error("a private key: the keyring holds public keys only (`gpg --armor --export`)")]
    PgpPrivateKey,
    #[error("key block without its END line")]
    PgpUnterminated,
    #[error("not an OpenPGP public key: {0}")]
    NotPgp(#[source] pgp::errors::Error),
    #[error("the key's self-signatures do not verify: {0}")]
    PgpBindings(#[source] pgp::errors::Error),
    #[error("holds no `-----BEGIN PGP PUBLIC KEY BLOCK-----` (export with `gpg --armor --export <key>`)")]
    NoPgpKey,
}

/// Why a key file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Missing, unreadable (the only transient problem: a mounted Secret being rotated).
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// Larger than [`MAX_KEY_FILE_BYTES`].
    #[error("larger than {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// Not text.
    #[error("not UTF-8 text")]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

/// Where a source's trusted keys are (`verify:` of a source). Any combination; a source with
/// none set verifies nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustFiles {
    /// OpenSSH `allowed_signers`, and the config field that named it.
    pub ssh_allowed_signers: Option<(String, PathBuf)>,
    /// ASCII-armoured OpenPGP public keys.
    pub openpgp_keyring: Option<(String, PathBuf)>,
    /// PEM `PUBLIC KEY` blocks (cosign's `cosign.pub`), one or several.
    pub cosign_public_keys: Option<(String, PathBuf)>,
}

impl TrustFiles {
    /// Whether any key file is configured (verification is on).
    pub fn is_set(&self) -> bool {
        self.ssh_allowed_signers.is_some() || self.openpgp_keyring.is_some() || self.cosign_public_keys.is_some()
    }

    /// Reads and parses every configured key file, now. Called at every poll.
    ///
    /// # Errors
    /// A file is missing, too large, or holds something that is not a key, with its line.
    pub fn load(&self) -> Result<Trust, KeyFileError> {
        let read = |(field, path): &(String, PathBuf)| -> Result<String, KeyFileError> {
            read_bounded(path, MAX_KEY_FILE_BYTES).map_err(|e| KeyFileError {
                field: field.clone(),
                path: path.clone(),
                line: 0,
                problem: e.into(),
            })
        };
        let at = |(field, path): &(String, PathBuf), (line, e): (usize, KeyParseError)| KeyFileError {
            field: field.clone(),
            path: path.clone(),
            line,
            problem: KeyFileProblem::Parse(Box::new(e)),
        };
        let ssh = match &self.ssh_allowed_signers {
            Some(f) => Some(sshsig::AllowedSigners::parse(&read(f)?).map_err(|e| at(f, e))?),
            None => None,
        };
        let openpgp = match &self.openpgp_keyring {
            Some(f) => Some(openpgp::Keyring::parse(&read(f)?).map_err(|e| at(f, e))?),
            None => None,
        };
        let cosign = match &self.cosign_public_keys {
            Some(f) => Some(cosign::CosignKeys::parse(&read(f)?).map_err(|e| at(f, e))?),
            None => None,
        };
        Ok(Trust { ssh, openpgp, cosign })
    }
}

/// Reads a small text file, refusing one larger than `max` bytes.
///
/// # Errors
/// The file cannot be read, is larger than `max`, or is not UTF-8.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<String, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge { max });
    }
    String::from_utf8(bytes).map_err(ReadError::NotUtf8)
}

/// The keys a source trusts, as loaded at this poll.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// From the `allowed_signers` file, if one is configured.
    pub ssh: Option<sshsig::AllowedSigners>,
    /// From the OpenPGP keyring, if one is configured.
    pub openpgp: Option<openpgp::Keyring>,
    /// From the cosign public keys file, if one is configured.
    pub cosign: Option<cosign::CosignKeys>,
}

impl Trust {
    /// Every trusted key's fingerprint, as [`Verified::signer`] names them: what a refusal lists.
    pub fn fingerprints(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(s) = &self.ssh {
            out.extend(s.fingerprints());
        }
        if let Some(k) = &self.openpgp {
            out.extend(k.fingerprints());
        }
        if let Some(c) = &self.cosign {
            out.extend(c.fingerprints());
        }
        out
    }

    /// Identifies this set of keys (and their options): a verdict reached under another set is
    /// reached again, so a key rotated out stops counting at the next poll.
    pub fn id(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            self.ssh.as_ref().map(sshsig::AllowedSigners::canonical),
            self.openpgp.as_ref().map(|k| k.fingerprints().join(",")),
            self.cosign.as_ref().map(|c| c.fingerprints().join(",")),
        ] {
            h.update(part.unwrap_or_default().as_bytes());
            h.update(b"\0");
        }
        hex::encode(&h.finalize()[..12])
    }

    /// Verifies an annotated Git tag object (its raw bytes) named `tag`: signed by a trusted SSH
    /// (namespace `git`) or OpenPGP key, the object naming `tag` itself (a signed tag object
    /// pushed under another name is refused). `now` is Unix seconds, for `valid-after/-before`.
    ///
    /// # Errors
    /// Why it is refused: unsigned, a key not trusted, a signature that does not verify, …
    pub fn verify_git_tag(&self, tag: &str, object: &[u8], now: i64) -> Result<Verified, Refusal> {
        let parsed = gittag::split(object)?;
        let Some(signature) = parsed.signature else {
            return Err(Refusal::Unsigned { what: format!("annotated tag {tag} carries no signature") });
        };
        let verified = match signature.kind {
            gittag::SignatureKind::Ssh => {
                let Some(ssh) = &self.ssh else { return Err(Refusal::NoKeysForKind { kind: "ssh" }) };
                ssh.verify("git", parsed.payload, signature.armored, now)?
            }
            gittag::SignatureKind::OpenPgp => {
                let Some(keys) = &self.openpgp else { return Err(Refusal::NoKeysForKind { kind: "openpgp" }) };
                keys.verify(parsed.payload, signature.armored)?
            }
            gittag::SignatureKind::Other(what) => {
                return Err(Refusal::Malformed { signer: "unknown".into(), message: format!("unsupported signature format {what}") });
            }
        };
        if parsed.name != tag.as_bytes() {
            return Err(Refusal::WrongSubject {
                signer: verified.signer,
                signed: format!("tag {}", String::from_utf8_lossy(parsed.name)),
                expected: format!("tag {tag}"),
            });
        }
        Ok(verified)
    }

    /// Verifies a release asset `content` against its `.sig` asset: a `cosign sign-blob`
    /// signature (base64 DER) when cosign keys are configured, an SSH signature (namespace
    /// `file`) when the `.sig` is an armoured SSH signature.
    ///
    /// # Errors
    /// Why it is refused.
    pub fn verify_blob(&self, content: &[u8], sig: &[u8], now: i64) -> Result<Verified, Refusal> {
        let text = std::str::from_utf8(sig)
            .map_err(|_| Refusal::Malformed { signer: "unknown".into(), message: "the signature is not text".into() })?;
        if text.trim_start().starts_with(sshsig::BEGIN) {
            let Some(ssh) = &self.ssh else { return Err(Refusal::NoKeysForKind { kind: "ssh" }) };
            return ssh.verify("file", content, text, now);
        }
        let Some(cosign) = &self.cosign else { return Err(Refusal::NoKeysForKind { kind: "cosign" }) };
        cosign.verify_blob(content, text)
    }
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.signer)
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    //! Signatures made by the real `ssh-keygen -Y sign` and `gpg --detach-sign` (testdata/);
    //! the tests with Git tags, cosign and the daemon are in tests/signed_releases.rs.
    use super::*;

    const PAYLOAD: &[u8] = include_bytes!("../testdata/payload.txt");
    const SSH_SIG: &str = include_str!("../testdata/payload.ssh-git.sig");
    const SSH_OTHER: &str = include_str!("../testdata/payload.ssh-other.sig");
    const PGP_SIG: &str = include_str!("../testdata/payload.pgp.sig");
    const RELEASE_FP: &str = "ssh:SHA256:88z4Vszc13OdDFvORC+uD0MPGFYNC1Ez6Jf5K10eSoQ";
    const PGP_FP: &str = "openpgp:8750242B6A9D2670EBE6B9F7D95274F1EAFCBA87";

    fn signers(extra: &str) -> sshsig::AllowedSigners {
        let line = include_str!("../testdata/allowed_signers").trim();
        let (principal, key) = line.split_once(' ').unwrap();
        sshsig::AllowedSigners::parse(&format!("{principal} {extra} {key}\n")).unwrap()
    }

    #[test]
    fn ssh_signatures_by_ssh_keygen() {
        let now = 1_800_000_000;
        let ok = signers("").verify("git", PAYLOAD, SSH_SIG, now).unwrap();
        assert_eq!(ok.signer, RELEASE_FP);
        let table: Vec<(sshsig::AllowedSigners, &str, &[u8], &str, &str)> = vec![
            (signers(""), "git", b"tampered payload\n", SSH_SIG, "bad_signature"),
            (signers(""), "file", PAYLOAD, SSH_SIG, "wrong_subject"),
            (signers(""), "git", PAYLOAD, SSH_OTHER, "untrusted_key"),
            (signers("valid-before=\"20260101\""), "git", PAYLOAD, SSH_SIG, "key_not_valid"),
            (signers("valid-after=\"20300101\""), "git", PAYLOAD, SSH_SIG, "key_not_valid"),
            (signers("namespaces=\"file\""), "git", PAYLOAD, SSH_SIG, "key_not_valid"),
        ];
        for (keys, ns, payload, sig, kind) in table {
            let err = keys.verify(ns, payload, sig, now).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
        }
        // A byte of the signature changed.
        let mut lines: Vec<String> = SSH_SIG.lines().map(str::to_owned).collect();
        let l = &mut lines[2];
        let flipped = if l.ends_with('A') { 'B' } else { 'A' };
        l.pop();
        l.push(flipped);
        let err = signers("").verify("git", PAYLOAD, &(lines.join("\n") + "\n"), now).unwrap_err();
        assert!(matches!(err.kind(), "bad_signature" | "malformed" | "untrusted_key"), "{err}");
        let other = sshsig::AllowedSigners::parse(include_str!("../testdata/allowed_signers.other")).unwrap();
        assert_eq!(other.verify("git", PAYLOAD, SSH_SIG, now).unwrap_err().signer(), RELEASE_FP);
    }

    #[test]
    fn openpgp_signatures_by_gpg() {
        let ring = openpgp::Keyring::parse(include_str!("../testdata/keyring.asc")).unwrap();
        assert_eq!(ring.fingerprints(), vec![PGP_FP.to_owned()]);
        assert_eq!(ring.verify(PAYLOAD, PGP_SIG).unwrap().signer, PGP_FP);
        let err = ring.verify(b"tampered\n", PGP_SIG).unwrap_err();
        assert_eq!(err.kind(), "bad_signature", "{err}");
        assert_eq!(err.signer(), PGP_FP);
        let (line, msg) =
            openpgp::Keyring::parse("# keys\n-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n")
                .unwrap_err();
        assert_eq!(line, 2, "{msg}");
    }

    #[test]
    fn cosign_blob_signatures_by_cosign() {
        let keys = cosign::CosignKeys::parse(include_str!("../testdata/cosign.pub")).unwrap();
        let fp = "cosign:SHA256:l5Xv42SwWIhR2evTmcRusRDvfLe0ItgeSJ5P9x/QyTM";
        assert_eq!(keys.fingerprints(), vec![fp.to_owned()]);
        let sig = include_str!("../testdata/payload.cosign.sig");
        let trust = Trust { cosign: Some(keys), ..Default::default() };
        assert_eq!(trust.verify_blob(PAYLOAD, sig.as_bytes(), 0).unwrap().signer, fp);
        assert_eq!(trust.verify_blob(b"tampered\n", sig.as_bytes(), 0).unwrap_err().kind(), "untrusted_key");
        assert_eq!(trust.verify_blob(PAYLOAD, b"not base64!", 0).unwrap_err().kind(), "malformed");
        // An SSH signature beside an asset, with no SSH keys configured.
        assert_eq!(trust.verify_blob(PAYLOAD, SSH_SIG.as_bytes(), 0).unwrap_err().kind(), "no_keys_for_kind");
    }

    #[test]
    fn git_tags_need_a_signature_of_a_configured_kind_naming_the_tag() {
        let obj = "object 0123456789012345678901234567890123456789\ntype commit\ntag v1.0.0\ntagger T <t@x> 1 +0000\n\nv1.0.0\n";
        let trust = Trust { ssh: Some(signers("")), ..Default::default() };
        assert_eq!(trust.verify_git_tag("v1.0.0", obj.as_bytes(), 0).unwrap_err().kind(), "unsigned");
        let pgp = format!("{obj}{PGP_SIG}");
        assert_eq!(trust.verify_git_tag("v1.0.0", pgp.as_bytes(), 0).unwrap_err().kind(), "no_keys_for_kind");
    }

    #[test]
    fn key_file_errors_name_field_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowed_signers");
        std::fs::write(&path, "# ok\nrelease@acme ssh-ed25519 AAAA\n").unwrap();
        let files = TrustFiles {
            ssh_allowed_signers: Some(("sources[0].git.verify.ssh.allowedSigners".into(), path.clone())),
            ..Default::default()
        };
        let err = files.load().unwrap_err();
        assert_eq!(err.line, 2);
        let text = err.to_string();
        assert!(text.starts_with("sources[0].git.verify.ssh.allowedSigners "), "{text}");
        assert!(text.contains("allowed_signers:2:"), "{text}");
        std::fs::remove_file(&path).unwrap();
        let err = files.load().unwrap_err();
        assert!(err.problem.to_string().contains("cannot read"), "{err}");
        assert!(err.is_transient() && matches!(err.problem, KeyFileProblem::Read(ReadError::Io(_))), "{err:?}");
    }
}
