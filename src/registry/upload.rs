//! Sending a blob's bytes into upload sessions (OCI distribution: "Pushing
//! a blob monolithically", "Pushing a blob in chunks"). A blob of at most
//! one chunk goes in one PUT, as it always has; a larger one in PATCHes
//! (`Content-Range`, each answer's `Location` and `Range` followed) and an
//! empty closing PUT. After a failure part-way, the registry is asked where
//! the session stands (`GET` on it: `Range: 0-<n>`) and the upload goes on
//! from there; when it cannot say (the session is gone, or it answers what
//! was never sent) the upload starts again in a new session. All of it
//! within the client's retry policy: each failure is one attempt.
//!
//! What distribution 2.8 does (docs/registry.md#resumable-transfers): it
//! takes chunks, but a PATCH cut off part-way leaves the session holding
//! more than its state token says, and its next request (the `GET`
//! included) is refused 404 `BLOB_UPLOAD_INVALID` and the session ended:
//! the new session is the way on there.

use super::blob::{blob_request, session_of};
use super::client::Client;
use super::transport::bearer::Scope;
use super::transport::retry::Exhausted;
use super::transport::{Failure, Response};
use super::{Digest, Error, ErrorKind, Repository, Result};
use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderValue};
use std::sync::Mutex;

/// Blobs of up to this many bytes go in one PUT (POST, PUT: the requests
/// every config, small layer and attestation has always cost); larger ones
/// in PATCHes of this size. 8 MiB: a chunk the registry loses whole (a 5xx,
/// or an answer lost after the bytes arrived, on a registry that cannot
/// resume a cut chunk) costs at most 8 % of a 100 MiB layer again, within
/// the 1.1× of the layer's size a fault may cost (issue 29); it is above
/// the 5 MiB some registries require of every chunk but the last (ECR);
/// and the round trip each chunk adds is a few percent of its time on the
/// wire over a 40 ms link at 100 Mbit/s (0.04 s of 0.67 s).
pub const UPLOAD_CHUNK: usize = 8 << 20;

/// `OCI-Chunk-Min-Length` (distribution spec 1.1): the smallest chunk a
/// registry takes, which the chunk size is raised to.
const CHUNK_MIN_LENGTH: &str = "oci-chunk-min-length";

/// An open upload session: where it is and what the registry holds of it.
#[derive(Debug, Clone)]
struct Open {
    /// The request target (path and query) on the registry's origin.
    target: String,
    /// Bytes of the blob the registry holds (its `Range`, or 0 when new).
    offset: usize,
    /// Bytes per PATCH.
    chunk: usize,
    /// Whether the registry's word on the offset was taken after a failure
    /// (then a digest the registry refuses at the end is a reason to start
    /// again, not a bad request).
    resumed: bool,
}

/// Where an upload stands between attempts.
#[derive(Default)]
struct Progress {
    session: Option<Open>,
    /// An attempt failed part-way: the registry is asked where the session
    /// stands before more bytes go into it.
    uncertain: bool,
    /// An attempt has failed: before a new session the blob is looked for
    /// (a closing PUT whose answer was lost has landed).
    retried: bool,
}

/// Why a step of an upload failed.
enum Step {
    /// Worth another attempt: the session (if kept) is asked where it
    /// stands first.
    Again(Error),
    /// The session is of no more use: the next attempt opens a new one.
    Anew(Error),
    Fatal(Error),
}

/// `e` from a request of the upload: a failure a retry would mend (reset,
/// stall, 429/5xx: the transport's one attempt gave up) is `again`, a
/// session the registry no longer knows (404) starts anew, the rest is
/// fatal.
fn classify(e: Error) -> Step {
    match e.kind() {
        ErrorKind::GaveUp { .. } => Step::Again(e),
        ErrorKind::NotFound { .. } => Step::Anew(e),
        _ => Step::Fatal(e),
    }
}

/// A blob whose bytes are still being written to a file (a layer
/// compressed while it is sent, [`Client::upload_growing`]): how many the
/// file holds so far, and once it is whole, its digest (or why it never
/// will be).
pub struct Growing {
    file: std::fs::File,
    state: Mutex<GrowingState>,
    grew: tokio::sync::Notify,
}

#[derive(Default)]
struct GrowingState {
    written: u64,
    end: Option<std::result::Result<Digest, String>>,
}

