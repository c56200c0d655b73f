//! A tiny HTTP/1.1 server on raw tokio, for the token issuer and the
//! fault-injection proxy: raw sockets make "hang", "truncate the body" and
//! "close" faults exact, which a full server framework would smooth over.
//! [`serve_tls`] serves the same over TLS with the test PKI's server
//! certificate (127.0.0.1, localhost), for an https registry a test controls.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query as sent.
    pub target: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
    pub fn query(&self) -> Vec<(String, String)> {
        match self.target.split_once('?') {
            Some((_, q)) => url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect(),
            None => Vec::new(),
        }
    }
    pub fn query_param(&self, key: &str) -> Option<String> {
        self.query()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// For HEAD: the Content-Length to announce without a body.
    pub head_length: Option<usize>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            head_length: None,
        }
    }
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Response::new(status)
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(value).unwrap())
    }
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value.into()));
    }
    pub fn remove_header(&mut self, name: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }
}

pub enum Reply {
    Send(Response),
    /// Never answer; keep the connection open.
    Hang,
    /// Announce the whole body, send only this many bytes, then close.
    Truncate(Response, usize),
}

/// A running server; stops (and drops its connections) on drop.
pub struct Server {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// `host:port` for references.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }
}

/// Serves `handler` on `bind` (e.g. `127.0.0.1:0`).
pub async fn serve<F, Fut>(bind: &str, handler: F) -> Server
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    serve_with(bind, None, handler).await
}

/// Serves `handler` over TLS on `bind`, with the test PKI's server
/// certificate (clients trust it with `distribution::pki().ca_cert`).
pub async fn serve_tls<F, Fut>(bind: &str, handler: F) -> Server
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    serve_with(bind, Some(tls_acceptor()), handler).await
}

/// The DER blocks of a PEM file (what rustls takes).
fn pem_blocks(path: &std::path::Path) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let text = std::fs::read_to_string(path).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("-----BEGIN ") {
            current = Some(String::new());
        } else if line.starts_with("-----END ") {
            let b64 = current.take().unwrap();
            blocks.push(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            );
        } else if let Some(b) = current.as_mut() {
            b.push_str(line.trim());
        }
    }
    blocks
}

fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::{self, pki_types};
    let pki = super::distribution::pki();
    let certs = pem_blocks(&pki.server_cert)
        .into_iter()
        .map(pki_types::CertificateDer::from)
        .collect();
    let key = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(
        pem_blocks(&pki.server_key).remove(0),
    ));
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("the test server certificate and key");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve_with<F, Fut>(
    bind: &str,
    tls: Option<tokio_rustls::TlsAcceptor>,
    handler: F,
) -> Server
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let listener = TcpListener::bind(bind).await.expect("bind test server");
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            let tls = tls.clone();
            // Connections live in the JoinSet so aborting the server ends them.
            conns.spawn(async move {
                let _ = match tls {
                    None => connection(stream, handler).await,
                    Some(tls) => match tls.accept(stream).await {
                        Ok(stream) => connection(stream, handler).await,
                        Err(_) => Ok(()),
                    },
                };
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Server {
        addr,
        connections,
        task,
    }
}

async fn connection<S, F, Fut>(mut stream: S, handler: Arc<F>) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            // A TLS ClientHello to this plain-http server: refuse it at once,
            // as Go's (and so distribution's) server does.
            if buf.first() == Some(&0x16) {
                stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                    .await?;
                return Ok(());
            }
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        parsed
            .parse(&buf[..head_end])
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let method = parsed.method.unwrap_or("GET").to_string();
        let target = parsed.path.unwrap_or("/").to_string();
        let headers: Vec<(String, String)> = parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
        buf.drain(..head_end);
        let body = if chunked {
            // The engine's `push` streams layers with chunked uploads.
            match dechunk(&mut stream, &mut buf).await? {
                Some(body) => body,
                None => return Ok(()),
            }
        } else {
            while buf.len() < length {
                let mut chunk = [0u8; 8192];
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..length).collect()
        };
        let headers: Vec<(String, String)> = headers
            .into_iter()
            .filter(|(n, _)| n != "transfer-encoding")
            .collect();
        let is_head = method == "HEAD";
        let request = Request {
            method,
            target,
            headers,
            body,
        };
        match handler(request).await {
            Reply::Send(resp) => {
                stream.write_all(&head_bytes(&resp, is_head)).await?;
                if !is_head {
                    stream.write_all(&resp.body).await?;
                }
                stream.flush().await?;
            }
            Reply::Truncate(resp, n) => {
                stream.write_all(&head_bytes(&resp, false)).await?;
                stream
                    .write_all(&resp.body[..n.min(resp.body.len())])
                    .await?;
                stream.flush().await?;
                return Ok(());
            }
            Reply::Hang => {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Reads a chunked body from `buf` and then `stream`; `None` when the
/// connection closed before its end.
async fn dechunk(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = find(buf, b"\r\n") {
                break i;
            }
            if !fill(stream, buf).await? {
                return Ok(None);
            }
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| std::io::Error::other(format!("bad chunk size {size_text:?}: {e}")))?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (none expected), then the final CRLF.
            while find(buf, b"\r\n").is_none() {
                if !fill(stream, buf).await? {
                    return Ok(None);
                }
            }
            let end = find(buf, b"\r\n").unwrap();
            buf.drain(..end + 2);
            return Ok(Some(body));
        }
        while buf.len() < size + 2 {
            if !fill(stream, buf).await? {
                return Ok(None);
            }
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

/// Reads more from `stream` into `buf`; false at end of stream.
async fn fill(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 65536];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

fn head_bytes(resp: &Response, is_head: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (n, v) in &resp.headers {
        if n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding") {
            continue;
        }
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    let len = if is_head {
        resp.head_length.unwrap_or(resp.body.len())
    } else {
        resp.body.len()
    };
    out.push_str(&format!("Content-Length: {len}\r\n\r\n"));
    out.into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
