//! How the containerd runtime reaches OCI registries: the pull policy, the credentials file, the
//! registries spoken to over plain HTTP, and what a registry's failure means for people.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use base64::Engine;
use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use serde::Deserialize;

/// When the containerd runtime pulls an instance's image from its registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PullPolicy {
    /// Pull only when the image is not in containerd's store (the default).
    #[default]
    IfNotPresent,
    /// Ask the registry before every container is created: a changed tag is pulled again, and
    /// blobs already in the store are not downloaded twice.
    Always,
    /// Never pull: only images already in the store (imported) run; a missing one is
    /// [`RuntimeError::ImageNotFound`](ccattler_core::RuntimeError::ImageNotFound).
    Never,
}

impl FromStr for PullPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "if-not-present" => Ok(PullPolicy::IfNotPresent),
            "always" => Ok(PullPolicy::Always),
            "never" => Ok(PullPolicy::Never),
            other => Err(format!(
                "unknown pull policy {other:?}: use if-not-present, always or never"
            )),
        }
    }
}

impl fmt::Display for PullPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PullPolicy::IfNotPresent => "if-not-present",
            PullPolicy::Always => "always",
            PullPolicy::Never => "never",
        })
    }
}

/// How registries are reached: every registry over HTTPS, except those named insecure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryConfig {
    /// A credentials file, read at every pull (so that it can change while the runtime runs):
    /// JSON in the form of docker's `config.json`, `{"auths": {"HOST[:PORT]": {"auth":
    /// "BASE64(user:password)"}}}`, where an entry may give `"username"` and `"password"`
    /// instead of `"auth"`. A registry with no entry is asked anonymously. Basic and token
    /// authentication both work with these credentials.
    pub credentials_file: Option<PathBuf>,
    /// Registries spoken to over plain HTTP, as image references name them (`HOST` or
    /// `HOST:PORT`). Keep it to registries on a trusted network.
    pub insecure: Vec<String>,
}

/// Registry credentials by host, as read from a [`RegistryConfig::credentials_file`].
///
/// Its `Debug` output names the hosts only, never a user name or password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryCredentials {
    by_host: BTreeMap<String, (String, String)>,
}

impl fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_host.keys()).finish()
    }
}

/// Why a credentials file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("cannot read the registry credentials file {path}: {source}; check the path")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not in the expected form.
    #[error(
        "the registry credentials file {path} is not valid: {why}; expected \
         {{\"auths\": {{\"HOST[:PORT]\": {{\"auth\": \"BASE64(user:password)\"}}}}}} \
         or {{\"username\": ..., \"password\": ...}} in place of \"auth\""
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

impl RegistryCredentials {
    /// Reads a credentials file (see [`RegistryConfig::credentials_file`] for its form).
    ///
    /// # Errors
    ///
    /// [`CredentialsError`] when the file cannot be read or is not in that form.
    pub fn load(path: &Path) -> Result<RegistryCredentials, CredentialsError> {
        let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
            path: path.to_owned(),
            source,
        })?;
        RegistryCredentials::parse(&text).map_err(|why| CredentialsError::Invalid {
            path: path.to_owned(),
            why,
        })
    }

    /// Parses the text of a credentials file.
    fn parse(text: &str) -> Result<RegistryCredentials, String> {
        let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut by_host = BTreeMap::new();
        for (key, entry) in file.auths {
            let pair = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|e| format!("the auth of {key} is not base64: {e}"))?;
                    let text = String::from_utf8(decoded)
                        .map_err(|_| format!("the auth of {key} is not UTF-8"))?;
                    let (user, password) = text
                        .split_once(':')
                        .ok_or_else(|| format!("the auth of {key} is not user:password"))?;
                    (user.to_owned(), password.to_owned())
                }
                (None, Some(user), Some(password)) => (user, password),
                _ => {
                    return Err(format!(
                        "the entry of {key} has neither auth nor a password"
                    ));
                }
            };
            by_host.insert(host_of(&key), pair);
        }
        Ok(RegistryCredentials { by_host })
    }

    /// The user name and password for `registry` (`HOST` or `HOST:PORT`), if the file has them.
    pub fn get(&self, registry: &str) -> Option<(&str, &str)> {
        let found = self.by_host.get(registry).or_else(|| match registry {
            // Docker Hub goes by several names.
            "docker.io" | "index.docker.io" | "registry-1.docker.io" => {
                ["docker.io", "index.docker.io", "registry-1.docker.io"]
                    .iter()
                    .find_map(|alias| self.by_host.get(*alias))
            }
            _ => None,
        });
        found.map(|(user, password)| (user.as_str(), password.as_str()))
    }

    /// The hosts the file has credentials for.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.by_host.keys().map(String::as_str)
    }
}

