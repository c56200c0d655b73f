//! Authorization of registry requests: answer the challenge the registry
//! has issued before (so only the first request pays a 401) with Basic
//! credentials or a bearer token for the request's scope, and after a 401
//! try once more with fresh authorization before reporting what was tried.

use super::bearer::{self, TokenRequest, Tokens};
use super::challenge::{self, Challenge};
use super::redirect::{redacted, redacted_text};
use super::retry::Budget;
use super::{Failure, Request, Response, Session, scheme};
use crate::registry::credentials::Found;
use crate::registry::error::error_detail;
use crate::registry::host::is_loopback;
use crate::registry::{Error, ErrorKind};
use reqwest::header::{self, HeaderValue};
use reqwest::{StatusCode, Url};
use std::sync::Mutex;

/// What one registry has asked for, and the tokens it has issued.
#[derive(Default)]
pub(crate) struct AuthState {
    challenge: Mutex<Option<Challenge>>,
    tokens: Tokens,
}

impl AuthState {
    fn challenge(&self) -> Option<Challenge> {
        self.challenge.lock().expect("challenge lock").clone()
    }
}

/// Sends `req` with authorization; a 401 the registry keeps answering
/// becomes [`ErrorKind::Unauthorized`] naming the credentials tried.
pub(crate) async fn send(
    session: &Session<'_>,
    req: &Request<'_>,
    budget: &Budget,
) -> Result<Response, Failure> {
    let state = &session.state.auth;
    let mut authorization = authorization(session, req).await?;
    // Sent nothing: the challenge says how to authenticate. Sent a token: it
    // may have expired or been revoked, so a fresh one gets one more try.
    let mut discovered = false;
    let mut refreshed = false;
    loop {
        let sent = authorization.is_some();
        let resp = scheme::send(session, req, authorization.as_ref(), budget).await?;
        if resp.status != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        // Only the registry says how to authenticate to it: a 401 from a
        // host a redirect led to (storage, or anyone the registry names)
        // must not choose where the next credential goes.
        if resp.url.origin() != resp.requested.origin() {
            return Err(Failure::Fatal(ErrorKind::ForeignChallenge {
                location: redacted(&resp.url),
            }));
        }
        let offered = resp
            .headers
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok());
        let Some(challenge) = challenge::preferred(offered) else {
            return Err(unauthorized(session, req, &resp, sent).await);
        };
        check_realm(session, &resp, &challenge)?;
        let bearer = matches!(challenge, Challenge::Bearer { .. });
        *state.challenge.lock().expect("challenge lock") = Some(challenge);
        let again = if !sent && !discovered {
            discovered = true;
            true
        } else if sent && bearer && !refreshed {
            refreshed = true;
            state.tokens.forget(&req.scope);
            true
        } else {
            false
        };
        if again {
            authorization = self::authorization(session, req).await?;
            if authorization.is_some() {
                continue;
            }
        }
        return Err(unauthorized(session, req, &resp, sent).await);
    }
}

/// Refuses a Bearer challenge whose realm the credential must not be sent
/// to (see [`realm_allowed`]).
fn check_realm(
    session: &Session<'_>,
    resp: &Response,
    challenge: &Challenge,
) -> Result<(), Failure> {
    let Challenge::Bearer { realm, .. } = challenge else {
        return Ok(());
    };
    // An unparsable realm is reported by the token request.
    let Ok(realm) = reqwest::Url::parse(realm) else {
        return Ok(());
    };
    let insecure = &session.settings.insecure;
    if realm_allowed(&realm, &resp.url, session.registry, insecure) {
        return Ok(());
    }
    Err(Failure::Fatal(ErrorKind::InsecureRealm {
        realm: redacted(&realm),
    }))
}

/// Whether `registry`, answering from `registry_url`, may send its client
/// to `realm` for tokens. A realm on another host is fine (Docker Hub's and
/// GHCR's are), but an https registry's credential (or refresh token) must
/// not cross the network in the clear: a plain-http realm is allowed only
/// on loopback, or when the registry or the realm's host is configured as
/// insecure.
fn realm_allowed(realm: &Url, registry_url: &Url, registry: &str, insecure: &[String]) -> bool {
    if realm.scheme() != "http" || registry_url.scheme() != "https" {
        return true;
    }
    let host = realm.host_str().unwrap_or_default();
    let authority = match realm.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    is_loopback(host) || insecure.iter().any(|r| r == registry || *r == authority)
}

