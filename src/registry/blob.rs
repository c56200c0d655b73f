//! Blobs: whether a repository has one (HEAD), reading one verified (GET,
//! resumed with `Range` after a body breaks off), and writing one — an
//! upload (`upload.rs`: one PUT, or PATCHes for a blob over a chunk) or a
//! cross-repository mount, whose 202 answer (the registry would rather not
//! mount) is an upload session the bytes go to.

use super::client::Client;
use super::host::api_host;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::transport::retry::Exhausted;
use super::transport::{Failure, NotHere, Request, Response};
use super::upload::UPLOAD_CHUNK;
use super::{Digest, Error, ErrorKind, Repository, Result};
use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};

/// Largest blob [`Client::copy_blob`] carries from one registry to another
/// (it passes through memory whole; the family's layers are far smaller).
pub const MAX_COPIED_BLOB: usize = 2 << 30;

/// How a blob came to be in the target repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobCopy {
    /// It was there already (HEAD): nothing written.
    Present,
    /// Mounted from the source repository: no bytes sent.
    Mounted,
    /// Uploaded, with this many bytes (mount refused, or another registry).
    Uploaded(u64),
}

/// What a mount request was answered with.
enum Mount {
    Mounted,
    /// 202: an upload session (request target) for the bytes.
    Session(String),
}

pub(super) fn blob_request<'a>(
    method: Method,
    target: String,
    scope: Scope,
    context: &'a str,
) -> Request<'a> {
    Request {
        method,
        target,
        headers: HeaderMap::new(),
        body: None,
        scope,
        context,
        limit: Limit {
            bytes: 0,
            what: "blob",
            partial: false,
        },
    }
}

impl Client {
    /// The size of `digest` in `repo`, `None` when the registry does not
    /// have it there (404).
    pub async fn blob_size(&self, repo: &Repository, digest: &Digest) -> Result<Option<u64>> {
        let context = format!("{repo}@{digest}");
        let target = format!("/v2/{}/blobs/{digest}", repo.path());
        let req = blob_request(Method::HEAD, target, Scope::pull(repo.path()), &context);
        let resp = self.execute(repo.registry(), req).await?;
        match resp.status.as_u16() {
            404 => Ok(None),
            s if (200..300).contains(&s) => Ok(Some(
                resp.header(header::CONTENT_LENGTH.as_str())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            )),
            s => Err(Error::status(&context, repo.registry(), s, &resp.body)),
        }
    }

    /// [`Client::blob_size`] of each of `digests`, in their order, asked at
    /// once: the client's per-registry limit bounds how many are in flight.
    pub async fn blob_sizes(
        &self,
        repo: &Repository,
        digests: &[Digest],
    ) -> Result<Vec<Option<u64>>> {
        super::in_order(
            digests.iter().map(|d| self.blob_size(repo, d)),
            super::REQUESTS,
        )
        .await
    }

    /// The bytes of `digest` in `repo`, verified against it, at most `limit`.
    /// A body that breaks off is asked for from where it broke (`Range:
    /// bytes=<n>-`), within the client's retry policy; a registry that
    /// answers the whole blob (200) instead of the rest (206) is read from
    /// the start again. The digest is checked over the whole.
    pub async fn fetch_blob(
        &self,
        repo: &Repository,
        digest: &Digest,
        limit: usize,
    ) -> Result<Vec<u8>> {
        let context = format!("{repo}@{digest}");
        let target = format!("/v2/{}/blobs/{digest}", repo.path());
        let settings = self.settings();
        let received = std::sync::Mutex::new(Vec::new());
        let (received, context_ref, target_ref) = (&received, &context, &target);
        let attempt = |_deadline| async move {
            let mut have = std::mem::take(&mut *received.lock().expect("received lock"));
            let result = self
                .fetch_rest(repo, target_ref, &mut have, limit, context_ref)
                .await;
            *received.lock().expect("received lock") = have;
            result
        };
        let gave_up = |e: Exhausted| {
            let kind = ErrorKind::GaveUp {
                attempts: e.attempts,
                elapsed_ms: e.elapsed.as_millis(),
                last: e.last,
            };
            Error::new(kind, &context, repo.registry())
        };
        (settings.retry)
            .run((&settings.clock, &settings.sleeper), attempt, gave_up)
            .await?;
        let body = std::mem::take(&mut *received.lock().expect("received lock"));
        super::manifest::check_claimed(digest, &body, &context, "the blob's digest")?;
        Ok(body)
    }

