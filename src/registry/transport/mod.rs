//! The layers every registry request goes through, outermost first: retry
//! (backoff, `Retry-After`, the request's budget), authorization (challenge,
//! bearer token or Basic credentials), scheme (https, or http where allowed),
//! redirects, size caps and the timeouts of one exchange (`idle.rs`).
//!
//! Each layer is one file and a function that calls the next one; the
//! client composes them per registry (see `client.rs`). A request carries
//! its method, headers and body, so uploads go through the same stack as
//! reads.

pub(crate) mod auth;
pub(crate) mod bearer;
pub(crate) mod challenge;
pub(crate) mod idle;
pub(crate) mod limits;
pub(crate) mod redirect;
pub(crate) mod retry;
pub(crate) mod scheme;
pub(crate) mod send_queue;

use super::ErrorKind;
use super::credentials;
use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use std::time::Duration;

/// Where the client reads the time for what expires (cached tokens) and
/// what the retry layer has used of its bound: the system's, or a test's
/// own to move forward without waiting.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> std::time::Instant + Send + Sync>);

impl Clock {
    pub fn system() -> Clock {
        Clock(std::sync::Arc::new(std::time::Instant::now))
    }

    /// A clock that reads `now`.
    pub fn from_fn(now: impl Fn() -> std::time::Instant + Send + Sync + 'static) -> Clock {
        Clock(std::sync::Arc::new(now))
    }

    pub fn now(&self) -> std::time::Instant {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// How the retry layer waits between attempts: the runtime's timer, or a
/// test's own that records the delays asked for (and moves its [`Clock`]
/// on) instead of waiting them out.
#[derive(Clone)]
pub struct Sleeper(std::sync::Arc<dyn Fn(Duration) -> Sleep + Send + Sync>);

/// One wait of a [`Sleeper`].
pub type Sleep = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl Sleeper {
    pub fn system() -> Sleeper {
        Sleeper::from_fn(|delay| Box::pin(tokio::time::sleep(delay)))
    }

    /// A sleeper that runs `sleep` for each delay.
    pub fn from_fn(sleep: impl Fn(Duration) -> Sleep + Send + Sync + 'static) -> Sleeper {
        Sleeper(std::sync::Arc::new(sleep))
    }

    pub async fn sleep(&self, delay: Duration) {
        (self.0)(delay).await
    }
}

impl Default for Sleeper {
    fn default() -> Sleeper {
        Sleeper::system()
    }
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sleeper")
    }
}

/// How the layers are configured (from the client builder).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Registries (`host[:port]`) that may be spoken to over plain http.
    pub insecure: Vec<String>,
    /// Connect, header and idle timeouts of one exchange.
    pub timeouts: idle::Timeouts,
    pub retry: retry::RetryPolicy,
    pub limits: limits::Limits,
    /// What cached tokens expire by, and the retry layer's bound runs by.
    pub clock: Clock,
    /// How the retry layer waits.
    pub sleeper: Sleeper,
}

/// One request to a registry's API, relative to its origin.
pub(crate) struct Request<'a> {
    pub method: Method,
    /// Path and query, e.g. `/v2/library/debian/manifests/latest`.
    pub target: String,
    /// Accept, Content-Type and the like (never Authorization: the auth
    /// layer adds that).
    pub headers: HeaderMap,
    /// Sent with every attempt (cheap to clone).
    pub body: Option<Bytes>,
    /// What a bearer token must allow.
    pub scope: bearer::Scope,
    /// For messages: the reference or repository concerned.
    pub context: &'a str,
    /// Cap on the body of a success response.
    pub limit: limits::Limit,
}

/// A response whose body (if any) has been read completely (or as far as
/// it came, see `broken`).
pub(crate) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// Why the body broke off, when it did and the request's limit keeps
    /// what arrived (`Limit::partial`); `body` is then that part.
    pub broken: Option<String>,
    /// The URL the response came from (after redirects).
    pub url: reqwest::Url,
    /// The URL the request was sent to, before any redirect: for registry
    /// requests, on the registry's own origin.
    pub requested: reqwest::Url,
}

