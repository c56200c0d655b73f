//! Bearer tokens: fetching one from the token endpoint a challenge names
//! (docker token spec; the OAuth2 refresh-token grant for identity tokens)
//! and caching it per scope until shortly before it expires. Token-endpoint
//! failures are reported, never turned into anonymous access.

use super::limits::Limit;
use super::redirect::{self, Outgoing, Redirects, redacted_text};
use super::{Failure, Settings, retry};
use crate::registry::credentials::Credential;
use crate::registry::error::error_detail;
use crate::registry::{Error, ErrorKind};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, Url};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a token is asked for: `repository:<name>:<actions>`, and for a
/// cross-repository mount also `repository:<from>:pull`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Scope {
    repository: String,
    /// `pull`, or `pull,push` for uploads.
    actions: &'static str,
    /// A repository the request also reads: a mount's source.
    from: Option<String>,
}

impl Scope {
    pub(crate) fn pull(repository: &str) -> Scope {
        Scope {
            repository: repository.to_string(),
            actions: "pull",
            from: None,
        }
    }
    /// Writing blobs and manifests (distribution asks for `pull,push`).
    pub(crate) fn push(repository: &str) -> Scope {
        Scope {
            actions: "pull,push",
            ..Scope::pull(repository)
        }
    }
    /// Mounting a blob of `from` into `repository`.
    pub(crate) fn mount(repository: &str, from: &str) -> Scope {
        Scope {
            from: Some(from.to_string()).filter(|f| f != repository),
            ..Scope::push(repository)
        }
    }
    /// The repository path (credentials may be keyed by its namespace).
    pub(crate) fn repository(&self) -> &str {
        &self.repository
    }
    /// Each `repository:…` scope, as the token request lists them.
    pub(crate) fn parts(&self) -> Vec<String> {
        let mut parts = vec![format!("repository:{}:{}", self.repository, self.actions)];
        if let Some(from) = &self.from {
            parts.push(format!("repository:{from}:pull"));
        }
        parts
    }
}

/// The scopes space-separated, as OAuth2 writes them.
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts().join(" "))
    }
}

struct CachedToken {
    token: String,
    valid_until: Instant,
}

/// The tokens of one registry, by scope.
#[derive(Default)]
pub(crate) struct Tokens {
    cache: Mutex<HashMap<Scope, CachedToken>>,
    /// Serialises fetches so N concurrent requests fetch one token.
    fetching: tokio::sync::Mutex<()>,
}

impl Tokens {
    fn cached(&self, scope: &Scope, now: Instant) -> Option<String> {
        let cache = self.cache.lock().expect("token lock");
        cache
            .get(scope)
            .filter(|t| t.valid_until > now)
            .map(|t| t.token.clone())
    }

    fn store(&self, scope: &Scope, token: String, lifetime: Duration, now: Instant) {
        // Renew a little early so a token never expires in flight.
        let margin = (lifetime / 10).min(Duration::from_secs(10));
        let cached = CachedToken {
            token,
            valid_until: now + lifetime - margin,
        };
        let mut cache = self.cache.lock().expect("token lock");
        cache.insert(scope.clone(), cached);
    }

    /// Drops the token for `scope` (the registry rejected it).
    pub(crate) fn forget(&self, scope: &Scope) {
        self.cache.lock().expect("token lock").remove(scope);
    }

    /// The cached token for `scope`, or a new one from `fetch` (which gives
    /// the token and its lifetime).
    pub(crate) async fn get_or_fetch<F, Fut>(
        &self,
        scope: &Scope,
        clock: &super::Clock,
        fetch: F,
    ) -> Result<String, ErrorKind>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(String, Duration), ErrorKind>>,
    {
        if let Some(t) = self.cached(scope, clock.now()) {
            return Ok(t);
        }
        let _one_fetch = self.fetching.lock().await;
        if let Some(t) = self.cached(scope, clock.now()) {
            return Ok(t);
        }
        let (token, lifetime) = fetch().await?;
        self.store(scope, token.clone(), lifetime, clock.now());
        Ok(token)
    }
}

