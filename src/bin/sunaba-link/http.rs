//! HTTP/1.1 as the link needs it: heads parsed where they enter (bounded,
//! by httparse), message framing (RFC 9112 §6), and a read buffer that
//! outlives one exchange (a keep-alive connection's next request may be in
//! it already). Bodies are never parsed beyond their framing.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest head the link reads (distribution's are well under 8 KiB).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most headers a head may carry.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size or trailer line.
pub(crate) const MAX_LINE: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("the peer closed the connection in the middle of a message")]
    Truncated,
    #[error("a head over {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("a line over {MAX_LINE} bytes")]
    LineTooLong,
    #[error("not HTTP/1.x: {0}")]
    Malformed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Bytes read from a peer and not yet used: a buffer allocated (and
/// zeroed) once, refilled in place.
#[derive(Debug)]
pub(crate) struct InBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

/// What one read may bring.
const READ_SIZE: usize = 64 * 1024;

impl InBuf {
    pub(crate) fn new() -> InBuf {
        InBuf {
            data: vec![0; 2 * READ_SIZE],
            start: 0,
            end: 0,
        }
    }

    pub(crate) fn buffered(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more (up to 64 KiB); 0 at the end of the stream.
    pub(crate) async fn fill(
        &mut self,
        r: &mut (impl AsyncRead + Unpin),
    ) -> std::io::Result<usize> {
        if self.data.len() - self.end < READ_SIZE {
            // Move what is left to the front; grow only for a long head.
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.data.len() - self.end < READ_SIZE {
                self.data.resize(self.end + READ_SIZE, 0);
            }
        }
        let n = r
            .read(&mut self.data[self.end..self.end + READ_SIZE])
            .await?;
        self.end += n;
        Ok(n)
    }

    /// The next head, through its blank line; `None` if the stream ends
    /// before its first byte (a keep-alive connection closed between
    /// requests).
    pub(crate) async fn read_head(
        &mut self,
        r: &mut (impl AsyncRead + Unpin),
    ) -> Result<Option<Vec<u8>>, HttpError> {
        self.read_head_where(r, |_| Ok(())).await
    }

    /// The next request head, as `read_head`, refused as soon as what has
    /// arrived cannot begin one — a TLS handshake sent to plain http, say:
    /// a registry answers that at once (400), so the link does too, rather
    /// than wait for a blank line that never comes.
    pub(crate) async fn read_request_head(
        &mut self,
        r: &mut (impl AsyncRead + Unpin),
    ) -> Result<Option<Vec<u8>>, HttpError> {
        self.read_head_where(r, request_prefix).await
    }

    /// A head, with `prefix` judging each incomplete one.
    async fn read_head_where(
        &mut self,
        r: &mut (impl AsyncRead + Unpin),
        prefix: fn(&[u8]) -> Result<(), HttpError>,
    ) -> Result<Option<Vec<u8>>, HttpError> {
        let mut searched: usize = 0;
        loop {
            let have = self.buffered();
            if let Some(end) = find(&have[searched.saturating_sub(3)..], b"\r\n\r\n") {
                let end = searched.saturating_sub(3) + end + 4;
                let head = have[..end].to_vec();
                self.consume(end);
                return Ok(Some(head));
            }
            searched = have.len();
            if searched > MAX_HEAD {
                return Err(HttpError::HeadTooLarge);
            }
            prefix(have)?;
            if self.fill(r).await? == 0 {
                return if self.buffered().is_empty() {
                    Ok(None)
                } else {
                    Err(HttpError::Truncated)
                };
            }
        }
    }

    /// One line through its CRLF (a chunk size, a trailer).
    pub(crate) async fn read_line(
        &mut self,
        r: &mut (impl AsyncRead + Unpin),
    ) -> Result<Vec<u8>, HttpError> {
        loop {
            if let Some(end) = find(self.buffered(), b"\r\n") {
                let line = self.buffered()[..end + 2].to_vec();
                self.consume(end + 2);
                return Ok(line);
            }
            if self.buffered().len() > MAX_LINE {
                return Err(HttpError::LineTooLong);
            }
            if self.fill(r).await? == 0 {
                return Err(HttpError::Truncated);
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes (a response without length).
    UntilClose,
}

/// A parsed request head (the raw bytes go on as they came).
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) framing: Framing,
    /// The client asked to close after this exchange (or spoke HTTP/1.0
    /// without keep-alive).
    pub(crate) close: bool,
    pub(crate) expect_continue: bool,
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) framing: Framing,
    pub(crate) close: bool,
}

struct Common {
    framing: Option<Framing>,
    close: bool,
}

fn common(headers: &[httparse::Header<'_>], version: u8) -> Result<Common, HttpError> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = version == 0;
    for h in headers {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| HttpError::Malformed(format!("header {} is not text", h.name)))?
            .trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .parse()
                .map_err(|_| HttpError::Malformed(format!("Content-Length {value:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::Malformed("two Content-Lengths".into()));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(HttpError::Malformed(format!(
                    "Transfer-Encoding {value:?} (only chunked last)"
                )));
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && version == 0 {
                    close = false;
                }
            }
        }
    }
    if chunked && length.is_some() {
        return Err(HttpError::Malformed(
            "both Content-Length and Transfer-Encoding".into(),
        ));
    }
    let framing = if chunked {
        Some(Framing::Chunked)
    } else {
        length.map(|n| {
            if n == 0 {
                Framing::Empty
            } else {
                Framing::Length(n)
            }
        })
    };
    Ok(Common { framing, close })
}

