//! Connection credentials: the database URL (which carries a password) and
//! the MQTT username and password, with the rules for where each may come
//! from. Nothing here ever prints a password.

use std::{
    fmt,
    ops::Deref,
    path::{Path, PathBuf},
};

use thiserror::Error;

use super::{secret::Secret, settings::Environment};

/// Where production mounts the database URL by default (a Swarm secret).
pub const DEFAULT_DATABASE_URL_FILE: &str = "/run/secrets/radar_database_url";
/// Where production mounts the MQTT password by default (a Swarm secret).
pub const DEFAULT_MQTT_PASSWORD_FILE: &str = "/run/secrets/radar_mqtt_password";

/// A PostgreSQL URL. It dereferences to the full URL for the driver, but its
/// `Debug`, `Display` and serialized forms hide the password.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with any user info replaced, safe for logs and messages.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl Deref for DatabaseUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({:?})", self.redacted())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl serde::Serialize for DatabaseUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

/// `url` with everything between the scheme and the last `@` replaced by
/// `***`, so neither a user name nor a password (even one holding `/`, `:`
/// or an unescaped `@`) survives. A URL without `@` is returned unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return url.to_string();
    };
    let start = url.find("://").map_or(0, |i| i + 3);
    if start > at {
        return "***".to_string();
    }
    format!("{}***{}", &url[..start], &url[at..])
}

/// Why a credential could not be used. Never contains a password.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CredentialError {
    #[error(
        "cannot read {variable} file {path}: {reason}; mount the secret there or point {variable} at it"
    )]
    Unreadable {
        variable: &'static str,
        path: String,
        reason: String,
    },
    #[error("the {variable} file {path} is empty")]
    EmptyFile {
        variable: &'static str,
        path: String,
    },
    #[error("the {variable} file {path} is not UTF-8 text")]
    NotText {
        variable: &'static str,
        path: String,
    },
    #[error(
        "production reads the MQTT password from a file, not from RADAR_MQTT_PASSWORD; \
         unset it and set RADAR_MQTT_PASSWORD_FILE (default {DEFAULT_MQTT_PASSWORD_FILE})"
    )]
    InlinePasswordInProduction,
    #[error("both RADAR_MQTT_PASSWORD and RADAR_MQTT_PASSWORD_FILE are set; keep one of them")]
    TwoPasswordSources,
    #[error(
        "an MQTT password is configured but RADAR_MQTT_USERNAME is not set; MQTT sends a \
         password only with a user name"
    )]
    PasswordWithoutUsername,
    #[error("RADAR_MQTT_USERNAME is empty; unset it to connect without credentials")]
    EmptyUsername,
}

/// The MQTT login, safe to print: the password is a [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttCredentials {
    pub username: String,
    /// `None` sends the user name alone.
    pub password: Option<Secret>,
    /// Where the password came from, for the startup log line.
    pub password_source: Option<String>,
}

/// The MQTT variables as set, before the rules apply.
#[derive(Debug, Clone, Default)]
pub struct MqttLogin<'a> {
    pub username: Option<&'a str>,
    pub inline_password: Option<&'a Secret>,
    pub password_file: Option<&'a Path>,
}

/// Decides the MQTT login. Production never takes an inline password; both
/// environments read `RADAR_MQTT_PASSWORD_FILE`, or the default secret file
/// when it exists.
pub fn resolve_mqtt_login(
    env: Environment,
    login: &MqttLogin<'_>,
) -> Result<Option<MqttCredentials>, CredentialError> {
    if login.inline_password.is_some() {
        if env == Environment::Production {
            return Err(CredentialError::InlinePasswordInProduction);
        }
        if login.password_file.is_some() {
            return Err(CredentialError::TwoPasswordSources);
        }
    }
    let default = Path::new(DEFAULT_MQTT_PASSWORD_FILE);
    let file = match login.password_file {
        Some(path) => Some(path),
        None if login.inline_password.is_none() && default.exists() => Some(default),
        None => None,
    };
    let (password, source) = match (login.inline_password, file) {
        (Some(inline), _) => (
            Some(inline.clone()),
            Some("RADAR_MQTT_PASSWORD".to_string()),
        ),
        (None, Some(path)) => {
            let text = read_secret_text("RADAR_MQTT_PASSWORD_FILE", path)?;
            (Some(Secret::new(text)), Some(path.display().to_string()))
        }
        (None, None) => (None, None),
    };
    match login.username {
        Some("") => Err(CredentialError::EmptyUsername),
        Some(username) => Ok(Some(MqttCredentials {
            username: username.to_string(),
            password,
            password_source: source,
        })),
        // A default secret file alone, without a user name, is not a login
        // the operator asked for; an explicit password is.
        None if password.is_some()
            && (login.inline_password.is_some() || login.password_file.is_some()) =>
        {
            Err(CredentialError::PasswordWithoutUsername)
        }
        None => Ok(None),
    }
}

/// The file the database URL is read from, if any: `RADAR_DATABASE_URL_FILE`
/// when set; otherwise, in production and when `DATABASE_URL` is not set,
/// the default secret file when it exists.
pub fn database_url_file(
    env: Environment,
    explicit: Option<&Path>,
    database_url_set: bool,
) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    let default = Path::new(DEFAULT_DATABASE_URL_FILE);
    (env == Environment::Production && !database_url_set && default.exists())
        .then(|| default.to_path_buf())
}

