//! The HTTP side: scheme choice, authentication, retries, redirects, size
//! caps and per-registry concurrency.

use super::auth::{Challenge, CredentialStore, Found, parse_challenge};
use super::reference::{api_host, is_loopback};
use super::{Error, Result};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;

/// How failed requests are retried: jittered exponential backoff for 408,
/// 429, 500, 502, 503, 504 and connection errors, `Retry-After` honoured,
/// everything within `total`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Delay before the first retry; doubled each time, with full jitter.
    pub base_delay: Duration,
    /// Cap of one backoff delay (not of `Retry-After`, which only `total` bounds).
    pub max_delay: Duration,
    /// Bound on the whole request including retries and waits.
    pub total: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            total: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// No retries at all (one attempt).
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max_delay);
        // Full jitter: spreads clients that failed together.
        let frac: f64 = rand::random::<f64>();
        exp.mul_f64(0.5 + frac / 2.0)
    }
}

fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    insecure: Vec<String>,
    ca_files: Vec<PathBuf>,
    ca_pems: Vec<Vec<u8>>,
    connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    per_registry: usize,
    credentials: Option<CredentialStore>,
    pub(crate) max_manifest_bytes: usize,
    pub(crate) max_token_bytes: usize,
    pub(crate) max_config_bytes: usize,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            insecure: Vec::new(),
            ca_files: Vec::new(),
            ca_pems: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            per_registry: 16,
            credentials: None,
            // distribution refuses manifests over 4 MiB; so do we.
            max_manifest_bytes: 4 << 20,
            max_token_bytes: 1 << 20,
            max_config_bytes: 16 << 20,
        }
    }
}