    /// One GET of the blob at `target`: of the bytes after `have` when it
    /// holds some. What arrives is added to `have` (or replaces it: a 200
    /// is the whole blob); a body that broke off is retryable with `have`
    /// kept for the next attempt.
    async fn fetch_rest(
        &self,
        repo: &Repository,
        target: &str,
        have: &mut Vec<u8>,
        limit: usize,
        context: &str,
    ) -> std::result::Result<(), Failure<Error>> {
        let mut req = blob_request(
            Method::GET,
            target.to_string(),
            Scope::pull(repo.path()),
            context,
        );
        req.limit.bytes = limit;
        req.limit.partial = true;
        let from = have.len();
        if from > 0 {
            let range = HeaderValue::from_str(&format!("bytes={from}-")).expect("digits");
            req.headers.insert(header::RANGE, range);
        }
        let resp = match self.execute_once(repo.registry(), req).await {
            Ok(resp) => resp,
            Err(e) if matches!(e.kind(), ErrorKind::GaveUp { .. }) => {
                return Err(Failure::retryable(e.attempt_reason()));
            }
            Err(e) => return Err(Failure::Fatal(e)),
        };
        match resp.status.as_u16() {
            // The whole blob, from its first byte.
            200 => *have = resp.body,
            206 if range_start(&resp) == Some(from) => {
                if from + resp.body.len() > limit {
                    let kind = ErrorKind::TooLarge {
                        what: "blob",
                        limit,
                    };
                    return Err(Failure::Fatal(Error::new(kind, context, repo.registry())));
                }
                have.extend_from_slice(&resp.body);
            }
            // Not the rest of what arrived (or nothing is left to ask
            // for): from the start again.
            206 | 416 => {
                have.clear();
                return Err(Failure::retryable(format!(
                    "HTTP {} to bytes={from}-, not the rest of the blob",
                    resp.status.as_u16()
                )));
            }
            status => {
                return Err(Failure::Fatal(Error::status(
                    context,
                    repo.registry(),
                    status,
                    &resp.body,
                )));
            }
        }
        match resp.broken {
            Some(reason) => Err(Failure::retryable(reason)),
            None => Ok(()),
        }
    }

    /// Uploads `bytes` as a blob of `repo` (POST, then one PUT, or PATCHes
    /// of [`UPLOAD_CHUNK`] for a larger blob); returns its sha256 digest.
    /// Does not ask first whether the blob is there.
    pub async fn upload_blob(&self, repo: &Repository, bytes: Bytes) -> Result<Digest> {
        self.upload_blob_in_chunks(repo, bytes, UPLOAD_CHUNK).await
    }

    /// [`Client::upload_blob`] with chunks of `chunk` bytes (a blob of at
    /// most `chunk` in one PUT).
    pub async fn upload_blob_in_chunks(
        &self,
        repo: &Repository,
        bytes: Bytes,
        chunk: usize,
    ) -> Result<Digest> {
        let digest = Digest::sha256(&bytes);
        let context = format!("{repo}@{digest}");
        self.upload(repo, None, &digest, bytes, chunk, &context)
            .await?;
        Ok(digest)
    }

    /// Makes `digest` a blob of `to`, cheapest first: already there (one
    /// HEAD); mounted from `from` on the same registry; else its bytes are
    /// read from `from` and uploaded (also into the session a refused mount
    /// opened).
    pub async fn copy_blob(
        &self,
        from: &Repository,
        to: &Repository,
        digest: &Digest,
    ) -> Result<BlobCopy> {
        if self.blob_size(to, digest).await?.is_some() {
            return Ok(BlobCopy::Present);
        }
        let context = format!("{to}@{digest}");
        let session = if from.registry() == to.registry() {
            match self.mount(from, to, digest, &context).await? {
                Mount::Mounted => return Ok(BlobCopy::Mounted),
                Mount::Session(target) => Some(target),
            }
        } else {
            None
        };
        let bytes = Bytes::from(self.fetch_blob(from, digest, MAX_COPIED_BLOB).await?);
        let size = bytes.len() as u64;
        (self.upload(to, session, digest, bytes, UPLOAD_CHUNK, &context)).await?;
        Ok(BlobCopy::Uploaded(size))
    }

    /// Mounts `digest` from `from` into `to` (another repository of the
    /// same registry) if the registry will: `true` when it did (201). A
    /// registry that will not (202: an upload session instead) has that
    /// session cancelled, so none is left behind.
    pub async fn mount_blob(
        &self,
        from: &Repository,
        to: &Repository,
        digest: &Digest,
    ) -> Result<bool> {
        let context = format!("{to}@{digest}");
        match self.mount(from, to, digest, &context).await? {
            Mount::Mounted => Ok(true),
            Mount::Session(target) => {
                self.cancel_session(to, target, &context).await;
                Ok(false)
            }
        }
    }

    /// Cancels the upload session `target` of `repo` (`DELETE`), so none is
    /// left behind. Best effort: a registry forgets an idle session anyway.
    pub(super) async fn cancel_session(&self, repo: &Repository, target: String, context: &str) {
        let scope = Scope::push(repo.path());
        let req = blob_request(Method::DELETE, target, scope, context);
        let _ = self.execute(repo.registry(), req).await;
    }

