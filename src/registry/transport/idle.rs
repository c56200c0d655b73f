//! Timeouts that measure progress, not length. An exchange has three:
//!
//! - **connect** (TCP and TLS): reqwest's own `connect_timeout`;
//! - **header**: waiting for the response's status line with nothing to
//!   send — before a request body starts moving (connect included; cut to
//!   what the request's retry budget has left), and after its last byte was
//!   handed to the connection;
//! - **idle**: a body, either way, that moves no byte for that long.
//!
//! A body that keeps moving is never cut, however long it takes. Downloads
//! time each read of the response body. Uploads cannot be timed that way:
//! reqwest has no write timeout, and its `read_timeout` runs from the
//! request's start, so a long upload would trip it. So the request body is
//! a [`WatchedBody`] that hands the connection its bytes a chunk at a time
//! and records when it last did; hyper asks for the next chunk only once
//! it has room (its buffer and the socket's), so a link that stops taking
//! bytes stops the asking, and [`watch`] notices.

use crate::registry::transport::retry::Budget;
use bytes::Bytes;
use reqwest::Method;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The timeouts of every exchange of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// TCP connect and TLS handshake.
    pub(crate) connect: Duration,
    /// Waiting for the response's head with nothing moving.
    pub(crate) header: Duration,
    /// A body (either way) moving no byte.
    pub(crate) idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            // Finishing a large upload can take a registry a while
            // (verifying the digest, moving the blob in object storage).
            header: Duration::from_secs(60),
            idle: Duration::from_secs(30),
        }
    }
}

/// How much of a request body the connection has taken, and when; the
/// watchdog is woken when the body starts and when it ends (the limit it
/// waits for changes then; in between it looks again at each idle limit).
#[derive(Debug, Clone)]
pub(crate) struct Progress(Arc<(Mutex<Track>, tokio::sync::Notify)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Track {
    /// The exchange was handed to the connection.
    pub started: Instant,
    /// Bytes of the body handed to the connection, of `total`.
    pub sent: u64,
    pub total: u64,
    /// When the first and the latest chunk were handed over.
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    /// After the last chunk: when the connection's send queue was last
    /// seen shrinking ([`super::send_queue`]): the body still moving.
    pub drained: Option<Instant>,
}

impl Progress {
    pub(crate) fn new(total: u64, started: Instant) -> Progress {
        let track = Track {
            started,
            sent: 0,
            total,
            first: None,
            last: None,
            drained: None,
        };
        Progress(Arc::new((Mutex::new(track), tokio::sync::Notify::new())))
    }

    fn advance(&self, n: u64, now: Instant) {
        let mut t = self.0.0.lock().expect("progress lock");
        let phase_changes = t.first.is_none() || t.sent + n >= t.total;
        t.sent += n;
        t.first.get_or_insert(now);
        t.last = Some(now);
        drop(t);
        if phase_changes {
            self.0.1.notify_one();
        }
    }

    /// The send queue was seen shrinking at `now`, the body handed over.
    fn drained(&self, now: Instant) {
        self.0.0.lock().expect("progress lock").drained = Some(now);
    }

    pub(crate) fn track(&self) -> Track {
        *self.0.0.lock().expect("progress lock")
    }
}

impl Track {
    /// The time the body was moving: from its first chunk to its last,
    /// or to the send queue's last shrinking after it.
    pub(crate) fn moving(&self) -> Duration {
        match (self.first, self.moved()) {
            (Some(first), Some(moved)) => moved.saturating_duration_since(first),
            _ => Duration::ZERO,
        }
    }

    /// When the body last moved: its latest chunk handed over, or the send
    /// queue seen shrinking after that.
    fn moved(&self) -> Option<Instant> {
        self.last.max(self.drained)
    }
}

/// Chunk a body is handed over in: small enough that progress is seen
/// often, large enough to cost nothing.
const CHUNK: usize = 64 << 10;

/// A request body handed to the connection a chunk at a time, recording
/// its [`Progress`]. Its exact size is known, so it goes with a
/// `Content-Length`, as a plain body would.
pub(crate) struct WatchedBody {
    bytes: Bytes,
    at: usize,
    progress: Progress,
}

impl WatchedBody {
    pub(crate) fn new(bytes: Bytes, progress: Progress) -> WatchedBody {
        WatchedBody {
            bytes,
            at: 0,
            progress,
        }
    }
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let end = (self.at + CHUNK).min(self.bytes.len());
        if self.at == end {
            return Poll::Ready(None);
        }
        let chunk = self.bytes.slice(self.at..end);
        self.at = end;
        self.progress.advance(chunk.len() as u64, Instant::now());
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact((self.bytes.len() - self.at) as u64)
    }
}