impl Growing {
    /// A blob to be written to `file` from its start.
    pub fn new(file: std::fs::File) -> std::sync::Arc<Growing> {
        std::sync::Arc::new(Growing {
            file,
            state: Mutex::default(),
            grew: tokio::sync::Notify::new(),
        })
    }

    /// The file now holds the blob's first `written` bytes.
    pub fn grew(&self, written: u64) {
        self.state.lock().expect("growing lock").written = written;
        self.grew.notify_waiters();
    }

    /// The blob is whole (`Ok`: its digest; every byte written), or never
    /// will be (`Err`: why).
    pub fn end(&self, end: std::result::Result<Digest, String>) {
        self.state.lock().expect("growing lock").end = Some(end);
        self.grew.notify_waiters();
    }

    /// Waits until the file holds `want` bytes or the blob has ended;
    /// what it holds, and the end if it came.
    pub(crate) async fn wait(
        &self,
        want: u64,
    ) -> (u64, Option<std::result::Result<Digest, String>>) {
        loop {
            // Registered before the state is read: a change in between
            // still wakes it.
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            {
                let s = self.state.lock().expect("growing lock");
                if s.written >= want || s.end.is_some() {
                    return (s.written, s.end.clone());
                }
            }
            grew.await;
        }
    }

    /// The whole blob, `len` bytes, mapped (not read into memory).
    fn whole(&self, len: u64) -> std::io::Result<Bytes> {
        // Safety of the map: the blob has ended, so its writer no longer
        // writes the file (a temporary file nobody else knows of).
        let map = unsafe { memmap2::Mmap::map(&self.file) }?;
        if (map.len() as u64) < len {
            return Err(std::io::Error::other(format!(
                "it holds {} bytes of {len}",
                map.len()
            )));
        }
        Ok(Bytes::from_owner(map).slice(..len as usize))
    }

    /// `len` bytes of the blob from `from` (the file holds them).
    pub(crate) fn read(&self, from: u64, len: usize) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt as _;
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, from)?;
        Ok(Bytes::from(buf))
    }
}

impl Client {
    /// Sends the blob `growing` into `repo` while it is written: a PATCH of
    /// [`UPLOAD_CHUNK`] as soon as the file holds one, and once the blob is
    /// whole (its digest known), the rest and the closing PUT, resumably
    /// as [`Client::upload`] sends (a chunk that failed part-way is asked
    /// after, then sent on from where the registry stands). No HEAD first:
    /// the digest is not known until the end. Its digest and size; `None`
    /// when the blob was never finished (its writer says why elsewhere).
    /// `what` names the blob in errors until its digest is known.
    pub async fn upload_growing(
        &self,
        repo: &Repository,
        growing: &Growing,
        what: &str,
    ) -> Result<Option<(Digest, u64)>> {
        self.upload_growing_in_chunks(repo, growing, what, UPLOAD_CHUNK)
            .await
    }

    /// [`Client::upload_growing`] in chunks of `chunk` bytes.
    pub(crate) async fn upload_growing_in_chunks(
        &self,
        repo: &Repository,
        growing: &Growing,
        what: &str,
        chunk: usize,
    ) -> Result<Option<(Digest, u64)>> {
        let chunk = chunk.max(1);
        let context = format!("{repo} ({what})");
        let mut open = self.open_session(repo, chunk, &context).await.ok();
        let mut uncertain = false;
        while let Some(o) = open.clone() {
            let (_, end) = growing.wait((o.offset + o.chunk) as u64).await;
            if end.is_some() {
                break;
            }
            let part = (growing.read(o.offset as u64, o.chunk)).map_err(|e| {
                let reason = format!("reading it from its file: {e}");
                Error::new(ErrorKind::Source { reason }, &context, repo.registry())
            })?;
            match self.patch(repo, &o, part, &context).await {
                Ok(next) => open = Some(next),
                // Asked where it stands once the blob is whole.
                Err(Step::Again(_)) => {
                    uncertain = true;
                    break;
                }
                Err(Step::Anew(_)) => open = None,
                Err(Step::Fatal(e)) => return Err(e),
            }
        }
        let (written, end) = growing.wait(u64::MAX).await;
        let digest = match end {
            Some(Ok(digest)) => digest,
            _ => {
                if let Some(o) = open {
                    self.cancel_session(repo, o.target, &context).await;
                }
                return Ok(None);
            }
        };
        let bytes = growing.whole(written).map_err(|e| {
            let reason = format!("mapping its file: {e}");
            Error::new(ErrorKind::Source { reason }, &context, repo.registry())
        })?;
        let context = format!("{repo}@{digest}");
        (self.upload_from(repo, open, uncertain, &digest, bytes, chunk, &context)).await?;
        Ok(Some((digest, written)))
    }

