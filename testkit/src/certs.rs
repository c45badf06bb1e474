//! A throwaway certificate authority made at run time with the `openssl`
//! command: a CA, server certificates for chosen names and a client pair.
//! Nothing here is committed; every file lives in the test's directory and
//! is readable by the broker, which drops to its own user.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

/// A certificate and its private key, as PEM files.
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA in `dir` that signs leaf certificates.
pub struct TestCa {
    dir: PathBuf,
    pub cert: PathBuf,
    key: PathBuf,
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl (package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn readable(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

impl TestCa {
    /// A new CA named `name` in `dir` (made world-readable).
    pub fn new(dir: &Path, name: &str) -> Self {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod dir");
        let cert = dir.join(format!("{name}-ca.pem"));
        let key = dir.join(format!("{name}-ca.key"));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=radar test CA {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            s(&key),
            "-out",
            s(&cert),
        ]);
        readable(&cert);
        Self {
            dir: dir.to_path_buf(),
            cert,
            key,
        }
    }

    /// A leaf certificate for `subject_alt_names` (e.g. `IP:127.0.0.1`),
    /// for a server or (with `client`) for a client.
    pub fn issue(&self, name: &str, subject_alt_names: &str, client: bool) -> Pair {
        let key = self.dir.join(format!("{name}.key"));
        let csr = self.dir.join(format!("{name}.csr"));
        let cert = self.dir.join(format!("{name}.pem"));
        let ext = self.dir.join(format!("{name}.ext"));
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            s(&key),
            "-out",
            s(&csr),
        ]);
        let usage = if client { "clientAuth" } else { "serverAuth" };
        fs::write(
            &ext,
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage={usage}\n\
                 subjectAltName={subject_alt_names}\n"
            ),
        )
        .expect("write extensions");
        openssl(&[
            "x509",
            "-req",
            "-in",
            s(&csr),
            "-CA",
            s(&self.cert),
            "-CAkey",
            s(&self.key),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            s(&ext),
            "-out",
            s(&cert),
        ]);
        readable(&cert);
        readable(&key);
        Pair { cert, key }
    }
}
