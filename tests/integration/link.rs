//! The shaped link (`sunaba-link`): it forwards HTTP/1.1 faithfully, at the
//! bandwidth and round-trip time it is given, with the faults its rules
//! put on chosen requests, and counts what went over it. Against the dev
//! registry (a real distribution 2.8) where a registry's behaviour
//! matters, and against upstreams of the test's own where the bytes on the
//! wire do.

use crate::support::link::{Link, noise};
use crate::support::{self, sha256};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Taken by the tests that measure time, so they do not load each other
/// (they share this process's two worker threads and the machine's cores).
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A repository of this test run alone.
fn repo(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("sunaba-link-test/{test}-{}-{nanos}", std::process::id())
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Opens an upload session through `base`; its Location (absolute).
async fn start_upload(http: &reqwest::Client, base: &str, repo: &str) -> String {
    let r = http
        .post(format!("{base}/v2/{repo}/blobs/uploads/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    r.headers()["location"].to_str().unwrap().to_string()
}

fn with_digest(location: &str, digest: &str) -> String {
    let sep = if location.contains('?') { '&' } else { '?' };
    format!("{location}{sep}digest={digest}")
}

/// Pushes `data` as one blob (POST, then PUT with the body): its digest.
async fn push_blob(http: &reqwest::Client, base: &str, repo: &str, data: Vec<u8>) -> String {
    let digest = sha256(&data);
    let location = start_upload(http, base, repo).await;
    let r = http
        .put(with_digest(&location, &digest))
        .body(data)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    digest
}

fn exchange_with<'a>(
    exchanges: &'a [serde_json::Value],
    method: &str,
    part: &str,
) -> &'a serde_json::Value {
    exchanges
        .iter()
        .find(|e| e["method"] == method && e["target"].as_str().unwrap().contains(part))
        .unwrap_or_else(|| panic!("no {method} …{part}… in {exchanges:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn uploads_and_downloads_go_through_whole_and_locations_name_the_link() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("faithful");
    let location = start_upload(&http, &base, &repo).await;
    // The registry names the link in Location: the session comes back here.
    assert!(
        location.starts_with(&format!("{base}/v2/{repo}/blobs/uploads/")),
        "{location}"
    );
    let blob = noise(3 << 20, 1);
    let digest = push_blob(&http, &base, &repo, blob.clone()).await;
    let got = http
        .get(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(sha256(&got.bytes().await.unwrap()), digest);
    let head = http
        .head(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "3145728");

    let stats = link.settled_stats();
    // POST, POST, PUT, GET, HEAD, every one complete. (How many connections
    // reqwest opens is its pool's business: it may start the next request
    // before the last connection is back. That the link keeps a connection
    // is asserted on a raw one, below.)
    assert_eq!(stats["requests"].as_u64(), Some(5), "{stats:#}");
    assert!(
        stats["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["outcome"] == "complete"),
        "{stats:#}"
    );
    let exchanges = stats["exchanges"].as_array().unwrap().clone();
    let put = exchange_with(&exchanges, "PUT", "digest=");
    assert_eq!(put["request"]["body"], 3 << 20);
    assert_eq!(
        (put["status"].as_u64(), put["outcome"].as_str()),
        (Some(201), Some("complete"))
    );
    let get = exchange_with(&exchanges, "GET", &digest);
    assert_eq!(get["response"]["body"], 3 << 20);
    assert_eq!(
        exchange_with(&exchanges, "HEAD", &digest)["response"]["body"],
        0
    );
    // Wire bytes: both bodies and every head, nothing more.
    let total = |dir: &str, part: &str| -> u64 {
        exchanges
            .iter()
            .map(|e| e[dir]["head"].as_u64().unwrap() + e[dir][part].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        stats["bytes"]["up"].as_u64().unwrap(),
        total("request", "body")
    );
    assert_eq!(
        stats["bytes"]["down"].as_u64().unwrap(),
        total("response", "body")
    );
}

/// An upstream of the test's own that records the bytes it got: for each
/// `(length, answer)` it reads until `length` more bytes came (the test
/// knows its requests), then answers.
async fn scripted_upstream(
    script: Vec<(usize, Vec<u8>)>,
) -> (String, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let mut want = 0;
        for (length, answer) in script {
            want += length;
            while got.len() < want {
                let n = s.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "the link closed early: {}",
                    String::from_utf8_lossy(&got)
                );
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(&answer).await.unwrap();
        }
        // Whatever else comes before the client closes.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
        got.extend_from_slice(&rest);
        got
    });
    (addr, task)
}

/// Reads one response from `s` up to `end` (a byte string its last bytes
/// are).
async fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, end: &[u8]) {
    let mut buf = vec![0u8; 64 << 10];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the answer came")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(got));
        got.extend_from_slice(&buf[..n]);
    }
}

/// Chunked bodies both ways, a trailer, an interim 100 and a keep-alive
/// second request: the upstream gets the client's bytes and the client
/// the upstream's, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_interim_answers_and_heads_cross_byte_for_byte() {
    let answer_1 = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Odd:  spaced \r\n\r\n5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: yes\r\n\r\n".to_vec();
    let answer_2 = b"HTTP/1.1 204 No Content\r\nLocation: /v2/x\r\n\r\n".to_vec();
    let request_1 = b"POST /v2/a/blobs/uploads/ HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\nX-Case: KeEp\r\n\r\n3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
    let request_2 = b"GET /v2/ HTTP/1.1\r\nHost: h\r\n\r\n";
    let (upstream, server) = scripted_upstream(vec![
        (request_1.len(), answer_1.clone()),
        (request_2.len(), answer_2.clone()),
    ])
    .await;
    let link = Link::start(&upstream, &[]);
    let mut s = TcpStream::connect(link.authority()).await.unwrap();
    s.write_all(request_1).await.unwrap();
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"X-Trailer: yes\r\n\r\n").await;
    assert_eq!(got, answer_1);
    s.write_all(request_2).await.unwrap();
    let mut got_2 = Vec::new();
    read_until(&mut s, &mut got_2, b"\r\n\r\n").await;
    assert_eq!(got_2, answer_2);
    drop(s);
    let upstream_got = server.await.unwrap();
    assert_eq!(upstream_got, [&request_1[..], &request_2[..]].concat());
    let stats = link.settled_stats();
    assert_eq!(
        (stats["requests"].as_u64(), stats["connections"].as_u64()),
        (Some(2), Some(1))
    );
    let post = &stats["exchanges"][0];
    // The body as it was on the wire (chunk framing included); the 100's
    // head and the final head both count as the response's head.
    assert_eq!(post["request"]["body"].as_u64(), Some(35));
    assert_eq!(post["status"].as_u64(), Some(200));
    assert_eq!(
        stats["bytes"]["up"].as_u64(),
        Some((request_1.len() + request_2.len()) as u64)
    );
    assert_eq!(
        stats["bytes"]["down"].as_u64(),
        Some((answer_1.len() + answer_2.len()) as u64)
    );
}

