//! Registry credentials from the files docker and podman write (auths,
//! identity tokens, credential helpers), looked up once per repository.
//!
//! Files, first match wins (the order of containers-auth.json(5), which
//! falls back to docker's file):
//! 1. `$REGISTRY_AUTH_FILE` (podman/skopeo/buildah),
//! 2. `$XDG_RUNTIME_DIR/containers/auth.json`,
//! 3. `~/.config/containers/auth.json`,
//! 4. `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
//!
//! Within a file: `credHelpers[registry]`, else `credsStore`, else `auths`
//! (`auth` = base64 `user:password`, `username`/`password`, `identitytoken`).
//! Keys are normalised: scheme and `/v1/`, `/v2/` suffixes dropped, and
//! `index.docker.io` / `registry-1.docker.io` mean `docker.io`. A key may name
//! a repository namespace (`quay.io/org`); the longest matching key wins.

use crate::name::reference::DOCKER_HUB;
use crate::registry::Error;
use base64::Engine as _;
use reqwest::header::HeaderValue;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A secret for one registry. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Basic {
        username: String,
        password: String,
    },
    /// An OAuth2 refresh token (`identitytoken`), exchanged at the token
    /// endpoint with `grant_type=refresh_token`.
    IdentityToken {
        username: String,
        token: String,
    },
}

impl Credential {
    pub fn username(&self) -> &str {
        match self {
            Credential::Basic { username, .. } | Credential::IdentityToken { username, .. } => {
                username
            }
        }
    }
    /// `Authorization: Basic …` for this credential (identity tokens are
    /// only ever exchanged for a bearer token).
    pub(crate) fn basic_header(&self) -> Option<HeaderValue> {
        let Credential::Basic { username, password } = self else {
            return None;
        };
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
            .expect("base64 is a valid header value");
        value.set_sensitive(true);
        Some(value)
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => {
                write!(
                    f,
                    "Basic {{ username: {username:?}, password: <redacted> }}"
                )
            }
            Credential::IdentityToken { username, .. } => {
                write!(
                    f,
                    "IdentityToken {{ username: {username:?}, token: <redacted> }}"
                )
            }
        }
    }
}

/// Where a credential came from, for messages ("from ~/.docker/config.json").
#[derive(Debug, Clone)]
pub struct Found {
    pub credential: Credential,
    pub source: String,
}

/// The credential files to consult, in order.
#[derive(Debug, Clone, Default)]
pub struct CredentialStore {
    files: Vec<PathBuf>,
}

impl CredentialStore {
    /// The default locations, read from the environment.
    pub fn from_env() -> CredentialStore {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = env("HOME");
        let mut files = Vec::new();
        if let Some(f) = env("REGISTRY_AUTH_FILE") {
            files.push(f);
        }
        if let Some(d) = env("XDG_RUNTIME_DIR") {
            files.push(d.join("containers/auth.json"));
        }
        if let Some(d) = env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")))
        {
            files.push(d.join("containers/auth.json"));
        }
        if let Some(d) = env("DOCKER_CONFIG").or_else(|| home.as_ref().map(|h| h.join(".docker"))) {
            files.push(d.join("config.json"));
        }
        CredentialStore { files }
    }