/// Why a target a response named (`Link`, `Location`) is not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotHere {
    /// Not a URL, even relative to the response's.
    Invalid(String),
    /// Another origin (`host:port`), or credentials in the URL: the
    /// registry's authorization must not be sent there.
    OtherHost(String),
}

impl Response {
    /// `location` resolved against the URL this response came from, as a
    /// request target (path and query) on the registry's origin: only when
    /// both the response and the target are on the origin the request was
    /// sent to (scheme, host and port), and the target names no userinfo.
    pub(crate) fn same_origin_target(&self, location: &str) -> Result<String, NotHere> {
        let next = self
            .url
            .join(location)
            .map_err(|e| NotHere::Invalid(e.to_string()))?;
        let registry = self.requested.origin();
        if next.host_str().is_none_or(str::is_empty)
            || next.origin() != registry
            || self.url.origin() != registry
            || !next.username().is_empty()
            || next.password().is_some()
        {
            let host = next.host_str().unwrap_or_default();
            let port = next.port_or_known_default().unwrap_or_default();
            return Err(NotHere::OtherHost(format!("{host}:{port}")));
        }
        Ok(match next.query() {
            Some(q) => format!("{}?{q}", next.path()),
            None => next.path().to_string(),
        })
    }

    /// A header's value, trimmed; `None` when absent, empty or not text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }
}

/// Why one exchange gave no usable response. The retry layer tries again
/// after a [`Failure::Retryable`]; the client turns a [`Failure::Fatal`]
/// into an [`super::Error`] with the request's context. (`E` is the
/// caller's error: the package indexes retry by the same policy.)
#[derive(Debug)]
pub(crate) enum Failure<E = ErrorKind> {
    /// Connection errors, timeouts, broken bodies, 429/5xx.
    Retryable {
        reason: String,
        /// What `Retry-After` asked for, if anything.
        wait: Option<Duration>,
    },
    Fatal(E),
}

impl<E> Failure<E> {
    pub(crate) fn retryable(reason: impl Into<String>) -> Failure<E> {
        Failure::Retryable {
            reason: reason.into(),
            wait: None,
        }
    }
}

/// Per-registry state of the layers below the client.
#[derive(Default)]
pub(crate) struct RegistryState {
    pub scheme: scheme::SchemeState,
    pub auth: auth::AuthState,
    pub credentials: credentials::CredentialCache,
}

/// What a request to one registry goes through the layers with.
pub(crate) struct Session<'a> {
    pub http: &'a reqwest::Client,
    pub settings: &'a Settings,
    pub store: &'a credentials::CredentialStore,
    /// As in references: `docker.io`, `host:port`.
    pub registry: &'a str,
    pub state: &'a RegistryState,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(requested: &str, url: &str) -> Response {
        Response {
            status: StatusCode::ACCEPTED,
            headers: HeaderMap::new(),
            body: Vec::new(),
            broken: None,
            url: url.parse().unwrap(),
            requested: requested.parse().unwrap(),
        }
    }

    #[test]
    fn targets_a_response_names_stay_on_the_registry_origin() {
        let reg = "https://reg.example/v2/a/blobs/uploads/";
        let resp = answer(reg, reg);
        assert_eq!(
            resp.same_origin_target("/v2/a/blobs/uploads/1?_state=x"),
            Ok("/v2/a/blobs/uploads/1?_state=x".to_string())
        );
        assert_eq!(
            resp.same_origin_target("https://reg.example:443/v2/next"),
            Ok("/v2/next".to_string())
        );
        for other in [
            "https://cdn.example/v2/x",
            "http://reg.example/v2/x",
            "https://reg.example:8443/v2/x",
            "https://user:pw@reg.example/v2/x",
        ] {
            assert!(
                matches!(resp.same_origin_target(other), Err(NotHere::OtherHost(_))),
                "{other}"
            );
        }
        // An answer from where a redirect led: even a target naming the
        // registry is not the registry's word.
        let elsewhere = answer(reg, "https://storage.example/upload");
        assert!(matches!(
            elsewhere.same_origin_target("https://reg.example/v2/x"),
            Err(NotHere::OtherHost(_))
        ));
    }
}
