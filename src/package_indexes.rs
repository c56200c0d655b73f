//! The package registries behind the locks and `outdated`: the npm registry
//! (packuments, version metadata, tarballs) and PyPI's JSON API, over one
//! HTTPS client with the extra CA roots the profile and `--ca-cert` name.
//!
//! Where: `SUNABA_NPM_REGISTRY`, else npm's own `NPM_CONFIG_REGISTRY`, else
//! <https://registry.npmjs.org>; `SUNABA_PYPI_URL`, else <https://pypi.org>.
//!
//! What they send is read under a cap per kind of body ([`Caps`]), refused
//! as soon as it is known to be over (by `Content-Length` or by what has
//! arrived). A registry URL may carry `user:token@` (npm's and pip's
//! configs allow it) and a download URL a signed query: every URL in an
//! error is [`redacted`], and a transport error is shown without its URL.

use crate::registry::{
    Clock, Exhausted, Failure, RetryPolicy, Sleeper, exchange_timeout, retry_after, retryable,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Every `url` field is [`redacted`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("cannot read the CA file {path}: {reason}")]
    Ca { path: PathBuf, reason: String },
    /// reqwest's error, its URL taken out (`url` says it, redacted).
    #[error("{url}")]
    Http { url: String, source: reqwest::Error },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: gave up after {attempts} attempt(s) in {seconds:.1} s: {last}")]
    GaveUp {
        url: String,
        attempts: u32,
        seconds: f64,
        last: String,
    },
    #[error("{url}: unexpected answer")]
    Body {
        url: String,
        source: serde_json::Error,
    },
    #[error("{url}: the {} is over the cap of {cap} bytes ({read}); refused", .kind.what())]
    TooLarge {
        url: String,
        kind: BodyKind,
        cap: u64,
        /// What was known when it was refused.
        read: ReadSoFar,
    },
}

/// How much of a refused body was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadSoFar {
    /// Refused on the length the server announced, before reading.
    Announced(u64),
    /// Refused while reading, once this many bytes had arrived.
    Read(u64),
}

impl std::fmt::Display for ReadSoFar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadSoFar::Announced(n) => write!(f, "the server announced {n} bytes"),
            ReadSoFar::Read(n) => write!(f, "stopped after reading {n} bytes"),
        }
    }
}

/// The kinds of body the package indexes send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    Packument,
    NpmVersion,
    PypiProject,
    Tarball,
}

impl BodyKind {
    fn what(self) -> &'static str {
        match self {
            BodyKind::Packument => "npm packument",
            BodyKind::NpmVersion => "npm version document",
            BodyKind::PypiProject => "PyPI project document",
            BodyKind::Tarball => "download",
        }
    }
}

/// The most a feed may send of each kind of body: far above what the
/// registries send (the abbreviated packument of a package with thousands
/// of versions is a few MiB, PyPI's JSON of the busiest projects tens; the
/// tarballs locked today are tens of MiB), finite, and held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    pub packument: u64,
    pub npm_version: u64,
    pub pypi_project: u64,
    pub tarball: u64,
}

impl Default for Caps {
    fn default() -> Caps {
        Caps {
            packument: 64 << 20,
            npm_version: 16 << 20,
            pypi_project: 64 << 20,
            tarball: 512 << 20,
        }
    }
}

impl Caps {
    fn of(&self, kind: BodyKind) -> u64 {
        match kind {
            BodyKind::Packument => self.packument,
            BodyKind::NpmVersion => self.npm_version,
            BodyKind::PypiProject => self.pypi_project,
            BodyKind::Tarball => self.tarball,
        }
    }
}

/// `url` for messages: its origin and path, without `user:password@`, a
/// query or a fragment (where registries and storage put credentials and
/// signatures). Text
/// that does not parse as a URL keeps only what precedes any `?` or `#`,
/// with everything up to an `@` after `//` dropped.
pub(crate) fn redacted(url: &str) -> String {
    // What a URL in a message shows is the registry client's rule (origin
    // and path), kept in one place.
    if let Ok(u) = url::Url::parse(url)
        && u.has_host()
    {
        return crate::registry::redacted_url(&u);
    }
    let head = url.split(['?', '#']).next().unwrap_or_default();
    match head.split_once("//") {
        Some((scheme, rest)) => match rest.split('/').next().and_then(|a| a.rfind('@')) {
            Some(at) => format!("{scheme}//{}", &rest[at + 1..]),
            None => head.to_string(),
        },
        None => head.to_string(),
    }
}