/// A token request, from a Bearer challenge.
pub(crate) struct TokenRequest<'a> {
    pub realm: &'a str,
    pub service: Option<&'a str>,
    pub scope: &'a Scope,
    /// `None`: an anonymous token.
    pub credential: Option<&'a Credential>,
}

/// Fetches a token (and its lifetime) with the client's retry policy.
pub(crate) async fn fetch(
    http: &reqwest::Client,
    settings: &Settings,
    req: &TokenRequest<'_>,
) -> Result<(String, Duration), ErrorKind> {
    let fail = |reason: String| ErrorKind::Token {
        realm: redacted_text(req.realm),
        reason,
    };
    let realm = Url::parse(req.realm).map_err(|e| fail(format!("invalid realm URL: {e}")))?;
    if !matches!(realm.scheme(), "https" | "http") {
        return Err(fail("the realm is not an http(s) URL".into()));
    }
    // reqwest would send a URL's userinfo as Basic credentials of its own.
    if !realm.username().is_empty() || realm.password().is_some() {
        return Err(fail("the realm URL holds credentials".into()));
    }
    let (method, url, headers, body, authorization) = token_exchange(&realm, req);
    let realm = &realm;
    let limit = Limit {
        bytes: settings.limits.token,
        what: "token response",
        partial: false,
    };
    let attempt = |budget: retry::Budget| {
        let outgoing = Outgoing {
            method: method.clone(),
            url: url.clone(),
            headers: &headers,
            body: body.clone(),
            authorization: authorization.as_ref(),
            limit,
            timeouts: settings.timeouts,
            budget,
            subject: "the token response".into(),
            redirects: Redirects::Refuse,
        };
        async move {
            let resp = redirect::send(http, outgoing)
                .await
                .map_err(|f| as_token_failure(f, req, realm))?;
            let resp = retry::check_status(resp)?;
            if !resp.status.is_success() {
                let status = resp.status.as_u16();
                let reason = format!("HTTP {status}{}", error_detail(&resp.body));
                return Err(Failure::Fatal(fail(reason)));
            }
            parse_token(&resp.body).map_err(|r| Failure::Fatal(fail(r)))
        }
    };
    let gave_up = |e: retry::Exhausted| {
        fail(format!(
            "gave up after {} attempt(s): {}",
            e.attempts, e.last
        ))
    };
    settings
        .retry
        .run_budgeted((&settings.clock, &settings.sleeper), attempt, gave_up)
        .await
}

type Exchange = (
    Method,
    Url,
    HeaderMap,
    Option<bytes::Bytes>,
    Option<HeaderValue>,
);

/// The request of the token flow that fits the credential: the OAuth2
/// refresh-token grant (POST) for identity tokens, else a GET with Basic
/// credentials, if any.
fn token_exchange(realm: &Url, req: &TokenRequest<'_>) -> Exchange {
    let scope = req.scope.to_string();
    let mut headers = HeaderMap::new();
    if let Some(Credential::IdentityToken { token, .. }) = req.credential {
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("client_id", "sunaba-images"),
            ("refresh_token", token.as_str()),
            ("scope", scope.as_str()),
        ];
        if let Some(s) = req.service {
            form.push(("service", s));
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        return (
            Method::POST,
            realm.clone(),
            headers,
            Some(body.into()),
            None,
        );
    }
    let mut url = realm.clone();
    {
        let mut q = url.query_pairs_mut();
        if let Some(s) = req.service {
            q.append_pair("service", s);
        }
        // The docker token spec repeats `scope` once per resource.
        for part in req.scope.parts() {
            q.append_pair("scope", &part);
        }
    }
    let authorization = req.credential.and_then(Credential::basic_header);
    (Method::GET, url, headers, None, authorization)
}

/// A failure of the token endpoint's exchange, as a token error (which
/// names the realm) unless it is worth retrying.
fn as_token_failure(failure: Failure, req: &TokenRequest<'_>, realm: &Url) -> Failure {
    let kind = match failure {
        Failure::Fatal(kind) => kind,
        retryable => return retryable,
    };
    let reason = match kind {
        ErrorKind::TooLarge { what, limit } => {
            format!("the {what} exceeds the limit of {limit} bytes")
        }
        ErrorKind::UntrustedCertificate { reason } => {
            format!(
                "{reason}; if the token endpoint uses a private CA, pass it with --ca-cert \
                 REGISTRY=PEM (it vouches for the registry's token endpoint too)"
            )
        }
        other => Error::new(other, "", realm.host_str().unwrap_or_default()).to_string(),
    };
    Failure::Fatal(ErrorKind::Token {
        realm: redacted_text(req.realm),
        reason,
    })
}