/// `host[:port]` of a credentials key, which may be a URL (`https://host/v1/`).
fn host_of(key: &str) -> String {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// A registry client for one pull (its token cache lives as long as the pull).
pub(super) fn client(config: &RegistryConfig, timeout: Duration) -> Result<Client, String> {
    // TLS goes through rustls with ring. An application that installed a provider of its own
    // keeps it: installing ours then fails, and that is fine.
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    let config = ClientConfig {
        protocol: ClientProtocol::HttpsExcept(config.insecure.clone()),
        connect_timeout: Some(timeout),
        read_timeout: Some(timeout.max(Duration::from_secs(30))),
        ..ClientConfig::default()
    };
    Client::try_from(config).map_err(|e| format!("cannot make a registry client: {e}"))
}

/// What a failed registry request means, and what to do about it.
pub(super) fn explain(
    error: &OciDistributionError,
    registry: &str,
    repository: &str,
    with_credentials: bool,
    insecure: bool,
) -> String {
    let refused = || {
        if with_credentials {
            format!(
                "registry {registry} refused the credentials for {repository}: check the entry \
                 for {registry} in the registry credentials file"
            )
        } else {
            format!(
                "registry {registry} requires credentials for {repository}: add an entry for \
                 {registry} to the registry credentials file"
            )
        }
    };
    match error {
        OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
            let hint = if insecure {
                ""
            } else {
                "; a registry served over plain HTTP must be listed as insecure \
                 (--insecure-registry)"
            };
            format!(
                "cannot reach registry {registry} ({}): check the image name, that the registry \
                 is up, and the network{hint}",
                chain(e)
            )
        }
        OciDistributionError::RequestError(e) => {
            format!("request to registry {registry} failed: {}", chain(e))
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => refused(),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                refused()
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                format!(
                    "registry {registry} has no such image ({error}): check the repository \
                     {repository} and the tag"
                )
            } else {
                format!("registry {registry} answered with an error: {error}")
            }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => format!(
            "registry {registry} has no such image: check the repository {repository} and the tag"
        ),
        OciDistributionError::ServerError { code: 404, .. } => format!(
            "registry {registry} has no such image ({error}): check the repository \
             {repository} and the tag"
        ),
        OciDistributionError::DigestError(e) => format!(
            "registry {registry} served data that does not match its digest ({e}): nothing of it \
             was kept; the registry's storage or a proxy on the way is corrupt"
        ),
        other => format!("registry {registry}: {other}"),
    }
}

/// An error and its causes, `: `-joined.
pub(super) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_from_auth_and_from_username_password() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let text = format!(
            r#"{{"auths": {{"https://reg.example:5000/v1/": {{"auth": "{auth}"}},
                "other": {{"username": "bob", "password": "pw"}}}}}}"#
        );
        let creds = RegistryCredentials::parse(&text).unwrap_or_default();
        assert_eq!(creds.get("reg.example:5000"), Some(("alice", "s3:cret")));
        assert_eq!(creds.get("other"), Some(("bob", "pw")));
        assert_eq!(creds.get("nobody"), None);
        assert!(!format!("{creds:?}").contains("alice"));
    }

    #[test]
    fn bad_credentials_say_what_is_wrong() {
        let no_pair = RegistryCredentials::parse(r#"{"auths": {"h": {"auth": "bm9jb2xvbg=="}}}"#);
        assert!(no_pair.is_err_and(|e| e.contains("user:password")));
        let empty = RegistryCredentials::parse(r#"{"auths": {"h": {}}}"#);
        assert!(empty.is_err_and(|e| e.contains("neither auth nor a password")));
    }

    #[test]
    fn pull_policies_parse() {
        assert_eq!("always".parse(), Ok(PullPolicy::Always));
        assert_eq!("if-not-present".parse(), Ok(PullPolicy::IfNotPresent));
        assert_eq!("never".parse(), Ok(PullPolicy::Never));
        assert!("sometimes".parse::<PullPolicy>().is_err());
        assert_eq!(PullPolicy::default().to_string(), "if-not-present");
    }
}
