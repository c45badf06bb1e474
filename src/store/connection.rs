//! Opening one PostgreSQL connection, with TLS when the URL asks for it.
//!
//! tokio-postgres (under diesel-async) knows `sslmode=disable|prefer|require`
//! but not libpq's `verify-ca`/`verify-full` nor `sslrootcert`. radar reads
//! those itself, gives tokio-postgres `sslmode=require` and a rustls
//! configuration that checks the server as the URL asked. URLs without
//! `require`/`verify-*` connect exactly as before: without TLS (`prefer`
//! falls back to plain text, as it always did here).

use std::path::PathBuf;

use diesel::{ConnectionError, ConnectionResult};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::tls::{ServerCheck, postgres_config};

/// What the URL asks of the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The URL for tokio-postgres: libpq-only options rewritten or removed.
    pub url: String,
    /// `None`: no TLS (the URL did not require it).
    pub tls: Option<(ServerCheck, Option<PathBuf>)>,
}

/// Reads `sslmode` and `sslrootcert` from the URL's query.
pub(crate) fn plan(url: &str) -> Result<Plan, String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Plan {
            url: url.to_string(),
            tls: None,
        });
    };
    let mut mode = None;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", value)) => mode = Some(value.to_string()),
            Some(("sslrootcert", value)) => root_cert = Some(PathBuf::from(percent_decode(value))),
            _ => kept.push(pair),
        }
    }
    let check = match mode.as_deref() {
        None | Some("disable" | "prefer") => None,
        Some("require") if root_cert.is_some() => Some(ServerCheck::Chain),
        Some("require") => Some(ServerCheck::None),
        Some("verify-ca") => Some(ServerCheck::Chain),
        Some("verify-full") => Some(ServerCheck::ChainAndName),
        Some(other) => {
            return Err(format!(
                "sslmode={other} is not supported; use disable, prefer, require, verify-ca or verify-full"
            ));
        }
    };
    match check {
        None => Ok(Plan {
            // Nothing to rewrite: tokio-postgres reads the URL as it is.
            url: url.to_string(),
            tls: None,
        }),
        Some(check) => {
            kept.push("sslmode=require");
            Ok(Plan {
                url: format!("{base}?{}", kept.join("&")),
                tls: Some((check, root_cert)),
            })
        }
    }
}

/// Decodes `%XX` escapes (a path in a URL query may carry `%2F`).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One connection to `url`, with TLS when `sslmode` requires it. Must run
/// inside a Tokio runtime: the connection's driver is spawned on it.
pub(crate) async fn establish(url: &str) -> ConnectionResult<AsyncPgConnection> {
    let plan = plan(url).map_err(ConnectionError::BadConnection)?;
    let Some((check, root_cert)) = plan.tls else {
        return AsyncPgConnection::establish(&plan.url).await;
    };
    let config = postgres_config(check, root_cert.as_deref())
        .map_err(|e| ConnectionError::BadConnection(format!("PostgreSQL TLS: {e}")))?;
    let (client, connection) = tokio_postgres::connect(&plan.url, MakeRustlsConnect::new(config))
        .await
        .map_err(|e| ConnectionError::BadConnection(with_causes(&e)))?;
    AsyncPgConnection::try_from_client_and_connection(client, connection).await
}

/// `error` and its causes: tokio-postgres says only "error performing TLS
/// handshake"; the rustls cause says which check failed.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_tls_requirement_are_left_alone() {
        for url in [
            "postgres://u:p@h/db",
            "postgres://u:p@h/db?sslmode=prefer",
            "postgres://u:p@h/db?sslmode=disable&application_name=x",
        ] {
            assert_eq!(
                plan(url).unwrap(),
                Plan {
                    url: url.into(),
                    tls: None
                }
            );
        }
    }

    #[test]
    fn verify_full_becomes_require_with_a_name_checking_configuration() {
        let p = plan("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=w")
            .unwrap();
        assert_eq!(
            p.url,
            "postgres://u:p@h/db?application_name=w&sslmode=require"
        );
        assert_eq!(
            p.tls,
            Some((
                ServerCheck::ChainAndName,
                Some(PathBuf::from("/etc/ca.pem"))
            ))
        );
    }

    #[test]
    fn require_checks_the_chain_only_when_a_root_is_named() {
        assert_eq!(
            plan("postgres://h/db?sslmode=require").unwrap().tls,
            Some((ServerCheck::None, None))
        );
        assert_eq!(
            plan("postgres://h/db?sslmode=require&sslrootcert=/ca.pem")
                .unwrap()
                .tls
                .map(|t| t.0),
            Some(ServerCheck::Chain)
        );
        assert!(plan("postgres://h/db?sslmode=allow").is_err());
    }
}
