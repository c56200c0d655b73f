//! One HTTP exchange, following redirects by hand so that Authorization is
//! only ever sent to the origin it was meant for, with the body read under
//! its size cap, each hop under the timeouts of `idle.rs`.

use super::idle::{self, Limits, Progress, Timeouts, WatchedBody};
use super::limits::{ERROR_BODY_LIMIT, Limit, ReadError, read_limited};
use super::retry::Budget;
use super::send_queue;
use super::{Failure, Response};
use crate::error_chain::error_chain;
use crate::registry::ErrorKind;
use bytes::Bytes;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use std::time::Instant;

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
    pub timeouts: Timeouts,
    /// The request's retry budget: its waits are cut to what is left, and
    /// it is given back the time bodies moved.
    pub budget: Budget,
    /// What the exchange moves, for messages (`blob sha256:…`).
    pub subject: String,
    pub redirects: Redirects,
}

/// Whether a request to `to` may carry the Authorization meant for `from`:
/// only when scheme, host and port are the same.
pub(crate) fn carries_authorization(from: &Url, to: &Url) -> bool {
    from.origin() == to.origin()
}

/// `url` for messages: origin and path, without credentials or a query
/// (which, for storage redirects, holds signatures). Every URL that enters
/// an error goes through here (or is left out, as reqwest's are).
pub(crate) fn redacted(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// Text that should be a URL (a realm a registry named), for messages:
/// [`redacted`] when it parses, else only that it is not a URL, escaped
/// and cut short (it came from the registry).
pub(crate) fn redacted_text(text: &str) -> String {
    match Url::parse(text) {
        Ok(url) if url.has_host() => redacted(&url),
        _ => {
            let shown: String = text.chars().take(80).collect();
            format!("{shown:?} (not a URL)")
        }
    }
}

/// The rustls error among `e`'s causes that says the peer's certificate is
/// not trusted, found by type (never by text: a repository named
/// `acme/certificate-tools` in a URL is no TLS failure). `std::io::Error`
/// hides the error it wraps from `source()`, so it is looked into.
pub(crate) fn untrusted_certificate<'e>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
            .then_some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && let Some(tls) = untrusted_certificate(inner)
        {
            return Some(tls);
        }
        next = err.source();
    }
    None
}

/// Why an exchange failed, as the retry layer sees it: a certificate the
/// client does not trust is fatal, anything else worth another try. The
/// reason never holds the URL (its query may be a signature).
fn send_failure(e: reqwest::Error, timeouts: &Timeouts) -> Failure {
    if e.is_connect() && e.is_timeout() {
        return Failure::retryable(format!(
            "could not connect within {}",
            idle::seconds(timeouts.connect)
        ));
    }
    let untrusted = untrusted_certificate(&e).is_some();
    let reason = error_chain(&e.without_url());
    if untrusted {
        Failure::Fatal(ErrorKind::UntrustedCertificate { reason })
    } else {
        Failure::retryable(reason)
    }
}

/// Where a redirect from `url` to `location` leads: an http(s) URL, and
/// never from https to plain http (what was asked over TLS, a request
/// target or a body, does not continue in the clear).
fn next_hop(url: &Url, location: &str) -> Result<Url, Failure> {
    let next = url.join(location).map_err(|e| {
        Failure::Fatal(ErrorKind::Malformed {
            what: "redirect",
            reason: format!("bad Location: {e}"),
        })
    })?;
    if !matches!(next.scheme(), "https" | "http") {
        return Err(Failure::Fatal(ErrorKind::Malformed {
            what: "redirect",
            reason: format!(
                "Location is not an http(s) URL (a {} URL, from {})",
                next.scheme(),
                redacted(url)
            ),
        }));
    }
    if url.scheme() == "https" && next.scheme() != "https" {
        return Err(Failure::Fatal(ErrorKind::InsecureRedirect {
            from: redacted(url),
            to: redacted(&next),
        }));
    }
    Ok(next)
}

