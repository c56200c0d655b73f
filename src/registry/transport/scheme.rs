//! Which scheme a registry is spoken to with: https always; plain http only
//! for loopback registries and those configured as insecure, and for them
//! only after https did not answer. The first answer decides for the
//! client's lifetime.

use super::redirect::{self, Outgoing, Redirects};
use super::retry::Budget;
use super::{Failure, Request, Response, Session, idle};
use crate::registry::ErrorKind;
use crate::registry::host::{api_host, is_loopback};
use reqwest::StatusCode;
use reqwest::header::HeaderValue;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Https,
    Http,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }
}

/// The rule: plain http is allowed for `registry` only when it is on the
/// loopback interface or listed in `insecure` (a profile's
/// `insecure_registries`, `--insecure-registry`).
pub(crate) fn plain_http_allowed(registry: &str, insecure: &[String]) -> bool {
    is_loopback(registry) || insecure.iter().any(|r| r == registry)
}

/// The schemes to try, in order, given what is known of the registry.
fn candidates(known: Option<Scheme>, plain_http_allowed: bool) -> &'static [Scheme] {
    match known {
        Some(Scheme::Http) => &[Scheme::Http],
        Some(Scheme::Https) => &[Scheme::Https],
        None if plain_http_allowed => &[Scheme::Https, Scheme::Http],
        None => &[Scheme::Https],
    }
}

/// What one registry has shown it speaks.
#[derive(Default)]
pub(crate) struct SchemeState {
    /// Set once a response has shown which scheme the registry speaks.
    known: Mutex<Option<Scheme>>,
    /// Serialises detection so one request probes https, not N.
    probe: tokio::sync::Mutex<()>,
}

impl SchemeState {
    fn known(&self) -> Option<Scheme> {
        *self.known.lock().expect("scheme lock")
    }
}

/// Sends `req` to the registry with the scheme it speaks (detecting it on
/// the first request), `authorization` for the registry's origin only.
pub(crate) async fn send(
    session: &Session<'_>,
    req: &Request<'_>,
    authorization: Option<&HeaderValue>,
    budget: &Budget,
) -> Result<Response, Failure> {
    let state = &session.state.scheme;
    let mut known = state.known();
    let _probing = if known.is_none() {
        let guard = state.probe.lock().await;
        known = state.known();
        known.is_none().then_some(guard)
    } else {
        None
    };
    let allowed = plain_http_allowed(session.registry, &session.settings.insecure);
    let mut subject = idle::subject(&req.method, &req.target, req.limit.what);
    // A chunk of an upload (PATCH) says which bytes of the blob it holds
    // (the digest is the error's context).
    if req.method == reqwest::Method::PATCH
        && let Some(range) = (req.headers.get(reqwest::header::CONTENT_RANGE))
            .and_then(|v| v.to_str().ok())
            .filter(|r| r.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
    {
        subject = format!("bytes {range} of {subject}");
    }
    let mut errors = Vec::new();
    for &scheme in candidates(known, allowed) {
        let origin = format!("{}://{}", scheme.as_str(), api_host(session.registry));
        let url = reqwest::Url::parse(&format!("{origin}{}", req.target)).map_err(|e| {
            Failure::Fatal(ErrorKind::Config {
                reason: format!("invalid URL {origin}{}: {e}", req.target),
            })
        })?;
        let outgoing = Outgoing {
            method: req.method.clone(),
            url,
            headers: &req.headers,
            body: req.body.clone(),
            authorization,
            limit: req.limit,
            timeouts: session.settings.timeouts,
            budget: budget.clone(),
            subject: subject.clone(),
            redirects: Redirects::Follow,
        };
        match redirect::send(session.http, outgoing).await {
            Ok(resp) if scheme == Scheme::Http && speaks_only_https(&resp) => {
                errors.push("http: the registry speaks only https".to_string());
            }
            Ok(resp) => {
                if known.is_none() {
                    *state.known.lock().expect("scheme lock") = Some(scheme);
                }
                return Ok(resp);
            }
            Err(Failure::Retryable { reason, .. }) => {
                errors.push(format!("{}: {reason}", scheme.as_str()));
            }
            // A certificate was presented, so the registry speaks TLS:
            // plain http is not its answer (a HEAD there would get an
            // empty 400 that would pass for one), and the error is this.
            Err(fatal) => return Err(fatal),
        }
    }
    Err(Failure::retryable(errors.join("; ")))
}

/// Go's TLS server answers a plain http request with this 400.
fn speaks_only_https(resp: &Response) -> bool {
    resp.status == StatusCode::BAD_REQUEST
        && String::from_utf8_lossy(&resp.body).contains("HTTPS server")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_for_loopback_or_configured_registries() {
        let insecure = vec!["reg.lan:5000".to_string()];
        for ok in [
            "127.0.0.1:5000",
            "localhost:5000",
            "[::1]:5000",
            "reg.lan:5000",
        ] {
            assert!(plain_http_allowed(ok, &insecure), "{ok}");
        }
        for no in ["reg.lan", "reg.lan:5001", "docker.io", "10.0.0.1:5000"] {
            assert!(!plain_http_allowed(no, &insecure), "{no}");
        }
    }

    #[test]
    fn https_first_and_what_is_known_sticks() {
        use Scheme::*;
        assert_eq!(candidates(None, false), &[Https]);
        assert_eq!(candidates(None, true), &[Https, Http]);
        assert_eq!(candidates(Some(Http), true), &[Http]);
        assert_eq!(candidates(Some(Https), true), &[Https]);
    }
}