impl ClientBuilder {
    /// Registries (`host[:port]`) that may be spoken to over plain http, as a
    /// profile's `insecure_registries` lists. Loopback registries always may.
    pub fn insecure_registries<I, S>(mut self, registries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.insecure.extend(registries.into_iter().map(Into::into));
        self
    }
    /// An extra trusted root CA (PEM file), on top of the system roots.
    pub fn root_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }
    /// An extra trusted root CA (PEM bytes).
    pub fn root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pems.push(pem.into());
        self
    }
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }
    /// Bound on one HTTP exchange (headers and body); retries start anew.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }
    /// Requests in flight to one registry at most (default 16).
    pub fn per_registry_limit(mut self, n: usize) -> Self {
        self.per_registry = n.max(1);
        self
    }
    /// Where credentials come from; default [`CredentialStore::from_env`].
    pub fn credentials(mut self, store: CredentialStore) -> Self {
        self.credentials = Some(store);
        self
    }
    /// Ignore every credential file (anonymous access only).
    pub fn anonymous(self) -> Self {
        self.credentials(CredentialStore::with_files(Vec::new()))
    }
    pub fn max_manifest_bytes(mut self, n: usize) -> Self {
        self.max_manifest_bytes = n;
        self
    }
    pub fn max_token_bytes(mut self, n: usize) -> Self {
        self.max_token_bytes = n;
        self
    }

    pub fn build(self) -> Result<Client> {
        let mut http = reqwest::Client::builder()
            .user_agent(concat!("sunaba-images/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.connect_timeout)
            .pool_max_idle_per_host(self.per_registry.max(8))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            // Redirects are followed by hand so Authorization is only ever
            // sent to the registry's own host.
            .redirect(reqwest::redirect::Policy::none());
        let mut pems = self.ca_pems.clone();
        for f in &self.ca_files {
            pems.push(std::fs::read(f).map_err(|e| Error::Config {
                reason: format!("cannot read CA certificate {}: {e}", f.display()),
            })?);
        }
        let mut certs = Vec::new();
        for pem in &pems {
            let found = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| Error::Config {
                reason: format!("invalid PEM CA certificate: {e}"),
            })?;
            if found.is_empty() {
                return Err(Error::Config {
                    reason: "a CA file holds no PEM certificate".into(),
                });
            }
            certs.extend(found);
        }
        if !certs.is_empty() {
            http = http.tls_certs_merge(certs);
        }
        let http = http.build().map_err(|e| Error::Config {
            reason: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })?;
        Ok(Client {
            http,
            inner: Arc::new(Inner {
                credentials: self
                    .credentials
                    .clone()
                    .unwrap_or_else(CredentialStore::from_env),
                cfg: self,
                registries: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// A registry client; cheap to clone (clones share pools, caches and limits).
#[derive(Clone)]
pub struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) cfg: ClientBuilder,
    credentials: CredentialStore,
    registries: Mutex<HashMap<String, Arc<RegistryState>>>,
}

struct CachedToken {
    token: String,
    valid_until: Instant,
}

/// What is known about one registry.
struct RegistryState {
    permits: Semaphore,
    /// `https` or `http`, once a response has shown which one it speaks.
    scheme: Mutex<Option<&'static str>>,
    challenge: Mutex<Option<Challenge>>,
    tokens: Mutex<HashMap<String, CachedToken>>,
    /// Serialises token fetches so N concurrent requests fetch one token.
    token_fetch: tokio::sync::Mutex<()>,
    /// Serialises scheme detection so one request probes https, not N.
    scheme_probe: tokio::sync::Mutex<()>,
    /// Credential lookups by repository (keys may name a namespace).
    credentials: tokio::sync::Mutex<HashMap<String, Option<Found>>>,
}

/// One request to a registry, relative to its API origin.
pub(crate) struct Req<'a> {
    pub method: Method,
    /// Path and query, e.g. `/v2/library/debian/manifests/latest`.
    pub target: String,
    pub accept: Option<&'a str>,
    /// `repository:<name>:pull`.
    pub scope: String,
    /// For messages: the reference or repository concerned.
    pub context: &'a str,
    /// Body cap and what the body is (for [`Error::TooLarge`]).
    pub limit: (usize, &'static str),
}

/// A response whose body (if any) has been read completely.
pub(crate) struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// The origin+path the response came from (after redirects).
    pub url: reqwest::Url,
}

enum Failure {
    /// Worth another attempt.
    Transient(String),
    /// The server's TLS certificate is not trusted: retrying cannot help.
    Certificate(String),
    Fatal(Error),
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        src = cause.source();
    }
    s
}

/// A short, credential-free summary of a registry error body.
pub(crate) fn error_detail(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errs {
        #[serde(default)]
        errors: Vec<E>,
        #[serde(default)]
        details: Option<String>,
        #[serde(default)]
        error: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct E {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let text = match serde_json::from_slice::<Errs>(body) {
        Ok(e) if !e.errors.is_empty() => e
            .errors
            .iter()
            .map(|e| format!("{} {}", e.code, e.message).trim().to_string())
            .collect::<Vec<_>>()
            .join("; "),
        Ok(Errs {
            details: Some(d), ..
        }) => d,
        Ok(Errs { error: Some(d), .. }) => d,
        _ => String::from_utf8_lossy(body).trim().to_string(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    fn state(&self, registry: &str) -> Arc<RegistryState> {
        let mut map = self.inner.registries.lock().expect("registry state lock");
        map.entry(registry.to_string())
            .or_insert_with(|| {
                Arc::new(RegistryState {
                    permits: Semaphore::new(self.inner.cfg.per_registry),
                    scheme: Mutex::new(None),
                    challenge: Mutex::new(None),
                    tokens: Mutex::new(HashMap::new()),
                    token_fetch: tokio::sync::Mutex::new(()),
                    scheme_probe: tokio::sync::Mutex::new(()),
                    credentials: tokio::sync::Mutex::new(HashMap::new()),
                })
            })
            .clone()
    }

    fn may_use_http(&self, registry: &str) -> bool {
        is_loopback(registry) || self.inner.cfg.insecure.iter().any(|r| r == registry)
    }

    async fn credential(
        &self,
        state: &RegistryState,
        registry: &str,
        repository: &str,
    ) -> Result<Option<Found>> {
        let mut cache = state.credentials.lock().await;
        if let Some(found) = cache.get(repository) {
            return Ok(found.clone());
        }
        let store = self.inner.credentials.clone();
        let (reg, repo) = (registry.to_string(), repository.to_string());
        let found = tokio::task::spawn_blocking(move || store.lookup(&reg, &repo))
            .await
            .map_err(|e| Error::Credentials {
                registry: registry.to_string(),
                reason: format!("lookup task failed: {e}"),
            })??;
        cache.insert(repository.to_string(), found.clone());
        Ok(found)
    }

    /// Sends `req` to `registry` with authentication, retries and the
    /// per-registry limit; returns any final HTTP response (the caller maps
    /// non-success statuses), or an error for transport failures, 401s that
    /// credentials cannot fix, and exhausted retries.
    pub(crate) async fn execute(&self, registry: &str, req: Req<'_>) -> Result<Resp> {
        let state = self.state(registry);
        let _permit = state
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        let policy = &self.inner.cfg.retry;
        let started = Instant::now();
        let mut attempts = 0u32;
        let mut auth_refreshed = false;
        let mut discovered = false;
        loop {
            attempts += 1;
            let auth = self.auth_header(&state, registry, &req).await?;
            let remaining = policy.total.saturating_sub(started.elapsed());
            let failure = match self
                .send_once(&state, registry, &req, auth.as_deref(), remaining)
                .await
            {
                Ok(resp) if resp.status == StatusCode::UNAUTHORIZED => {
                    let challenge = resp
                        .headers
                        .get(header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_challenge);
                    let Some(challenge) = challenge else {
                        return Err(self
                            .unauthorized(&state, registry, &req, &resp, auth.is_some())
                            .await);
                    };
                    let bearer = matches!(challenge, Challenge::Bearer { .. });
                    *state.challenge.lock().expect("challenge lock") = Some(challenge);
                    // Sent nothing: the challenge says how to authenticate.
                    // Sent a token: it may have expired or been revoked, so
                    // a fresh one gets one more try.
                    let retry = if auth.is_none() && !discovered {
                        discovered = true;
                        true
                    } else if auth.is_some() && bearer && !auth_refreshed {
                        auth_refreshed = true;
                        state.tokens.lock().expect("token lock").remove(&req.scope);
                        true
                    } else {
                        false
                    };
                    if retry && self.auth_header(&state, registry, &req).await?.is_some() {
                        attempts -= 1;
                        continue;
                    }
                    return Err(self
                        .unauthorized(&state, registry, &req, &resp, auth.is_some())
                        .await);
                }
                Ok(resp) if retryable(resp.status) => {
                    let wait = retry_after(&resp.headers);
                    let last = format!("HTTP {}{}", resp.status.as_u16(), error_detail(&resp.body));
                    (last, wait)
                }
                Ok(resp) => return Ok(resp),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(msg) | Failure::Certificate(msg)) => (msg, None),
            };
            let (last, wait) = failure;
            let delay = wait.unwrap_or_else(|| policy.backoff(attempts - 1));
            let elapsed = started.elapsed();
            if attempts >= policy.max_attempts || elapsed + delay >= policy.total {
                let last = match wait {
                    Some(w) if elapsed + w >= policy.total => format!(
                        "{last} (Retry-After asks for {} s, beyond the {} s bound)",
                        w.as_secs(),
                        policy.total.as_secs()
                    ),
                    _ => last,
                };
                return Err(Error::GaveUp {
                    context: req.context.to_string(),
                    attempts,
                    elapsed_ms: elapsed.as_millis(),
                    last: format!("{registry}: {last}"),
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn unauthorized(
        &self,
        state: &RegistryState,
        registry: &str,
        req: &Req<'_>,
        resp: &Resp,
        sent_auth: bool,
    ) -> Error {
        let found = self
            .credential(state, registry, req_repository(&req.scope))
            .await
            .ok()
            .flatten();
        let hint = match (&found, sent_auth) {
            (Some(f), true) => format!(
                "the credentials for user {:?} from {} were rejected: check them (e.g. `docker login {registry}`)",
                f.credential.username(),
                f.source
            ),
            (Some(f), false) => format!("credentials from {} were not accepted", f.source),
            (None, _) => format!(
                "no credentials for {registry} were found (looked in {}); log in with `docker login {registry}`",
                self.inner
                    .credentials
                    .files()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Error::Unauthorized {
            context: req.context.to_string(),
            registry: registry.to_string(),
            status: resp.status.as_u16(),
            detail: error_detail(&resp.body),
            hint,
        }
    }

    /// The Authorization value for `req`, from what the registry has
    /// challenged for before (so only the first request pays a 401).
    async fn auth_header(
        &self,
        state: &RegistryState,
        registry: &str,
        req: &Req<'_>,
    ) -> Result<Option<String>> {
        let challenge = state.challenge.lock().expect("challenge lock").clone();
        match challenge {
            None => Ok(None),
            Some(Challenge::Basic) => Ok(self
                .credential(state, registry, req_repository(&req.scope))
                .await?
                .and_then(|f| f.credential.basic_header())),
            Some(Challenge::Bearer { realm, service, .. }) => {
                if let Some(t) = cached_token(state, &req.scope) {
                    return Ok(Some(format!("Bearer {t}")));
                }
                let _guard = state.token_fetch.lock().await;
                if let Some(t) = cached_token(state, &req.scope) {
                    return Ok(Some(format!("Bearer {t}")));
                }
                let (token, ttl) = self
                    .fetch_token(
                        state,
                        registry,
                        &realm,
                        service.as_deref(),
                        &req.scope,
                        req.context,
                    )
                    .await?;
                // Renew a little early so a token never expires in flight.
                let margin = (ttl / 10).min(Duration::from_secs(10));
                state.tokens.lock().expect("token lock").insert(
                    req.scope.clone(),
                    CachedToken {
                        token: token.clone(),
                        valid_until: Instant::now() + ttl - margin,
                    },
                );
                Ok(Some(format!("Bearer {token}")))
            }
        }
    }

    /// The bearer token flow (docker token spec, and OAuth2 refresh tokens
    /// for `identitytoken` credentials). Failures are reported, never turned
    /// into anonymous access.
    async fn fetch_token(
        &self,
        state: &RegistryState,
        registry: &str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        context: &str,
    ) -> Result<(String, Duration)> {
        let fail = |reason: String| Error::Token {
            context: context.to_string(),
            registry: registry.to_string(),
            realm: realm.to_string(),
            reason,
        };
        let realm_url =
            reqwest::Url::parse(realm).map_err(|e| fail(format!("invalid realm URL: {e}")))?;
        if !matches!(realm_url.scheme(), "https" | "http") {
            return Err(fail("the realm is not an http(s) URL".into()));
        }
        let found = self
            .credential(state, registry, req_repository(scope))
            .await?;
        let policy = &self.inner.cfg.retry;
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut rb = match found.as_ref().map(|f| &f.credential) {
                Some(super::auth::Credential::IdentityToken { token, .. }) => {
                    let mut form = vec![
                        ("grant_type", "refresh_token"),
                        ("client_id", "sunaba-images"),
                        ("refresh_token", token.as_str()),
                        ("scope", scope),
                    ];
                    if let Some(s) = service {
                        form.push(("service", s));
                    }
                    let body = url::form_urlencoded::Serializer::new(String::new())
                        .extend_pairs(form)
                        .finish();
                    self.http
                        .post(realm_url.clone())
                        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                        .body(body)
                }
                other => {
                    let mut url = realm_url.clone();
                    {
                        let mut q = url.query_pairs_mut();
                        if let Some(s) = service {
                            q.append_pair("service", s);
                        }
                        q.append_pair("scope", scope);
                    }
                    let rb = self.http.get(url);
                    match other.and_then(|c| c.basic_header()) {
                        Some(h) => rb.header(header::AUTHORIZATION, h),
                        None => rb,
                    }
                }
            };
            let remaining = policy.total.saturating_sub(started.elapsed());
            rb = rb.timeout(self.inner.cfg.request_timeout.min(remaining));
            let outcome: std::result::Result<std::convert::Infallible, (String, Option<Duration>)> =
                match rb.send().await {
                    Ok(mut resp) => {
                        let status = resp.status();
                        let headers = resp.headers().clone();
                        match read_limited(&mut resp, self.inner.cfg.max_token_bytes).await {
                            Ok(body) if status.is_success() => {
                                return parse_token(&body).map_err(fail);
                            }
                            Ok(body) if retryable(status) => Err((
                                format!("HTTP {}{}", status.as_u16(), error_detail(&body)),
                                retry_after(&headers),
                            )),
                            Ok(body) => {
                                return Err(fail(format!(
                                    "HTTP {}{}",
                                    status.as_u16(),
                                    error_detail(&body)
                                )));
                            }
                            Err(ReadError::TooLarge) => {
                                return Err(fail(format!(
                                    "the token response exceeds the limit of {} bytes",
                                    self.inner.cfg.max_token_bytes
                                )));
                            }
                            Err(ReadError::Broken(m)) => Err((m, None)),
                        }
                    }
                    Err(e) => Err((error_chain(&e), None)),
                };
            let Err((last, wait)) = outcome;
            let delay = wait.unwrap_or_else(|| policy.backoff(attempts - 1));
            if attempts >= policy.max_attempts || started.elapsed() + delay >= policy.total {
                return Err(fail(format!("gave up after {attempts} attempt(s): {last}")));
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One exchange, following redirects by hand, with the body read under
    /// the size cap. Tries https then http for registries that may use http
    /// until one of them answers.
    async fn send_once(
        &self,
        state: &RegistryState,
        registry: &str,
        req: &Req<'_>,
        auth: Option<&str>,
        remaining: Duration,
    ) -> std::result::Result<Resp, Failure> {
        let mut known = *state.scheme.lock().expect("scheme lock");
        let _probing = if known.is_none() {
            let guard = state.scheme_probe.lock().await;
            known = *state.scheme.lock().expect("scheme lock");
            known.is_none().then_some(guard)
        } else {
            None
        };
        let schemes: &[&'static str] = match known {
            Some("http") => &["http"],
            Some(_) => &["https"],
            None if self.may_use_http(registry) => &["https", "http"],
            None => &["https"],
        };
        let timeout = self
            .inner
            .cfg
            .request_timeout
            .min(remaining)
            .max(Duration::from_millis(1));
        let mut errors = Vec::new();
        let mut certificate = None;
        for scheme in schemes {
            let origin = format!("{scheme}://{}", api_host(registry));
            let url = reqwest::Url::parse(&format!("{origin}{}", req.target)).map_err(|e| {
                Failure::Fatal(Error::Config {
                    reason: format!("invalid URL {origin}{}: {e}", req.target),
                })
            })?;
            match self
                .exchange(url, &origin, req, auth, timeout, registry)
                .await
            {
                Ok(resp) => {
                    // Go's TLS server answers plain http with this 400.
                    if *scheme == "http"
                        && resp.status == StatusCode::BAD_REQUEST
                        && String::from_utf8_lossy(&resp.body).contains("HTTPS server")
                    {
                        errors.push("http: the registry speaks only https".to_string());
                        continue;
                    }
                    if known.is_none() {
                        *state.scheme.lock().expect("scheme lock") = Some(scheme);
                    }
                    return Ok(resp);
                }
                Err(Failure::Transient(m)) => errors.push(format!("{scheme}: {m}")),
                Err(Failure::Certificate(m)) => {
                    certificate = Some(m.clone());
                    errors.push(format!("{scheme}: {m}"));
                }
                Err(fatal) => return Err(fatal),
            }
        }
        if certificate.is_some() {
            return Err(Failure::Fatal(Error::Connect {
                context: req.context.to_string(),
                registry: registry.to_string(),
                reason: format!(
                    "{}; if the registry uses a private CA, pass it with --ca-cert",
                    errors.join("; ")
                ),
            }));
        }
        Err(Failure::Transient(errors.join("; ")))
    }

    async fn exchange(
        &self,
        mut url: reqwest::Url,
        origin: &str,
        req: &Req<'_>,
        auth: Option<&str>,
        timeout: Duration,
        registry: &str,
    ) -> std::result::Result<Resp, Failure> {
        let deadline = Instant::now() + timeout;
        for _hop in 0..=5 {
            let same_origin = url.origin().ascii_serialization() == origin;
            let mut rb = self.http.request(req.method.clone(), url.clone()).timeout(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            );
            if let Some(a) = req.accept {
                rb = rb.header(header::ACCEPT, a);
            }
            if let (Some(a), true) = (auth, same_origin) {
                let mut v = HeaderValue::from_str(a).map_err(|_| {
                    Failure::Fatal(Error::Config {
                        reason: "an authorization value is not a valid header".into(),
                    })
                })?;
                v.set_sensitive(true);
                rb = rb.header(header::AUTHORIZATION, v);
            }
            let mut resp = match rb.send().await {
                Ok(r) => r,
                Err(e) if e.is_timeout() => {
                    return Err(Failure::Transient(format!(
                        "no response within {} ms",
                        timeout.as_millis()
                    )));
                }
                Err(e) => {
                    let chain = error_chain(&e);
                    return Err(if chain.contains("certificate") {
                        Failure::Certificate(chain)
                    } else {
                        Failure::Transient(chain)
                    });
                }
            };
            let status = resp.status();
            if status.is_redirection()
                && let Some(loc) = resp
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
            {
                url = url.join(loc).map_err(|e| {
                    Failure::Fatal(Error::Malformed {
                        context: req.context.to_string(),
                        what: "redirect",
                        reason: format!("bad Location: {e}"),
                    })
                })?;
                continue;
            }
            let headers = resp.headers().clone();
            let limit = if status.is_success() {
                req.limit.0
            } else {
                64 << 10
            };
            let body = if req.method == Method::HEAD {
                Vec::new()
            } else {
                match read_limited(&mut resp, limit).await {
                    Ok(b) => b,
                    Err(ReadError::TooLarge) if status.is_success() => {
                        return Err(Failure::Fatal(Error::TooLarge {
                            context: req.context.to_string(),
                            registry: registry.to_string(),
                            what: req.limit.1,
                            limit,
                        }));
                    }
                    Err(ReadError::TooLarge) => b"(error body too large)".to_vec(),
                    Err(ReadError::Broken(m)) => return Err(Failure::Transient(m)),
                }
            };
            return Ok(Resp {
                status,
                headers,
                body,
                url,
            });
        }
        Err(Failure::Fatal(Error::Status {
            context: req.context.to_string(),
            registry: registry.to_string(),
            status: 310,
            detail: ": more than 5 redirects".into(),
        }))
    }
}

fn cached_token(state: &RegistryState, scope: &str) -> Option<String> {
    let tokens = state.tokens.lock().expect("token lock");
    tokens
        .get(scope)
        .filter(|t| t.valid_until > Instant::now())
        .map(|t| t.token.clone())
}

/// `repository:a/b:pull` -> `a/b`.
fn req_repository(scope: &str) -> &str {
    scope
        .strip_prefix("repository:")
        .and_then(|s| s.rsplit_once(':'))
        .map_or("", |(name, _)| name)
}

fn parse_token(body: &[u8]) -> std::result::Result<(String, Duration), String> {
    #[derive(serde::Deserialize)]
    struct TokenResponse {
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        access_token: Option<String>,
        #[serde(default)]
        expires_in: Option<u64>,
    }
    let t: TokenResponse =
        serde_json::from_slice(body).map_err(|e| format!("the token response is not JSON: {e}"))?;
    let token = t
        .token
        .or(t.access_token)
        .filter(|t| !t.is_empty())
        .ok_or("the token response holds no token")?;
    if token.chars().any(|c| c.is_control() || c == ' ') {
        return Err("the token response holds an invalid token".into());
    }
    // The token spec's default lifetime is 60 s.
    Ok((
        token,
        Duration::from_secs(t.expires_in.unwrap_or(60).max(1)),
    ))
}

pub(crate) enum ReadError {
    TooLarge,
    Broken(String),
}

pub(crate) async fn read_limited(
    resp: &mut reqwest::Response,
    limit: usize,
) -> std::result::Result<Vec<u8>, ReadError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    let expected = resp.content_length();
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    return Err(ReadError::TooLarge);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(ReadError::Broken(format!(
                    "the response body broke off after {} of {} bytes: {}",
                    buf.len(),
                    expected.map_or("?".to_string(), |n| n.to_string()),
                    error_chain(&e)
                )));
            }
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(30);
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(27) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_cap() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            total: Duration::from_secs(60),
        };
        for _ in 0..50 {
            let d0 = p.backoff(0);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100),
                "{d0:?}"
            );
            let d3 = p.backoff(3);
            assert!(
                d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(800),
                "{d3:?}"
            );
            assert!(p.backoff(20) <= Duration::from_millis(1000));
        }
        let distinct: std::collections::BTreeSet<_> = (0..20).map(|_| p.backoff(2)).collect();
        assert!(distinct.len() > 1, "jittered");
    }

    #[test]
    fn token_responses() {
        assert_eq!(
            parse_token(br#"{"token":"abc","expires_in":300}"#).unwrap(),
            ("abc".to_string(), Duration::from_secs(300))
        );
        assert_eq!(
            parse_token(br#"{"access_token":"x"}"#).unwrap().1,
            Duration::from_secs(60)
        );
        assert!(parse_token(b"<html>").unwrap_err().contains("not JSON"));
        assert!(
            parse_token(br#"{"token":""}"#)
                .unwrap_err()
                .contains("no token")
        );
    }

    #[test]
    fn error_bodies_are_summarised() {
        assert_eq!(
            error_detail(
                br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#
            ),
            ": MANIFEST_UNKNOWN manifest unknown"
        );
        assert_eq!(error_detail(b""), "");
        assert_eq!(error_detail(&vec![b'x'; 1000]).len(), 302);
    }
}
