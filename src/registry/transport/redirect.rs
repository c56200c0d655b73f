//! One HTTP exchange, following redirects by hand so that Authorization is
//! only ever sent to the origin it was meant for, with the body read under
//! its size cap.

use super::limits::{ERROR_BODY_LIMIT, Limit, ReadError, read_limited};
use super::{Failure, Response};
use crate::registry::ErrorKind;
use crate::registry::error::error_chain;
use bytes::Bytes;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use std::time::{Duration, Instant};

/// Hops followed before [`ErrorKind::TooManyRedirects`].
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Whether a redirect is followed or answered as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redirects {
    Follow,
    /// For requests whose body holds a secret (a refresh token): a redirect
    /// would carry it elsewhere, so the 3xx is the answer.
    Refuse,
}

/// One request as this layer sends it.
pub(crate) struct Outgoing<'a> {
    pub method: Method,
    pub url: Url,
    pub headers: &'a HeaderMap,
    pub body: Option<Bytes>,
    /// Sent to `url`'s origin only, never to another host a redirect names.
    pub authorization: Option<&'a HeaderValue>,
    pub limit: Limit,
    /// Bound on the whole exchange, redirects included.
    pub timeout: Duration,
    pub redirects: Redirects,
}

/// Whether a request to `to` may carry the Authorization meant for `from`:
/// only when scheme, host and port are the same.
pub(crate) fn carries_authorization(from: &Url, to: &Url) -> bool {
    from.origin() == to.origin()
}

/// `url` for messages: origin and path, without credentials or a query
/// (which, for storage redirects, holds signatures).
fn redacted(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// Sends `out`, following up to [`MAX_REDIRECTS`] redirects.
pub(crate) async fn send(http: &reqwest::Client, out: Outgoing<'_>) -> Result<Response, Failure> {
    let deadline = Instant::now() + out.timeout;
    let origin = out.url.clone();
    let mut url = out.url;
    let mut method = out.method;
    let mut body = out.body;
    for _hop in 0..=MAX_REDIRECTS {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let mut rb = http
            .request(method.clone(), url.clone())
            .headers(out.headers.clone())
            .timeout(remaining);
        if let Some(a) = out
            .authorization
            .filter(|_| carries_authorization(&origin, &url))
        {
            rb = rb.header(header::AUTHORIZATION, a.clone());
        }
        if let Some(b) = &body {
            rb = rb.body(b.clone());
        }
        let mut resp = match rb.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(Failure::retryable(format!(
                    "no response within {} ms",
                    out.timeout.as_millis()
                )));
            }
            Err(e) => {
                let chain = error_chain(&e);
                return Err(if chain.contains("certificate") {
                    Failure::Fatal(ErrorKind::UntrustedCertificate { reason: chain })
                } else {
                    Failure::retryable(chain)
                });
            }
        };
        let status = resp.status();
        if status.is_redirection()
            && out.redirects == Redirects::Follow
            && let Some(location) = resp
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
        {
            url = url.join(location).map_err(|e| {
                Failure::Fatal(ErrorKind::Malformed {
                    what: "redirect",
                    reason: format!("bad Location: {e}"),
                })
            })?;
            // See other: the target is fetched (HEAD stays HEAD), whatever
            // the request was. Other redirects keep method and body, as the
            // registry API's 307s for uploads need.
            if status == StatusCode::SEE_OTHER && method != Method::HEAD {
                method = Method::GET;
                body = None;
            }
            continue;
        }
        let headers = resp.headers().clone();
        let limit = if status.is_success() {
            out.limit.bytes
        } else {
            ERROR_BODY_LIMIT
        };
        let body = if method == Method::HEAD {
            Vec::new()
        } else {
            match read_limited(&mut resp, limit).await {
                Ok(b) => b,
                Err(ReadError::TooLarge) if status.is_success() => {
                    return Err(Failure::Fatal(ErrorKind::TooLarge {
                        what: out.limit.what,
                        limit,
                    }));
                }
                Err(ReadError::TooLarge) => b"(error body too large)".to_vec(),
                Err(ReadError::Broken(m)) => return Err(Failure::retryable(m)),
            }
        };
        return Ok(Response {
            status,
            headers,
            body,
            url,
        });
    }
    Err(Failure::Fatal(ErrorKind::TooManyRedirects {
        limit: MAX_REDIRECTS,
        location: redacted(&url),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        s.parse().unwrap()
    }

    #[test]
    fn authorization_stays_on_its_origin() {
        let from = u("https://reg.example/v2/a/manifests/1");
        assert!(carries_authorization(&from, &u("https://reg.example/v2/b")));
        assert!(
            carries_authorization(&from, &u("https://reg.example:443/x")),
            "the default port is the same origin"
        );
        for other in [
            "https://cdn.example/blob",
            "https://reg.example:8443/x",
            "http://reg.example/x",
            "https://sub.reg.example/x",
        ] {
            assert!(!carries_authorization(&from, &u(other)), "{other}");
        }
    }

    #[test]
    fn messages_drop_queries_and_userinfo() {
        assert_eq!(
            redacted(&u(
                "https://user:pw@s3.example/bucket/blob?X-Amz-Signature=secret"
            )),
            "https://s3.example/bucket/blob"
        );
    }
}