/// Why an exchange was given up while sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No response head within this (the header timeout, or what the
    /// budget had left) with nothing to send.
    NoResponse { waited: Duration, body: Option<u64> },
    /// The request body stopped moving.
    Stalled {
        idle: Duration,
        sent: u64,
        total: u64,
    },
}

/// What to do next, watching an exchange at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Look again then.
    Until(Instant),
    Expired(Expired),
}

/// The limits an exchange is watched by: the timeouts, and what the
/// request's retry budget had left (a waiting limit) when it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header: Duration,
    pub idle: Duration,
    pub budget_left: Duration,
}

impl Limits {
    pub(crate) fn new(timeouts: &Timeouts, budget: &Budget) -> Limits {
        Limits {
            header: timeouts.header,
            idle: timeouts.idle,
            budget_left: budget.remaining(),
        }
    }
}

/// The arithmetic of [`watch`]. Before the body moves: a header wait from
/// the start, cut to what the budget has left. While it moves: idle from
/// its latest chunk. Once the last chunk is handed over: the header
/// timeout alone, not cut by the budget, from when the body last moved —
/// the socket buffers (megabytes) may still be sending what they took:
/// while the send queue shrinks, the wait starts again.
fn verdict(t: &Track, now: Instant, limits: &Limits) -> Verdict {
    let (from, limit, expired) = match t.last {
        Some(last) if t.sent < t.total => (
            last,
            limits.idle,
            Expired::Stalled {
                idle: limits.idle,
                sent: t.sent,
                total: t.total,
            },
        ),
        Some(last) => {
            let body = Some(t.total);
            let waited = limits.header;
            let moved = t.moved().unwrap_or(last);
            (moved, waited, Expired::NoResponse { waited, body })
        }
        None => {
            let waited = limits.header.min(limits.budget_left);
            let body = None;
            (t.started, waited, Expired::NoResponse { waited, body })
        }
    };
    // A limit past what an Instant holds never comes.
    match from.checked_add(limit.max(Duration::from_millis(1))) {
        Some(at) if at > now => Verdict::Until(at),
        Some(_) => Verdict::Expired(expired),
        None => Verdict::Until(now + Duration::from_secs(86_400)),
    }
}

/// How often the send queue is looked at while a handed-over body drains.
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// Resolves when the exchange `progress` tracks has waited or stalled past
/// `limits` (never, while it keeps moving): race it against the exchange.
/// `queued` says how many bytes the connection still holds
/// ([`super::send_queue::queued_to`] the registry's port); once the body
/// is handed over it is asked every [`DRAIN_POLL`] while it is not empty,
/// and each time it has shrunk the body counts as moving.
pub(crate) async fn watch(
    progress: &Progress,
    limits: Limits,
    mut queued: impl FnMut() -> Option<u64>,
) -> Expired {
    let mut seen: Option<u64> = None;
    loop {
        let t = progress.track();
        let mut wake = None;
        if t.total > 0 && t.sent == t.total {
            let now = queued();
            if let (Some(before), Some(now)) = (seen, now)
                && now < before
            {
                progress.drained(Instant::now());
            }
            if now.is_some_and(|n| n > 0) {
                wake = Some(Instant::now() + DRAIN_POLL);
            }
            seen = now;
        }
        match verdict(&progress.track(), Instant::now(), &limits) {
            Verdict::Until(at) => {
                let at = wake.map_or(at, |w| w.min(at));
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => {}
                    () = progress.0.1.notified() => {}
                }
            }
            Verdict::Expired(e) => return e,
        }
    }
}

/// What an exchange moves, for messages: `blob sha256:…` (a blob's GET or
/// HEAD, or the PUT that ends its upload), `manifest REPO:TAG`, or
/// `fallback` (the kind of answer expected).
pub(crate) fn subject(method: &Method, target: &str, fallback: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // What a valid name holds is printable ASCII; anything else (a
    // registry's Location can hold anything) is shown quoted and escaped.
    let shown = |s: &str| {
        if s.chars().all(|c| c.is_ascii_graphic()) {
            s.to_string()
        } else {
            format!("{s:?}")
        }
    };
    if let Some((repo, reference)) = path.strip_prefix("/v2/").and_then(|p| p.rsplit_once('/')) {
        if let Some(repo) = repo.strip_suffix("/manifests") {
            let sep = if reference.contains(':') { '@' } else { ':' };
            return format!("manifest {}{sep}{}", shown(repo), shown(reference));
        }
        if repo.ends_with("/blobs") {
            return format!("blob {}", shown(reference));
        }
    }
    let digest = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "digest")
        .last();
    match digest {
        Some((_, d)) if *method == Method::PUT && path.contains("/blobs/uploads/") => {
            format!("blob {}", shown(&d))
        }
        _ => format!("the {fallback}"),
    }
}