/// An upstream that takes any request with a Content-Length body, drops
/// the body and answers 201, or answers a GET /size/N with N bytes;
/// forever, on every connection.
async fn sink_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut s = tokio::io::BufReader::with_capacity(256 << 10, s);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        use tokio::io::AsyncBufReadExt;
                        if s.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let length: u64 = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |n| n.trim().parse().unwrap());
                    tokio::io::copy(&mut (&mut s).take(length), &mut tokio::io::sink())
                        .await
                        .unwrap();
                    if let Some(n) = head.strip_prefix("GET /size/") {
                        let n: usize = n.split(' ').next().unwrap().parse().unwrap();
                        let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
                        s.get_mut().write_all(reply.as_bytes()).await.unwrap();
                        let block = vec![7u8; 1 << 20];
                        let mut left = n;
                        while left > 0 {
                            let k = left.min(block.len());
                            if s.get_mut().write_all(&block[..k]).await.is_err() {
                                return;
                            }
                            left -= k;
                        }
                    } else {
                        let reply = "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
                        if s.get_mut().write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Sends a PUT of `len` bytes through `authority` on a raw connection and
/// waits for its answer: the seconds it took.
async fn timed_put(authority: &str, len: usize) -> f64 {
    let mut s = TcpStream::connect(authority).await.unwrap();
    let start = Instant::now();
    let head = format!("PUT /blob HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let block = vec![1u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let k = left.min(block.len());
        s.write_all(&block[..k]).await.unwrap();
        left -= k;
    }
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"\r\n\r\n").await;
    assert!(
        got.starts_with(b"HTTP/1.1 201"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    start.elapsed().as_secs_f64()
}

/// GETs `len` bytes through `authority`: the seconds it took.
async fn timed_get(authority: &str, len: usize) -> f64 {
    let mut s = TcpStream::connect(authority).await.unwrap();
    let start = Instant::now();
    s.write_all(format!("GET /size/{len} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    let mut head_len = None;
    let mut head = Vec::new();
    while head_len.is_none_or(|h| got < h + len) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        if head_len.is_none() {
            head.extend_from_slice(&buf[..n.min(4096)]);
            if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                head_len = Some(p + 4);
            }
        }
        got += n;
    }
    start.elapsed().as_secs_f64()
}

/// Unshaped, the link is no bottleneck for a 100 Mbit/s experiment: it
/// moves well over that both ways (even in this debug build).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unshaped_it_moves_well_over_100_mbit_per_second_both_ways() {
    let _timing = TIMING.lock().await;
    let upstream = sink_upstream().await;
    let link = Link::start(&upstream, &[]);
    let len = 256 << 20;
    let up = timed_put(link.authority(), len).await;
    let down = timed_get(link.authority(), len).await;
    let mbit = |secs: f64| len as f64 * 8.0 / secs / 1e6;
    eprintln!(
        "unshaped link: up {:.0} Mbit/s, down {:.0} Mbit/s",
        mbit(up),
        mbit(down)
    );
    assert!(
        mbit(up) > 200.0 && mbit(down) > 200.0,
        "up {} down {}",
        mbit(up),
        mbit(down)
    );
    let stats = link.settled_stats();
    assert!(stats["bytes"]["up"].as_u64().unwrap() > len as u64);
    assert!(stats["bytes"]["down"].as_u64().unwrap() > len as u64);
}

/// Each direction has its own bucket: an upload at 20 Mbit/s and a
/// download at 80 Mbit/s at the same time each take their own rate's time
/// (one shared bucket, or one rate for both, would slow one of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_direction_has_its_own_rate_at_the_same_time() {
    let _timing = TIMING.lock().await;
    let upstream = sink_upstream().await;
    let link = Link::start(&upstream, &["--rate-up", "20mbit", "--rate-down", "80mbit"]);
    let (up_len, down_len) = (5 << 20, 20 << 20);
    let (up, down) = tokio::join!(
        timed_put(link.authority(), up_len),
        timed_get(link.authority(), down_len)
    );
    let expected_up = up_len as f64 * 8.0 / 20e6;
    let expected_down = down_len as f64 * 8.0 / 80e6;
    eprintln!(
        "at once: up 5 MiB at 20 Mbit/s {up:.2} s (expected {expected_up:.2} s), \
         down 20 MiB at 80 Mbit/s {down:.2} s (expected {expected_down:.2} s)"
    );
    // Never faster than the rate (the bucket's burst is 25 ms); slower only
    // by what a loaded machine adds — the bound catches one rate or one
    // bucket for both directions (the download would take 4× its time).
    for (took, expected) in [(up, expected_up), (down, expected_down)] {
        assert!(
            took >= expected * 0.95 && took <= expected * 2.0,
            "took {took:.2} s, expected {expected:.2} s (-5 %, +100 %)"
        );
    }
    let shape: serde_json::Value =
        serde_json::from_str(&link.admin("GET", "/_link/shape", None).1).unwrap();
    assert_eq!(
        shape,
        serde_json::json!({"up_bps": 20_000_000, "down_bps": 80_000_000, "rtt_ms": 0})
    );
}