    /// Sends `bytes` as `digest` into `repo` (see the module comment):
    /// through `session` first when one is open (a refused mount's), in
    /// PATCHes of `chunk` when larger than that.
    pub(super) async fn upload(
        &self,
        repo: &Repository,
        session: Option<String>,
        digest: &Digest,
        bytes: Bytes,
        chunk: usize,
        context: &str,
    ) -> Result<()> {
        let chunk = chunk.max(1);
        let open = session.map(|target| Open {
            target,
            offset: 0,
            chunk,
            resumed: false,
        });
        (self.upload_from(repo, open, false, digest, bytes, chunk, context)).await
    }

    /// [`Client::upload`] from a session `open` that holds `open.offset`
    /// bytes already, asked where it stands first when `uncertain`.
    #[allow(clippy::too_many_arguments)]
    async fn upload_from(
        &self,
        repo: &Repository,
        open: Option<Open>,
        uncertain: bool,
        digest: &Digest,
        bytes: Bytes,
        chunk: usize,
        context: &str,
    ) -> Result<()> {
        let chunk = chunk.max(1);
        let settings = self.settings();
        let progress = Mutex::new(Progress {
            uncertain: uncertain && open.is_some(),
            session: open,
            ..Progress::default()
        });
        let progress = &progress;
        let attempt = |_deadline| {
            let bytes = bytes.clone();
            async move {
                let (open, uncertain, retried) = {
                    let mut p = progress.lock().expect("upload progress lock");
                    let taken = (p.session.take(), p.uncertain, p.retried);
                    p.uncertain = false;
                    p.retried = true;
                    taken
                };
                let step = self
                    .upload_attempt(
                        repo, open, uncertain, retried, digest, &bytes, chunk, context,
                    )
                    .await;
                let mut p = progress.lock().expect("upload progress lock");
                match step {
                    Ok(()) => Ok(()),
                    Err((Step::Again(e), open)) => {
                        p.uncertain = open.is_some();
                        p.session = open;
                        Err(Failure::retryable(e.attempt_reason()))
                    }
                    Err((Step::Anew(e), _)) => Err(Failure::retryable(e.attempt_reason())),
                    Err((Step::Fatal(e), _)) => Err(Failure::Fatal(e)),
                }
            }
        };
        let gave_up = |e: Exhausted| {
            let kind = ErrorKind::GaveUp {
                attempts: e.attempts,
                elapsed_ms: e.elapsed.as_millis(),
                last: e.last,
            };
            Error::new(kind, context, repo.registry())
        };
        (settings.retry)
            .run((&settings.clock, &settings.sleeper), attempt, gave_up)
            .await
    }

