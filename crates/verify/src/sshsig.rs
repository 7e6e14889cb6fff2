//! SSH signatures (the SSHSIG format of `ssh-keygen -Y sign` and Git's `gpg.format=ssh`) checked
//! against an OpenSSH `allowed_signers` file, as `ssh-keygen -Y verify` reads it:
//! `principals [options] keytype base64-key [comment]`, options `namespaces="…"`,
//! `valid-after="…"`, `valid-before="…"`. `cert-authority` entries are refused when the file is
//! loaded (certificates are not supported). Times are `YYYYMMDD[HHMM[SS]]` with an optional `Z`,
//! always read as UTC. Pure.

use ssh_key::{HashAlg, PublicKey, SshSig};

use super::{KeyParseError, Refusal, Verified};

/// The first line of an armoured SSH signature.
pub const BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";

/// One trusted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signer {
    pub principals: String,
    pub key: PublicKey,
    /// `ssh:SHA256:<base64>`.
    pub fingerprint: String,
    /// `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    pub valid_after: Option<i64>,
    pub valid_before: Option<i64>,
    /// 1-based line in the file.
    pub line: usize,
}

/// A parsed `allowed_signers` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedSigners {
    pub(crate) signers: Vec<Signer>,
}

impl AllowedSigners {
    /// Parses the file's text.
    ///
    /// # Errors
    /// `(line, message)` of the first entry that cannot be used.
    pub fn parse(text: &str) -> Result<AllowedSigners, (usize, KeyParseError)> {
        let mut signers = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            signers.push(parse_line(trimmed, line).map_err(|e| (line, e.into()))?);
        }
        if signers.is_empty() {
            return Err((0, KeyParseError::NoSshKey));
        }
        Ok(AllowedSigners { signers })
    }

    /// The trusted keys' fingerprints (`ssh:SHA256:…`).
    pub fn fingerprints(&self) -> Vec<String> {
        self.signers.iter().map(|s| s.fingerprint.clone()).collect()
    }

    /// The keys with their options, one line each: changes when any of them changes.
    pub fn canonical(&self) -> String {
        self.signers
            .iter()
            .map(|s| format!("{} {:?} {:?} {:?}", s.fingerprint, s.namespaces, s.valid_after, s.valid_before))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Verifies an armoured SSH signature over `msg` made in `namespace`, at time `now` (Unix
    /// seconds).
    ///
    /// # Errors
    /// The signature cannot be read, its key is not listed, the entry does not allow the
    /// namespace or is outside its validity window, or the signature does not verify.
    pub fn verify(&self, namespace: &str, msg: &[u8], armored: &str, now: i64) -> Result<Verified, Refusal> {
        let sig = SshSig::from_pem(armored.trim().as_bytes())
            .map_err(|e| Refusal::Malformed { signer: "unknown".into(), message: format!("not an SSH signature: {e}") })?;
        let signer = format!("ssh:{}", sig.public_key().fingerprint(HashAlg::Sha256));
        let entries: Vec<&Signer> = self.signers.iter().filter(|s| s.key.key_data() == sig.public_key()).collect();
        if entries.is_empty() {
            return Err(Refusal::UntrustedKey { signer });
        }
        if sig.namespace() != namespace {
            return Err(Refusal::WrongSubject {
                signer,
                signed: format!("namespace {:?}", sig.namespace()),
                expected: format!("namespace {namespace:?}"),
            });
        }
        // The first entry of this key that allows the namespace now; else say why the last one
        // does not.
        let mut why = String::new();
        for entry in &entries {
            if let Some(ns) = &entry.namespaces
                && !ns.iter().any(|n| pattern_matches(n, namespace))
            {
                why = format!("allowed_signers line {} allows namespaces {} only, not {namespace:?}", entry.line, ns.join(","));
                continue;
            }
            if let Some(after) = entry.valid_after
                && now < after
            {
                why = format!("allowed_signers line {} is valid after {} only", entry.line, show_time(after));
                continue;
            }
            if let Some(before) = entry.valid_before
                && now >= before
            {
                why = format!("allowed_signers line {} expired at {} (valid-before)", entry.line, show_time(before));
                continue;
            }
            return entry
                .key
                .verify(namespace, msg, &sig)
                .map(|()| Verified { signer: signer.clone() })
                .map_err(|e| Refusal::BadSignature { signer: signer.clone(), message: e.to_string() });
        }
        Err(Refusal::KeyNotValid { signer, message: why })
    }
}

/// What is wrong with one `allowed_signers` line (reported with its number by
/// [`AllowedSigners::parse`]).
#[allow(missing_docs, reason = "each variant is its message")]
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("not an OpenSSH public key (`keytype base64-key`): {0}")]
    Key(#[source] ssh_key::Error),
    #[error("unterminated quote")]
    Quote,
    #[error("time `{0}` is not YYYYMMDD[HHMM[SS]][Z]")]
    Time(String),
    #[error("`cert-authority` entries are not supported: list the signing keys themselves")]
    CertAuthority,
    #[error("unknown or malformed option `{0}`")]
    Option(String),
}