/// 20 MiB at 40 Mbit/s is 4.19 s, each way, to the real registry: the
/// bucket shapes the body, not just its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn at_40_mbit_20_mib_take_4_2_seconds_each_way() {
    let _timing = TIMING.lock().await;
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &["--rate", "40mbit"]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("rate");
    let blob = noise(20 << 20, 2);
    let digest = sha256(&blob);
    let location = start_upload(&http, &base, &repo).await;
    let start = Instant::now();
    let r = http
        .put(with_digest(&location, &digest))
        .body(blob)
        .send()
        .await
        .unwrap();
    let up = start.elapsed().as_secs_f64();
    assert_eq!(r.status(), 201);
    let start = Instant::now();
    let body = http
        .get(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let down = start.elapsed().as_secs_f64();
    assert_eq!(sha256(&body), digest);
    let expected = (20 << 20) as f64 * 8.0 / 40e6;
    eprintln!("20 MiB at 40 Mbit/s: up {up:.2} s, down {down:.2} s (expected {expected:.2} s)");
    // Never faster than the rate; slower only by what a loaded machine adds.
    for took in [up, down] {
        assert!(
            took >= expected * 0.95 && took <= expected * 2.0,
            "took {took:.2} s, expected {expected:.2} s (-5 %, +100 %)"
        );
    }
}

