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
//! Within a file: `credHelpers[registry]`, else an `auths` entry that holds
//! a credential (`auth` = base64 `user:password`, `username`/`password`,
//! `identitytoken`), else `credsStore`. Keys are normalised: scheme and
//! `/v1/`, `/v2/` suffixes dropped, and `index.docker.io` /
//! `registry-1.docker.io` mean `docker.io`. A key may name a repository
//! namespace (`quay.io/org`); the longest matching key wins.
//!
//! A file is read as JSON first and only the entries a lookup needs are
//! checked, so a malformed entry is an error for its own registry only.
//! Errors name the file, the key and the kind of problem ("is a number, not
//! a string"), never a value.

use crate::name::reference::DOCKER_HUB;
use crate::registry::Error;
use base64::Engine as _;
use reqwest::header::HeaderValue;
use serde_json::{Map, Value};
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
            let text = match read_bounded(file) {
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

/// Credential files are small; a bigger one is a mistake, not something to
/// hold in memory.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// `file` as text, refused beyond [`MAX_FILE_BYTES`].
fn read_bounded(file: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(file)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(text)
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

/// The value of the key in `map` that best matches `registry/repository`
/// (the longest), with that key.
fn best_key<'a>(
    map: &'a Map<String, Value>,
    registry: &str,
    repository: &str,
) -> Option<(&'a str, &'a Value)> {
    map.iter()
        .filter_map(|(k, v)| key_match(k, registry, repository).map(|n| (n, k.as_str(), v)))
        .max_by_key(|(n, ..)| *n)
        .map(|(_, k, v)| (k, v))
}

/// The JSON type of `value`, for messages that must not show the value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One credentials file, read part by part: the file as JSON first, then
/// only the entries that concern the registry looked up, each checked for
/// its type by hand. So a bad entry is an error for its registry alone, and
/// no message ever holds a value (serde's "invalid type: string \"…\""
/// would print the secret).
struct ConfigFile<'a> {
    path: &'a Path,
    doc: Map<String, Value>,
    registry: &'a str,
}

impl<'a> ConfigFile<'a> {
    fn parse(path: &'a Path, text: &str, registry: &'a str) -> Result<ConfigFile<'a>, Error> {
        // serde_json's syntax errors name a position, never the content.
        let doc: Value = serde_json::from_str(text).map_err(|e| {
            let reason = format!("{} is not a valid credentials file: {e}", path.display());
            Error::credentials(registry, reason)
        })?;
        let Value::Object(doc) = doc else {
            let reason = format!(
                "{} is not a valid credentials file: it is {}, not a JSON object",
                path.display(),
                type_name(&doc)
            );
            return Err(Error::credentials(registry, reason));
        };
        Ok(ConfigFile {
            path,
            doc,
            registry,
        })
    }

    /// "FILE: WHERE WHAT", never a value.
    fn problem(&self, place: &str, what: &str) -> Error {
        let reason = format!("{}: {place} {what}", self.path.display());
        Error::credentials(self.registry, reason)
    }

    /// A top-level section that maps keys to entries (`auths`,
    /// `credHelpers`); `None` when absent or null.
    fn section(&self, name: &str) -> Result<Option<&Map<String, Value>>, Error> {
        match self.doc.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(self.problem(
                &format!("{name:?}"),
                &format!("is {}, not an object", type_name(other)),
            )),
        }
    }

    /// A string where one is expected; `None` when absent or null.
    fn string<'v>(&self, value: Option<&'v Value>, place: &str) -> Result<Option<&'v str>, Error> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(self.problem(place, &format!("is {}, not a string", type_name(other))))
            }
        }
    }
}

fn lookup_in(
    file: &Path,
    text: &str,
    registry: &str,
    repository: &str,
) -> Result<Option<Found>, Error> {
    let config = ConfigFile::parse(file, text, registry)?;
    let source = file.display().to_string();
    let helpers = config.section("credHelpers")?;
    if let Some((key, helper)) = helpers.and_then(|h| best_key(h, registry, repository))
        && let Some(helper) = config.string(Some(helper), &format!("credHelpers[{key:?}]"))?
    {
        return helper_get(helper, registry).map(|c| {
            c.map(|credential| Found {
                credential,
                source: format!("docker-credential-{helper} (credHelpers in {source})"),
            })
        });
    }
    let auths = config.section("auths")?;
    if let Some((key, entry)) = auths.and_then(|a| best_key(a, registry, repository))
        && let Some(credential) = entry_credential(&config, key, entry)?
    {
        return Ok(Some(Found { credential, source }));
    }
    let store = config.string(config.doc.get("credsStore"), "\"credsStore\"")?;
    if let Some(store) = store {
        return helper_get(store, registry).map(|c| {
            c.map(|credential| Found {
                credential,
                source: format!("docker-credential-{store} (credsStore in {source})"),
            })
        });
    }
    Ok(None)
}

