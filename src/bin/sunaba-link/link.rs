//! The proxy: each client connection is paired with one upstream
//! connection (opened at its first request, opened again if the upstream
//! closed it), and every exchange on it forwarded as it came — heads byte
//! for byte but for a `Location` naming the upstream, bodies streamed in
//! pieces (never a whole blob in memory) through the shape's buckets, with
//! the faults a rule puts on it. Requests to `/_link/` are the link's own
//! (see `admin`): not forwarded, counted or shaped.

use crate::faults::{self, Action, Cut, Fault, Point, Rule};
use crate::http::{self, Framing, HttpError, InBuf, RequestHead};
use crate::shape::{SHAPED_CHUNK, Shape};
use crate::stats::{Exchange, Live, Message, Stats};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the link waits for the upstream to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a stall looks whether the client gave up.
const STALL_TICK: Duration = Duration::from_millis(100);
/// How long the rest of a request may take once its answer is complete.
const EARLY_ANSWER_GRACE: Duration = Duration::from_secs(1);
/// How long a reset waits for the bytes before it to reach the peer.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

pub(crate) struct Link {
    upstream: SocketAddr,
    /// `http://` and the upstream as given: what its `Location`s may name.
    upstream_origin: String,
    link_origin: String,
    pub(crate) shape: Shape,
    rules: Mutex<Vec<Rule>>,
    pub(crate) stats: Stats,
}

impl Link {
    pub(crate) fn new(
        listen: SocketAddr,
        upstream: SocketAddr,
        upstream_as_given: &str,
        shape: Shape,
        rules: Vec<Rule>,
    ) -> Link {
        Link {
            upstream,
            upstream_origin: format!("http://{upstream_as_given}"),
            link_origin: format!("http://{listen}"),
            shape,
            rules: Mutex::new(rules),
            stats: Stats::default(),
        }
    }