/// `GET /size/0` on a raw connection `n` times: the milliseconds from the
/// connect (or the previous answer) to each answer.
async fn turnarounds(authority: &str, n: usize) -> Vec<f64> {
    let start = Instant::now();
    let mut s = TcpStream::connect(authority).await.unwrap();
    let mut took = Vec::new();
    let mut last = start;
    for _ in 0..n {
        s.write_all(b"GET /size/0 HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        read_until(&mut s, &mut got, b"Content-Length: 0\r\n\r\n").await;
        took.push(last.elapsed().as_secs_f64() * 1e3);
        last = Instant::now();
    }
    took
}

/// A 40 ms RTT adds 40 ms to each request/response turnaround, and a new
/// connection one more (its handshake). On raw connections to an upstream
/// that answers at once, against the same requests unshaped; the fastest
/// of each series is compared (a loaded machine only ever adds delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_40_ms_rtt_adds_40_ms_per_turnaround_and_one_more_per_connection() {
    let _timing = TIMING.lock().await;
    let upstream = sink_upstream().await;
    let link = Link::start(&upstream, &[]);
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let unshaped = turnarounds(link.authority(), 12).await;
    link.set_shape(None, None, 40);
    let shaped = turnarounds(link.authority(), 12).await;
    eprintln!("GET in ms, unshaped: {unshaped:.1?}; 40 ms RTT: {shaped:.1?}");
    // Never less than the RTT (each way holds for half of it), the first
    // on a connection never less than two…
    assert!(fastest(&shaped[1..]) >= 40.0, "{shaped:?}");
    assert!(shaped[0] >= 80.0, "{shaped:?}");
    // …and the RTT is what it adds.
    // The upper bounds are loose on purpose: a loaded machine adds delay to
    // any sample, and what they must catch is an RTT applied twice (80 ms
    // per turnaround) or per piece of a body, not a few milliseconds.
    let added = fastest(&shaped[1..]) - fastest(&unshaped[1..]);
    assert!(
        (38.0..75.0).contains(&added),
        "the RTT added {added:.1} ms per turnaround"
    );
    assert!(shaped[0] - unshaped[0] < 160.0, "{shaped:?} {unshaped:?}");
    assert_eq!(link.stats()["connections"], 2);
}

/// A reset after N bytes of a chosen upload: exactly N bytes reach the
/// registry, the client sees its connection fail, and the link answers the
/// next request again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_reset_after_n_bytes_of_the_chosen_upload_cuts_both_connections_there() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("reset");
    let after = 1 << 20;
    link.add_rules(serde_json::json!([{
        "method": "PUT", "path": format!("^/v2/{repo}/blobs/uploads/"), "nth": 2,
        "fault": {"reset": {"at": "request_body", "after": after}}
    }]));
    // The first PUT is not the second match: it goes through.
    push_blob(&http, &base, &repo, noise(1 << 20, 3)).await;
    let blob = noise(4 << 20, 4);
    let digest = sha256(&blob);
    let location = start_upload(&http, &base, &repo).await;
    let err = http
        .put(with_digest(&location, &digest))
        .body(blob.clone())
        .send()
        .await
        .expect_err("the connection was reset");
    assert!(
        err.is_request() || err.is_connect() || err.is_body(),
        "{err:?}"
    );
    let put = link
        .exchanges("digest=")
        .into_iter()
        .find(|e| e["outcome"] == "reset")
        .unwrap();
    assert_eq!(put["request"]["body"], after);
    assert_eq!(put["status"], serde_json::Value::Null);
    assert!(
        put["fault"]
            .as_str()
            .unwrap()
            .starts_with("reset at request_body")
    );
    // The blob is not there; the next try (a third match) goes through.
    let head = http
        .head(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 404);
    assert_eq!(push_blob(&http, &base, &repo, blob).await, digest);
}

