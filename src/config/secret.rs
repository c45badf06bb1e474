//! The checkpoint secret and the rules for where it may come from.

use std::{fmt, path::Path};

use thiserror::Error;

use super::settings::Environment;

/// The public development key. It is published in `.env.example`, so anyone
/// can forge snapshots signed with it: production refuses it.
pub const DEVELOPMENT_KEY: &str = "radar-public-development-checkpoint-key-not-secret-0001";

/// Shortest key production accepts: 32 bytes, the HMAC-SHA256 block's half
/// and the output size, so the key is not the weak link.
pub const MIN_PRODUCTION_KEY_BYTES: usize = 32;

/// Secret bytes that never print themselves.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The raw bytes, for the signer only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret([redacted, {} bytes])", self.0.len())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Secret(s.into_bytes()))
    }
}

/// Why no usable checkpoint key could be found. Never contains the key.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error(
        "production reads the checkpoint key from the secret file {path}, not from \
         RADAR_CHECKPOINT_SECRET; mount the Swarm secret and unset the variable"
    )]
    InlineSecretInProduction { path: String },
    #[error(
        "cannot read the checkpoint secret file {path}: {reason}; mount the Swarm secret radar_checkpoint_secret or set RADAR_CHECKPOINT_SECRET_FILE"
    )]
    Unreadable { path: String, reason: String },
    #[error("the checkpoint key is empty; {hint}")]
    Empty { hint: &'static str },
    #[error(
        "the checkpoint key is {len} bytes; production needs at least {MIN_PRODUCTION_KEY_BYTES} \
         random bytes (e.g. `openssl rand -base64 48`)"
    )]
    TooShort { len: usize },
    #[error(
        "the checkpoint key is the public development key from .env.example, which anyone can \
         use to forge snapshots; production needs its own secret"
    )]
    PublicDevelopmentKey,
}

/// Where the key was found; safe to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(String),
    Environment,
    PublicDevelopmentDefault,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "secret file {path}"),
            Self::Environment => f.write_str("RADAR_CHECKPOINT_SECRET"),
            Self::PublicDevelopmentDefault => f.write_str("the public development key"),
        }
    }
}

/// Decides the checkpoint key by the environment's rules.
///
/// Production: only the secret file, and never an empty, short or public key.
/// Development: `RADAR_CHECKPOINT_SECRET`, else an explicitly set secret file,
/// else the public development key.
pub fn resolve_key(
    env: Environment,
    inline: Option<&Secret>,
    file: Option<&Path>,
    file_is_explicit: bool,
) -> Result<(Secret, KeySource), KeyError> {
    match env {
        Environment::Production => {
            let path = file.map(|p| p.display().to_string()).unwrap_or_default();
            if inline.is_some() {
                return Err(KeyError::InlineSecretInProduction { path });
            }
            let secret = read_secret_file(file.unwrap_or(Path::new("")))?;
            check_production_key(&secret)?;
            Ok((secret, KeySource::File(path)))
        }
        Environment::Development => {
            if let Some(secret) = inline {
                if secret.is_empty() {
                    return Err(KeyError::Empty {
                        hint: "unset RADAR_CHECKPOINT_SECRET to use the development key, or set a real one",
                    });
                }
                return Ok((secret.clone(), KeySource::Environment));
            }
            match file {
                Some(path) if file_is_explicit => {
                    let secret = read_secret_file(path)?;
                    if secret.is_empty() {
                        return Err(KeyError::Empty {
                            hint: "the secret file holds no key",
                        });
                    }
                    Ok((secret, KeySource::File(path.display().to_string())))
                }
                _ => Ok((
                    Secret::new(DEVELOPMENT_KEY),
                    KeySource::PublicDevelopmentDefault,
                )),
            }
        }
    }
}