    /// One attempt: a session (`open`, asked where it stands when
    /// `uncertain`, else a new one), then the bytes it lacks and the
    /// closing PUT. A failure comes with the session when it is worth
    /// going on in.
    #[allow(clippy::too_many_arguments)]
    async fn upload_attempt(
        &self,
        repo: &Repository,
        open: Option<Open>,
        uncertain: bool,
        retried: bool,
        digest: &Digest,
        bytes: &Bytes,
        chunk: usize,
        context: &str,
    ) -> std::result::Result<(), (Step, Option<Open>)> {
        let open = match open {
            Some(open) if uncertain => {
                match self.upload_status(repo, &open, bytes.len(), context).await {
                    Ok(found) => found,
                    Err(Step::Again(e)) => return Err((Step::Again(e), Some(open))),
                    Err(step) => return Err((step, None)),
                }
            }
            open => open,
        };
        let mut open = match open {
            Some(open) => open,
            None => {
                if retried
                    && (self.blob_size(repo, digest).await)
                        .map_err(|e| (Step::Fatal(e), None))?
                        .is_some()
                {
                    return Ok(());
                }
                self.open_session(repo, chunk, context)
                    .await
                    .map_err(|e| (Step::Fatal(e), None))?
            }
        };
        if bytes.len() <= open.chunk && open.offset == 0 {
            // One PUT. Bytes a reset cut off stay in the session, and
            // distribution refuses the same PUT into it (404
            // `BLOB_UPLOAD_INVALID`) only after reading it whole: a failed
            // one is never sent into its session again.
            return match self
                .close_session(repo, &open.target, digest, bytes.clone(), context)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) => match classify(e) {
                    Step::Again(e) | Step::Anew(e) => Err((Step::Anew(e), None)),
                    fatal => Err((fatal, None)),
                },
            };
        }
        while open.offset < bytes.len() {
            let end = bytes.len().min(open.offset + open.chunk);
            let part = bytes.slice(open.offset..end);
            match self.patch(repo, &open, part, context).await {
                Ok(next) => open = next,
                Err(step) => {
                    let keep = matches!(step, Step::Again(_)).then_some(open);
                    return Err((step, keep));
                }
            }
        }
        match self
            .close_session(repo, &open.target, digest, Bytes::new(), context)
            .await
        {
            Ok(()) => Ok(()),
            // The bytes the registry was trusted to hold after a failure
            // are not the blob: start again rather than stop.
            Err(e) if open.resumed && matches!(e.kind(), ErrorKind::Status { status: 400, .. }) => {
                Err((Step::Anew(e), None))
            }
            Err(e) => match classify(e) {
                Step::Again(e) => Err((Step::Again(e), Some(open))),
                step => Err((step, None)),
            },
        }
    }

    /// POSTs a new upload session; its chunk size is `chunk`, or the
    /// registry's `OCI-Chunk-Min-Length` when larger.
    async fn open_session(&self, repo: &Repository, chunk: usize, context: &str) -> Result<Open> {
        let target = format!("/v2/{}/blobs/uploads/", repo.path());
        let resp = self
            .start_upload(repo, target, Scope::push(repo.path()), context)
            .await?;
        let min = resp
            .header(CHUNK_MIN_LENGTH)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        Ok(Open {
            target: session_of(&resp, context, repo)?,
            offset: 0,
            chunk: chunk.max(min),
            resumed: false,
        })
    }

    /// PATCHes `part` (the bytes from `open.offset`) into the session; the
    /// session as the registry's answer leaves it.
    async fn patch(
        &self,
        repo: &Repository,
        open: &Open,
        part: Bytes,
        context: &str,
    ) -> std::result::Result<Open, Step> {
        let (start, sent) = (open.offset, open.offset + part.len());
        let mut req = blob_request(
            Method::PATCH,
            open.target.clone(),
            Scope::push(repo.path()),
            context,
        );
        req.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        let range =
            HeaderValue::from_str(&format!("{start}-{}", sent - 1)).expect("digits and a dash");
        req.headers.insert(header::CONTENT_RANGE, range);
        req.body = Some(part);
        let resp = self
            .execute_once(repo.registry(), req)
            .await
            .map_err(classify)?;
        match resp.status.as_u16() {
            202 | 204 => {}
            // Not where the registry is: it says where on a GET.
            416 => {
                return Err(Step::Again(Error::status(
                    context,
                    repo.registry(),
                    416,
                    &resp.body,
                )));
            }
            status => {
                return Err(classify(Error::status(
                    context,
                    repo.registry(),
                    status,
                    &resp.body,
                )));
            }
        }
        // Less than was sent is the registry's word (the rest goes
        // again); nothing taken, or more than was sent, cannot be built on
        // (and a registry taking nothing would be sent the chunk for ever).
        let held = match held_range(&resp) {
            Held::Absent => sent,
            Held::Bytes(n) if n > start && n <= sent => n,
            Held::Bytes(_) | Held::Invalid => {
                return Err(Step::Anew(inconsistent(&resp, context, repo, start, sent)));
            }
        };
        Ok(Open {
            target: next_target(&resp, &open.target, context, repo).map_err(Step::Fatal)?,
            offset: held,
            ..open.clone()
        })
    }

    /// Asks the registry where `open` stands (`GET`: 204 with `Range`):
    /// the session to go on in, or `None` when a new one is needed — it is
    /// gone (404, as distribution 2.8 answers after a cut PATCH), or it
    /// holds what cannot be so (more than the blob, less than it said it
    /// held, or the ambiguous `0-0`, which distribution writes for an empty
    /// session and for one byte alike).
    async fn upload_status(
        &self,
        repo: &Repository,
        open: &Open,
        len: usize,
        context: &str,
    ) -> std::result::Result<Option<Open>, Step> {
        let req = blob_request(
            Method::GET,
            open.target.clone(),
            Scope::push(repo.path()),
            context,
        );
        let resp = match self.execute_once(repo.registry(), req).await {
            Ok(resp) => resp,
            Err(e) => {
                return match classify(e) {
                    Step::Anew(_) => Ok(None),
                    step => Err(step),
                };
            }
        };
        if !resp.status.is_success() {
            return Ok(None);
        }
        let held = match held_range(&resp) {
            Held::Bytes(n) if n > 1 && n >= open.offset && n <= len => n,
            _ => return Ok(None),
        };
        let target = next_target(&resp, &open.target, context, repo).map_err(Step::Fatal)?;
        Ok(Some(Open {
            target,
            offset: held,
            resumed: true,
            ..open.clone()
        }))
    }

    /// PUTs the closing request of the session `target` with `digest` and
    /// `bytes` (the whole blob, or nothing after PATCHes), once (see
    /// [`Client::upload`] for the retries).
    async fn close_session(
        &self,
        repo: &Repository,
        target: &str,
        digest: &Digest,
        bytes: Bytes,
        context: &str,
    ) -> Result<()> {
        let sep = if target.contains('?') { '&' } else { '?' };
        let mut req = blob_request(
            Method::PUT,
            format!("{target}{sep}digest={digest}"),
            Scope::push(repo.path()),
            context,
        );
        req.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        req.body = Some(bytes);
        let resp = self.execute_once(repo.registry(), req).await?;
        if resp.status.is_success() {
            return Ok(());
        }
        let status = resp.status.as_u16();
        Err(Error::status(context, repo.registry(), status, &resp.body))
    }
}