/// A reset in a download after N bytes: the client has exactly N, and a
/// `Range` request for the rest completes the blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_reset_mid_download_leaves_n_bytes_and_range_fetches_the_rest() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("download-reset");
    let blob = noise(2 << 20, 5);
    let digest = push_blob(&http, &base, &repo, blob.clone()).await;
    let after = 700_001u64;
    link.add_rules(serde_json::json!({
        "method": "GET", "path": format!("/blobs/{digest}$"),
        "fault": {"reset": {"at": "response_body", "after": after}}
    }));
    let mut resp = http
        .get(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut got = Vec::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => panic!("the whole body came ({} bytes)", got.len()),
            Err(e) => break e,
        }
    };
    assert_eq!(got.len() as u64, after, "{err:?}");
    let rest = http
        .get(format!("{base}/v2/{repo}/blobs/{digest}"))
        .header("Range", format!("bytes={after}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 206);
    got.extend_from_slice(&rest.bytes().await.unwrap());
    assert_eq!(sha256(&got), digest);
    let stats = link.settled_stats();
    let gets: Vec<_> = stats["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["method"] == "GET")
        .collect();
    assert_eq!(gets[0]["outcome"], "reset");
    assert_eq!(gets[0]["response"]["body"], after);
    assert_eq!(gets[1]["outcome"], "complete");
}

/// A 500, a 502 and a burst of three 503s: the chosen requests get the
/// link's answer (distribution's error shape) and never reach the
/// registry; the one after them does.
/// A 429 carries the Retry-After asked for, and its body is read and
/// dropped, not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn status_bursts_and_429_with_retry_after_are_answered_by_the_link() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("status");
    link.add_rules(serde_json::json!([
        {"method": "GET", "path": "^/v2/$", "fault": {"status": {"code": 500}}},
        {"method": "GET", "path": "^/v2/$", "nth": 2, "fault": {"status": {"code": 502}}},
        {"method": "GET", "path": "^/v2/$", "nth": 3, "times": 3, "fault": {"status": {"code": 503}}},
        {"method": "PUT", "path": format!("^/v2/{repo}/blobs/uploads/"),
         "fault": {"status": {"code": 429, "retry_after": "2"}}}
    ]));
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = http.get(format!("{base}/v2/")).send().await.unwrap();
        let status = r.status().as_u16();
        statuses.push(status);
        // Read whole, so the client keeps the connection.
        let body: serde_json::Value = r.json().await.unwrap();
        let code = match status {
            503 => "UNAVAILABLE",
            500 | 502 => "UNKNOWN",
            _ => continue,
        };
        assert_eq!(body["errors"][0]["code"], code);
    }
    assert_eq!(statuses, [500, 502, 503, 503, 503, 200]);
    let blob = noise(1 << 20, 6);
    let digest = sha256(&blob);
    let location = start_upload(&http, &base, &repo).await;
    let r = http
        .put(with_digest(&location, &digest))
        .body(blob.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["errors"][0]["code"],
        "TOOMANYREQUESTS"
    );
    // Not forwarded: the registry has no such blob, and the session is
    // still open for the retry.
    let head = http
        .head(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 404);
    let r = http
        .put(with_digest(&location, &digest))
        .body(blob)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let stats = link.settled_stats();
    assert_eq!(stats["faults"], 6);
    let refused = exchange_with(stats["exchanges"].as_array().unwrap(), "PUT", "digest=");
    assert_eq!(refused["request"]["body"], 1 << 20);
    assert_eq!(refused["status"], 429);
}

/// The (first) GET of a blob in the link's `stats`.
fn blob_get(stats: &serde_json::Value, digest: &str) -> serde_json::Value {
    (stats["exchanges"].as_array().unwrap().iter())
        .find(|e| e["method"] == "GET" && e["target"].as_str().unwrap().contains(digest))
        .unwrap()
        .clone()
}

