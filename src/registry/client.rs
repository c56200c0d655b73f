//! The registry client: builds the HTTP pools and composes the transport
//! layers per registry (state, concurrency limit, trusted CAs), outermost
//! first: concurrency permit, retry, authorization, scheme, redirects (and
//! the timeouts of each exchange: connect, header, idle).
//!
//! One connection pool serves every registry that has no CA of its own; a
//! registry with its own CAs (`certs.d`, `--ca-cert HOST=PEM`, see
//! `certs.rs`) gets a pool of its own whose roots add them, so they vouch
//! for nothing else.

use super::certs::{self, CaCert, CertsDirs};
use super::credentials::CredentialStore;
use super::transport::idle::Timeouts;
use super::transport::limits::Limits;
use super::transport::retry::{self, Exhausted, RetryPolicy};
use super::transport::{self, Clock, RegistryState, Request, Response, Session, Settings, Sleeper};
use super::{Error, ErrorKind, Result};
use crate::error_chain::error_chain;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    settings: Settings,
    /// CA files and PEM bytes, for every registry (`None`) or one.
    ca_files: Vec<CaCert>,
    ca_pems: Vec<(Option<String>, Vec<u8>)>,
    per_registry: usize,
    credentials: Option<CredentialStore>,
    certs_dirs: Option<CertsDirs>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            settings: Settings {
                insecure: Vec::new(),
                timeouts: Timeouts::default(),
                retry: RetryPolicy::default(),
                limits: Limits::default(),
                clock: Clock::system(),
                sleeper: Sleeper::system(),
            },
            ca_files: Vec::new(),
            ca_pems: Vec::new(),
            per_registry: 16,
            credentials: None,
            certs_dirs: None,
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
    /// An extra trusted root CA (PEM file), on top of the system roots, for
    /// every registry.
    pub fn root_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(CaCert {
            registry: None,
            path: path.into(),
        });
        self
    }
    /// An extra trusted root CA (PEM bytes), for every registry.
    pub fn root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pems.push((None, pem.into()));
        self
    }
    /// A root CA (PEM file) trusted for `registry` (`host[:port]`, as in
    /// references) only: its requests, its token endpoint, its storage.
    pub fn registry_ca_file(
        mut self,
        registry: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> Self {
        self.ca_files.push(CaCert {
            registry: Some(registry.into()),
            path: path.into(),
        });
        self
    }
    /// A root CA (PEM bytes) trusted for `registry` only.
    pub fn registry_ca_pem(mut self, registry: impl Into<String>, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pems.push((Some(registry.into()), pem.into()));
        self
    }
    /// A `--ca-cert` value: for every registry or for one.
    pub fn ca_cert(mut self, ca: CaCert) -> Self {
        self.ca_files.push(ca);
        self
    }
    /// Where per-registry CAs are looked up (`DIR/HOST[:PORT]/*.crt`);
    /// default [`CertsDirs::from_env`].
    pub fn certs_dirs(mut self, dirs: CertsDirs) -> Self {
        self.certs_dirs = Some(dirs);
        self
    }
    /// Bound on a TCP connect and TLS handshake (default 10 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.settings.timeouts.connect = t;
        self
    }
    /// Bound on waiting for a response's head with nothing moving: before
    /// a request body moves, and after its last byte (default 60 s). The
    /// retry policy's `total` cuts these waits too (see `transport/idle.rs`).
    pub fn header_timeout(mut self, t: Duration) -> Self {
        self.settings.timeouts.header = t;
        self
    }
    /// The old name of [`ClientBuilder::header_timeout`]: once a bound on
    /// a whole exchange, body included; no bound cuts a body that moves.
    pub fn request_timeout(self, t: Duration) -> Self {
        self.header_timeout(t)
    }
    /// Bound on a body, either way, moving no byte (default 30 s); a body
    /// that keeps moving is never cut, however long it takes.
    pub fn idle_timeout(mut self, t: Duration) -> Self {
        self.settings.timeouts.idle = t;
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
        let (global, per_registry) = self.root_certificates()?;
        let pools = Pools {
            connect_timeout: self.settings.timeouts.connect,
            idle_per_host: self.per_registry.max(8),
            global,
            per_registry,
            certs_dirs: self.certs_dirs.clone().unwrap_or_else(CertsDirs::from_env),
        };
        let http = pools.build(Vec::new()).map_err(Error::config)?;
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
                pools,
                registries: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The extra CAs from files and PEM bytes: those for every registry,
    /// and those for one, by registry.
    #[allow(clippy::type_complexity)]
    fn root_certificates(
        &self,
    ) -> Result<(
        Vec<reqwest::Certificate>,
        HashMap<String, Vec<reqwest::Certificate>>,
    )> {
        let mut global = Vec::new();
        let mut per_registry: HashMap<String, Vec<reqwest::Certificate>> = HashMap::new();
        let mut add = |registry: &Option<String>, certs: Vec<reqwest::Certificate>| match registry {
            None => global.extend(certs),
            Some(r) => per_registry.entry(r.clone()).or_default().extend(certs),
        };
        for (registry, pem) in &self.ca_pems {
            let certs = certs::parse_pem(pem)
                .map_err(|e| Error::config(format!("a CA given as PEM bytes: {e}")))?;
            add(registry, certs);
        }
        for ca in &self.ca_files {
            add(
                &ca.registry,
                certs::read_pem_file(&ca.path).map_err(Error::config)?,
            );
        }
        Ok((global, per_registry))
    }
}