/// What an upload answer's `Range` says the registry holds.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Absent,
    /// `0-<end>`: `end + 1` bytes.
    Bytes(usize),
    Invalid,
}

/// The `Range` of an upload answer: `0-<end>` (distribution's form; some
/// registries write `bytes=0-<end>`).
fn held_range(resp: &Response) -> Held {
    let Some(range) = resp.header("range") else {
        return Held::Absent;
    };
    let range = range.strip_prefix("bytes=").unwrap_or(range);
    match range.split_once('-') {
        Some(("0", end)) if !end.is_empty() && end.bytes().all(|b| b.is_ascii_digit()) => end
            .parse::<usize>()
            .ok()
            .and_then(|end| end.checked_add(1))
            .map_or(Held::Invalid, Held::Bytes),
        _ => Held::Invalid,
    }
}

/// The session's next request target: the answer's `Location` (on the
/// registry's origin), or `current` when it names none.
fn next_target(resp: &Response, current: &str, context: &str, repo: &Repository) -> Result<String> {
    if resp.header(header::LOCATION.as_str()).is_none() {
        return Ok(current.to_string());
    }
    session_of(resp, context, repo)
}

/// A PATCH answer whose `Range` is not what was sent: the session is left.
fn inconsistent(
    resp: &Response,
    context: &str,
    repo: &Repository,
    start: usize,
    sent: usize,
) -> Error {
    let said = resp.header("range").unwrap_or_default();
    let kind = ErrorKind::Malformed {
        what: "upload answer",
        reason: format!(
            "after bytes {start}-{} the registry says it holds Range {said:?}, not \"0-{}\"",
            sent - 1,
            sent - 1
        ),
    };
    Error::new(kind, context, repo.registry())
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeRegistry;
    use super::*;

    fn repo(reg: &FakeRegistry) -> Repository {
        format!("{}/a/b", reg.authority).parse().unwrap()
    }

    /// Bytes that differ along their length (a misplaced chunk shows).
    fn blob(len: usize) -> Bytes {
        (0..len)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    /// The requests to upload sessions, as the fake logged them, without
    /// the `?_state=…` and digest queries.
    fn session_requests(reg: &FakeRegistry) -> Vec<String> {
        (reg.state().log.iter())
            .filter(|l| l.contains("/blobs/uploads/") || l.starts_with("HEAD"))
            .map(|l| {
                let (line, cut) = match l.strip_suffix(" (cut)") {
                    Some(line) => (line, " (cut)"),
                    None => (l.as_str(), ""),
                };
                let state = line
                    .split_once("_state=")
                    .map(|(_, s)| s.split('&').next().unwrap_or_default().to_string());
                let method = line.split(' ').next().unwrap();
                match state {
                    Some(at) => format!("{method} @{at}{cut}"),
                    None if line.contains("/blobs/uploads/") => format!("{method} new"),
                    None => format!("{method} blob"),
                }
            })
            .collect()
    }

    fn stored(reg: &FakeRegistry, digest: &Digest) -> Option<Vec<u8>> {
        reg.state()
            .blobs
            .get(&("a/b".into(), digest.to_string()))
            .cloned()
    }

    /// A blob of one chunk goes as it always has (POST, PUT); one byte
    /// more goes in PATCHes that follow each answer's Location and Range,
    /// then an empty PUT.
    #[tokio::test]
    async fn a_blob_of_one_chunk_is_one_put_and_a_larger_one_goes_in_chunks() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let one = blob(4000);
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), one.clone(), 4000)
            .await
            .unwrap();
        assert_eq!(session_requests(&reg), ["POST new", "PUT @0"]);
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&one[..]));

        reg.state().log.clear();
        let larger = blob(4001);
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), larger.clone(), 2000)
            .await
            .unwrap();
        assert_eq!(
            session_requests(&reg),
            [
                "POST new",
                "PATCH @0",
                "PATCH @2000",
                "PATCH @4000",
                "PUT @4001"
            ]
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&larger[..]));
        assert_eq!(reg.state().received, 4000 + 4001, "each byte once");
    }

    /// A blob written while it is sent, as a compressor writes a layer:
    /// `first` bytes written, then (once the upload has sent what it can
    /// of them) the rest and its digest, or (`whole` false) its end
    /// without one. The upload's answer.
    async fn grow_and_send(
        reg: &FakeRegistry,
        bytes: &Bytes,
        first: usize,
        whole: bool,
    ) -> Result<Option<(Digest, u64)>> {
        use std::io::Write as _;
        let client = reg.client();
        let mut file = tempfile::tempfile().unwrap();
        let growing = Growing::new(file.try_clone().unwrap());
        let repo = repo(reg);
        let sending = client.upload_growing_in_chunks(&repo, &growing, "a test blob", 1000);
        let writing = async {
            file.write_all(&bytes[..first]).unwrap();
            growing.grew(first as u64);
            // What can go before the end goes: its PATCHes are seen while
            // the blob is still being written.
            let full_chunks = first / 1000;
            for _ in 0..500 {
                if reg.state().count("PATCH", "/blobs/uploads/") >= full_chunks {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(reg.state().count("PATCH", "/blobs/uploads/") >= full_chunks);
            if whole {
                file.write_all(&bytes[first..]).unwrap();
                growing.grew(bytes.len() as u64);
                growing.end(Ok(Digest::sha256(bytes)));
            } else {
                growing.end(Err("the compressor stopped".into()));
            }
        };
        let (sent, ()) = futures::join!(sending, writing);
        sent
    }

    #[tokio::test]
    async fn a_growing_blob_goes_up_a_chunk_at_a_time_as_it_is_written_and_ends_with_its_digest() {
        let reg = FakeRegistry::start().await;
        let bytes = blob(4001);
        let sent = grow_and_send(&reg, &bytes, 2500, true).await.unwrap();
        let digest = Digest::sha256(&bytes);
        assert_eq!(sent, Some((digest.clone(), 4001)));
        assert_eq!(
            session_requests(&reg),
            [
                "POST new",
                "PATCH @0",
                "PATCH @1000",
                "PATCH @2000",
                "PATCH @3000",
                "PATCH @4000",
                "PUT @4001"
            ],
            "no HEAD (the digest comes last), each chunk once"
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));
        assert_eq!(reg.state().received, 4001, "each byte once");
    }

    #[tokio::test]
    async fn a_growing_blob_that_never_ends_whole_is_not_put_and_its_session_is_left() {
        let reg = FakeRegistry::start().await;
        let bytes = blob(4001);
        let sent = grow_and_send(&reg, &bytes, 2500, false).await.unwrap();
        assert_eq!(sent, None);
        let seen = session_requests(&reg);
        assert_eq!(
            seen,
            ["POST new", "PATCH @0", "PATCH @1000", "DELETE @2000"]
        );
        assert!(reg.state().blobs.is_empty());
    }

    /// A chunk of a growing blob cut off part-way: once the blob is whole,
    /// the registry is asked where the session stands and the rest goes
    /// from there, each byte about once.
    #[tokio::test]
    async fn a_growing_blob_cut_part_way_is_resumed_where_the_registry_stands() {
        let reg = FakeRegistry::start().await;
        reg.state()
            .cut_requests
            .push(("PATCH", "_state=1000".into(), 500));
        let bytes = blob(4001);
        let sent = grow_and_send(&reg, &bytes, 2500, true).await.unwrap();
        let digest = Digest::sha256(&bytes);
        assert_eq!(sent, Some((digest.clone(), 4001)));
        let seen = session_requests(&reg);
        assert_eq!(
            seen,
            [
                "POST new",
                "PATCH @0",
                "PATCH @1000 (cut)",
                "GET @1000",
                "PATCH @1500",
                "PATCH @2500",
                "PATCH @3500",
                "PUT @4001"
            ],
            "{seen:?}"
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));
        assert_eq!(reg.state().received, 4001, "the cut part was kept");
    }

    /// A PATCH cut off part-way (the registry keeps what arrived): the
    /// registry is asked where the session stands and the upload goes on
    /// from there, in the same session, each byte sent about once.
    #[tokio::test]
    async fn a_chunk_cut_off_is_resumed_where_the_registry_stands() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let bytes = blob(10_000);
        reg.state()
            .cut_requests
            .push(("PATCH", "_state=8000".into(), 500));
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), bytes.clone(), 1000)
            .await
            .unwrap();
        let seen = session_requests(&reg);
        assert_eq!(
            seen[9..],
            [
                "PATCH @8000 (cut)",
                "GET @8000",
                "PATCH @8500",
                "PATCH @9500",
                "PUT @10000"
            ],
            "{seen:?}"
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));
        assert_eq!(
            reg.state().received,
            10_000,
            "each byte once: the cut part was kept"
        );
        assert_eq!(reg.state().count("POST", "/blobs/uploads/"), 1);
    }

    /// distribution 2.8: a cut PATCH leaves the session holding more than
    /// its state token says, and the registry refuses the session (the GET
    /// included) — a new session takes the blob, after a HEAD.
    #[tokio::test]
    async fn a_session_the_registry_refuses_after_a_cut_is_left_for_a_new_one() {
        let reg = FakeRegistry::start().await;
        reg.state().stateful_uploads = true;
        let client = reg.client();
        let bytes = blob(4_000);
        reg.state()
            .cut_requests
            .push(("PATCH", "_state=3000".into(), 500));
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), bytes.clone(), 1000)
            .await
            .unwrap();
        let seen = session_requests(&reg);
        assert_eq!(
            seen[4..],
            [
                "PATCH @3000 (cut)",
                "GET @3000",
                "HEAD blob",
                "POST new",
                "PATCH @0",
                "PATCH @1000",
                "PATCH @2000",
                "PATCH @3000",
                "PUT @4000"
            ],
            "{seen:?}"
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));
    }

    /// A chunk refused with a 5xx before any of it was kept: even a
    /// registry that keeps state as distribution does says where it stands,
    /// and the chunk is sent again, not the blob.
    #[tokio::test]
    async fn a_chunk_refused_with_a_5xx_is_sent_again_in_its_session() {
        let reg = FakeRegistry::start().await;
        reg.state().stateful_uploads = true;
        let client = reg.client();
        let bytes = blob(3_000);
        reg.state()
            .faults
            .push(("PATCH", "_state=1000".into(), 503));
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), bytes.clone(), 1000)
            .await
            .unwrap();
        assert_eq!(
            session_requests(&reg),
            [
                "POST new",
                "PATCH @0",
                "PATCH @1000",
                "GET @1000",
                "PATCH @1000",
                "PATCH @2000",
                "PUT @3000"
            ]
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));
        // The blob and the refused chunk once more, not the blob again.
        assert_eq!(reg.state().received, 4_000);
    }

    /// A registry whose word on the offset cannot be so — a PATCH answered
    /// with more than was sent, a status of "0-0" (nothing, or one byte)
    /// after a cut — is not built on: the upload starts again in a new
    /// session and completes.
    #[tokio::test]
    async fn an_inconsistent_range_starts_a_new_session() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let bytes = blob(2_000);
        reg.state()
            .wrong_ranges
            .push(("PATCH", "_state=0".into(), "0-1999".into()));
        let digest = client
            .upload_blob_in_chunks(&repo(&reg), bytes.clone(), 1000)
            .await
            .unwrap();
        assert_eq!(
            session_requests(&reg),
            [
                "POST new",
                "PATCH @0",
                "HEAD blob",
                "POST new",
                "PATCH @0",
                "PATCH @1000",
                "PUT @2000"
            ]
        );
        assert_eq!(stored(&reg, &digest).as_deref(), Some(&bytes[..]));

        // A chunk answered as taken but nothing held beyond it before.
        reg.state().log.clear();
        reg.state()
            .wrong_ranges
            .push(("PATCH", "_state=1000".into(), "0-999".into()));
        let third = blob(2_002);
        client
            .upload_blob_in_chunks(&repo(&reg), third, 1000)
            .await
            .unwrap();
        let seen = session_requests(&reg);
        assert_eq!(
            seen[..4],
            ["POST new", "PATCH @0", "PATCH @1000", "HEAD blob"],
            "{seen:?}"
        );

        reg.state().log.clear();
        let other = blob(2_001);
        reg.state()
            .cut_requests
            .push(("PATCH", "_state=0".into(), 1));
        client
            .upload_blob_in_chunks(&repo(&reg), other, 1000)
            .await
            .unwrap();
        let seen = session_requests(&reg);
        assert_eq!(
            seen[..4],
            ["POST new", "PATCH @0 (cut)", "GET @0", "HEAD blob"],
            "{seen:?}"
        );
        assert_eq!(reg.state().count("POST", "/blobs/uploads/"), 2);
    }

    /// The closing PUT whose answer was lost has landed: the session is
    /// gone (404 on the GET), the blob is found, nothing is sent again.
    #[tokio::test]
    async fn a_lost_answer_to_the_closing_put_is_success() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        reg.state().lost_answers.push(("PUT", "digest=".into()));
        client
            .upload_blob_in_chunks(&repo(&reg), blob(1_500), 1000)
            .await
            .unwrap();
        assert_eq!(
            session_requests(&reg),
            [
                "POST new",
                "PATCH @0",
                "PATCH @1000",
                "PUT @1500",
                "GET @1500",
                "HEAD blob"
            ]
        );
    }

    /// A session's Location on another host is refused, as the POST's is:
    /// the registry's authorization does not go there.
    #[tokio::test]
    async fn a_chunk_answer_naming_another_host_is_refused() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let open = Open {
            target: "/v2/a/b/blobs/uploads/u1".into(),
            offset: 0,
            chunk: 10,
            resumed: false,
        };
        let resp = Response {
            status: reqwest::StatusCode::ACCEPTED,
            headers: [(
                header::LOCATION,
                HeaderValue::from_static("http://elsewhere.example/v2/a/b/blobs/uploads/u1"),
            )]
            .into_iter()
            .collect(),
            body: Vec::new(),
            broken: None,
            url: format!("http://{}/v2/a/b/blobs/uploads/u1", reg.authority)
                .parse()
                .unwrap(),
            requested: format!("http://{}/v2/a/b/blobs/uploads/u1", reg.authority)
                .parse()
                .unwrap(),
        };
        let err = next_target(&resp, &open.target, "ctx", &repo(&reg)).unwrap_err();
        assert!(err.to_string().contains("on another host"), "{err}");
        drop(client);
    }

    #[test]
    fn ranges_of_upload_answers() {
        let with = |range: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
            held_range(&Response {
                status: reqwest::StatusCode::ACCEPTED,
                headers,
                body: Vec::new(),
                broken: None,
                url: "http://r.example/".parse().unwrap(),
                requested: "http://r.example/".parse().unwrap(),
            })
        };
        assert_eq!(with("0-99"), Held::Bytes(100));
        assert_eq!(with("bytes=0-99"), Held::Bytes(100));
        assert_eq!(with("0-0"), Held::Bytes(1));
        for bad in [
            "5-99",
            "0-",
            "0-+1",
            "0-1x",
            "99",
            "0-99999999999999999999999",
        ] {
            assert_eq!(with(bad), Held::Invalid, "{bad}");
        }
    }
}