/// Reads the database URL from `path`, without a trailing line break.
pub fn read_database_url(path: &Path) -> Result<DatabaseUrl, CredentialError> {
    read_secret_text("RADAR_DATABASE_URL_FILE", path).map(DatabaseUrl)
}

/// A secret file's text, dropping one trailing line break so that a file
/// made with `echo` and one made with `printf` hold the same secret.
fn read_secret_text(variable: &'static str, path: &Path) -> Result<String, CredentialError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| CredentialError::Unreadable {
        variable,
        path: shown.clone(),
        reason: e.kind().to_string(),
    })?;
    let mut text = String::from_utf8(bytes).map_err(|_| CredentialError::NotText {
        variable,
        path: shown.clone(),
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(CredentialError::EmptyFile {
            variable,
            path: shown,
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWORD: &str = "p4ss/w:rd@x";

    fn file(contents: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), contents).unwrap();
        file
    }

    #[test]
    fn redaction_removes_user_and_password_even_with_reserved_characters() {
        let url = format!("postgres://radar:{PASSWORD}@db:5432/radar?sslmode=require");
        let shown = redact_url(&url);
        assert_eq!(shown, "postgres://***@db:5432/radar?sslmode=require");
        assert_eq!(redact_url("mqtt://h:1883"), "mqtt://h:1883");
        assert_eq!(redact_url("user:secret@h"), "***@h");
    }

    #[test]
    fn a_database_url_never_prints_its_password() {
        let url = DatabaseUrl::new(format!("postgres://radar:{PASSWORD}@db/radar"));
        for shown in [
            format!("{url:?}"),
            url.to_string(),
            serde_json::to_string(&url).unwrap(),
        ] {
            assert!(!shown.contains("p4ss"), "{shown}");
        }
        assert!(url.contains(PASSWORD), "the driver still gets the full URL");
    }

    #[test]
    fn the_database_url_file_is_read_without_its_trailing_newline() {
        let f = file("postgres://radar:pw@db/radar\n");
        let url = read_database_url(f.path()).unwrap();
        assert_eq!(&*url, "postgres://radar:pw@db/radar");
    }

    #[test]
    fn an_explicit_database_url_file_beats_database_url_and_the_default_needs_production() {
        let explicit = Path::new("/etc/radar/url");
        assert_eq!(
            database_url_file(Environment::Development, Some(explicit), true),
            Some(explicit.to_path_buf())
        );
        // No default secret file exists on a test machine.
        assert_eq!(
            database_url_file(Environment::Production, None, false),
            None
        );
        assert_eq!(
            database_url_file(Environment::Development, None, false),
            None
        );
    }

    #[test]
    fn a_missing_or_empty_url_file_is_named() {
        let err = read_database_url(Path::new("/nonexistent/url")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/url"), "{err}");
        assert!(err.to_string().contains("RADAR_DATABASE_URL_FILE"), "{err}");
        let f = file("\n");
        assert!(matches!(
            read_database_url(f.path()),
            Err(CredentialError::EmptyFile { .. })
        ));
    }

    #[test]
    fn production_refuses_an_inline_mqtt_password_and_development_accepts_it() {
        let inline = Secret::new(PASSWORD);
        let login = MqttLogin {
            username: Some("radar"),
            inline_password: Some(&inline),
            password_file: None,
        };
        let err = resolve_mqtt_login(Environment::Production, &login).unwrap_err();
        assert_eq!(err, CredentialError::InlinePasswordInProduction);
        assert!(!err.to_string().contains("p4ss"));
        let creds = resolve_mqtt_login(Environment::Development, &login)
            .unwrap()
            .unwrap();
        assert_eq!(creds.username, "radar");
        assert_eq!(creds.password.unwrap().expose(), PASSWORD.as_bytes());
    }

    #[test]
    fn the_mqtt_password_file_is_read_in_production() {
        let f = file(&format!("{PASSWORD}\n"));
        let login = MqttLogin {
            username: Some("radar"),
            inline_password: None,
            password_file: Some(f.path()),
        };
        let creds = resolve_mqtt_login(Environment::Production, &login)
            .unwrap()
            .unwrap();
        assert_eq!(
            creds.password.as_ref().unwrap().expose(),
            PASSWORD.as_bytes()
        );
        assert!(!format!("{creds:?}").contains("p4ss"));
    }

    #[test]
    fn a_password_needs_a_user_name_and_one_source() {
        let f = file(PASSWORD);
        let inline = Secret::new(PASSWORD);
        let no_user = MqttLogin {
            username: None,
            inline_password: None,
            password_file: Some(f.path()),
        };
        assert_eq!(
            resolve_mqtt_login(Environment::Development, &no_user).unwrap_err(),
            CredentialError::PasswordWithoutUsername
        );
        let both = MqttLogin {
            username: Some("radar"),
            inline_password: Some(&inline),
            password_file: Some(f.path()),
        };
        assert_eq!(
            resolve_mqtt_login(Environment::Development, &both).unwrap_err(),
            CredentialError::TwoPasswordSources
        );
    }

    #[test]
    fn no_variables_mean_no_login_and_a_user_name_alone_is_sent_alone() {
        assert_eq!(
            resolve_mqtt_login(Environment::Production, &MqttLogin::default()).unwrap(),
            None
        );
        let user_only = MqttLogin {
            username: Some("radar"),
            ..MqttLogin::default()
        };
        let creds = resolve_mqtt_login(Environment::Production, &user_only)
            .unwrap()
            .unwrap();
        assert!(creds.password.is_none());
    }
}
