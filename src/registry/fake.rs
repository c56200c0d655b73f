//! A fake OCI registry for unit tests: blobs, manifests and tags in memory,
//! monolithic and chunked uploads (PATCH, `GET` of an upload's offset),
//! cross-repository mounts and ranged blob reads over plain HTTP/1.1 on
//! loopback, a log of every request, and faults to inject (statuses,
//! refused mounts, wrong or missing `Docker-Content-Digest` answers,
//! connections cut part-way through a request's or an answer's body).

use super::{Client, Digest, RetryPolicy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the fake holds and how it misbehaves; tests change it freely.
#[derive(Default)]
pub(crate) struct State {
    /// (repository, digest) -> bytes.
    pub blobs: HashMap<(String, String), Vec<u8>>,
    /// (repository, digest) -> (media type, bytes).
    pub manifests: HashMap<(String, String), (String, Vec<u8>)>,
    /// (repository, tag) -> digest.
    pub tags: HashMap<(String, String), String>,
    /// Open upload sessions: uuid -> (repository, bytes held).
    pub uploads: HashMap<String, (String, Vec<u8>)>,
    sessions_opened: usize,
    /// Every request: `METHOD target`.
    pub log: Vec<String>,
    /// Body bytes received, of every request (those cut off included).
    pub received: usize,
    /// Body bytes sent, of every answer (those cut off included).
    pub sent: usize,
    /// One-shot answers of upload sessions with another `Range`: (method,
    /// target fragment, the `Range` value).
    pub wrong_ranges: Vec<(&'static str, String, String)>,
    /// As distribution 2.8 does: an upload's `Location` carries the offset
    /// it was answered at (`_state`), and a request whose offset is not
    /// what the session holds (a PATCH was cut off after it) gets 404
    /// `BLOB_UPLOAD_INVALID` and ends the session.
    pub stateful_uploads: bool,
    /// Answer ranged blob reads with the whole blob (200).
    pub ignore_ranges: bool,
    /// One-shot cuts: (method, target fragment, bytes): the request's body
    /// is read up to that many bytes (an upload session keeps them), then
    /// the connection closes unanswered.
    pub cut_requests: Vec<(&'static str, String, usize)>,
    /// One-shot cuts: (method, target fragment, bytes): the answer's body
    /// breaks off after that many bytes (the connection closes).
    pub cut_answers: Vec<(&'static str, String, usize)>,
    /// Answer mounts with 202 (an upload session) instead of mounting.
    pub refuse_mounts: bool,
    /// One-shot answers: (method, target fragment, status).
    pub faults: Vec<(&'static str, String, u16)>,
    /// One-shot lost answers: the request is carried out, then answered 500.
    pub lost_answers: Vec<(&'static str, String)>,
    /// Answer manifest PUTs with this digest instead of the bytes' own.
    pub answer_digest: Option<String>,
    /// Answer manifest PUTs without Docker-Content-Digest.
    pub omit_digest: bool,
    /// The requests counted in flight (and held): blob requests of this
    /// method (`HEAD` when `None`: the blobs looked for).
    pub held_method: Option<&'static str>,
    /// What a held request's target contains (`/blobs/` when `None`).
    pub held_path: Option<&'static str>,
    /// Hold each such request until this many are in flight together (or
    /// [`HOLD_AT_MOST`] has passed): how many a client sends at once shows
    /// in [`State::max_in_flight`] without depending on timing. It can be
    /// more than k: another can arrive before the k let go have left, so a
    /// test of "k at once" asserts at least k, one of a limit at most.
    pub hold: Option<usize>,
    in_flight: usize,
    pub max_in_flight: usize,
    arrivals: usize,
    released: usize,
}

/// How long a held request waits for the others at most.
const HOLD_AT_MOST: Duration = Duration::from_millis(500);

impl State {
    pub(crate) fn count(&self, method: &str, fragment: &str) -> usize {
        let prefix = format!("{method} ");
        self.log
            .iter()
            .filter(|l| l.starts_with(&prefix) && l.contains(fragment))
            .count()
    }
}

pub(crate) struct FakeRegistry {
    pub authority: String,
    pub state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRegistry {
    pub(crate) async fn start() -> FakeRegistry {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(connection(conn, shared.clone()));
            }
        });
        FakeRegistry {
            authority,
            state,
            task,
        }
    }

    /// A client for it: anonymous, plain http (loopback), fast retries.
    pub(crate) fn client(&self) -> Client {
        Client::builder()
            .anonymous()
            .retry(RetryPolicy {
                max_attempts: 3,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(5),
                total: Duration::from_secs(10),
            })
            .build()
            .unwrap()
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Stores a blob in `repo` directly; returns its digest.
    pub(crate) fn put_blob(&self, repo: &str, bytes: &[u8]) -> Digest {
        let digest = Digest::sha256(bytes);
        self.state()
            .blobs
            .insert((repo.into(), digest.to_string()), bytes.to_vec());
        digest
    }

    /// Stores a manifest in `repo` directly (and tags it, when `tag` is
    /// given); returns its digest.
    pub(crate) fn put_manifest(
        &self,
        repo: &str,
        tag: Option<&str>,
        media_type: &str,
        bytes: &[u8],
    ) -> Digest {
        let digest = Digest::sha256(bytes);
        let mut s = self.state();
        s.manifests.insert(
            (repo.into(), digest.to_string()),
            (media_type.into(), bytes.to_vec()),
        );
        if let Some(tag) = tag {
            s.tags.insert((repo.into(), tag.into()), digest.to_string());
        }
        digest
    }

    /// Stores a tiny image in `repo` directly: one layer of its own (a tar
    /// holding one file, so that the layer reads as one), the `config`
    /// document (with a `rootfs` of that layer) as its config blob, a
    /// manifest of `media_type`. Returns the manifest's digest.
    pub(crate) fn put_image(
        &self,
        repo: &str,
        config: &serde_json::Value,
        media_type: &str,
    ) -> Digest {
        let layer_bytes = {
            let data = format!("layer of {config}");
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "layer", data.as_bytes()).unwrap();
            b.into_inner().unwrap()
        };
        let layer = self.put_blob(repo, &layer_bytes);
        let mut config = config.clone();
        config["rootfs"] = serde_json::json!({"type": "layers", "diff_ids": [layer]});
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = self.put_blob(repo, &config);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {
                "mediaType": super::media_type::OCI_CONFIG,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer,
                "size": layer_bytes.len(),
            }],
        });
        self.put_manifest(
            repo,
            None,
            media_type,
            &serde_json::to_vec(&manifest).unwrap(),
        )
    }
}

/// The request headers the fake reads.
struct Head {
    content_type: String,
    range: Option<String>,
    content_range: Option<String>,
}

/// An upload session's answer: where it goes on (its `_state` the offset,
/// when the fake keeps state as distribution does) and what it holds.
fn session_answer(s: &State, status: u16, repo: &str, uuid: &str) -> Answer {
    let held = s.uploads[uuid].1.len();
    // Relative, as ghcr.io writes it (distribution's absolute form is
    // covered by the integration tests).
    let location = format!("/v2/{repo}/blobs/uploads/{uuid}?_state={held}");
    // distribution's form: "0-0" for an empty session as for one byte.
    answer(status)
        .header("Location", location)
        .header("Range", format!("0-{}", held.saturating_sub(1)))
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn answer(status: u16) -> Answer {
    Answer {
        status,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

impl Answer {
    fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
    fn body(mut self, body: Vec<u8>) -> Answer {
        self.body = body;
        self
    }
}

async fn connection(mut conn: tokio::net::TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            // A TLS ClientHello: this is a plain http server.
            if buf.first() == Some(&0x16) {
                return;
            }
        };
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if req.parse(&buf[..head_end]).is_err() {
            return;
        }
        let method = req.method.unwrap_or("GET").to_string();
        let target = req.path.unwrap_or("/").to_string();
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let length: usize = header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let head = Head {
            content_type: header("content-type").unwrap_or_default(),
            range: header("range"),
            content_range: header("content-range"),
        };
        buf.drain(..head_end);
        let cut = take_cut(&mut state.lock().unwrap().cut_requests, &method, &target);
        let wanted = cut.map_or(length, |n| n.min(length));
        while buf.len() < wanted {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf.drain(..wanted).collect();
        if cut.is_some() {
            let mut s = state.lock().unwrap();
            s.received += body.len();
            s.log.push(format!("{method} {target} (cut)"));
            keep_cut_off(&mut s, &target, body);
            return;
        }
        let counted = {
            let s = state.lock().unwrap();
            method == s.held_method.unwrap_or("HEAD")
                && target.contains(s.held_path.unwrap_or("/blobs/"))
        };
        if counted {
            enter_held(&state).await;
        }
        let a = handle(&state, &method, &target, &head, body);
        if counted {
            state.lock().unwrap().in_flight -= 1;
        }
        let cut = take_cut(&mut state.lock().unwrap().cut_answers, &method, &target);
        let mut out = format!("HTTP/1.1 {} X\r\n", a.status);
        for (n, v) in &a.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("Content-Length: {}\r\n\r\n", a.body.len()));
        let mut bytes = out.into_bytes();
        if method != "HEAD" {
            let sent = cut.map_or(a.body.len(), |n| n.min(a.body.len()));
            bytes.extend_from_slice(&a.body[..sent]);
            state.lock().unwrap().sent += sent;
        }
        if conn.write_all(&bytes).await.is_err() || cut.is_some() {
            return;
        }
    }
}

/// The bytes of a cut matching `method` and `target`, taken (one-shot).
fn take_cut(
    cuts: &mut Vec<(&'static str, String, usize)>,
    method: &str,
    target: &str,
) -> Option<usize> {
    let i = cuts
        .iter()
        .position(|(m, t, _)| *m == method && target.contains(t.as_str()))?;
    Some(cuts.remove(i).2)
}

/// What arrived of a request cut off: an upload session keeps it, as a
/// registry writing the body as it comes does (distribution does).
fn keep_cut_off(s: &mut State, target: &str, body: Vec<u8>) {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if let Some((_, uuid)) = path.split_once("/blobs/uploads/")
        && let Some((_, held)) = s.uploads.get_mut(uuid)
    {
        held.extend_from_slice(&body);
    }
}

/// Counts a held request (see [`State::held_method`]) in flight and, with
/// `hold = Some(k)`, waits until k are in flight together (every one that
/// has arrived is then let go) or [`HOLD_AT_MOST`] has passed.
async fn enter_held(state: &Mutex<State>) {
    let (me, hold) = {
        let mut s = state.lock().unwrap();
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        s.arrivals += 1;
        if s.hold.is_some_and(|k| s.in_flight >= k) {
            s.released = s.arrivals;
        }
        (s.arrivals, s.hold)
    };
    if hold.is_none() {
        return;
    }
    let started = std::time::Instant::now();
    while started.elapsed() < HOLD_AT_MOST && state.lock().unwrap().released < me {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn handle(state: &Mutex<State>, method: &str, target: &str, head: &Head, body: Vec<u8>) -> Answer {
    let mut s = state.lock().unwrap();
    s.log.push(format!("{method} {target}"));
    s.received += body.len();
    if let Some(i) = s
        .faults
        .iter()
        .position(|(m, t, _)| *m == method && target.contains(t.as_str()))
    {
        let (_, _, status) = s.faults.remove(i);
        return answer(status);
    }
    let lost = s
        .lost_answers
        .iter()
        .position(|(m, t)| *m == method && target.contains(t.as_str()));
    let mut done = carry_out(&mut s, method, target, head, body);
    if let Some(i) = s
        .wrong_ranges
        .iter()
        .position(|(m, t, _)| *m == method && target.contains(t.as_str()))
    {
        let (_, _, range) = s.wrong_ranges.remove(i);
        done.headers.retain(|(n, _)| n != "Range");
        done = done.header("Range", range);
    }
    match lost {
        Some(i) => {
            s.lost_answers.remove(i);
            answer(500)
        }
        None => done,
    }
}

fn carry_out(s: &mut State, method: &str, target: &str, head: &Head, body: Vec<u8>) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let param = |key: &str| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    let Some(rest) = path.strip_prefix("/v2/") else {
        return answer(404);
    };
    if let Some((repo, uuid)) = rest.split_once("/blobs/uploads/") {
        let repo = repo.to_string();
        if method == "POST" && uuid.is_empty() {
            if let (Some(digest), Some(from)) = (param("mount"), param("from"))
                && !s.refuse_mounts
                && let Some(bytes) = s.blobs.get(&(from, digest.clone())).cloned()
            {
                s.blobs.insert((repo.clone(), digest.clone()), bytes);
                return answer(201)
                    .header("Location", format!("/v2/{repo}/blobs/{digest}"))
                    .header("Docker-Content-Digest", digest);
            }
            s.sessions_opened += 1;
            let uuid = format!("u{}", s.sessions_opened);
            s.uploads.insert(uuid.clone(), (repo.clone(), Vec::new()));
            return session_answer(s, 202, &repo, &uuid);
        }
        let Some((owner, held)) = s.uploads.get(uuid) else {
            return answer(404);
        };
        if *owner != repo {
            return answer(404);
        }
        let held = held.len();
        if s.stateful_uploads && param("_state") != Some(held.to_string()) {
            s.uploads.remove(uuid);
            return answer(404).body(br#"{"errors":[{"code":"BLOB_UPLOAD_INVALID"}]}"#.to_vec());
        }
        match method {
            "GET" => session_answer(s, 204, &repo, uuid),
            "PATCH" => {
                // The spec's rule (distribution ignores the header and
                // appends): a chunk starts where the session ends.
                let start = (head.content_range.as_deref())
                    .and_then(|r| r.split_once('-'))
                    .and_then(|(start, _)| start.parse::<usize>().ok());
                if start.is_some_and(|start| start != held) {
                    return answer(416);
                }
                s.uploads.get_mut(uuid).unwrap().1.extend_from_slice(&body);
                session_answer(s, 202, &repo, uuid)
            }
            "PUT" => {
                let (_, mut bytes) = s.uploads.remove(uuid).unwrap();
                bytes.extend_from_slice(&body);
                let digest = Digest::sha256(&bytes).to_string();
                if param("digest").as_deref() != Some(digest.as_str()) {
                    return answer(400);
                }
                s.blobs.insert((repo, digest.clone()), bytes);
                answer(201).header("Docker-Content-Digest", digest)
            }
            _ => answer(405),
        }
    } else if let Some((repo, digest)) = rest.split_once("/blobs/") {
        let Some(bytes) = s.blobs.get(&(repo.to_string(), digest.to_string())) else {
            return answer(404);
        };
        let from = (head.range.as_deref())
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|_| !s.ignore_ranges);
        match from {
            Some(from) if from >= bytes.len() => answer(416),
            Some(from) => answer(206)
                .header("Docker-Content-Digest", digest)
                .header(
                    "Content-Range",
                    format!("bytes {from}-{}/{}", bytes.len() - 1, bytes.len()),
                )
                .body(bytes[from..].to_vec()),
            None => answer(200)
                .header("Docker-Content-Digest", digest)
                .body(bytes.clone()),
        }
    } else if let Some((repo, reference)) = rest.split_once("/manifests/") {
        let repo = repo.to_string();
        if method == "PUT" {
            let digest = Digest::sha256(&body).to_string();
            s.manifests.insert(
                (repo.clone(), digest.clone()),
                (head.content_type.clone(), body),
            );
            if !reference.starts_with("sha256:") {
                s.tags.insert((repo, reference.to_string()), digest.clone());
            }
            let mut a = answer(201);
            if !s.omit_digest {
                let answered = s.answer_digest.clone().unwrap_or(digest);
                a = a.header("Docker-Content-Digest", answered);
            }
            return a;
        }
        let digest = if reference.starts_with("sha256:") {
            Some(reference.to_string())
        } else {
            s.tags.get(&(repo.clone(), reference.to_string())).cloned()
        };
        match digest.and_then(|d| s.manifests.get(&(repo, d.clone())).map(|m| (d, m))) {
            Some((d, (media_type, bytes))) => answer(200)
                .header("Docker-Content-Digest", d)
                .header("Content-Type", media_type.clone())
                .body(bytes.clone()),
            None => answer(404),
        }
    } else {
        answer(404)
    }
}