/// One client for both registries.
#[derive(Clone)]
pub(crate) struct PackageIndexes {
    http: reqwest::Client,
    npm: String,
    pypi: String,
    caps: Caps,
    /// The registry transport's policy, clock and sleeper: one tested
    /// retry loop for every HTTP client of this tool.
    retry: RetryPolicy,
    clock: Clock,
    sleeper: Sleeper,
}

/// What the npm registry says about one version.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct NpmVersion {
    pub dist: NpmDist,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct NpmDist {
    pub tarball: String,
    pub integrity: Option<String>,
}

/// The parts of a packument `outdated` reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Packument {
    #[serde(default)]
    pub versions: BTreeMap<String, serde_json::Value>,
}

impl Packument {
    /// Published versions that are not deprecated.
    pub(crate) fn live_versions(&self) -> Vec<String> {
        self.versions
            .iter()
            .filter(|(_, v)| {
                v.get("deprecated")
                    .is_none_or(|d| d.is_null() || d == false)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[derive(Deserialize)]
struct PypiProject {
    releases: BTreeMap<String, Vec<PypiFile>>,
}

#[derive(Deserialize)]
struct PypiFile {
    #[serde(default)]
    yanked: bool,
}

fn env(keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

impl PackageIndexes {
    /// A client trusting the system roots plus `ca_files`; `timeout`
    /// bounds each request, its retries included.
    pub(crate) fn new(
        ca_files: &[PathBuf],
        timeout: Duration,
    ) -> Result<PackageIndexes, IndexError> {
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("sunaba-images/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10));
        let mut certs = Vec::new();
        for path in ca_files {
            let err = |reason: String| IndexError::Ca {
                path: path.clone(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
            certs.extend(
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?,
            );
        }
        if !certs.is_empty() {
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder.build().map_err(|e| IndexError::Http {
            url: "the package indexes' HTTP client".into(),
            source: e.without_url(),
        })?;
        let trim = |s: String| s.trim_end_matches('/').to_string();
        Ok(PackageIndexes {
            http,
            npm: trim(
                env(&[
                    "SUNABA_NPM_REGISTRY",
                    "NPM_CONFIG_REGISTRY",
                    "npm_config_registry",
                ])
                .unwrap_or_else(|| "https://registry.npmjs.org".into()),
            ),
            pypi: trim(env(&["SUNABA_PYPI_URL"]).unwrap_or_else(|| "https://pypi.org".into())),
            caps: Caps::default(),
            retry: RetryPolicy {
                max_attempts: 3,
                total: timeout,
                ..RetryPolicy::default()
            },
            clock: Clock::system(),
            sleeper: Sleeper::system(),
        })
    }

    /// GET, retried by the registry transport's [`RetryPolicy`] (connection
    /// errors, timeouts, 408/429/5xx, `Retry-After` honoured, all within
    /// the timeout given to [`PackageIndexes::new`]); the body read under
    /// the cap of its `kind`.
    async fn get(
        &self,
        url: &str,
        accept: &str,
        kind: BodyKind,
    ) -> Result<bytes::Bytes, IndexError> {
        // What reqwest says of a failure names the URL whole: shown without.
        let http = |e: reqwest::Error| IndexError::Http {
            url: redacted(url),
            source: e.without_url(),
        };
        let attempt = |deadline| async move {
            let timeout = exchange_timeout(self.retry.total, deadline, &self.clock);
            let request = self.http.get(url).header("Accept", accept).timeout(timeout);
            let mut resp = match request.send().await {
                Ok(resp) => resp,
                Err(e) if e.is_connect() || e.is_timeout() => {
                    return Err(Failure::retryable(crate::error_chain::error_chain(
                        &e.without_url(),
                    )));
                }
                Err(e) => return Err(Failure::Fatal(http(e))),
            };
            if retryable(resp.status()) {
                return Err(Failure::Retryable {
                    reason: format!("HTTP {}", resp.status().as_u16()),
                    wait: retry_after(resp.headers()),
                });
            }
            if !resp.status().is_success() {
                return Err(Failure::Fatal(IndexError::Status {
                    url: redacted(url),
                    status: resp.status().as_u16(),
                }));
            }
            let cap = self.caps.of(kind);
            let too_large = |read| {
                Failure::Fatal(IndexError::TooLarge {
                    url: redacted(url),
                    kind,
                    cap,
                    read,
                })
            };
            if let Some(n) = resp.content_length().filter(|&n| n > cap) {
                return Err(too_large(ReadSoFar::Announced(n)));
            }
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| Failure::Fatal(http(e)))? {
                let read = (body.len() + chunk.len()) as u64;
                if read > cap {
                    return Err(too_large(ReadSoFar::Read(read)));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(bytes::Bytes::from(body))
        };
        let gave_up = |e: Exhausted| IndexError::GaveUp {
            url: redacted(url),
            attempts: e.attempts,
            seconds: e.elapsed.as_secs_f64(),
            last: e.last,
        };
        (self.retry)
            .run((&self.clock, &self.sleeper), attempt, gave_up)
            .await
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        accept: &str,
        kind: BodyKind,
    ) -> Result<T, IndexError> {
        let bytes = self.get(url, accept, kind).await?;
        serde_json::from_slice(&bytes).map_err(|source| IndexError::Body {
            url: redacted(url),
            source,
        })
    }

    /// npm names go in the URL with the scope's `/` escaped.
    fn npm_url(&self, name: &str) -> String {
        format!("{}/{}", self.npm, name.replace('/', "%2F"))
    }

    /// Metadata of one published version.
    pub(crate) async fn npm_version(
        &self,
        name: &str,
        version: &str,
    ) -> Result<NpmVersion, IndexError> {
        self.json(
            &format!("{}/{version}", self.npm_url(name)),
            "application/json",
            BodyKind::NpmVersion,
        )
        .await
    }

    /// The abbreviated packument (dist-tags and versions).
    pub(crate) async fn npm_packument(&self, name: &str) -> Result<Packument, IndexError> {
        self.json(
            &self.npm_url(name),
            "application/vnd.npm.install-v1+json",
            BodyKind::Packument,
        )
        .await
    }

    /// The bytes at a tarball URL.
    pub(crate) async fn download(&self, url: &str) -> Result<bytes::Bytes, IndexError> {
        self.get(url, "application/octet-stream", BodyKind::Tarball)
            .await
    }

    /// Every release of a PyPI project that has files and is not yanked.
    pub(crate) async fn pypi_releases(&self, name: &str) -> Result<Vec<String>, IndexError> {
        let project: PypiProject = self
            .json(
                &format!("{}/pypi/{name}/json", self.pypi),
                "application/json",
                BodyKind::PypiProject,
            )
            .await?;
        Ok(project
            .releases
            .into_iter()
            .filter(|(_, files)| !files.is_empty() && files.iter().any(|f| !f.yanked))
            .map(|(v, _)| v)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// What the test server answers: a status, whether it announces the
    /// body's length (else it sends it until it closes), and the body.
    #[derive(Clone)]
    struct Answer {
        status: u16,
        length: Option<u64>,
        body: Vec<u8>,
        retry_after: Option<String>,
    }

    /// Answers every request on loopback with `answer`; returns its port.
    async fn serve(answer: Answer) -> u16 {
        serve_in_turn(vec![answer]).await
    }

    /// Answers the n-th request with `answers[n]` (the last one again once
    /// they run out); returns its port.
    async fn serve_in_turn(answers: Vec<Answer>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut answered = 0;
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = answers[answered.min(answers.len() - 1)].clone();
                answered += 1;
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", answer.status);
                    if let Some(wait) = &answer.retry_after {
                        out.push_str(&format!("Retry-After: {wait}\r\n"));
                    }
                    if let Some(n) = answer.length {
                        out.push_str(&format!("Content-Length: {n}\r\n"));
                    }
                    out.push_str("\r\n");
                    let _ = conn.write_all(out.as_bytes()).await;
                    let _ = conn.write_all(&answer.body).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        port
    }

    /// A client whose npm registry is `npm` (as `NPM_CONFIG_REGISTRY` would
    /// set it).
    fn npm_at(npm: String) -> PackageIndexes {
        PackageIndexes {
            npm,
            ..PackageIndexes::new(&[], Duration::from_secs(20)).unwrap()
        }
    }

    #[tokio::test]
    async fn a_body_announced_over_its_cap_is_refused_before_it_is_read() {
        let port = serve(Answer {
            status: 200,
            length: Some(100 << 20),
            body: b"{\"versions\":".to_vec(),
            retry_after: None,
        })
        .await;
        let indexes = npm_at(format!("http://user:s3cret@127.0.0.1:{port}"));
        let err = indexes.npm_packument("left-pad").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "http://127.0.0.1:{port}/left-pad: the npm packument is over the cap of \
                 67108864 bytes (the server announced 104857600 bytes); refused"
            )
        );
    }

    #[tokio::test]
    async fn a_body_that_grows_over_its_cap_is_refused_while_read() {
        let port = serve(Answer {
            status: 200,
            length: None,
            body: vec![b' '; 300 << 10],
            retry_after: None,
        })
        .await;
        let mut indexes = npm_at(format!("http://127.0.0.1:{port}"));
        indexes.caps.tarball = 100 << 10;
        let url = format!("http://127.0.0.1:{port}/t.tgz?X-Signature=abc");
        let err = indexes.download(&url).await.unwrap_err();
        let IndexError::TooLarge {
            url: shown,
            kind: BodyKind::Tarball,
            cap,
            read: ReadSoFar::Read(read),
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(shown, &format!("http://127.0.0.1:{port}/t.tgz"));
        assert_eq!(*cap, 100 << 10);
        assert!(*read > *cap && *read < 300 << 10, "{err}");
        // Under the cap, the same body is read whole.
        indexes.caps.tarball = 300 << 10;
        assert_eq!(indexes.download(&url).await.unwrap().len(), 300 << 10);
    }

    #[tokio::test]
    async fn errors_show_no_userinfo_and_no_query() {
        let port = serve(Answer {
            status: 404,
            length: Some(0),
            body: Vec::new(),
            retry_after: None,
        })
        .await;
        let indexes = npm_at(format!("http://npm-user:s3cret@127.0.0.1:{port}"));
        let err = indexes.npm_version("a", "1.0.0").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("http://127.0.0.1:{port}/a/1.0.0: HTTP 404")
        );
        let err = indexes
            .download(&format!(
                "http://u:s3cret@127.0.0.1:{port}/a.tgz?token=s3cret#s3cret"
            ))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("http://127.0.0.1:{port}/a.tgz: HTTP 404")
        );

        // A transport error: reqwest's own message names the URL whole.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let indexes = npm_at(format!("http://npm-user:s3cret@127.0.0.1:{port}"));
        let err = indexes.npm_packument("a").await.unwrap_err().to_string();
        assert!(
            !err.contains("s3cret") && !err.contains("npm-user"),
            "{err}"
        );
        assert!(
            err.starts_with(&format!("http://127.0.0.1:{port}/a: ")),
            "{err}"
        );
    }

    /// A 503 with `Retry-After` is waited out as the registry transport
    /// waits (its policy, clock and sleeper), not by a loop of its own.
    #[tokio::test]
    async fn a_busy_index_is_retried_by_the_transport_policy_honouring_retry_after() {
        let busy = Answer {
            status: 503,
            length: Some(0),
            body: Vec::new(),
            retry_after: Some("2".into()),
        };
        let body = br#"{"versions":{"1.0.0":{}},"time":{}}"#.to_vec();
        let ok = Answer {
            status: 200,
            length: Some(body.len() as u64),
            body,
            retry_after: None,
        };
        let port = serve_in_turn(vec![busy.clone(), busy, ok]).await;
        let waits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut indexes = npm_at(format!("http://127.0.0.1:{port}"));
        let seen = waits.clone();
        indexes.sleeper = Sleeper::from_fn(move |d| {
            seen.lock().unwrap().push(d);
            Box::pin(async {})
        });
        let packument = indexes.npm_packument("a").await.unwrap();
        assert_eq!(packument.live_versions(), ["1.0.0"]);
        assert_eq!(*waits.lock().unwrap(), [Duration::from_secs(2); 2]);

        // Busy for good: the policy's attempts, then one error saying so.
        let port = serve(Answer {
            status: 503,
            length: Some(0),
            body: Vec::new(),
            retry_after: Some("1".into()),
        })
        .await;
        let mut indexes = npm_at(format!("http://127.0.0.1:{port}"));
        indexes.sleeper = Sleeper::from_fn(|_| Box::pin(async {}));
        let err = indexes.npm_packument("a").await.unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "http://127.0.0.1:{port}/a: gave up after 3 attempt(s)"
            )) && err.ends_with(": HTTP 503"),
            "{err}"
        );
    }

    #[test]
    fn redaction_keeps_origin_and_path_only() {
        assert_eq!(
            redacted("https://u:p@registry.example/a%2Fb?token=t#f"),
            "https://registry.example/a%2Fb"
        );
        assert_eq!(
            redacted("https://registry.example"),
            "https://registry.example/"
        );
        assert_eq!(redacted("not a url?secret"), "not a url");
        assert_eq!(redacted("weird://u:p@[bad/x?q"), "weird://[bad/x");
    }
}