/// Sends `out`, following up to [`MAX_REDIRECTS`] redirects.
pub(crate) async fn send(
    http: &reqwest::Client,
    mut out: Outgoing<'_>,
) -> Result<Response, Failure> {
    let origin = out.url.clone();
    let mut url = origin.clone();
    let mut method = out.method.clone();
    let mut body = out.body.take();
    for _hop in 0..=MAX_REDIRECTS {
        let mut rb = http
            .request(method.clone(), url.clone())
            .headers(out.headers.clone());
        if let Some(a) = out
            .authorization
            .filter(|_| carries_authorization(&origin, &url))
        {
            rb = rb.header(header::AUTHORIZATION, a.clone());
        }
        let size = body.as_ref().map_or(0, |b| b.len() as u64);
        let progress = Progress::new(size, Instant::now());
        match &body {
            Some(b) if !b.is_empty() => {
                rb = rb.body(reqwest::Body::wrap(WatchedBody::new(
                    b.clone(),
                    progress.clone(),
                )));
            }
            Some(b) => rb = rb.body(b.clone()),
            None => {}
        }
        // The exchange raced against its watchdog: no response head in
        // time, or a request body that stopped moving, ends it.
        let limits = Limits::new(&out.timeouts, &out.budget);
        let sent = tokio::select! {
            sent = rb.send() => sent.map_err(|e| send_failure(e, &out.timeouts)),
            expired = idle::watch(&progress, limits, || {
                url.port_or_known_default().and_then(send_queue::queued_to)
            }) => {
                Err(Failure::retryable(expired.reason(&out.subject)))
            }
        };
        out.budget.credit(progress.track().moving());
        let mut resp = sent?;
        let status = resp.status();
        if status.is_redirection()
            && out.redirects == Redirects::Follow
            && let Some(location) = resp
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
        {
            url = next_hop(&url, location)?;
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
        let (body, broken) = if method == Method::HEAD {
            (Vec::new(), None)
        } else {
            read_body(&mut resp, &out).await?
        };
        return Ok(Response {
            status,
            headers,
            body,
            broken,
            url,
            requested: origin,
        });
    }
    Err(Failure::Fatal(ErrorKind::TooManyRedirects {
        limit: MAX_REDIRECTS,
        location: redacted(&url),
    }))
}

/// The body of `resp`, read under `out`'s limit and idle timeout, the time
/// it moved given back to the budget. A success body the caller resumes
/// (`Range`, `Limit::partial`) that broke off or stalled is answered with
/// what arrived and why it ended; any other broken body is a retryable
/// failure (it is asked for again whole).
async fn read_body(
    resp: &mut reqwest::Response,
    out: &Outgoing<'_>,
) -> Result<(Vec<u8>, Option<String>), Failure> {
    let status = resp.status();
    let range = (status == StatusCode::PARTIAL_CONTENT)
        .then(|| part_of(resp.headers()))
        .flatten();
    let limit = if status.is_success() {
        out.limit.bytes
    } else {
        ERROR_BODY_LIMIT
    };
    let reading = Instant::now();
    let read = read_limited(resp, limit, out.timeouts.idle).await;
    // Reading until the idle timeout fired was not moving.
    let moving = reading.elapsed();
    let stalled = matches!(read, Err(ReadError::Stalled { .. }));
    out.budget.credit(if stalled {
        moving.saturating_sub(out.timeouts.idle)
    } else {
        moving
    });
    let resumable = status.is_success() && out.limit.partial;
    match read {
        Ok(b) => Ok((b, None)),
        Err(ReadError::TooLarge) if status.is_success() => {
            Err(Failure::Fatal(ErrorKind::TooLarge {
                what: out.limit.what,
                limit,
            }))
        }
        Err(ReadError::TooLarge) => Ok((b"(error body too large)".to_vec(), None)),
        Err(ReadError::Broken { reason, received }) if resumable => Ok((received, Some(reason))),
        Err(ReadError::Broken { reason, .. }) => Err(Failure::retryable(reason)),
        Err(ReadError::Stalled { received, expected }) => {
            let subject = if status.is_success() {
                out.subject.to_string()
            } else {
                format!("the HTTP {} answer's body", status.as_u16())
            };
            // Of a part (`Range`), what had arrived of the whole.
            let (read, expected) = match range {
                // The start is the registry's word: no overflow from it.
                Some((start, whole)) => (start.saturating_add(received.len() as u64), whole),
                None => (received.len() as u64, expected),
            };
            let reason = idle::stalled(out.timeouts.idle, false, &subject, read, expected);
            if resumable {
                Ok((received, Some(reason)))
            } else {
                Err(Failure::retryable(reason))
            }
        }
    }
}

/// A 206's `Content-Range: bytes <start>-<end>/<whole>`: where the part
/// starts and the whole's size (`*`: unknown).
fn part_of(headers: &header::HeaderMap) -> Option<(u64, Option<u64>)> {
    let range = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let (span, whole) = range.strip_prefix("bytes ")?.split_once('/')?;
    let (start, _) = span.split_once('-')?;
    Some((start.parse().ok()?, whole.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_says_where_it_starts_and_the_whole_size() {
        let mut h = header::HeaderMap::new();
        assert_eq!(part_of(&h), None);
        h.insert(
            header::CONTENT_RANGE,
            "bytes 1048576-3145727/3145728".parse().unwrap(),
        );
        assert_eq!(part_of(&h), Some((1 << 20, Some(3 << 20))));
        h.insert(header::CONTENT_RANGE, "bytes 5-9/*".parse().unwrap());
        assert_eq!(part_of(&h), Some((5, None)));
        h.insert(header::CONTENT_RANGE, "items 5-9/10".parse().unwrap());
        assert_eq!(part_of(&h), None);
        let huge = format!("bytes {}-{}/*", u64::MAX, u64::MAX);
        h.insert(header::CONTENT_RANGE, huge.parse().unwrap());
        assert_eq!(part_of(&h), Some((u64::MAX, None)));
        assert_eq!(
            u64::MAX.saturating_add(1),
            u64::MAX,
            "what the stall message adds"
        );
    }
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every request with `respond(request head)`
    /// and closes; returns its origin and the request heads it saw.
    async fn serve(
        respond: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let answer = respond(&head);
                log.lock().unwrap().push(head);
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        (origin, seen)
    }

    fn redirect_to(location: &str) -> String {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    }

    fn get<'a>(
        url: &str,
        authorization: Option<&'a HeaderValue>,
        headers: &'a HeaderMap,
    ) -> Outgoing<'a> {
        Outgoing {
            method: Method::GET,
            url: url.parse().unwrap(),
            headers,
            body: None,
            authorization,
            limit: Limit {
                bytes: 1024,
                what: "manifest",
                partial: false,
            },
            timeouts: Timeouts::default(),
            budget: Budget::new(super::super::Clock::system(), Duration::from_secs(5)),
            subject: "the manifest".into(),
            redirects: Redirects::Follow,
        }
    }

    #[tokio::test]
    async fn a_redirect_loop_is_too_many_redirects() {
        let (origin, seen) = serve(|_| redirect_to("/again?sig=secret")).await;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let headers = HeaderMap::new();
        let err = send(&http, get(&format!("{origin}/v2/"), None, &headers))
            .await
            .err()
            .expect("a loop fails");
        let Failure::Fatal(ErrorKind::TooManyRedirects { limit, location }) = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            (limit, location),
            (MAX_REDIRECTS, format!("{origin}/again"))
        );
        assert_eq!(seen.lock().unwrap().len(), MAX_REDIRECTS + 1);
    }

    #[tokio::test]
    async fn bodies_are_read_under_their_cap() {
        let big = "x".repeat(2000);
        let answer = move |head: &str| {
            let status = if head.contains("/error") {
                "500 Oops"
            } else {
                "200 OK"
            };
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{big}",
                big.len()
            )
        };
        let (origin, _) = serve(answer).await;
        let http = reqwest::Client::new();
        let headers = HeaderMap::new();
        let err = send(&http, get(&format!("{origin}/ok"), None, &headers))
            .await
            .err()
            .expect("over the cap");
        assert!(
            matches!(
                err,
                Failure::Fatal(ErrorKind::TooLarge {
                    what: "manifest",
                    limit: 1024
                })
            ),
            "{err:?}"
        );
        let mut small = get(&format!("{origin}/ok"), None, &headers);
        small.limit.bytes = 2000;
        assert_eq!(send(&http, small).await.unwrap().body.len(), 2000);
        let resp = send(&http, get(&format!("{origin}/error"), None, &headers))
            .await
            .unwrap();
        assert_eq!(resp.status.as_u16(), 500, "error bodies have their own cap");
        assert_eq!(resp.body.len(), 2000);
    }

    #[tokio::test]
    async fn authorization_is_not_carried_to_another_host() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        let (storage, at_storage) = serve(move |_| ok.to_string()).await;
        let target = format!("{storage}/blob");
        let (registry, at_registry) = serve(move |_| redirect_to(&target)).await;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let secret = HeaderValue::from_static("Bearer secret-token");
        let headers = HeaderMap::new();
        let url = format!("{registry}/v2/a/blobs/x");
        let resp = send(&http, get(&url, Some(&secret), &headers))
            .await
            .unwrap();
        assert_eq!(
            (resp.status.as_u16(), resp.body.as_slice()),
            (200, &b"{}"[..])
        );
        assert_eq!(resp.url.as_str(), format!("{storage}/blob"));
        assert!(at_registry.lock().unwrap()[0].contains("authorization: bearer secret-token"));
        let storage_head = at_storage.lock().unwrap()[0].clone();
        assert!(!storage_head.contains("authorization"), "{storage_head}");
    }

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
    fn https_never_redirects_to_plain_http() {
        let from = u("https://reg.example/v2/a/blobs/sha256:1?x=1");
        let err = next_hop(&from, "http://s3.example/b/blob?X-Amz-Signature=sekrit")
            .expect_err("a downgrade is refused");
        let Failure::Fatal(ErrorKind::InsecureRedirect { from, to }) = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            (from.as_str(), to.as_str()),
            (
                "https://reg.example/v2/a/blobs/sha256:1",
                "http://s3.example/b/blob"
            )
        );
        let https = u("https://reg.example/v2/");
        assert_eq!(
            next_hop(&https, "https://cdn.example/b?sig=1").unwrap(),
            u("https://cdn.example/b?sig=1")
        );
        let http = u("http://127.0.0.1:5000/v2/");
        assert_eq!(
            next_hop(&http, "https://cdn.example/b").unwrap(),
            u("https://cdn.example/b"),
            "upgrading is fine"
        );
        assert_eq!(
            next_hop(&http, "/v2/x").unwrap(),
            u("http://127.0.0.1:5000/v2/x")
        );
        for odd in ["file:///etc/passwd", "ftp://x.example/y"] {
            let err = next_hop(&http, odd).expect_err(odd);
            assert!(
                matches!(err, Failure::Fatal(ErrorKind::Malformed { .. })),
                "{odd}: {err:?}"
            );
        }
    }

    /// Timeouts short enough for a test: 300 ms of nothing moving.
    fn quick() -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(300),
            header: Duration::from_secs(5),
            idle: Duration::from_millis(300),
        }
    }

    /// The reason of a retryable failure.
    fn retryable_reason(result: Result<Response, Failure>) -> String {
        match result {
            Err(Failure::Retryable { reason, .. }) => reason,
            Err(other) => panic!("not retryable: {other:?}"),
            Ok(resp) => panic!("answered {}", resp.status),
        }
    }

    /// A server that reads a request's head and then nothing more,
    /// holding the connection open: an upload stalls once the socket
    /// buffers are full, and is given up `idle` after its last chunk
    /// went, naming what it moved and how far it got — never cut while
    /// it moves, never waiting for an answer that cannot come.
    #[tokio::test]
    async fn an_upload_that_stops_moving_fails_after_the_idle_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let http = reqwest::Client::new();
        let headers = HeaderMap::new();
        let size = 64 << 20;
        let mut put = get(&format!("{origin}/v2/a/blobs/uploads/1"), None, &headers);
        put.method = Method::PUT;
        put.body = Some(Bytes::from(vec![0u8; size]));
        put.timeouts = quick();
        put.subject = "blob sha256:ab".into();
        let started = Instant::now();
        let reason = retryable_reason(send(&http, put).await);
        let took = started.elapsed();
        let re = regex::Regex::new(
            r"^no bytes for 0\.3 s while uploading blob sha256:ab \(([0-9,]+) of 67,108,864 bytes sent\)$",
        )
        .unwrap();
        let sent = re.captures(&reason).unwrap_or_else(|| panic!("{reason}"))[1].replace(',', "");
        let sent: u64 = sent.parse().unwrap();
        assert!(sent > 0 && sent < size as u64, "{reason}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    /// A download whose body stops after 1000 bytes: given up after the
    /// idle timeout, naming what was read of what was announced.
    #[tokio::test]
    async fn a_download_that_stops_moving_fails_after_the_idle_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n";
            conn.write_all(head.as_bytes()).await.unwrap();
            conn.write_all(&[b'x'; 1000]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let http = reqwest::Client::new();
        let headers = HeaderMap::new();
        let mut fetch = get(&format!("{origin}/v2/a/blobs/sha256:cd"), None, &headers);
        fetch.limit.bytes = 10_000;
        fetch.timeouts = quick();
        fetch.subject = "blob sha256:cd".into();
        let started = Instant::now();
        let reason = retryable_reason(send(&http, fetch).await);
        assert_eq!(
            reason,
            "no bytes for 0.3 s while downloading blob sha256:cd (1,000 of 5,000 bytes received)"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    /// A listener whose accept queue is full drops new connections' SYNs,
    /// as a firewall that blackholes a port does: the connect is given up
    /// after the connect timeout, and says so.
    #[tokio::test]
    async fn a_connect_that_gets_no_answer_fails_by_the_connect_timeout() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        let _listener = socket.listen(0).unwrap();
        // Fill the accept queue (never accepted); later SYNs are dropped.
        let mut filling = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(c)) = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(addr),
            )
            .await
            {
                filling.push(c);
            }
        }
        let http = reqwest::Client::builder()
            .connect_timeout(quick().connect)
            .build()
            .unwrap();
        let headers = HeaderMap::new();
        let mut probe = get(&format!("http://{addr}/v2/"), None, &headers);
        probe.timeouts = quick();
        let started = Instant::now();
        let reason = retryable_reason(send(&http, probe).await);
        let took = started.elapsed();
        assert_eq!(reason, "could not connect within 0.3 s");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(4),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_connection_error_is_retried_and_its_reason_holds_no_url() {
        // A closed port, and a URL that holds the word "certificate" and a
        // signature: neither a TLS failure nor something to print.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let headers = HeaderMap::new();
        let url = format!(
            "http://{closed}/v2/acme/certificate-tools/blobs/sha256:1?X-Amz-Signature=sekrit"
        );
        let err = send(&http, get(&url, None, &headers))
            .await
            .err()
            .expect("nothing listens");
        let Failure::Retryable { reason, .. } = err else {
            panic!("not a TLS failure, so retried: {err:?}")
        };
        for leak in ["sekrit", "X-Amz", "certificate-tools", "127.0.0.1"] {
            assert!(!reason.contains(leak), "{leak} in {reason}");
        }
    }

    #[test]
    fn untrusted_certificates_are_found_by_type_through_io_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Outer(#[source] std::io::Error);
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = Outer(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        assert!(matches!(
            untrusted_certificate(&wrapped),
            Some(rustls::Error::InvalidCertificate(_))
        ));
        let words = Outer(std::io::Error::other(
            "invalid peer certificate for /v2/acme/certificate-tools",
        ));
        assert!(
            untrusted_certificate(&words).is_none(),
            "text is not a type"
        );
        let other_tls = Outer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::HandshakeNotComplete,
        ));
        assert!(
            untrusted_certificate(&other_tls).is_none(),
            "a failed handshake is not an untrusted certificate"
        );
    }

    #[test]
    fn realms_and_other_named_urls_are_redacted_or_escaped() {
        assert_eq!(
            redacted_text("https://u:p@auth.example/token?secret=1"),
            "https://auth.example/token"
        );
        assert_eq!(
            redacted_text("\u{1b}[31mnot a url"),
            "\"\\u{1b}[31mnot a url\" (not a URL)"
        );
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