    pub(crate) fn rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Accepts connections for as long as the process runs.
pub(crate) async fn serve(link: Arc<Link>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) if peer.ip().is_loopback() => {
                tokio::spawn(connection(link.clone(), stream));
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("sunaba-link: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One end of a connection and what was read from it.
pub(crate) struct Side {
    pub(crate) stream: TcpStream,
    pub(crate) buf: InBuf,
}

/// What ended an exchange early.
#[derive(Debug)]
enum Abort {
    /// A fault reset both connections.
    Reset,
    ClientClosed,
    /// The upstream closed (or failed) before the exchange was complete.
    UpstreamClosed,
    UpstreamUnreachable,
    /// The upstream's answer was not HTTP the link can frame.
    BadResponse,
}

impl Abort {
    fn outcome(&self) -> &'static str {
        match self {
            Abort::Reset => "reset",
            Abort::ClientClosed => "client closed",
            Abort::UpstreamClosed => "upstream closed",
            Abort::UpstreamUnreachable => "upstream unreachable",
            Abort::BadResponse => "bad response",
        }
    }
}

/// After an exchange: keep the connection, close it, or reset it.
enum Next {
    KeepAlive,
    Close,
    Reset,
}

async fn connection(link: Arc<Link>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    // Numbered (and counted) at its first forwarded request: a connection
    // that only asks the link for its stats is not traffic.
    let mut conn = 0;
    let mut client = Side {
        stream,
        buf: InBuf::new(),
    };
    let mut upstream: Option<Side> = None;
    let mut handshaken = false;
    loop {
        let head = match client.buf.read_request_head(&mut client.stream).await {
            Ok(Some(head)) => head,
            Ok(None) | Err(HttpError::Io(_)) | Err(HttpError::Truncated) => return,
            Err(e) => return refuse(&mut client.stream, 400, &e.to_string()).await,
        };
        let req = match http::parse_request(&head) {
            Ok(req) => req,
            Err(e) => return refuse(&mut client.stream, 400, &e.to_string()).await,
        };
        if req.target.starts_with("/_link/") || req.target == "/_link" {
            if crate::admin::serve(&link, &mut client, &req).await {
                continue;
            }
            return;
        }
        if !handshaken {
            conn = link.stats.connections.fetch_add(1, Ordering::Relaxed) + 1;
            link.shape.handshake().await;
            handshaken = true;
        }
        match exchange(&link, conn, &mut client, &mut upstream, &head, req).await {
            Next::KeepAlive => {}
            Next::Close => return,
            Next::Reset => {
                let _ = client.stream.set_zero_linger();
                if let Some(up) = &upstream {
                    let _ = up.stream.set_zero_linger();
                }
                return;
            }
        }
    }
}

/// Answers `status` and closes (a request the link cannot frame).
async fn refuse(stream: &mut TcpStream, status: u16, why: &str) {
    let body = serde_json::json!({"errors": [{"code": "LINK", "message": why}]}).to_string();
    let reply = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason(status),
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// The head and body a status fault answers with: distribution's error
/// shape.
fn status_reply(code: u16, retry_after: Option<&str>) -> (String, String) {
    let error = match code {
        429 => "TOOMANYREQUESTS",
        503 => "UNAVAILABLE",
        _ => "UNKNOWN",
    };
    let body =
        serde_json::json!({"errors": [{"code": error, "message": "injected by sunaba-link"}]})
            .to_string();
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        reason(code),
        body.len()
    );
    if let Some(r) = retry_after {
        head.push_str(&format!("Retry-After: {r}\r\n"));
    }
    head.push_str("\r\n");
    (head, body)
}

struct Ctx<'a> {
    link: &'a Link,
    id: u64,
    live: &'a Live,
}

async fn exchange(
    link: &Link,
    conn: u64,
    client: &mut Side,
    upstream: &mut Option<Side>,
    head: &[u8],
    req: RequestHead,
) -> Next {
    let fault = faults::choose(&mut link.rules(), &req.method, &req.target);
    let (id, live) = link.stats.open(Exchange {
        id: 0,
        connection: conn,
        method: req.method.clone(),
        target: req.target.clone(),
        status: None,
        request: Message::default(),
        response: Message::default(),
        fault: fault.as_ref().map(Fault::label),
        outcome: "in progress".into(),
        start_ms: 0.0,
        ms: 0.0,
    });
    let ctx = Ctx {
        link,
        id,
        live: &live,
    };
    match run(&ctx, client, upstream, head, &req, fault).await {
        Ok((status, keep_alive)) => {
            link.stats.close(id, Some(status), "complete");
            if keep_alive && !req.close {
                Next::KeepAlive
            } else {
                *upstream = None;
                Next::Close
            }
        }
        Err((status, abort)) => {
            link.stats.close(id, status, abort.outcome());
            match abort {
                Abort::Reset => Next::Reset,
                _ => {
                    *upstream = None;
                    Next::Close
                }
            }
        }
    }
}

/// One exchange: `Ok((status, keep the connection))`, or what stopped it
/// (with the status the client got, if any).
async fn run(
    ctx: &Ctx<'_>,
    client: &mut Side,
    upstream: &mut Option<Side>,
    head: &[u8],
    req: &RequestHead,
    fault: Option<Fault>,
) -> Result<(u16, bool), (Option<u16>, Abort)> {
    let link = ctx.link;
    let cut = fault.as_ref().and_then(Fault::cut);
    let cut_at = |point| cut.filter(|c: &Cut| c.point == point);
    let client_fd = client.stream.as_raw_fd();
    link.shape.one_way().await;
    if let Some(Fault::Status { code, retry_after }) = &fault {
        return answer_with_status(ctx, client, req, *code, retry_after.as_deref())
            .await
            .map_err(|a| (None, a));
    }
    if let Some(c) = cut_at(Point::RequestHead) {
        fire(ctx, c.action, client_fd, None)
            .await
            .map_err(|a| (None, a))?;
    }
    let up = match open_upstream(link, upstream).await {
        Ok(up) => up,
        Err(e) => {
            refuse(
                &mut client.stream,
                502,
                &format!("sunaba-link: the upstream {}: {e}", link.upstream),
            )
            .await;
            return Err((Some(502), Abort::UpstreamUnreachable));
        }
    };
    send(ctx, Dir::Up, &mut up.stream, head, &ctx.live.request_head)
        .await
        .map_err(|_| (None, Abort::UpstreamClosed))?;

    let Side {
        stream: client_stream,
        buf: client_buf,
    } = client;
    let Side {
        stream: up_stream,
        buf: up_buf,
    } = up;
    let (mut cr, mut cw) = client_stream.split();
    let (mut ur, mut uw) = up_stream.split();
    let request_cut = cut_at(Point::RequestBody);
    let (head_cut, body_cut) = (cut_at(Point::ResponseHead), cut_at(Point::ResponseBody));
    let status = AtomicU64::new(0);
    let sending = async {
        let mut pump = Pump::new(ctx, Dir::Up, request_cut);
        pump.body(client_buf, &mut cr, &mut uw, req.framing, client_fd)
            .await
    };
    let answering = relay_response(
        ctx,
        up_buf,
        &mut ur,
        &mut cw,
        &req.method,
        head_cut,
        body_cut,
        &status,
    );
    tokio::pin!(sending, answering);
    let mut sent: Option<Result<(), Abort>> = None;
    let answered = loop {
        tokio::select! {
            r = &mut sending, if sent.is_none() => match r {
                // The upstream may answer without reading it all: wait.
                Err(Abort::UpstreamClosed) | Ok(()) => sent = Some(r),
                Err(a) => return Err((status_of(&status), a)),
            },
            r = &mut answering => break r,
        }
    };
    let close = answered.map_err(|a| (status_of(&status), a))?;
    if sent.is_none() {
        // The answer came while the request's last bytes were on their way
        // (or the upstream answered without reading them all): let them go
        // on a short while.
        if let Ok(r) = tokio::time::timeout(EARLY_ANSWER_GRACE, &mut sending).await {
            sent = Some(r);
        }
    }
    let code = status_of(&status).unwrap_or(0);
    // A request whose body did not all go through leaves the connection
    // out of step: close it.
    Ok((code, !close && matches!(sent, Some(Ok(())))))
}

/// A status fault: the link answers `code` itself; the request's body (if
/// the client sends it without waiting for a 100) crosses the link and is
/// dropped. `Ok((code, keep the connection))`.
async fn answer_with_status(
    ctx: &Ctx<'_>,
    client: &mut Side,
    req: &RequestHead,
    code: u16,
    retry_after: Option<&str>,
) -> Result<(u16, bool), Abort> {
    let client_fd = client.stream.as_raw_fd();
    let Side { stream, buf } = client;
    let (mut cr, mut cw) = stream.split();
    if !req.expect_continue {
        let mut sink = Pump::new(ctx, Dir::Up, None);
        sink.body(buf, &mut cr, &mut tokio::io::sink(), req.framing, client_fd)
            .await?;
    }
    ctx.link.shape.one_way().await;
    let (head, body) = status_reply(code, retry_after);
    send(
        ctx,
        Dir::Down,
        &mut cw,
        head.as_bytes(),
        &ctx.live.response_head,
    )
    .await?;
    send(
        ctx,
        Dir::Down,
        &mut cw,
        body.as_bytes(),
        &ctx.live.response_body,
    )
    .await?;
    // A client that waits for a 100 may still send its body: close.
    Ok((code, !req.expect_continue))
}

fn status_of(s: &AtomicU64) -> Option<u16> {
    match s.load(Ordering::Relaxed) {
        0 => None,
        n => u16::try_from(n).ok(),
    }
}

/// The upstream connection of this client connection, opened if there is
/// none or the one there was closed meanwhile.
async fn open_upstream<'a>(
    link: &Link,
    slot: &'a mut Option<Side>,
) -> std::io::Result<&'a mut Side> {
    if slot
        .as_ref()
        .is_some_and(|up| !up.buf.buffered().is_empty() || !still_open(&up.stream))
    {
        *slot = None;
    }
    if slot.is_none() {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(link.upstream))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = stream.set_nodelay(true);
        *slot = Some(Side {
            stream,
            buf: InBuf::new(),
        });
    }
    Ok(slot.as_mut().expect("set above"))
}