    /// Exactly these files, in order (no environment lookups).
    pub fn with_files(files: Vec<PathBuf>) -> CredentialStore {
        CredentialStore { files }
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The credential for `registry` (as in references: `docker.io`,
    /// `host:port`) and repository path, or `None` for anonymous access.
    pub fn lookup(&self, registry: &str, repository: &str) -> Result<Option<Found>, Error> {
        for file in &self.files {
            let text = match std::fs::read_to_string(file) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let reason = format!("cannot read {}: {e}", file.display());
                    return Err(Error::credentials(registry, reason));
                }
            };
            if let Some(found) = lookup_in(file, &text, registry, repository)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}

/// One registry's credential lookups, by repository (keys may name a
/// namespace, so the answer can differ per repository). Lookups may run a
/// helper program, so they run off the async threads, once each.
#[derive(Default)]
pub(crate) struct CredentialCache {
    by_repository: tokio::sync::Mutex<HashMap<String, Option<Found>>>,
}

impl CredentialCache {
    pub(crate) async fn lookup(
        &self,
        store: &CredentialStore,
        registry: &str,
        repository: &str,
    ) -> Result<Option<Found>, Error> {
        let mut cache = self.by_repository.lock().await;
        if let Some(found) = cache.get(repository) {
            return Ok(found.clone());
        }
        let store = store.clone();
        let (reg, repo) = (registry.to_string(), repository.to_string());
        let found = tokio::task::spawn_blocking(move || store.lookup(&reg, &repo))
            .await
            .map_err(|e| Error::credentials(registry, format!("lookup task failed: {e}")))??;
        cache.insert(repository.to_string(), found.clone());
        Ok(found)
    }
}

#[derive(serde::Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(serde::Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

/// `https://index.docker.io/v1/` -> `docker.io`, `http://h:5000/v2/` -> `h:5000`.
pub fn normalize_key(key: &str) -> String {
    let k = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let k = k
        .strip_suffix("/v1")
        .or_else(|| k.strip_suffix("/v2"))
        .unwrap_or(k);
    let (host, rest) = match k.split_once('/') {
        Some((h, r)) => (h, Some(r)),
        None => (k, None),
    };
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    };
    match rest {
        Some(r) => format!("{host}/{r}"),
        None => host.to_string(),
    }
}

/// Length of the match of `key` against `registry/repository`, if it matches.
fn key_match(key: &str, registry: &str, repository: &str) -> Option<usize> {
    let key = normalize_key(key);
    let full = format!("{registry}/{repository}");
    if key == registry || full == key || full.starts_with(&format!("{key}/")) {
        Some(key.len())
    } else {
        None
    }
}

fn best_key<'a, V>(
    map: &'a BTreeMap<String, V>,
    registry: &str,
    repository: &str,
) -> Option<&'a V> {
    map.iter()
        .filter_map(|(k, v)| key_match(k, registry, repository).map(|n| (n, v)))
        .max_by_key(|(n, _)| *n)
        .map(|(_, v)| v)
}

fn lookup_in(
    file: &Path,
    text: &str,
    registry: &str,
    repository: &str,
) -> Result<Option<Found>, Error> {
    let config: ConfigFile = serde_json::from_str(text).map_err(|e| {
        // serde_json's message names a position, never the file's content.
        let reason = format!("{} is not a valid credentials file: {e}", file.display());
        Error::credentials(registry, reason)
    })?;
    let source = file.display().to_string();
    if let Some(helper) = best_key(&config.cred_helpers, registry, repository) {
        return helper_get(helper, registry).map(|c| {
            c.map(|credential| Found {
                credential,
                source: format!("docker-credential-{helper} (credHelpers in {source})"),
            })
        });
    }
    if let Some(entry) = best_key(&config.auths, registry, repository)
        && let Some(credential) = entry_credential(entry, registry, file)?
    {
        return Ok(Some(Found { credential, source }));
    }
    if let Some(store) = &config.creds_store {
        return helper_get(store, registry).map(|c| {
            c.map(|credential| Found {
                credential,
                source: format!("docker-credential-{store} (credsStore in {source})"),
            })
        });
    }
    Ok(None)
}

fn entry_credential(
    entry: &AuthEntry,
    registry: &str,
    file: &Path,
) -> Result<Option<Credential>, Error> {
    let (mut username, mut password) = (entry.username.clone(), entry.password.clone());
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let bad = || {
            let reason = format!(
                "the \"auth\" entry in {} is not base64 of user:password",
                file.display()
            );
            Error::credentials(registry, reason)
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| bad())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
        let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
        username = Some(u.to_string());
        password = Some(p.to_string());
    }
    if let Some(token) = entry.identitytoken.as_deref().filter(|t| !t.is_empty()) {
        return Ok(Some(Credential::IdentityToken {
            username: username.unwrap_or_default(),
            token: token.to_string(),
        }));
    }
    match (username, password) {
        (Some(username), Some(password)) if !username.is_empty() => {
            Ok(Some(Credential::Basic { username, password }))
        }
        _ => Ok(None),
    }
}

