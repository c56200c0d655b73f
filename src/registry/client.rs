//! The registry client: builds the HTTP pool and composes the transport
//! layers per registry (state, concurrency limit), outermost first:
//! concurrency permit, retry, authorization, scheme, redirects.

use super::credentials::CredentialStore;
use super::transport::limits::Limits;
use super::transport::retry::{self, Exhausted, RetryPolicy};
use super::transport::{self, Clock, RegistryState, Request, Response, Session, Settings, Sleeper};
use super::{Error, ErrorKind, Result};
use crate::chain::error_chain;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    settings: Settings,
    ca_files: Vec<PathBuf>,
    ca_pems: Vec<Vec<u8>>,
    connect_timeout: Duration,
    per_registry: usize,
    credentials: Option<CredentialStore>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            settings: Settings {
                insecure: Vec::new(),
                request_timeout: Duration::from_secs(60),
                retry: RetryPolicy::default(),
                limits: Limits::default(),
                clock: Clock::system(),
                sleeper: Sleeper::system(),
            },
            ca_files: Vec::new(),
            ca_pems: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            per_registry: 16,
            credentials: None,
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
        let more = registries.into_iter().map(Into::into);
        self.settings.insecure.extend(more);
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
        self.settings.request_timeout = t;
        self
    }
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.settings.retry = policy;
        self
    }
    /// The clock cached tokens expire by and the retry bound runs by
    /// (default: the system's); a test moves its own forward instead of
    /// sleeping.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.settings.clock = clock;
        self
    }
    /// How the retry layer waits between attempts (default: the runtime's
    /// timer); a test records the delays instead of waiting them out.
    pub fn sleeper(mut self, sleeper: Sleeper) -> Self {
        self.settings.sleeper = sleeper;
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
        self.settings.limits.manifest = n;
        self
    }
    pub fn max_token_bytes(mut self, n: usize) -> Self {
        self.settings.limits.token = n;
        self
    }

    pub fn build(self) -> Result<Client> {
        let mut http = reqwest::Client::builder()
            .user_agent(concat!("sunaba-images/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.connect_timeout)
            .pool_max_idle_per_host(self.per_registry.max(8))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            // The redirect layer follows redirects itself, so Authorization
            // is only ever sent to the registry's own host.
            .redirect(reqwest::redirect::Policy::none());
        let certs = self.root_certificates()?;
        if !certs.is_empty() {
            http = http.tls_certs_merge(certs);
        }
        let http = http.build().map_err(|e| {
            Error::config(format!("cannot build the HTTP client: {}", error_chain(&e)))
        })?;
        let credentials = self
            .credentials
            .clone()
            .unwrap_or_else(CredentialStore::from_env);
        Ok(Client {
            http,
            inner: Arc::new(Inner {
                settings: self.settings,
                per_registry: self.per_registry,
                credentials,
                registries: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The extra CAs, from files and PEM bytes.
    fn root_certificates(&self) -> Result<Vec<reqwest::Certificate>> {
        let mut pems = self.ca_pems.clone();
        for f in &self.ca_files {
            let pem = std::fs::read(f).map_err(|e| {
                Error::config(format!("cannot read CA certificate {}: {e}", f.display()))
            })?;
            pems.push(pem);
        }
        let mut certs = Vec::new();
        for pem in &pems {
            let found = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::config(format!("invalid PEM CA certificate: {e}")))?;
            if found.is_empty() {
                return Err(Error::config("a CA file holds no PEM certificate"));
            }
            certs.extend(found);
        }
        Ok(certs)
    }
}

/// A registry client; cheap to clone (clones share pools, caches and limits).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

struct Inner {
    settings: Settings,
    per_registry: usize,
    credentials: CredentialStore,
    registries: Mutex<HashMap<String, Arc<Registry>>>,
}

/// One registry's share of the client.
struct Registry {
    permits: Semaphore,
    state: RegistryState,
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    fn registry(&self, registry: &str) -> Arc<Registry> {
        let mut map = self.inner.registries.lock().expect("registry state lock");
        let entry = map.entry(registry.to_string()).or_insert_with(|| {
            Arc::new(Registry {
                permits: Semaphore::new(self.inner.per_registry),
                state: RegistryState::default(),
            })
        });
        entry.clone()
    }

    /// Sends `req` to `registry` through the layers; returns any final HTTP
    /// response (the caller maps non-success statuses), or an error for
    /// transport failures, 401s that credentials cannot fix, and exhausted
    /// retries.
    pub(crate) async fn execute(&self, registry: &str, req: Request<'_>) -> Result<Response> {
        let shared = self.registry(registry);
        let _permit = shared
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        let session = Session {
            http: &self.http,
            settings: &self.inner.settings,
            store: &self.inner.credentials,
            registry,
            state: &shared.state,
        };
        let (session, request) = (&session, &req);
        let gave_up = |e: Exhausted| ErrorKind::GaveUp {
            attempts: e.attempts,
            elapsed_ms: e.elapsed.as_millis(),
            last: e.last,
        };
        self.inner
            .settings
            .retry
            .run(
                (&self.inner.settings.clock, &self.inner.settings.sleeper),
                move |deadline| async move {
                    let resp = transport::auth::send(session, request, deadline).await?;
                    retry::check_status(resp)
                },
                gave_up,
            )
            .await
            .map_err(|kind| Error::new(kind, req.context, registry))
    }
}
