//! Authorization of registry requests: answer the challenge the registry
//! has issued before (so only the first request pays a 401) with Basic
//! credentials or a bearer token for the request's scope, and after a 401
//! try once more with fresh authorization before reporting what was tried.

use super::bearer::{self, TokenRequest, Tokens};
use super::challenge::{self, Challenge};
use super::{Failure, Request, Response, Session, scheme};
use crate::registry::credentials::Found;
use crate::registry::error::error_detail;
use crate::registry::{Error, ErrorKind};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderValue};
use std::sync::Mutex;
use std::time::Instant;

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
    deadline: Instant,
) -> Result<Response, Failure> {
    let state = &session.state.auth;
    let mut authorization = authorization(session, req).await?;
    // Sent nothing: the challenge says how to authenticate. Sent a token: it
    // may have expired or been revoked, so a fresh one gets one more try.
    let mut discovered = false;
    let mut refreshed = false;
    loop {
        let sent = authorization.is_some();
        let resp = scheme::send(session, req, authorization.as_ref(), deadline).await?;
        if resp.status != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        let offered = resp
            .headers
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok());
        let Some(challenge) = challenge::preferred(offered) else {
            return Err(unauthorized(session, req, &resp, sent).await);
        };
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
            realm: realm.clone(),
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