/// The rules a production key must meet.
pub fn check_production_key(secret: &Secret) -> Result<(), KeyError> {
    if secret.is_empty() {
        return Err(KeyError::Empty {
            hint: "production needs a random secret of at least 32 bytes in the secret file",
        });
    }
    if secret.expose() == DEVELOPMENT_KEY.as_bytes() {
        return Err(KeyError::PublicDevelopmentKey);
    }
    if secret.len() < MIN_PRODUCTION_KEY_BYTES {
        return Err(KeyError::TooShort { len: secret.len() });
    }
    Ok(())
}

/// Reads a secret file, dropping one trailing line break so that a secret
/// created with `echo` and one created with `printf` are the same key.
fn read_secret_file(path: &Path) -> Result<Secret, KeyError> {
    let mut bytes = std::fs::read(path).map_err(|e| KeyError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(Secret::new(bytes))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn secret_file(contents: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(contents).unwrap();
        file
    }

    fn production(contents: &[u8]) -> Result<(Secret, KeySource), KeyError> {
        let file = secret_file(contents);
        resolve_key(Environment::Production, None, Some(file.path()), true)
    }

    #[test]
    fn production_refuses_the_public_development_key() {
        assert_eq!(
            production(DEVELOPMENT_KEY.as_bytes()).unwrap_err(),
            KeyError::PublicDevelopmentKey
        );
    }

    #[test]
    fn production_refuses_the_public_key_with_a_trailing_newline() {
        let with_newline = format!("{DEVELOPMENT_KEY}\n");
        assert_eq!(
            production(with_newline.as_bytes()).unwrap_err(),
            KeyError::PublicDevelopmentKey
        );
    }

    #[test]
    fn production_refuses_an_empty_key() {
        assert!(matches!(
            production(b"").unwrap_err(),
            KeyError::Empty { .. }
        ));
        assert!(matches!(
            production(b"\n").unwrap_err(),
            KeyError::Empty { .. }
        ));
    }

    #[test]
    fn production_refuses_a_key_shorter_than_32_bytes() {
        let err = production(&[b'k'; 31]).unwrap_err();
        assert_eq!(err, KeyError::TooShort { len: 31 });
        assert!(err.to_string().contains("at least 32"));
    }

    #[test]
    fn production_accepts_a_long_random_key_from_the_file() {
        let (secret, source) = production(&[b'x'; 48]).unwrap();
        assert_eq!(secret.len(), 48);
        assert!(matches!(source, KeySource::File(_)));
    }

    #[test]
    fn production_refuses_an_inline_secret_variable() {
        let inline = Secret::new(vec![b'z'; 64]);
        let file = secret_file(&[b'x'; 48]);
        let err = resolve_key(
            Environment::Production,
            Some(&inline),
            Some(file.path()),
            true,
        )
        .unwrap_err();
        assert!(matches!(err, KeyError::InlineSecretInProduction { .. }));
    }

    #[test]
    fn production_names_a_missing_secret_file() {
        let err = resolve_key(
            Environment::Production,
            None,
            Some(Path::new("/nonexistent/radar_checkpoint_secret")),
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent/radar_checkpoint_secret")
        );
    }

    #[test]
    fn development_uses_the_public_key_unless_overridden() {
        let (secret, source) = resolve_key(
            Environment::Development,
            None,
            Some(Path::new("/run/secrets/radar_checkpoint_secret")),
            false,
        )
        .unwrap();
        assert_eq!(secret.expose(), DEVELOPMENT_KEY.as_bytes());
        assert_eq!(source, KeySource::PublicDevelopmentDefault);
        let own = Secret::new("my-own-development-key");
        let (secret, source) =
            resolve_key(Environment::Development, Some(&own), None, false).unwrap();
        assert_eq!(secret, own);
        assert_eq!(source, KeySource::Environment);
    }

    #[test]
    fn a_secret_never_prints_its_bytes() {
        let secret = Secret::new("hunter2-hunter2-hunter2-hunter2-hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{secret}").contains("hunter2"));
    }

    #[test]
    fn the_development_key_is_long_enough_to_be_a_real_key() {
        assert!(DEVELOPMENT_KEY.len() >= MIN_PRODUCTION_KEY_BYTES);
    }
}