/// The credential of one `auths` entry: `auth` (base64 `user:password`),
/// `username`/`password`, or `identitytoken`.
fn entry_credential(
    config: &ConfigFile<'_>,
    key: &str,
    entry: &Value,
) -> Result<Option<Credential>, Error> {
    let place = format!("auths[{key:?}]");
    let entry = match entry {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        other => {
            return Err(config.problem(&place, &format!("is {}, not an object", type_name(other))));
        }
    };
    let field = |name: &str| config.string(entry.get(name), &format!("{place}.{name}"));
    let (mut username, mut password) = (field("username")?, field("password")?);
    let (auth, identity_token) = (field("auth")?, field("identitytoken")?);
    let decoded;
    if let Some(auth) = auth.filter(|a| !a.is_empty()) {
        let bad = || config.problem(&format!("{place}.auth"), "is not base64 of user:password");
        decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .ok_or_else(bad)?;
        let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
        username = Some(u);
        password = Some(p);
    }
    if let Some(token) = identity_token.filter(|t| !t.is_empty()) {
        return Ok(Some(Credential::IdentityToken {
            username: username.unwrap_or_default().to_string(),
            token: token.to_string(),
        }));
    }
    match (username, password) {
        (Some(username), Some(password)) if !username.is_empty() => Ok(Some(Credential::Basic {
            username: username.to_string(),
            password: password.to_string(),
        })),
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
    fn a_wrong_typed_entry_is_named_without_its_value_and_spares_other_registries() {
        let dir = tempfile::tempdir().unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secret = "user:Sup3r-s3cret-Value";
        let config = serde_json::json!({
            "auths": {
                // `auth`'s string where the entry belongs: serde would print it.
                "bad.io": b64(secret),
                "num.io": {"auth": 31_415_926_535_u64},
                "list.io": {"username": "u", "password": ["Sup3r-s3cret-Value"]},
                "good.io": {"auth": b64("gooduser:goodpass")},
            },
            "credHelpers": {"helper.io": 4_242_424_242_u64},
            "credsStore": ["Xyzzy-store"],
        });
        let f = write(dir.path(), "config.json", &config.to_string());
        let store = CredentialStore::with_files(vec![f.clone()]);
        let err = |registry: &str| store.lookup(registry, "a/b").unwrap_err().to_string();
        for (registry, place, kind) in [
            ("bad.io", r#"auths["bad.io"]"#, "is a string, not an object"),
            (
                "num.io",
                r#"auths["num.io"].auth"#,
                "is a number, not a string",
            ),
            (
                "list.io",
                r#"auths["list.io"].password"#,
                "is an array, not a string",
            ),
            (
                "helper.io",
                r#"credHelpers["helper.io"]"#,
                "is a number, not a string",
            ),
            ("other.io", r#""credsStore""#, "is an array, not a string"),
        ] {
            let e = err(registry);
            assert!(
                e.contains(&f.display().to_string()) && e.contains(place) && e.contains(kind),
                "{registry}: {e}"
            );
            for value in [
                &b64(secret),
                secret,
                "Sup3r",
                "31415926535",
                "4242424242",
                "Xyzzy",
            ] {
                assert!(!e.contains(value), "{registry}: {value:?} in {e}");
            }
        }
        assert_eq!(
            store
                .lookup("good.io", "a/b")
                .unwrap()
                .map(|f| f.credential),
            Some(Credential::Basic {
                username: "gooduser".into(),
                password: "goodpass".into()
            }),
            "one bad entry affects only its registry"
        );
        let f = write(dir.path(), "array.json", "[1]");
        let e = CredentialStore::with_files(vec![f])
            .lookup("x.io", "a")
            .unwrap_err()
            .to_string();
        assert!(e.contains("an array, not a JSON object"), "{e}");
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