/// Whether an idle upstream connection can take a request: nothing to
/// read (a close would read as 0 bytes, stray bytes as more).
fn still_open(stream: &TcpStream) -> bool {
    peek(stream.as_raw_fd()) == Peek::Idle
}

/// Forwards the response: interim heads, the final head (its `Location`
/// rewritten), its body; `Ok(close)`: the connection must close after it.
#[allow(clippy::too_many_arguments)]
async fn relay_response(
    ctx: &Ctx<'_>,
    buf: &mut InBuf,
    upstream: &mut (impl AsyncRead + Unpin),
    client: &mut tokio::net::tcp::WriteHalf<'_>,
    method: &str,
    head_cut: Option<Cut>,
    body_cut: Option<Cut>,
    status: &AtomicU64,
) -> Result<bool, Abort> {
    let link = ctx.link;
    let client_fd = client.as_ref().as_raw_fd();
    loop {
        let head = match buf.read_head(upstream).await {
            Ok(Some(head)) => head,
            Ok(None) | Err(HttpError::Io(_)) | Err(HttpError::Truncated) => {
                return Err(Abort::UpstreamClosed);
            }
            Err(_) => return Err(Abort::BadResponse),
        };
        let resp = http::parse_response(&head, method).map_err(|_| Abort::BadResponse)?;
        let head = http::rewrite_location(&head, &link.upstream_origin, &link.link_origin);
        let interim = (100..200).contains(&resp.status) && resp.status != 101;
        if !interim && let Some(c) = head_cut {
            fire(ctx, c.action, client_fd, None).await?;
        }
        link.shape.one_way().await;
        if !interim {
            // Recorded before the client can see it.
            status.store(u64::from(resp.status), Ordering::Relaxed);
            link.stats.mark(ctx.id, Some(resp.status), "in progress");
        }
        send(ctx, Dir::Down, client, &head, &ctx.live.response_head).await?;
        if interim {
            continue;
        }
        let mut pump = Pump::new(ctx, Dir::Down, body_cut);
        pump.body(buf, upstream, client, resp.framing, client_fd)
            .await?;
        return Ok(resp.close || resp.status == 101);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Client → upstream.
    Up,
    /// Upstream → client.
    Down,
}

impl Dir {
    /// What a failed read (from the source) or write (to the sink) means.
    fn read_failed(self) -> Abort {
        match self {
            Dir::Up => Abort::ClientClosed,
            Dir::Down => Abort::UpstreamClosed,
        }
    }
    fn write_failed(self) -> Abort {
        match self {
            Dir::Up => Abort::UpstreamClosed,
            Dir::Down => Abort::ClientClosed,
        }
    }
}

/// Writes `bytes` one way: through that direction's bucket, counted on
/// the link and in `counter`.
async fn send(
    ctx: &Ctx<'_>,
    dir: Dir,
    w: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    counter: &AtomicU64,
) -> Result<(), Abort> {
    let (bucket, total) = match dir {
        Dir::Up => (&ctx.link.shape.up, &ctx.link.stats.up),
        Dir::Down => (&ctx.link.shape.down, &ctx.link.stats.down),
    };
    let piece = if bucket.is_shaped() {
        SHAPED_CHUNK
    } else {
        usize::MAX
    };
    for part in bytes.chunks(piece.max(1)) {
        bucket.take(part.len()).await;
        w.write_all(part).await.map_err(|_| dir.write_failed())?;
        counter.fetch_add(part.len() as u64, Ordering::Relaxed);
        total.fetch_add(part.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Carries out a fault's action. A reset first lets what was sent reach
/// the peer (`sent_on`), so "after N bytes" means N bytes arrived. A stall
/// watches the client's socket (`client`), and ends early if it closed.
async fn fire(
    ctx: &Ctx<'_>,
    action: Action,
    client: RawFd,
    sent_on: Option<RawFd>,
) -> Result<(), Abort> {
    match action {
        Action::Reset => {
            if let Some(s) = sent_on {
                drain(s).await;
            }
            Err(Abort::Reset)
        }
        Action::Stall(how_long) => {
            ctx.link.stats.mark(ctx.id, None, "stalled");
            let until = how_long.map(|d| tokio::time::Instant::now() + d);
            loop {
                let now = tokio::time::Instant::now();
                if until.is_some_and(|t| now >= t) {
                    ctx.link.stats.mark(ctx.id, None, "in progress");
                    return Ok(());
                }
                let tick = until.map_or(now + STALL_TICK, |t| t.min(now + STALL_TICK));
                tokio::time::sleep_until(tick).await;
                if peek(client) == Peek::Closed {
                    return Err(Abort::ClientClosed);
                }
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Peek {
    /// Nothing to read now.
    Idle,
    /// Bytes wait to be read (they hide a close behind them).
    Data,
    /// The peer closed (or the connection failed).
    Closed,
}

/// Looks at a socket without reading from it or waiting.
fn peek(fd: RawFd) -> Peek {
    let mut byte = 0u8;
    // SAFETY: recv with MSG_PEEK | MSG_DONTWAIT writes at most one byte to
    // `byte` and never blocks; the caller's stream keeps `fd` open.
    let n = unsafe {
        libc::recv(
            fd,
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => Peek::Closed,
        n if n > 0 => Peek::Data,
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Peek::Idle,
            _ => Peek::Closed,
        },
    }
}

/// Waits (a bounded while) until the socket's send queue is empty.
async fn drain(fd: RawFd) {
    let start = tokio::time::Instant::now();
    while unsent(fd).is_some_and(|n| n > 0) && start.elapsed() < DRAIN_LIMIT {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Bytes in the socket's send queue not yet acknowledged by the peer.
fn unsent(fd: RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ on a socket) writes one int to `n`; the
    // caller's stream keeps `fd` open.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then(|| usize::try_from(n).unwrap_or(0))
}

/// Moves one message body one way, by its framing, with the cut a fault
/// put on it.
struct Pump<'c, 'a> {
    ctx: &'c Ctx<'a>,
    dir: Dir,
    cut: Option<Cut>,
    /// Payload bytes forwarded (a chunked body's framing not counted).
    payload: u64,
}

impl<'c, 'a> Pump<'c, 'a> {
    fn new(ctx: &'c Ctx<'a>, dir: Dir, cut: Option<Cut>) -> Self {
        Pump {
            ctx,
            dir,
            cut,
            payload: 0,
        }
    }

    fn counter(&self) -> &AtomicU64 {
        match self.dir {
            Dir::Up => &self.ctx.live.request_body,
            Dir::Down => &self.ctx.live.response_body,
        }
    }

    /// `client` is the client's socket (a stall watches it); the sink's
    /// socket is what a reset drains first.
    async fn body(
        &mut self,
        buf: &mut InBuf,
        from: &mut (impl AsyncRead + Unpin),
        to: &mut (impl AsyncWrite + Unpin + SocketOf),
        framing: Framing,
        client: RawFd,
    ) -> Result<(), Abort> {
        match framing {
            Framing::Empty => {}
            Framing::Length(n) => self.exact(buf, from, to, Some(n), client).await?,
            Framing::UntilClose => self.exact(buf, from, to, None, client).await?,
            Framing::Chunked => loop {
                let line = self.line(buf, from).await?;
                self.framing(to, &line).await?;
                let size = http::chunk_size(&line).map_err(|_| self.bad())?;
                if size == 0 {
                    loop {
                        let trailer = self.line(buf, from).await?;
                        self.framing(to, &trailer).await?;
                        if trailer == b"\r\n" {
                            break;
                        }
                    }
                    break;
                }
                self.exact(buf, from, to, Some(size), client).await?;
                let end = self.line(buf, from).await?;
                if end != b"\r\n" {
                    return Err(self.bad());
                }
                self.framing(to, &end).await?;
            },
        }
        // A cut exactly at the body's end (or at 0 of an empty body).
        self.maybe_fire(to, client).await?;
        to.flush().await.map_err(|_| self.dir.write_failed())
    }

    fn bad(&self) -> Abort {
        match self.dir {
            Dir::Up => Abort::ClientClosed,
            Dir::Down => Abort::BadResponse,
        }
    }

    async fn line(
        &self,
        buf: &mut InBuf,
        from: &mut (impl AsyncRead + Unpin),
    ) -> Result<Vec<u8>, Abort> {
        buf.read_line(from).await.map_err(|e| match e {
            HttpError::Io(_) | HttpError::Truncated => self.dir.read_failed(),
            _ => self.bad(),
        })
    }

    async fn framing(&self, to: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> Result<(), Abort> {
        send(self.ctx, self.dir, to, bytes, self.counter()).await
    }

    async fn maybe_fire(
        &mut self,
        to: &mut (impl AsyncWrite + Unpin + SocketOf),
        client: RawFd,
    ) -> Result<(), Abort> {
        if let Some(cut) = self.cut
            && self.payload == cut.after
        {
            self.cut = None;
            to.flush().await.map_err(|_| self.dir.write_failed())?;
            fire(self.ctx, cut.action, client, to.socket()).await?;
        }
        Ok(())
    }

    /// `n` payload bytes (`None`: to the end of the stream).
    async fn exact(
        &mut self,
        buf: &mut InBuf,
        from: &mut (impl AsyncRead + Unpin),
        to: &mut (impl AsyncWrite + Unpin + SocketOf),
        n: Option<u64>,
        client: RawFd,
    ) -> Result<(), Abort> {
        let mut left = n;
        while left != Some(0) {
            self.maybe_fire(to, client).await?;
            if buf.buffered().is_empty() {
                let got = buf.fill(from).await.map_err(|_| self.dir.read_failed())?;
                if got == 0 {
                    return match left {
                        None => Ok(()),
                        Some(_) => Err(self.dir.read_failed()),
                    };
                }
            }
            let mut take = buf.buffered().len() as u64;
            if let Some(l) = left {
                take = take.min(l);
            }
            if let Some(cut) = self.cut
                && cut.after > self.payload
            {
                take = take.min(cut.after - self.payload);
            }
            let take = take as usize;
            send(
                self.ctx,
                self.dir,
                to,
                &buf.buffered()[..take],
                self.counter(),
            )
            .await?;
            buf.consume(take);
            self.payload += take as u64;
            if let Some(l) = &mut left {
                *l -= take as u64;
            }
        }
        Ok(())
    }
}

/// The socket behind a sink, if it is one (a reset drains it first).
trait SocketOf {
    fn socket(&self) -> Option<RawFd>;
}

impl SocketOf for tokio::net::tcp::WriteHalf<'_> {
    fn socket(&self) -> Option<RawFd> {
        Some(self.as_ref().as_raw_fd())
    }
}

impl SocketOf for tokio::io::Sink {
    fn socket(&self) -> Option<RawFd> {
        None
    }
}