/// A stall holds the connection open with no bytes moving — for a while
/// (then the exchange goes on) or for good (until the client gives up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_stall_moves_no_bytes_for_its_time_or_until_the_client_gives_up() {
    let _timing = TIMING.lock().await;
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let base = format!("http://{}", link.authority());
    let http = http();
    let repo = repo("stall");
    let blob = noise(1 << 20, 7);
    let digest = push_blob(&http, &base, &repo, blob).await;
    link.add_rules(serde_json::json!([
        {"method": "GET", "path": format!("/blobs/{digest}$"), "times": 1,
         "fault": {"stall": {"at": "response_body", "after": 65536, "seconds": 1.5}}},
        {"method": "GET", "path": "/manifests/", "fault": {"stall": {"at": "response_head"}}}
    ]));
    let start = Instant::now();
    let mut resp = http
        .get(format!("{base}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .unwrap();
    let mut got = 0usize;
    let mut stalled_at = None;
    let mut resumed_at = None;
    while let Some(c) = resp.chunk().await.unwrap() {
        if got >= 65536 && resumed_at.is_none() {
            resumed_at = Some(start.elapsed());
        }
        got += c.len();
        if got == 65536 {
            stalled_at = Some(start.elapsed());
            // Nothing moves while the link holds it.
            let mid = blob_get(&link.stats(), &digest);
            assert_eq!(mid["outcome"], "stalled");
            assert_eq!(mid["response"]["body"], 65536);
        }
    }
    assert_eq!(got, 1 << 20);
    let (stalled_at, resumed_at) = (stalled_at.unwrap(), resumed_at.unwrap());
    let gap = (resumed_at - stalled_at).as_secs_f64();
    assert!((1.4..2.5).contains(&gap), "the gap was {gap:.2} s");
    assert_eq!(
        blob_get(&link.settled_stats(), &digest)["outcome"],
        "complete"
    );

    // For good: the client's own timeout ends it; the link sees it go.
    let quick = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let err = quick
        .get(format!("{base}/v2/{repo}/manifests/latest"))
        .send()
        .await
        .expect_err("no answer comes");
    assert!(err.is_timeout(), "{err:?}");
    drop(quick);
    let mut outcome = serde_json::Value::Null;
    for _ in 0..50 {
        outcome = link.exchanges("/manifests/latest")[0]["outcome"].clone();
        if outcome == "client closed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(outcome, "client closed");
}

#[test]
fn it_talks_to_loopback_only_and_says_why_with_exit_64() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sunaba-link"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--upstream", "192.0.2.1:5000"]);
    assert_eq!(code, Some(64));
    assert_eq!(
        err,
        "sunaba-link: --upstream 192.0.2.1:5000: the link talks to loopback only\n"
    );
    let (code, err) = run(&["--upstream", "127.0.0.1:5000", "--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(64));
    assert_eq!(
        err,
        "sunaba-link: --listen 0.0.0.0:0: the link listens on loopback only\n"
    );
    let (code, err) = run(&["--upstream", "127.0.0.1:5000", "--rate", "fast"]);
    assert_eq!(code, Some(64));
    assert!(
        err.contains("a rate is a number of bit, kbit, mbit or gbit"),
        "{err}"
    );
    let (code, _) = run(&["--upstream"]);
    assert_eq!(code, Some(64));
}

/// On SIGTERM the link writes its stats where `--stats-file` says (what a
/// benchmark script reads) and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_it_writes_its_stats_file() {
    let upstream = sink_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stats.json");
    let link = Link::start(&upstream, &["--stats-file", file.to_str().unwrap()]);
    timed_put(link.authority(), 1000).await;
    // The client has its answer; the link closes the record just after.
    assert_eq!(link.settled_stats()["exchanges"][0]["outcome"], "complete");
    let status = link.terminate();
    assert!(status.success(), "{status:?}");
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(stats["requests"], 1);
    assert_eq!(stats["exchanges"][0]["request"]["body"], 1000);
    assert_eq!(stats["exchanges"][0]["status"], 201);
}
