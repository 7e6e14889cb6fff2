//! Certificates made by the real `openssl` (Debian's package) for the tests' TLS listeners.

use std::path::{Path, PathBuf};

pub fn openssl(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl (Debian's openssl package)");
    assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A CA (`<name>-ca.crt`) and a serving certificate for 127.0.0.1 signed by it
/// (`<name>.crt`, `<name>.key`): EC P-256 in PKCS#8, or RSA in PKCS#1 (what cert-manager writes
/// by default).
pub fn make_certs(dir: &Path, name: &str, rsa: bool) -> (PathBuf, PathBuf, PathBuf) {
    let key_args: &[&str] = if rsa { &["-newkey", "rsa:2048"] } else { &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] };
    let (ca_crt, ca_key) = (format!("{name}-ca.crt"), format!("{name}-ca.key"));
    let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=stacksync test CA", "-keyout", &ca_key, "-out", &ca_crt];
    args.extend_from_slice(key_args);
    args.extend_from_slice(&["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &args);
    let (key, csr, crt, ext) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
    let mut args = vec!["req", "-new", "-nodes", "-subj", "/CN=stacksync-hooks", "-keyout", &key, "-out", &csr];
    args.extend_from_slice(key_args);
    openssl(dir, &args);
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1,DNS:stacksync-hooks.stacksync-system.svc\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    openssl(
        dir,
        &["x509", "-req", "-in", &csr, "-CA", &ca_crt, "-CAkey", &ca_key, "-CAcreateserial", "-days", "2", "-out", &crt, "-extfile", &ext],
    );
    if rsa {
        openssl(dir, &["rsa", "-in", &key, "-traditional", "-out", &key]);
        assert!(std::fs::read_to_string(dir.join(&key)).expect("key").starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    }
    (dir.join(ca_crt), dir.join(crt), dir.join(key))
}