    /// `POST …/blobs/uploads/?mount=<digest>&from=<repo>`: 201 mounted, 202
    /// an upload session instead.
    async fn mount(
        &self,
        from: &Repository,
        to: &Repository,
        digest: &Digest,
        context: &str,
    ) -> Result<Mount> {
        let target = format!(
            "/v2/{}/blobs/uploads/?mount={digest}&from={}",
            to.path(),
            from.path()
        );
        let scope = Scope::mount(to.path(), from.path());
        let resp = self.start_upload(to, target, scope, context).await?;
        if resp.status.as_u16() == 201 {
            return Ok(Mount::Mounted);
        }
        session_of(&resp, context, to).map(Mount::Session)
    }

    /// POSTs `target` (a new upload session or a mount); any 2xx is the
    /// caller's to read.
    pub(super) async fn start_upload(
        &self,
        repo: &Repository,
        target: String,
        scope: Scope,
        context: &str,
    ) -> Result<Response> {
        let mut req = blob_request(Method::POST, target, scope, context);
        req.body = Some(Bytes::new());
        let resp = self.execute(repo.registry(), req).await?;
        if !resp.status.is_success() {
            let status = resp.status.as_u16();
            return Err(Error::status(context, repo.registry(), status, &resp.body));
        }
        Ok(resp)
    }
}

/// Where a 206 answer's `Content-Range: bytes <start>-<end>/<size>` starts.
fn range_start(resp: &Response) -> Option<usize> {
    let range = resp.header(header::CONTENT_RANGE.as_str())?;
    let (start, _) = range.strip_prefix("bytes ")?.split_once('-')?;
    start.parse().ok()
}