/// Runs `docker-credential-<helper> get` (the docker credential helper
/// protocol: server URL on stdin, `{"Username","Secret"}` on stdout).
fn helper_get(helper: &str, registry: &str) -> Result<Option<Credential>, Error> {
    let fail = |reason: String| Error::credentials(registry, reason);
    if helper.is_empty()
        || !helper
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(fail(format!("invalid credential helper name {helper:?}")));
    }
    let program = format!("docker-credential-{helper}");
    let server = if registry == DOCKER_HUB {
        "https://index.docker.io/v1/".to_string()
    } else {
        registry.to_string()
    };
    // Through the process runner (argv, no shell). Its stdout holds the
    // secret, so only the exit status and stderr ever reach a message.
    let out = crate::process::Cmd::new(&program)
        .arg("get")
        .stdin_bytes(server.into_bytes())
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .map_err(|e| match e {
            crate::process::ProcessError::NotFound { .. } => fail(format!(
                "{program} is not installed or not on PATH (named by the docker config)"
            )),
            other => fail(other.to_string()),
        })?;
    let stdout = out.stdout.as_str();
    if !out.status.success() {
        if stdout.contains("credentials not found") || out.stderr.contains("credentials not found")
        {
            return Ok(None);
        }
        // Helpers print diagnostics, not secrets, on stderr; keep it short anyway.
        let stderr: String = out.stderr.chars().take(200).collect();
        return Err(fail(format!(
            "{program} get failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    #[derive(serde::Deserialize)]
    struct HelperOut {
        #[serde(rename = "Username", default)]
        username: String,
        #[serde(rename = "Secret", default)]
        secret: String,
    }
    let parsed: HelperOut = serde_json::from_str(stdout).map_err(|_| {
        fail(format!(
            "{program} get printed something other than {{\"Username\",\"Secret\"}} JSON"
        ))
    })?;
    if parsed.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if parsed.username == "<token>" {
        Credential::IdentityToken {
            username: String::new(),
            token: parsed.secret,
        }
    } else {
        Credential::Basic {
            username: parsed.username,
            password: parsed.secret,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_normalisation() {
        assert_eq!(normalize_key("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(normalize_key("registry-1.docker.io"), "docker.io");
        assert_eq!(normalize_key("http://localhost:5000/v2/"), "localhost:5000");
        assert_eq!(normalize_key("quay.io/org"), "quay.io/org");
    }

    fn write(dir: &Path, name: &str, json: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, json).unwrap();
        p
    }

    #[test]
    fn auths_entries_and_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode("hubuser:hubpass");
        let docker = write(
            dir.path(),
            "config.json",
            &format!(
                r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{b64}"}},
                    "ghcr.io":{{"username":"u","password":"p"}},
                    "quay.io":{{"auth":"{b64}"}},
                    "quay.io/team":{{"username":"team","password":"tp"}},
                    "id.example":{{"identitytoken":"refresh-me"}}}}}}"#
            ),
        );
        let podman = write(
            dir.path(),
            "auth.json",
            r#"{"auths":{"ghcr.io":{"username":"podman","password":"pp"}}}"#,
        );
        let store = CredentialStore::with_files(vec![podman, docker]);
        let get = |reg: &str, repo: &str| store.lookup(reg, repo).unwrap().map(|f| f.credential);
        assert_eq!(
            get("docker.io", "library/debian"),
            Some(Credential::Basic {
                username: "hubuser".into(),
                password: "hubpass".into()
            })
        );
        assert_eq!(
            get("ghcr.io", "x/y").unwrap().username(),
            "podman",
            "the first file wins"
        );
        assert_eq!(
            get("quay.io", "team/app").unwrap().username(),
            "team",
            "longest key wins"
        );
        assert_eq!(get("quay.io", "other/app").unwrap().username(), "hubuser");
        assert!(
            matches!(get("id.example", "a"), Some(Credential::IdentityToken { token, .. }) if token == "refresh-me")
        );
        assert_eq!(
            get("127.0.0.1:5000", "a"),
            None,
            "anonymous when nothing matches"
        );
        let debug = format!("{:?}", get("ghcr.io", "x"));
        assert!(
            !debug.contains("pp") && debug.contains("redacted"),
            "{debug}"
        );
    }

    #[test]
    fn a_missing_helper_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "config.json",
            r#"{"credHelpers":{"x.io":"sunaba-absent-helper"}}"#,
        );
        let err = CredentialStore::with_files(vec![f])
            .lookup("x.io", "a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("docker-credential-sunaba-absent-helper is not installed"),
            "{err}"
        );
    }

    #[test]
    fn bad_files_are_reported_without_content() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "config.json",
            r#"{"auths":{"x.io":{"auth":"!!not-base64-secret"}}}"#,
        );
        let err = CredentialStore::with_files(vec![f.clone()])
            .lookup("x.io", "a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not base64") && !err.contains("not-base64-secret"),
            "{err}"
        );
        let f = write(dir.path(), "broken.json", r#"{"auths": secret"#);
        let err = CredentialStore::with_files(vec![f])
            .lookup("x.io", "a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a valid credentials file") && !err.contains("secret"),
            "{err}"
        );
    }
}