fn parse_line(line: &str, n: usize) -> Result<Signer, LineError> {
    let (principals, rest) = take_field(line)?;
    let rest = rest.trim_start();
    // Options come before the key type: a field that is not a key type is the options.
    let (options, rest) = {
        let (first, after) = take_field(rest)?;
        if is_key_type(&first) { (String::new(), rest) } else { (first, after.trim_start()) }
    };
    let key = PublicKey::from_openssh(rest.trim()).map_err(LineError::Key)?;
    let mut signer = Signer {
        principals,
        fingerprint: format!("ssh:{}", key.fingerprint(HashAlg::Sha256)),
        key,
        namespaces: None,
        valid_after: None,
        valid_before: None,
        line: n,
    };
    for opt in split_options(&options) {
        let (name, value) = opt.split_once('=').map_or((opt.as_str(), None), |(k, v)| (k, Some(v.trim_matches('"'))));
        match (name.to_ascii_lowercase().as_str(), value) {
            ("namespaces", Some(v)) => signer.namespaces = Some(v.split(',').map(str::to_owned).collect()),
            ("valid-after", Some(v)) => signer.valid_after = Some(parse_time(v)?),
            ("valid-before", Some(v)) => signer.valid_before = Some(parse_time(v)?),
            ("cert-authority", None) => return Err(LineError::CertAuthority),
            (other, _) => return Err(LineError::Option(other.to_owned())),
        }
    }
    Ok(signer)
}

fn is_key_type(field: &str) -> bool {
    field.starts_with("ssh-") || field.starts_with("ecdsa-sha2-") || field.starts_with("sk-") || field.contains("-cert-v01@")
}

/// The next whitespace-separated field; double quotes group (and are kept).
fn take_field(s: &str) -> Result<(String, &str), LineError> {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return Ok((s[..i].to_owned(), &s[i..])),
            _ => {}
        }
    }
    if quoted {
        return Err(LineError::Quote);
    }
    Ok((s.to_owned(), ""))
}

/// Options split at commas outside quotes.
fn split_options(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut cur, mut quoted) = (String::new(), false);
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `YYYYMMDD[HHMM[SS]][Z]` as Unix seconds (UTC).
fn parse_time(v: &str) -> Result<i64, LineError> {
    let digits = v.strip_suffix(['Z', 'z']).unwrap_or(v);
    let bad = || LineError::Time(v.to_owned());
    if !matches!(digits.len(), 8 | 12 | 14) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| digits.get(r).and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
    let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(num(0..4)).map_err(|_| bad())?, num(4..6), num(6..8)).ok_or_else(bad)?;
    let time = chrono::NaiveTime::from_hms_opt(num(8..10), num(10..12), num(12..14)).ok_or_else(bad)?;
    Ok(date.and_time(time).and_utc().timestamp())
}

fn show_time(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).map_or_else(|| t.to_string(), |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// `*` and `?` wildcards, as OpenSSH's `match_pattern`.
fn pattern_matches(pattern: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKVh6fe2p7JY7gcRrPvbjL5nymuCMwWWuRcF1K1VSnjK";

    #[test]
    fn entries_with_options_quotes_and_comments() {
        let text = format!(
            "# release keys\n\nrelease@acme,\"ops team\" namespaces=\"git,file\",valid-after=\"20260101\",valid-before=\"203001011200Z\" {KEY} old key\n*@acme {KEY}\n"
        );
        let a = AllowedSigners::parse(&text).unwrap();
        assert_eq!(a.signers.len(), 2);
        let s = &a.signers[0];
        assert_eq!(s.principals, "release@acme,\"ops team\"");
        assert_eq!(s.namespaces.as_deref(), Some(&["git".to_owned(), "file".to_owned()][..]));
        assert_eq!(s.valid_after, Some(1_767_225_600));
        assert_eq!(s.valid_before, Some(1_893_499_200));
        assert_eq!(s.line, 3);
        assert!(s.fingerprint.starts_with("ssh:SHA256:"), "{}", s.fingerprint);
        assert_eq!(a.signers[1].namespaces, None);
    }

    #[test]
    fn bad_entries_name_their_line() {
        let table = [
            (format!("a {KEY}\nb ssh-ed25519 notbase64\n"), 2, "not an OpenSSH public key"),
            (format!("a cert-authority {KEY}\n"), 1, "cert-authority"),
            (format!("a valid-before=\"2026\" {KEY}\n"), 1, "YYYYMMDD"),
            (format!("a frobnicate {KEY}\n"), 1, "frobnicate"),
            ("# nothing\n".to_owned(), 0, "no key"),
        ];
        for (text, line, says) in table {
            let (l, m) = AllowedSigners::parse(&text).unwrap_err();
            let m = m.to_string();
            assert_eq!(l, line, "{m}");
            assert!(m.contains(says), "{m}");
        }
    }

    #[test]
    fn wildcards() {
        assert!(pattern_matches("gi?", "git"));
        assert!(pattern_matches("*", "file"));
        assert!(!pattern_matches("file", "git"));
    }

    #[test]
    fn a_signature_by_an_unlisted_key_is_untrusted_and_garbage_is_malformed() {
        let a = AllowedSigners::parse(&format!("a {KEY}\n")).unwrap();
        let got = a.verify("git", b"x", "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n", 0);
        assert!(matches!(got, Err(Refusal::Malformed { .. })), "{got:?}");
    }
}
