//! The registry client's timeouts through the shaped link (`sunaba-link`)
//! to the dev registry: a slow transfer that keeps moving is never cut,
//! whatever the request's budget (`--registry-timeout`); a transfer that
//! stops moving fails after the idle timeout, naming the registry, what it
//! was moving, which way and how far it got. (A connect that gets no
//! answer is a unit test of `transport/redirect.rs`: a full accept queue
//! on loopback blackholes a port, no link needed.)

use crate::support::link::{Link, noise};
use crate::support::{self};
use serde_json::json;
use std::time::{Duration, Instant};
use sunaba_images::registry::{Client, ClientBuilder, Digest, Repository, RetryPolicy};

/// A client whose request budget is `budget`, as `--registry-timeout`
/// sets it (on main, the budget also cut every exchange, body included).
fn client_with_budget(budget: Duration) -> ClientBuilder {
    Client::builder().anonymous().retry(RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
        total: budget,
    })
}

fn repo(authority: &str, name: &str) -> Repository {
    format!("{authority}/{}/blobs", support::unique(name))
        .parse()
        .unwrap()
}

/// 3 MiB each way at 8 Mbit/s (over 3 s) under a 2 s budget: the upload
/// and the download take longer than the budget and succeed, because
/// they keep moving. On main, the budget was also a cap on each exchange,
/// body included, so the upload failed after 2 s every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn slow_transfers_that_keep_moving_outlast_the_request_budget() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &["--rate", "8mbit"]);
    let client = client_with_budget(Duration::from_secs(2)).build().unwrap();
    let r = repo(link.authority(), "slow");
    let bytes = noise(3 << 20, 0x5eed_0001);

    let started = Instant::now();
    let digest = client.upload_blob(&r, bytes.clone().into()).await;
    let took = started.elapsed();
    let digest = digest.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    eprintln!("3 MiB up at 8 Mbit/s under a 2 s budget: {took:?}");
    assert!(
        took > Duration::from_secs(2),
        "slower than the budget: {took:?}"
    );

    let started = Instant::now();
    let got = client.fetch_blob(&r, &digest, 4 << 20).await;
    let took = started.elapsed();
    let got = got.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    eprintln!("3 MiB down at 8 Mbit/s under a 2 s budget: {took:?}");
    assert!(
        took > Duration::from_secs(2),
        "slower than the budget: {took:?}"
    );
    assert_eq!(got, bytes);
    let puts = link.exchanges_of("PUT", &digest.to_string());
    assert_eq!(puts.len(), 1, "sent once, never cut: {puts:#?}");
}

/// An upload whose link stops taking bytes 1 MiB in, every time: each
/// attempt is given up 1 s (the idle timeout) after its bytes stopped,
/// and the upload after the budget's attempts, naming the registry, the
/// blob and how much had been handed over. Once the link moves again,
/// the next attempt (a new session) completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn an_upload_that_stalls_fails_after_the_idle_timeout_naming_host_blob_and_bytes() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let link = Link::start(&registry, &[]);
    let client = client_with_budget(Duration::from_secs(2))
        .idle_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let r = repo(link.authority(), "stall-up");
    // Larger than every buffer between the client and the link's reads.
    let size = 24 << 20;
    let bytes = noise(size, 0x5eed_0002);
    let digest = Digest::sha256(&bytes);
    link.add_rules(json!({
        "method": "PUT", "path": "/blobs/uploads/", "times": 100,
        "fault": {"stall": {"at": "request_body", "after": 1 << 20}}
    }));
    let started = Instant::now();
    // In one request (a chunk of the whole blob): larger than every buffer
    // between the client and the link, so the stall is one of the body.
    // In 8 MiB chunks the buffers of a busy machine can take a whole chunk,
    // and what then stalls is the wait for its answer (the header timeout).
    let err = client
        .upload_blob_in_chunks(&r, bytes.clone().into(), size)
        .await
        .expect_err("every PUT stalls");
    let took = started.elapsed();
    eprintln!("a stalled upload, idle 1 s, budget 2 s: reported after {took:?}: {err}");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("{r}@{digest}: gave up after 2 attempt(s)")),
        "{message}"
    );
    let re = regex::Regex::new(&format!(
        r"in [0-9]+ ms: {}: http: no bytes for 1 s while uploading blob {digest} \(([0-9,]+) of 25,165,824 bytes sent\)$",
        regex::escape(link.authority())
    ))
    .unwrap();
    let sent: u64 = re.captures(&message).unwrap_or_else(|| panic!("{message}"))[1]
        .replace(',', "")
        .parse()
        .unwrap();
    assert!((1 << 20..size as u64).contains(&sent), "{message}");
    // Two attempts of 1 s idle each fit the 2 s budget (the bytes moving
    // cost it nothing); slack for the sessions and the backoff.
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let stalled = link.exchanges_of("PUT", &digest.to_string());
    assert_eq!(stalled.len(), 2, "{stalled:#?}");
    assert_ne!(stalled[0]["target"], stalled[1]["target"], "a new session");

    // The link moves again: the upload goes through.
    assert_eq!(link.admin("DELETE", "/_link/rules", None).0, 204);
    assert_eq!(client.upload_blob(&r, bytes.into()).await.unwrap(), digest);
}

/// A download whose body stops 1 MiB in: given up after the idle timeout
/// naming the blob and the bytes received, and retried (a GET is); a
/// stall that keeps happening fails within the budget's attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_download_that_stalls_is_retried_then_fails_naming_host_blob_and_bytes() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let size = 3 << 20;
    let bytes = noise(size, 0x5eed_0003);
    let direct = Client::builder().anonymous().build().unwrap();
    let name = support::unique("stall-down");
    let at_registry: Repository = format!("{registry}/{name}/blobs").parse().unwrap();
    let digest = direct
        .upload_blob(&at_registry, bytes.clone().into())
        .await
        .unwrap();
    let link = Link::start(&registry, &[]);
    let r: Repository = format!("{}/{name}/blobs", link.authority())
        .parse()
        .unwrap();
    let client = client_with_budget(Duration::from_secs(2))
        .idle_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let stall = |times: u64| {
        assert_eq!(link.admin("DELETE", "/_link/rules", None).0, 204);
        link.clear_stats();
        link.add_rules(json!({
            "method": "GET", "path": format!("/blobs/{digest}$"), "times": times,
            "fault": {"stall": {"at": "response_body", "after": 1 << 20}}
        }));
    };

    // Once: the retry asks for the rest (`Range`) and reads it.
    stall(1);
    let got = client.fetch_blob(&r, &digest, 4 << 20).await.unwrap();
    assert_eq!(got, bytes);
    let gets = link.exchanges_of("GET", &digest.to_string());
    assert_eq!(gets.len(), 2, "{gets:#?}");
    assert_eq!(gets[1]["outcome"], "complete", "{gets:#?}");

    // Every time: given up, naming what was read of the blob (1 MiB of
    // the first GET, 1 MiB of the second's rest).
    stall(100);
    let started = Instant::now();
    let err = client
        .fetch_blob(&r, &digest, 4 << 20)
        .await
        .expect_err("every GET stalls");
    let took = started.elapsed();
    eprintln!("a stalled download, idle 1 s, budget 2 s: reported after {took:?}: {err}");
    let expected = format!(
        "{}: no bytes for 1 s while downloading blob {digest} (2,097,152 of 3,145,728 bytes received)",
        link.authority()
    );
    assert!(err.to_string().ends_with(&expected), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{r}@{digest}: gave up after 2 attempt(s)")),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
}