/// Whether `have` can still begin a request head (httparse checks what
/// there is of the request line and headers).
fn request_prefix(have: &[u8]) -> Result<(), HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::Request::new(&mut headers).parse(have) {
        // Too many headers is `parse_request`'s to say, once the head is in.
        Ok(_) | Err(httparse::Error::TooManyHeaders) => Ok(()),
        Err(e) => Err(HttpError::Malformed(e.to_string())),
    }
}

pub(crate) fn parse_request(head: &[u8]) -> Result<RequestHead, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HttpError::Truncated),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    }
    let version = req.version.unwrap_or(1);
    let c = common(req.headers, version)?;
    let expect_continue = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("expect") && h.value.eq_ignore_ascii_case(b"100-continue")
    });
    Ok(RequestHead {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        // A request without length or chunking has no body (§6.3).
        framing: c.framing.unwrap_or(Framing::Empty),
        close: c.close,
        expect_continue,
    })
}

/// Parses a response head; `method` is the request's (a HEAD's answer
/// has no body, whatever it announces).
pub(crate) fn parse_response(head: &[u8], method: &str) -> Result<ResponseHead, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HttpError::Truncated),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    }
    let status = resp.code.unwrap_or(0);
    let version = resp.version.unwrap_or(1);
    let c = common(resp.headers, version)?;
    let bodiless =
        method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304;
    let framing = if bodiless {
        Framing::Empty
    } else {
        c.framing.unwrap_or(Framing::UntilClose)
    };
    Ok(ResponseHead {
        status,
        framing,
        close: c.close || framing == Framing::UntilClose,
    })
}

/// The head with every `Location` that names `from` (`http://host:port`)
/// naming `to` instead, so upload sessions come back through the link;
/// every other byte as it was.
pub(crate) fn rewrite_location(head: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 16);
    for line in head.split_inclusive(|&b| b == b'\n') {
        let is_location = line.len() > 9 && line[..9].eq_ignore_ascii_case(b"location:");
        if is_location {
            let value = &line[9..];
            let lead = value
                .iter()
                .take_while(|b| **b == b' ' || **b == b'\t')
                .count();
            if value[lead..].starts_with(from.as_bytes()) {
                out.extend_from_slice(&line[..9 + lead]);
                out.extend_from_slice(to.as_bytes());
                out.extend_from_slice(&value[lead + from.len()..]);
                continue;
            }
        }
        out.extend_from_slice(line);
    }
    out
}

/// Parses a chunk-size line (`1a2b;ext=1\r\n`).
pub(crate) fn chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| HttpError::Malformed("a chunk size that is not text".into()))?;
    let hex = text
        .trim_end_matches("\r\n")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    if hex.is_empty() || hex.len() > 15 {
        return Err(HttpError::Malformed(format!("chunk size {hex:?}")));
    }
    u64::from_str_radix(hex, 16).map_err(|_| HttpError::Malformed(format!("chunk size {hex:?}")))
}

