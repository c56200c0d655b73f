//! A fake OCI registry for unit tests: blobs, manifests and tags in memory,
//! monolithic uploads and cross-repository mounts over plain HTTP/1.1 on
//! loopback, a log of every request, and faults to inject (statuses,
//! refused mounts, wrong or missing `Docker-Content-Digest` answers).

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
    uploads: HashMap<String, String>,
    /// Every request: `METHOD target`.
    pub log: Vec<String>,
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
    /// Hold each HEAD until this many are in flight together (or
    /// [`HOLD_AT_MOST`] has passed): how many a client sends at once shows
    /// in [`State::max_heads_in_flight`] without depending on timing.
    pub hold_heads: Option<usize>,
    heads_in_flight: usize,
    pub max_heads_in_flight: usize,
    head_arrivals: usize,
    heads_released: usize,
}

/// How long a held HEAD waits for the others at most.
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
        let content_type = header("content-type").unwrap_or_default();
        buf.drain(..head_end);
        while buf.len() < length {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf.drain(..length).collect();
        if method == "HEAD" {
            enter_head(&state).await;
        }
        let a = handle(&state, &method, &target, &content_type, body);
        if method == "HEAD" {
            state.lock().unwrap().heads_in_flight -= 1;
        }
        let mut out = format!("HTTP/1.1 {} X\r\n", a.status);
        for (n, v) in &a.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("Content-Length: {}\r\n\r\n", a.body.len()));
        let mut bytes = out.into_bytes();
        if method != "HEAD" {
            bytes.extend_from_slice(&a.body);
        }
        if conn.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Counts a HEAD in flight and, with `hold_heads = Some(k)`, waits until
/// k are in flight together (every HEAD that has arrived is then let go)
/// or [`HOLD_AT_MOST`] has passed.
async fn enter_head(state: &Mutex<State>) {
    let (me, hold) = {
        let mut s = state.lock().unwrap();
        s.heads_in_flight += 1;
        s.max_heads_in_flight = s.max_heads_in_flight.max(s.heads_in_flight);
        s.head_arrivals += 1;
        if s.hold_heads.is_some_and(|k| s.heads_in_flight >= k) {
            s.heads_released = s.head_arrivals;
        }
        (s.head_arrivals, s.hold_heads)
    };
    if hold.is_none() {
        return;
    }
    let started = std::time::Instant::now();
    while started.elapsed() < HOLD_AT_MOST && state.lock().unwrap().heads_released < me {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn handle(
    state: &Mutex<State>,
    method: &str,
    target: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Answer {
    let mut s = state.lock().unwrap();
    s.log.push(format!("{method} {target}"));
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
    let done = carry_out(&mut s, method, target, content_type, body);
    match lost {
        Some(i) => {
            s.lost_answers.remove(i);
            answer(500)
        }
        None => done,
    }
}

fn carry_out(
    s: &mut State,
    method: &str,
    target: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Answer {
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
        match (method, uuid) {
            ("POST", "") => {
                if let (Some(digest), Some(from)) = (param("mount"), param("from"))
                    && !s.refuse_mounts
                    && let Some(bytes) = s.blobs.get(&(from, digest.clone())).cloned()
                {
                    s.blobs.insert((repo.clone(), digest.clone()), bytes);
                    return answer(201)
                        .header("Location", format!("/v2/{repo}/blobs/{digest}"))
                        .header("Docker-Content-Digest", digest);
                }
                let uuid = format!("u{}", s.uploads.len() + 1);
                s.uploads.insert(uuid.clone(), repo.clone());
                // Relative, as ghcr.io writes it (distribution's absolute
                // form is covered by the integration tests).
                let location = format!("/v2/{repo}/blobs/uploads/{uuid}?_state=x");
                answer(202).header("Location", location)
            }
            ("PUT", uuid) => {
                let Some(owner) = s.uploads.remove(uuid) else {
                    return answer(404);
                };
                let digest = Digest::sha256(&body).to_string();
                if owner != repo || param("digest").as_deref() != Some(digest.as_str()) {
                    return answer(400);
                }
                s.blobs.insert((repo, digest.clone()), body);
                answer(201).header("Docker-Content-Digest", digest)
            }
            _ => answer(405),
        }
    } else if let Some((repo, digest)) = rest.split_once("/blobs/") {
        match s.blobs.get(&(repo.to_string(), digest.to_string())) {
            Some(bytes) => answer(200)
                .header("Docker-Content-Digest", digest)
                .body(bytes.clone()),
            None => answer(404),
        }
    } else if let Some((repo, reference)) = rest.split_once("/manifests/") {
        let repo = repo.to_string();
        if method == "PUT" {
            let digest = Digest::sha256(&body).to_string();
            s.manifests.insert(
                (repo.clone(), digest.clone()),
                (content_type.to_string(), body),
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