/// `n` with thousands separators: 12,582,912.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A timeout as people read it: `30 s`, `0.5 s`.
pub(crate) fn seconds(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// The message of a stall: `no bytes for 30 s while uploading blob
/// sha256:… (12,582,912 of 108,003,328 bytes sent)`.
pub(crate) fn stalled(
    idle: Duration,
    upload: bool,
    subject: &str,
    moved: u64,
    total: Option<u64>,
) -> String {
    let (doing, done) = if upload {
        ("uploading", "sent")
    } else {
        ("downloading", "received")
    };
    let total = total.map_or("?".to_string(), grouped);
    format!(
        "no bytes for {} while {doing} {subject} ({} of {total} bytes {done})",
        seconds(idle),
        grouped(moved)
    )
}

impl Expired {
    /// The message, for the retry layer (the registry is named by the
    /// error around it).
    pub(crate) fn reason(&self, subject: &str) -> String {
        match *self {
            Expired::NoResponse { waited, body: None } => {
                format!("no response within {} ms", waited.as_millis())
            }
            Expired::NoResponse {
                waited,
                body: Some(n),
            } => format!(
                "no response within {} ms after the {}-byte body of {subject} was sent",
                waited.as_millis(),
                grouped(n)
            ),
            Expired::Stalled { idle, sent, total } => {
                stalled(idle, true, subject, sent, Some(total))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    const LIMITS: Limits = Limits {
        header: Duration::from_secs(60),
        idle: Duration::from_secs(30),
        budget_left: Duration::from_secs(120),
    };

    fn track(t0: Instant, sent: u64, total: u64, first: Option<u64>, last: Option<u64>) -> Track {
        Track {
            started: t0,
            sent,
            total,
            first: first.map(|f| t0 + s(f)),
            last: last.map(|l| t0 + s(l)),
            drained: None,
        }
    }

    #[test]
    fn before_the_body_moves_the_header_wait_is_cut_to_the_budget() {
        let t0 = Instant::now();
        let waiting = track(t0, 0, 100, None, None);
        assert_eq!(
            verdict(&waiting, t0 + s(59), &LIMITS),
            Verdict::Until(t0 + s(60))
        );
        let no_response = Verdict::Expired(Expired::NoResponse {
            waited: s(60),
            body: None,
        });
        assert_eq!(verdict(&waiting, t0 + s(60), &LIMITS), no_response);
        let short = Limits {
            budget_left: s(2),
            ..LIMITS
        };
        assert_eq!(
            verdict(&waiting, t0 + s(1), &short),
            Verdict::Until(t0 + s(2))
        );
    }

    #[test]
    fn a_moving_body_is_never_cut_and_a_still_one_is_after_idle() {
        let t0 = Instant::now();
        // Ten minutes in, a chunk a second ago: far past every other
        // limit, yet it goes on.
        let moving = track(t0, 50, 100, Some(1), Some(600));
        assert_eq!(
            verdict(&moving, t0 + s(601), &LIMITS),
            Verdict::Until(t0 + s(630))
        );
        assert_eq!(
            verdict(&moving, t0 + s(630), &LIMITS),
            Verdict::Expired(Expired::Stalled {
                idle: s(30),
                sent: 50,
                total: 100
            })
        );
    }

    #[test]
    fn after_the_body_the_header_timeout_alone_bounds_the_wait() {
        let t0 = Instant::now();
        let spent = Limits {
            budget_left: Duration::ZERO,
            ..LIMITS
        };
        // 600 s moving, the budget long spent: the socket buffers may
        // still be sending, so the answer gets the whole header timeout.
        let sent = track(t0, 100, 100, Some(4), Some(604));
        assert_eq!(
            verdict(&sent, t0 + s(605), &spent),
            Verdict::Until(t0 + s(664))
        );
        assert_eq!(
            verdict(&sent, t0 + s(664), &spent),
            Verdict::Expired(Expired::NoResponse {
                waited: s(60),
                body: Some(100)
            })
        );
        // Before the body, a spent budget leaves the shortest wait.
        let waiting = track(t0, 0, 100, None, None);
        assert_eq!(
            verdict(&waiting, t0, &spent),
            Verdict::Until(t0 + Duration::from_millis(1))
        );
    }

    #[test]
    fn a_send_queue_seen_shrinking_after_the_body_starts_the_wait_again() {
        let t0 = Instant::now();
        // Handed over at 4 s; the buffers still sending at 100 s.
        let draining = Track {
            drained: Some(t0 + s(100)),
            ..track(t0, 100, 100, Some(1), Some(4))
        };
        assert_eq!(
            verdict(&draining, t0 + s(101), &LIMITS),
            Verdict::Until(t0 + s(160))
        );
        assert_eq!(draining.moving(), s(99), "the budget is given it back");
    }

    /// `watch` after the body: a queue that shrinks keeps the exchange
    /// going past the header timeout; once it stops shrinking the header
    /// timeout runs from then. (Real time, polls [`DRAIN_POLL`] apart: the
    /// verdict reads the std clock, which a paused runtime does not move.)
    #[tokio::test]
    async fn watch_waits_while_the_queue_drains_and_then_the_header_timeout() {
        let started = Instant::now();
        let progress = Progress::new(10, started);
        progress.advance(10, started);
        let limits = Limits {
            header: Duration::from_millis(1500),
            ..LIMITS
        };
        // Draining for 2 s (a byte a millisecond), then stuck at one byte.
        let queue = move || {
            let ms = started.elapsed().as_millis().min(2000) as u64;
            Some(2001 - ms)
        };
        let expired = watch(&progress, limits, queue).await;
        assert_eq!(
            expired,
            Expired::NoResponse {
                waited: limits.header,
                body: Some(10)
            }
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(3400) && waited < Duration::from_millis(6000),
            "gave up after {waited:?}: 2 s draining, then 1.5 s"
        );
        // Without a queue to look at, the header timeout from the body.
        let progress = Progress::new(10, Instant::now());
        progress.advance(10, Instant::now());
        let t = Instant::now();
        watch(&progress, limits, || None).await;
        let waited = t.elapsed();
        assert!(
            waited >= limits.header && waited < Duration::from_millis(3000),
            "{waited:?}"
        );
    }

    #[test]
    fn a_huge_limit_never_overflows() {
        let t0 = Instant::now();
        let forever = Limits {
            header: Duration::MAX,
            idle: Duration::MAX,
            budget_left: Duration::MAX,
        };
        assert!(matches!(
            verdict(&track(t0, 0, 1, None, None), t0, &forever),
            Verdict::Until(_)
        ));
    }

    #[tokio::test]
    async fn the_body_goes_in_chunks_with_its_exact_size_recording_progress() {
        let t0 = Instant::now();
        let bytes = Bytes::from(vec![7u8; CHUNK * 2 + 5]);
        let progress = Progress::new(bytes.len() as u64, t0);
        let mut body = WatchedBody::new(bytes.clone(), progress.clone());
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let data = frame.unwrap().into_data().unwrap();
            sizes.push(data.len());
            got.extend_from_slice(&data);
            assert_eq!(progress.track().sent, got.len() as u64);
        }
        assert_eq!(sizes, [CHUNK, CHUNK, 5]);
        assert_eq!(got, bytes);
        assert!(body.is_end_stream());
        let t = progress.track();
        assert!(t.first.is_some() && t.last >= t.first);
    }

    #[test]
    fn what_moves_is_named_by_the_request() {
        let d = "sha256:0123";
        assert_eq!(
            subject(&Method::GET, &format!("/v2/a/b/blobs/{d}"), "blob"),
            "blob sha256:0123"
        );
        assert_eq!(
            subject(
                &Method::PUT,
                &format!("/v2/a/blobs/uploads/u-1?_state=x&digest={d}"),
                "blob"
            ),
            "blob sha256:0123"
        );
        assert_eq!(
            subject(&Method::GET, "/v2/a/b/manifests/v1", "manifest"),
            "manifest a/b:v1"
        );
        assert_eq!(
            subject(&Method::PUT, &format!("/v2/a/manifests/{d}"), "x"),
            "manifest a@sha256:0123"
        );
        assert_eq!(
            subject(&Method::GET, "/v2/a/tags/list?n=1000", "tag list page"),
            "the tag list page"
        );
        assert_eq!(
            subject(&Method::PUT, "/v2/a/blobs/uploads/u?digest=%1b[31m", "blob"),
            "blob \"\\u{1b}[31m\"",
            "escaped"
        );
    }

    #[test]
    fn messages_group_digits_and_say_which_way() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(12_582_912), "12,582,912");
        assert_eq!(grouped(108_003_328), "108,003,328");
        assert_eq!(seconds(s(30)), "30 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(
            stalled(s(30), true, "blob sha256:ab", 12_582_912, Some(108_003_328)),
            "no bytes for 30 s while uploading blob sha256:ab (12,582,912 of 108,003,328 bytes sent)"
        );
        assert_eq!(
            stalled(s(2), false, "manifest a:1", 64, None),
            "no bytes for 2 s while downloading manifest a:1 (64 of ? bytes received)"
        );
    }
}
