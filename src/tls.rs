//! rustls client configurations for the broker and for PostgreSQL: trust
//! roots from a PEM CA file or the system's store, and an optional client
//! certificate. The ring provider is named explicitly, so nothing depends
//! on a process-wide default having been installed.

use std::{path::Path, sync::Arc};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error as RustlsError, RootCertStore,
    SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature},
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject},
};
use thiserror::Error;

/// Makes ring the process's rustls provider, for any library that asks
/// rustls for the default. radar's own configurations name ring explicitly.
pub fn install_default_provider() {
    // Err only means a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why a TLS configuration could not be built. Names files, never contents.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TlsError {
    #[error("cannot read {variable} file {path}: {reason}")]
    Unreadable {
        variable: &'static str,
        path: String,
        reason: String,
    },
    #[error("the {variable} file {path} holds no PEM {what}")]
    NoPem {
        variable: &'static str,
        path: String,
        what: &'static str,
    },
    #[error("the {variable} file {path} holds a certificate rustls cannot use: {reason}")]
    BadCertificate {
        variable: &'static str,
        path: String,
        reason: String,
    },
    #[error("no trusted root certificates in the system store; set {variable} to a PEM CA file")]
    NoSystemRoots { variable: &'static str },
    #[error("the client certificate and key do not form a usable pair: {reason}")]
    BadClientPair { reason: String },
    #[error("rustls refused the protocol versions: {reason}")]
    Protocol { reason: String },
}

/// Which files make up a client TLS configuration, and the variables that
/// named them (for messages).
#[derive(Debug, Clone, Copy)]
pub struct TlsFiles<'a> {
    pub ca: Option<&'a Path>,
    pub ca_variable: &'static str,
    /// Certificate chain and key for mutual TLS.
    pub client: Option<(&'a Path, &'a Path)>,
    pub client_variables: (&'static str, &'static str),
}

/// A client configuration that verifies the server against `files.ca` (or
/// the system's roots) and, when given, presents the client certificate.
pub fn client_config(files: TlsFiles<'_>) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match files.ca {
        Some(path) => roots_from_file(files.ca_variable, path)?,
        None => system_roots(files.ca_variable)?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Protocol {
            reason: e.to_string(),
        })?
        .with_root_certificates(roots);
    let config = match files.client {
        Some((cert, key)) => {
            let (cert_var, key_var) = files.client_variables;
            let chain = certificates(cert_var, cert)?;
            let key = private_key(key_var, key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::BadClientPair {
                    reason: e.to_string(),
                })?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// How far a PostgreSQL client checks the server, after libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCheck {
    /// `require` without `sslrootcert`: encrypted, the certificate unchecked.
    None,
    /// `verify-ca` (and `require` with `sslrootcert`): the chain, not the name.
    Chain,
    /// `verify-full`: the chain and the host name.
    ChainAndName,
}

/// A client configuration for PostgreSQL: roots from `root_cert` (libpq's
/// `sslrootcert`) or the system's store, checked as far as `check` says.
pub fn postgres_config(
    check: ServerCheck,
    root_cert: Option<&Path>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Protocol {
            reason: e.to_string(),
        })?;
    let verifier: Arc<dyn ServerCertVerifier> = if check == ServerCheck::None {
        Arc::new(Unchecked(provider))
    } else {
        let roots = match root_cert {
            Some(path) => roots_from_file("sslrootcert", path)?,
            None => system_roots("sslrootcert")?,
        };
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Protocol {
                reason: e.to_string(),
            })?;
        if check == ServerCheck::Chain {
            Arc::new(AnyName(webpki))
        } else {
            webpki
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// libpq's `sslmode=require`: encryption against passive listeners only.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, RustlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// libpq's `sslmode=verify-ca`: the chain must lead to a trusted root; the
/// name in the certificate is not compared with the host.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, RustlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(RustlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn read(variable: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Unreadable {
        variable,
        path: path.display().to_string(),
        reason: e.kind().to_string(),
    })
}

fn certificates(
    variable: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(variable, path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            variable,
            path: path.display().to_string(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn private_key(variable: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(variable, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::NoPem {
        variable,
        path: path.display().to_string(),
        what: "private key",
    })
}

fn roots_from_file(variable: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(variable, path)? {
        roots.add(cert).map_err(|e| TlsError::BadCertificate {
            variable,
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn system_roots(variable: &'static str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    // Unparseable system certificates are skipped, as every TLS client does.
    let (added, _ignored) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added == 0 {
        return Err(TlsError::NoSystemRoots { variable });
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(ca: Option<&Path>) -> TlsFiles<'_> {
        TlsFiles {
            ca,
            ca_variable: "RADAR_MQTT_CA_FILE",
            client: None,
            client_variables: ("RADAR_MQTT_CLIENT_CERT_FILE", "RADAR_MQTT_CLIENT_KEY_FILE"),
        }
    }

    #[test]
    fn a_missing_ca_file_is_named_with_its_variable() {
        let err = client_config(files(Some(Path::new("/nonexistent/ca.pem")))).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("RADAR_MQTT_CA_FILE") && text.contains("/nonexistent/ca.pem"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_file_without_pem_is_refused() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "not a certificate").unwrap();
        assert!(matches!(
            client_config(files(Some(file.path()))),
            Err(TlsError::NoPem { .. })
        ));
    }
}