/// The upload session a 202 names in `Location`, as a request target on
/// the registry's own origin (its authorization must not go elsewhere).
pub(super) fn session_of(resp: &Response, context: &str, repo: &Repository) -> Result<String> {
    let location = resp.header(header::LOCATION.as_str()).ok_or_else(|| {
        Error::malformed(context, "upload answer", "202 without a Location header")
    })?;
    resp.same_origin_target(location).map_err(|e| {
        let reason = match e {
            NotHere::Invalid(e) => format!("invalid Location {location:?}: {e}"),
            NotHere::OtherHost(other) => format!(
                "the upload session is on another host ({other}, not {}); refusing to send there",
                api_host(repo.registry())
            ),
        };
        Error::new(
            ErrorKind::Malformed {
                what: "upload answer",
                reason,
            },
            context,
            repo.registry(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeRegistry;
    use super::*;

    fn repo(reg: &FakeRegistry, path: &str) -> Repository {
        format!("{}/{path}", reg.authority).parse().unwrap()
    }

    #[tokio::test]
    async fn upload_then_head_and_get_verified() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let r = repo(&reg, "a/b");
        let bytes = Bytes::from_static(b"layer bytes");
        let digest = client.upload_blob(&r, bytes.clone()).await.unwrap();
        assert_eq!(digest, Digest::sha256(&bytes));
        assert_eq!(client.blob_size(&r, &digest).await.unwrap(), Some(11));
        assert_eq!(client.fetch_blob(&r, &digest, 100).await.unwrap(), bytes);
        let absent = Digest::sha256(b"other");
        assert_eq!(client.blob_size(&r, &absent).await.unwrap(), None);
        let s = reg.state();
        assert_eq!(s.count("POST", "/blobs/uploads/"), 1);
        assert_eq!(s.count("PUT", &format!("digest={digest}")), 1);
        assert_eq!(
            s.log
                .iter()
                .filter(|l| l.contains("/blobs/uploads/"))
                .count(),
            2,
            "a small blob: a session and its PUT, nothing more: {:?}",
            s.log
        );
    }

    /// A blob whose body breaks off at 90 % is asked for from there
    /// (`Range`), the rest appended and the whole verified: the registry
    /// sends it about once. A registry that ignores the range and sends
    /// the whole blob (200) is read from the start again.
    #[tokio::test]
    async fn a_broken_download_resumes_with_range() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let r = repo(&reg, "a/b");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let digest = reg.put_blob("a/b", &bytes);
        reg.state()
            .cut_answers
            .push(("GET", digest.to_string(), 90_000));
        let got = client.fetch_blob(&r, &digest, 200_000).await.unwrap();
        assert_eq!(got, bytes);
        {
            let s = reg.state();
            assert_eq!(s.count("GET", &digest.to_string()), 2, "{:?}", s.log);
            assert_eq!(s.sent, 100_000, "each byte once");
        }

        reg.state().sent = 0;
        reg.state().ignore_ranges = true;
        reg.state()
            .cut_answers
            .push(("GET", digest.to_string(), 90_000));
        // Under a limit of the blob's size: the whole again is within it.
        let got = client.fetch_blob(&r, &digest, 100_000).await.unwrap();
        assert_eq!(got, bytes, "whole again, not appended");
        assert_eq!(reg.state().sent, 190_000);

        // The limit holds over the parts together.
        reg.state().ignore_ranges = false;
        reg.state()
            .cut_answers
            .push(("GET", digest.to_string(), 90_000));
        let err = client.fetch_blob(&r, &digest, 99_999).await.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::TooLarge { .. }), "{err}");
    }

    /// Eight HEADs with a limit of three per registry: three at a time, in
    /// the digests' order, a missing blob `None`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blob_sizes_asks_at_once_within_the_per_registry_limit() {
        let reg = FakeRegistry::start().await;
        let mut digests: Vec<Digest> = (0..7)
            .map(|i| reg.put_blob("a/b", format!("blob {i}").as_bytes()))
            .collect();
        digests.insert(3, Digest::sha256(b"absent"));
        reg.state().hold = Some(3);
        let client = Client::builder()
            .anonymous()
            .per_registry_limit(3)
            .build()
            .unwrap();
        let sizes = client.blob_sizes(&repo(&reg, "a/b"), &digests).await;
        let mut want = vec![Some(6); 7];
        want.insert(3, None);
        assert_eq!(sizes.unwrap(), want);
        let s = reg.state();
        assert_eq!(s.count("HEAD", "/blobs/"), 8);
        assert_eq!(s.max_in_flight, 3, "at once, never over the limit");
    }

    #[tokio::test]
    async fn copies_head_first_then_mount_then_bytes() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let (from, to) = (repo(&reg, "src/x"), repo(&reg, "dst/y"));
        let digest = reg.put_blob("src/x", b"shared layer");
        let how = client.copy_blob(&from, &to, &digest).await.unwrap();
        assert_eq!(how, BlobCopy::Mounted);
        assert_eq!(reg.state().count("GET", "/blobs/"), 0, "no bytes read");
        let again = client.copy_blob(&from, &to, &digest).await.unwrap();
        assert_eq!(again, BlobCopy::Present);
        assert_eq!(reg.state().count("POST", "mount="), 1, "one HEAD, no POST");

        // A registry that answers the mount with 202: the session takes the bytes.
        let other = reg.put_blob("src/x", b"second layer");
        reg.state().refuse_mounts = true;
        let how = client.copy_blob(&from, &to, &other).await.unwrap();
        assert_eq!(how, BlobCopy::Uploaded(12));
        assert_eq!(
            reg.state().blobs.get(&("dst/y".into(), other.to_string())),
            Some(&b"second layer".to_vec())
        );
        assert_eq!(
            reg.state().count("POST", "/blobs/uploads/"),
            2,
            "the refused mount's session was used, not a new one"
        );
    }

    /// A PUT that fails is not sent into its session again: the upload
    /// starts over in a new one (the blob looked for first).
    #[tokio::test]
    async fn a_failed_put_is_retried_in_a_new_session() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let r = repo(&reg, "a/b");
        reg.state().faults.push(("PUT", "digest=".into(), 503));
        let digest = client
            .upload_blob(&r, Bytes::from_static(b"z"))
            .await
            .unwrap();
        let s = reg.state();
        assert_eq!(s.count("POST", "/blobs/uploads/"), 2, "a second session");
        assert_eq!(s.count("PUT", "digest="), 2);
        assert_eq!(s.count("HEAD", &digest.to_string()), 1);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_and_a_lost_answer_is_success() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let r = repo(&reg, "a/b");
        reg.state()
            .faults
            .push(("POST", "/blobs/uploads/".into(), 503));
        client
            .upload_blob(&r, Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(reg.state().count("POST", "/blobs/uploads/"), 2);
        reg.state().lost_answers.push(("PUT", "digest=".into()));
        let digest = client
            .upload_blob(&r, Bytes::from_static(b"y"))
            .await
            .unwrap();
        // The PUT whose answer was lost is not sent again: before a new
        // session the blob is looked for, and it is there.
        assert_eq!(reg.state().count("PUT", "digest="), 2, "no second PUT");
        assert_eq!(reg.state().count("HEAD", &digest.to_string()), 1);
        assert_eq!(reg.state().count("POST", "/blobs/uploads/"), 3);
        // A missing blob stays an error naming it.
        let missing = Digest::sha256(b"missing");
        let err = client.fetch_blob(&r, &missing, 10).await.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::NotFound { .. }), "{err}");
        assert!(err.to_string().contains(&missing.to_string()), "{err}");
    }
}