/// Reads `n` bytes exactly into nothing but the buffer's end (for tests).
#[cfg(test)]
async fn read_all(r: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut v = Vec::new();
    r.read_to_end(&mut v).await.unwrap();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn heads_are_cut_where_they_end_and_the_rest_stays_buffered() {
        let wire = b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\nPUT /v2/a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        // One byte at a time: the head is found across reads.
        let mut r = tokio_test_reader(wire, 1);
        let mut buf = InBuf::new();
        let first = buf.read_head(&mut r).await.unwrap().unwrap();
        assert_eq!(first, b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n");
        let second = buf.read_head(&mut r).await.unwrap().unwrap();
        let req = parse_request(&second).unwrap();
        assert_eq!((req.method.as_str(), req.target.as_str()), ("PUT", "/v2/a"));
        assert_eq!(req.framing, Framing::Length(3));
        while buf.buffered().len() < 3 {
            buf.fill(&mut r).await.unwrap();
        }
        assert_eq!(buf.buffered(), b"abc");
        buf.consume(3);
        assert!(buf.read_head(&mut r).await.unwrap().is_none());
        assert!(read_all(&mut r).await.is_empty());
    }

    /// What a TLS client sends first (a handshake record), then nothing
    /// until it is answered: refused at once, not waited on.
    #[tokio::test]
    async fn a_request_head_that_cannot_be_http_is_refused_before_it_ends() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        tokio::io::AsyncWriteExt::write_all(
            &mut client,
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        )
        .await
        .unwrap();
        let mut buf = InBuf::new();
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            buf.read_request_head(&mut server),
        )
        .await
        .expect("refused without waiting for more");
        assert!(matches!(got, Err(HttpError::Malformed(_))), "{got:?}");
        // A request arriving a byte at a time is not refused on the way.
        let wire = b"GET /v2/ HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        let mut r = tokio_test_reader(wire, 1);
        let head = InBuf::new().read_request_head(&mut r).await.unwrap();
        assert_eq!(head.as_deref(), Some(&wire[..]));
    }

    fn tokio_test_reader(bytes: &'static [u8], step: usize) -> impl AsyncRead + Unpin {
        struct Step(&'static [u8], usize);
        impl AsyncRead for Step {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let n = self.1.min(self.0.len()).min(buf.remaining());
                buf.put_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                std::task::Poll::Ready(Ok(()))
            }
        }
        Step(bytes, step)
    }

    #[test]
    fn framing_follows_the_rules_and_refuses_smuggling() {
        let r = |h: &str| parse_request(h.as_bytes());
        assert_eq!(
            r("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .framing,
            Framing::Chunked
        );
        assert_eq!(
            r("GET /x HTTP/1.1\r\n\r\n").unwrap().framing,
            Framing::Empty
        );
        assert!(
            r("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .close
        );
        assert!(r("GET /x HTTP/1.0\r\n\r\n").unwrap().close);
        assert!(
            !r("GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .close
        );
        for bad in [
            "POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        ] {
            assert!(r(bad).is_err(), "{bad}");
        }
        let p = |h: &str, m| parse_response(h.as_bytes(), m).unwrap();
        assert_eq!(
            p("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "HEAD").framing,
            Framing::Empty
        );
        assert_eq!(
            p("HTTP/1.1 204 No Content\r\n\r\n", "GET").framing,
            Framing::Empty
        );
        let until = p("HTTP/1.1 200 OK\r\n\r\n", "GET");
        assert_eq!((until.framing, until.close), (Framing::UntilClose, true));
        assert_eq!(p("HTTP/1.1 100 Continue\r\n\r\n", "PUT").status, 100);
    }

    #[test]
    fn a_location_naming_the_upstream_names_the_link_and_nothing_else_moves() {
        let head = b"HTTP/1.1 202 Accepted\r\nLocation: http://127.0.0.1:5000/v2/a/blobs/uploads/u?_state=x\r\nX-Location: http://127.0.0.1:5000/\r\nlocation:http://127.0.0.1:5000/b\r\nLocation: http://other:5000/c\r\n\r\n";
        let out = rewrite_location(head, "http://127.0.0.1:5000", "http://127.0.0.1:4000");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 202 Accepted\r\nLocation: http://127.0.0.1:4000/v2/a/blobs/uploads/u?_state=x\r\nX-Location: http://127.0.0.1:5000/\r\nlocation:http://127.0.0.1:4000/b\r\nLocation: http://other:5000/c\r\n\r\n"
        );
    }

    #[test]
    fn chunk_sizes_are_hex_with_extensions() {
        assert_eq!(chunk_size(b"1a\r\n").unwrap(), 26);
        assert_eq!(chunk_size(b"0;x=y\r\n").unwrap(), 0);
        assert!(chunk_size(b"zz\r\n").is_err());
        assert!(chunk_size(b"ffffffffffffffffff\r\n").is_err());
    }
}