/// How the client's connection pools are built: one for every registry
/// without CAs of its own, one per registry with them.
struct Pools {
    connect_timeout: Duration,
    idle_per_host: usize,
    /// Trusted for every registry (`--ca-cert PEM`).
    global: Vec<reqwest::Certificate>,
    /// Trusted for one registry (`--ca-cert HOST=PEM`).
    per_registry: HashMap<String, Vec<reqwest::Certificate>>,
    certs_dirs: CertsDirs,
}

impl Pools {
    /// A pool trusting the system roots, the global CAs and `extra`.
    fn build(
        &self,
        extra: Vec<reqwest::Certificate>,
    ) -> std::result::Result<reqwest::Client, String> {
        let mut http = reqwest::Client::builder()
            .user_agent(concat!("sunaba-images/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.connect_timeout)
            .pool_max_idle_per_host(self.idle_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            // The redirect layer follows redirects itself, so Authorization
            // is only ever sent to the registry's own host.
            .redirect(reqwest::redirect::Policy::none());
        let certs: Vec<_> = self.global.iter().cloned().chain(extra).collect();
        if !certs.is_empty() {
            http = http.tls_certs_merge(certs);
        }
        http.build()
            .map_err(|e| format!("cannot build the HTTP client: {}", error_chain(&e)))
    }

    /// `registry`'s own CAs (given for it, and from its `certs.d`
    /// directory); empty when it has none.
    fn registry_certificates(
        &self,
        registry: &str,
    ) -> std::result::Result<Vec<reqwest::Certificate>, String> {
        let mut certs = self.per_registry.get(registry).cloned().unwrap_or_default();
        for file in self.certs_dirs.ca_files(registry)? {
            certs.extend(certs::read_pem_file(&file)?);
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
    pools: Pools,
    registries: Mutex<HashMap<String, Arc<Registry>>>,
}

/// One registry's share of the client.
struct Registry {
    permits: Semaphore,
    state: RegistryState,
    /// The shared pool, or the registry's own when it has CAs of its own;
    /// why not, when its CAs cannot be read (reported by every request).
    http: std::result::Result<reqwest::Client, String>,
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
            let pools = &self.inner.pools;
            let http = pools.registry_certificates(registry).and_then(|own| {
                if own.is_empty() {
                    Ok(self.http.clone())
                } else {
                    pools.build(own)
                }
            });
            Arc::new(Registry {
                permits: Semaphore::new(self.inner.per_registry),
                state: RegistryState::default(),
                http,
            })
        });
        entry.clone()
    }

    /// Sends `req` to `registry` through the layers; returns any final HTTP
    /// response (the caller maps non-success statuses), or an error for
    /// transport failures, 401s that credentials cannot fix, and exhausted
    /// retries.
    pub(crate) async fn execute(&self, registry: &str, req: Request<'_>) -> Result<Response> {
        self.execute_with(registry, req, &self.inner.settings.retry)
            .await
    }

    /// [`Client::execute`] with one attempt, for a request its caller
    /// retries as part of a larger unit (a PUT into an upload session: the
    /// same PUT again is refused once a reset left part of it there).
    pub(crate) async fn execute_once(&self, registry: &str, req: Request<'_>) -> Result<Response> {
        let once = RetryPolicy {
            max_attempts: 1,
            ..self.inner.settings.retry.clone()
        };
        self.execute_with(registry, req, &once).await
    }

    async fn execute_with(
        &self,
        registry: &str,
        req: Request<'_>,
        policy: &RetryPolicy,
    ) -> Result<Response> {
        let shared = self.registry(registry);
        let _permit = shared
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        let http = shared.http.as_ref().map_err(|reason| {
            let kind = ErrorKind::Config {
                reason: format!("the CAs of registry {registry}: {reason}"),
            };
            Error::new(kind, req.context, registry)
        })?;
        let session = Session {
            http,
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
        policy
            .run_budgeted(
                (&self.inner.settings.clock, &self.inner.settings.sleeper),
                move |budget| async move {
                    let resp = transport::auth::send(session, request, &budget).await?;
                    retry::check_status(resp)
                },
                gave_up,
            )
            .await
            .map_err(|kind| Error::new(kind, req.context, registry))
    }
}