/// The Authorization value for `req`, from the challenge the registry has
/// issued before; `None` before any challenge, or without credentials for
/// a Basic one.
async fn authorization(
    session: &Session<'_>,
    req: &Request<'_>,
) -> Result<Option<HeaderValue>, Failure> {
    let Some(challenge) = session.state.auth.challenge() else {
        return Ok(None);
    };
    let Challenge::Bearer { realm, service, .. } = challenge else {
        let found = credential(session, req).await.map_err(Failure::Fatal)?;
        return Ok(found.and_then(|f| f.credential.basic_header()));
    };
    let fetch = || async {
        let found = credential(session, req).await?;
        let token_request = TokenRequest {
            realm: &realm,
            service: service.as_deref(),
            scope: &req.scope,
            credential: found.as_ref().map(|f| &f.credential),
        };
        bearer::fetch(session.http, session.settings, &token_request).await
    };
    let tokens = &session.state.auth.tokens;
    let token = tokens
        .get_or_fetch(&req.scope, &session.settings.clock, fetch)
        .await
        .map_err(Failure::Fatal)?;
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        Failure::Fatal(ErrorKind::Token {
            realm: redacted_text(&realm),
            reason: "the token is not a valid header value".into(),
        })
    })?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// The credential for the request's repository (looked up once).
async fn credential(session: &Session<'_>, req: &Request<'_>) -> Result<Option<Found>, ErrorKind> {
    session
        .state
        .credentials
        .lookup(session.store, session.registry, req.scope.repository())
        .await
        .map_err(Error::into_kind)
}

/// The 401 as an error that says which credentials were tried and what to
/// do (never the secret itself).
async fn unauthorized(
    session: &Session<'_>,
    req: &Request<'_>,
    resp: &Response,
    sent_authorization: bool,
) -> Failure {
    let registry = session.registry;
    let found = credential(session, req).await.ok().flatten();
    let hint = match (&found, sent_authorization) {
        (Some(f), true) => format!(
            "the credentials for user {:?} from {} were rejected: check them (e.g. `docker login {registry}`)",
            f.credential.username(),
            f.source
        ),
        (Some(f), false) => format!("credentials from {} were not accepted", f.source),
        (None, _) => format!(
            "no credentials for {registry} were found (looked in {}); log in with `docker login {registry}`",
            session
                .store
                .files()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Failure::Fatal(ErrorKind::Unauthorized {
        status: resp.status.as_u16(),
        detail: error_detail(&resp.body),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        s.parse().unwrap()
    }

    #[test]
    fn an_https_registry_names_a_plain_http_realm_only_on_loopback_or_when_insecure() {
        let https = u("https://reg.example/v2/");
        let none: &[String] = &[];
        for ok in [
            "https://auth.example/token",
            "https://other.example:8443/token",
            "http://127.0.0.1:5001/token",
            "http://localhost/token",
            "http://[::1]:80/token",
        ] {
            assert!(realm_allowed(&u(ok), &https, "reg.example", none), "{ok}");
        }
        let plain = u("http://auth.example/token");
        assert!(!realm_allowed(&plain, &https, "reg.example", none));
        assert!(!realm_allowed(
            &u("http://10.0.0.1:5001/t"),
            &https,
            "reg.example",
            none
        ));
        let insecure = |r: &str| vec![r.to_string()];
        assert!(realm_allowed(
            &plain,
            &https,
            "reg.example",
            &insecure("reg.example")
        ));
        assert!(realm_allowed(
            &plain,
            &https,
            "reg.example",
            &insecure("auth.example")
        ));
        assert!(!realm_allowed(
            &plain,
            &https,
            "reg.example",
            &insecure("other.example")
        ));
        assert!(
            realm_allowed(&plain, &u("http://reg.lan:5000/v2/"), "reg.lan:5000", none),
            "a plain-http registry loses nothing to a plain-http realm"
        );
    }
}