/// A token response: `token` or `access_token`, and `expires_in`.
pub(crate) fn parse_token(body: &[u8]) -> Result<(String, Duration), String> {
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
    // The token spec's default lifetime is 60 s; a huge one is capped so
    // the expiry instant stays representable.
    let secs = t.expires_in.unwrap_or(60).clamp(1, 86_400 * 365);
    Ok((token, Duration::from_secs(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tokens_expire_a_little_early_and_per_scope() {
        let tokens = Tokens::default();
        let (a, b) = (Scope::pull("a"), Scope::pull("b"));
        let t0 = Instant::now();
        tokens.store(&a, "ta".into(), Duration::from_secs(60), t0);
        assert_eq!(tokens.cached(&a, t0).as_deref(), Some("ta"));
        assert_eq!(tokens.cached(&b, t0), None, "per scope");
        let s = Duration::from_secs;
        assert!(tokens.cached(&a, t0 + s(53)).is_some());
        assert_eq!(tokens.cached(&a, t0 + s(54)), None, "renewed 10% early");
        tokens.store(&a, "long".into(), s(3600), t0);
        assert!(tokens.cached(&a, t0 + s(3589)).is_some());
        assert_eq!(tokens.cached(&a, t0 + s(3590)), None, "at most 10 s early");
        tokens.forget(&a);
        assert_eq!(tokens.cached(&a, t0), None);
    }

    #[tokio::test]
    async fn one_fetch_fills_the_cache() {
        let tokens = Tokens::default();
        let clock = super::super::Clock::system();
        let scope = Scope::pull("a/b");
        let got = tokens
            .get_or_fetch(&scope, &clock, || async {
                Ok(("t1".to_string(), Duration::from_secs(60)))
            })
            .await;
        assert_eq!(got.unwrap(), "t1");
        let got = tokens
            .get_or_fetch(&scope, &clock, || async {
                panic!("cached: no second fetch")
            })
            .await;
        assert_eq!(got.unwrap(), "t1");
        let failed = tokens
            .get_or_fetch(&Scope::pull("c"), &clock, || async {
                Err(ErrorKind::Token {
                    realm: "r".into(),
                    reason: "HTTP 401".into(),
                })
            })
            .await;
        assert!(matches!(failed, Err(ErrorKind::Token { .. })));
    }

    #[test]
    fn scopes_name_repository_and_actions() {
        assert_eq!(Scope::pull("a/b").to_string(), "repository:a/b:pull");
        assert_eq!(Scope::pull("a/b").repository(), "a/b");
        assert_eq!(Scope::push("a/b").to_string(), "repository:a/b:pull,push");
        let mount = Scope::mount("a/b", "c/d");
        assert_eq!(
            mount.parts(),
            ["repository:a/b:pull,push", "repository:c/d:pull"]
        );
        assert_eq!(mount.repository(), "a/b", "credentials are the target's");
        assert_eq!(Scope::mount("a/b", "a/b"), Scope::push("a/b"));
        assert_ne!(Scope::push("a/b"), Scope::pull("a/b"), "cached apart");
    }

    #[test]
    fn token_requests_list_every_scope() {
        let realm: Url = "https://auth.example/token".parse().unwrap();
        let scope = Scope::mount("a/b", "c/d");
        let req = TokenRequest {
            realm: realm.as_str(),
            service: Some("reg"),
            scope: &scope,
            credential: None,
        };
        let (method, url, ..) = token_exchange(&realm, &req);
        assert_eq!(method, Method::GET);
        let scopes: Vec<String> = url
            .query_pairs()
            .filter(|(k, _)| k == "scope")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(scopes, ["repository:a/b:pull,push", "repository:c/d:pull"]);
    }
}
