//! `release --write` through the shaped link (`sunaba-link`) with a fault
//! on the way (issue 29, acceptance 2): the family's images come from the
//! registry itself (`--from`, another host to the client, read straight
//! from it) and every byte the release sends crosses the link, whose
//! exchange log is the evidence of what was sent, when and how often.

use crate::support::link::{Link, noise};
use crate::support::oci::{Image, Pusher};
use crate::support::{self, all_tools, check_label, sha256};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A family pushed to `{registry}/{ns}/ci` (one layer per image: python's
/// `big` bytes of noise, the others a line), released through a link to
/// `{link}/{ns}/sandbox`.
struct Rig {
    link: Link,
    registry: String,
    ns: String,
    project: support::Project,
    pusher: Pusher,
    /// python's layer: its digest and size.
    big_layer: (String, u64),
}

impl Rig {
    fn new(name: &str, link_flags: &[&str], big: usize) -> Option<Rig> {
        let registry = support::dev_registry()?;
        let link = Link::start(&registry, link_flags);
        let ns = support::unique(name);
        let project =
            support::Project::shipped_publishing_to(&format!("{}/{ns}/sandbox", link.authority()));
        let pusher = Pusher::plain(&registry);
        let mut big_layer = None;
        for v in &support::shipped_variants() {
            let inputs = sha256(format!("{v} {name}").as_bytes());
            let bytes = match v.as_str() {
                "python" => noise(big, 0x9e37_79b9_7f4a_7c15),
                _ => format!("layer of {v}").into_bytes(),
            };
            let image = Image::linux("amd64")
                .labels(check_label("pass", v, &inputs, &all_tools()))
                .layer(bytes);
            let pushed = pusher.wait(pusher.image(&format!("{ns}/ci"), Some(v), &image));
            if v == "python" {
                let manifest: Value = serde_json::from_slice(&pushed.bytes).unwrap();
                let layer = &manifest["layers"][0];
                big_layer = Some((
                    layer["digest"].as_str().unwrap().to_string(),
                    layer["size"].as_u64().unwrap(),
                ));
            }
        }
        Some(Rig {
            link,
            ns,
            registry,
            project,
            pusher,
            big_layer: big_layer.unwrap(),
        })
    }

    /// `release --write` of the family from the `ci` repository.
    fn release(&self) -> support::Cli {
        self.project
            .cli()
            .args(["--profile", "local", "release", "--write"])
            .args(["--notes", "notes.md"])
            .args(["--from", &format!("{}/{}/ci", self.registry, self.ns)])
    }

    fn done_line(&self) -> String {
        let n = support::shipped_variants().len();
        format!(
            r"release: \S+ done: {n} image\(s\), {} release tag\(s\) at their images",
            4 * n
        )
    }

    /// The target repository's tags (on the registry itself).
    fn tags(&self) -> Vec<String> {
        let p = &self.pusher;
        p.wait(p.tags(&format!("{}/sandbox", self.ns)))
    }

    fn pins_verify(&self) {
        self.project
            .cli()
            .args(["--profile", "local", "pins", "verify"])
            .stdout(format!(
                "ok: {} alias(es) pinned and verified in image_pins.json\n",
                support::shipped_aliases().len()
            ))
            .run();
    }

    /// Every exchange the link logged, in the order the requests arrived.
    fn exchanges(&self) -> Vec<Value> {
        let mut all = self.link.settled_stats()["exchanges"]
            .as_array()
            .unwrap()
            .clone();
        all.sort_by_key(|e| e["id"].as_u64());
        all
    }

    /// The blobs whose upload the registry finished (a `PUT …?digest=`
    /// answered 201), by digest, with the bytes of every request that
    /// carried that blob's data (its POST, PATCHes and PUTs).
    fn uploads(&self) -> (BTreeSet<String>, BTreeMap<String, u64>) {
        // An upload session's URL names its digest only on the last PUT:
        // follow each session by its path.
        let mut session_blob: BTreeMap<String, String> = BTreeMap::new();
        let exchanges = self.exchanges();
        for e in &exchanges {
            let target = e["target"].as_str().unwrap();
            if e["method"] == "PUT"
                && let Some((path, digest)) = target.split_once("digest=")
            {
                let path = path.split('?').next().unwrap().to_string();
                session_blob.insert(path, digest.replace("%3A", ":"));
            }
        }
        let mut finished = BTreeSet::new();
        let mut sent: BTreeMap<String, u64> = BTreeMap::new();
        for e in &exchanges {
            let target = e["target"].as_str().unwrap();
            if !target.contains("/blobs/uploads/") {
                continue;
            }
            let path = target.split('?').next().unwrap();
            if let Some(blob) = session_blob.get(path) {
                *sent.entry(blob.clone()).or_default() += e["request"]["body"].as_u64().unwrap();
                if e["method"] == "PUT" && e["status"] == 201 {
                    finished.insert(blob.clone());
                }
            }
        }
        (finished, sent)
    }
}

/// When an exchange started and ended, in the link's ms.
fn span(e: &Value) -> (f64, f64) {
    let start = e["start_ms"].as_f64().unwrap();
    (start, start + e["ms"].as_f64().unwrap())
}

/// Over a 40 ms link, a reset a third of the way through python's layer
/// upload: the upload starts again in a new session (the cut-off bytes
/// poison the old one: distribution 2.8 would answer the same PUT with 404
/// BLOB_UPLOAD_INVALID after reading it whole), the release completes, and
/// the layer costs its size and the part that was cut.
#[test]
#[ignore = "tier: registry"]
fn release_over_a_latent_link_survives_a_reset_mid_upload_in_a_new_session() {
    let Some(rig) = Rig::new("link-release", &["--rtt", "40ms"], 256 << 10) else {
        return;
    };
    let (layer, size) = rig.big_layer.clone();
    let cut = size / 3;
    rig.link.add_rules(json!({
        "method": "PUT", "path": format!("/blobs/uploads/.*digest={}", regex::escape(&layer)),
        "fault": {"reset": {"at": "request_body", "after": cut}}
    }));
    rig.release()
        .stderr_may(r"release: .*")
        .stderr_like(rig.done_line())
        .run();
    let puts: Vec<Value> = (rig.exchanges().into_iter())
        .filter(|e| e["method"] == "PUT" && e["target"].as_str().unwrap().contains(&layer))
        .collect();
    let seen: Vec<(&Value, &Value, &Value)> = puts
        .iter()
        .map(|e| (&e["status"], &e["outcome"], &e["request"]["body"]))
        .collect();
    assert_eq!(
        seen,
        [
            (&Value::Null, &json!("reset"), &json!(cut)),
            (&json!(201), &json!("complete"), &json!(size)),
        ],
        "the reset PUT, then the layer whole in a new session: {puts:#?}"
    );
    assert_ne!(puts[0]["target"], puts[1]["target"], "a new session");
    eprintln!(
        "the {size}-byte layer cost {} bytes over the link (cut at {cut})",
        cut + size
    );
    rig.pins_verify();
}

/// A burst of three 503s on the first blob uploads begun and a 429 asking
/// for two seconds on a manifest PUT: the release completes, each faulted
/// request is asked again, and the retry after the 429 comes no sooner
/// than the registry asked.
#[test]
#[ignore = "tier: registry"]
fn a_release_through_a_503_burst_and_a_429_waits_as_asked_and_completes() {
    let Some(rig) = Rig::new("link-release-busy", &["--rtt", "20ms"], 64 << 10) else {
        return;
    };
    rig.link.add_rules(json!([
        {"method": "POST", "path": "/blobs/uploads/$", "times": 3,
         "fault": {"status": {"code": 503}}},
        {"method": "PUT", "path": "/manifests/", "nth": 2,
         "fault": {"status": {"code": 429, "retry_after": "2"}}},
    ]));
    rig.release()
        .stderr_may(r"release: .*")
        .stderr_like(rig.done_line())
        .run();
    let exchanges = rig.exchanges();
    let faulted: Vec<&Value> = exchanges.iter().filter(|e| !e["fault"].is_null()).collect();
    assert_eq!(
        faulted
            .iter()
            .map(|e| e["fault"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [
            "status 503",
            "status 503",
            "status 503",
            "status 429 (Retry-After: 2)"
        ],
        "{faulted:#?}"
    );
    // Each faulted request came again (the same method and target, later)
    // and was answered.
    for f in &faulted {
        let again = exchanges.iter().find(|e| {
            e["id"].as_u64() > f["id"].as_u64()
                && e["method"] == f["method"]
                && (e["target"] == f["target"] || f["method"] == "POST")
                && e["fault"].is_null()
        });
        let again = again.unwrap_or_else(|| panic!("not asked again: {f:#}"));
        assert!(
            matches!(again["status"].as_u64(), Some(201 | 202)),
            "{again:#}"
        );
    }
    let too_many = faulted[3];
    let retry = exchanges
        .iter()
        .find(|e| {
            e["id"].as_u64() > too_many["id"].as_u64()
                && e["method"] == "PUT"
                && e["target"] == too_many["target"]
        })
        .unwrap();
    let (_, answered) = span(too_many);
    let (retried, _) = span(retry);
    assert!(
        retried - answered >= 2000.0,
        "the retry came {:.0} ms after the 429 that asked for 2 s",
        retried - answered
    );
    rig.pins_verify();
}

/// The link stops taking python's layer for 90 s (every chunk of its
/// 24 MiB, in 8 MiB chunks, stalls a MiB in): the release gives up within
/// the user's timeouts (`--registry-idle-timeout 2s`, a `--registry-timeout`
/// budget of 5 s for the retries), not the stall's 90 s, naming the link
/// and the blob. (Each attempt ends at the idle timeout while the client
/// still holds bytes of the chunk, or at the header timeout, 60 s, if a
/// loaded machine's socket buffers took the whole chunk: to the client it
/// then looks sent and unanswered; on a loaded machine the kernel has also
/// ended such a connection itself, ETIMEDOUT after about 30 s.) No tag is
/// written (nothing promoted), image_pins.json is untouched; `--resume`
/// then completes, sends python's layer whole once more (distribution 2.8
/// refuses a session whose chunk was cut) and no blob the first run
/// finished.
#[test]
#[ignore = "tier: registry"]
fn a_stalled_upload_fails_within_its_timeouts_and_a_resume_sends_only_what_was_missing() {
    let Some(rig) = Rig::new("link-release-stall", &["--rtt", "20ms"], 24 << 20) else {
        return;
    };
    let (layer, size) = rig.big_layer.clone();
    rig.link.add_rules(json!({
        "method": "PATCH", "path": "/blobs/uploads/", "times": 1000,
        "fault": {"stall": {"at": "request_body", "after": 1 << 20, "seconds": 90}}
    }));
    let pins_before = std::fs::read(rig.project.path().join("image_pins.json")).unwrap();
    let started = Instant::now();
    let link = regex::escape(rig.link.authority());
    rig.release()
        .args(["--registry-idle-timeout", "2s", "--registry-timeout", "5s"])
        .status(1)
        .stderr_may(r"release: .*")
        .stderr_like(format!(
            r"error: release (\S+) stopped \(image_pins.json is untouched\); `sunaba-images release --resume \S+` continues it: staging python: {link}/\S+@{}: gave up after \d+ attempt\(s\) in \d+ ms: {link}: http: (no bytes for 2 s while uploading bytes \d+-\d+ of the blob|no response within 60000 ms after|error sending request: .*Connection timed out).*",
            regex::escape(&layer)
        ))
        .run();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(80),
        "gave up after {took:?}: the idle timeout is 2 s, the header timeout 60 s, the stall 90 s"
    );
    assert_eq!(rig.tags(), Vec::<String>::new(), "nothing promoted");
    assert_eq!(
        std::fs::read(rig.project.path().join("image_pins.json")).unwrap(),
        pins_before
    );
    let (finished_first, _) = rig.uploads();
    assert!(!finished_first.contains(&layer), "{finished_first:?}");
    assert!(
        !finished_first.is_empty(),
        "some blobs went up before the stall"
    );

    let journals = std::fs::read_dir(rig.project.path().join("target/sunaba-release"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect::<Vec<_>>();
    assert_eq!(journals.len(), 1, "{journals:?}");
    assert_eq!(rig.link.admin("DELETE", "/_link/rules", None).0, 204);
    rig.link.clear_stats();
    rig.project
        .cli()
        .args(["--profile", "local", "release", "--resume", &journals[0]])
        .args(["--notes", "notes.md"])
        .stderr_may(r"release: .*")
        .stderr_like(rig.done_line())
        .run();
    let (finished_again, sent) = rig.uploads();
    assert!(finished_again.contains(&layer), "{finished_again:?}");
    assert_eq!(sent[&layer], size, "python's layer went up once, whole");
    let resent: Vec<&String> = (finished_first.iter())
        .filter(|b| sent.contains_key(*b))
        .collect();
    assert!(
        resent.is_empty(),
        "blobs finished before the stall were sent again: {resent:?}"
    );
    assert_eq!(rig.tags().len(), 4 * support::shipped_variants().len());
    rig.pins_verify();
}

/// A layer whose upload takes three minutes at the link's rate (2.25 MB at
/// 100 kbit/s): no cap on a transfer that is moving, so the release
/// completes, in one request for that layer.
#[test]
#[ignore = "tier: registry"]
fn a_layer_whose_upload_takes_three_minutes_goes_up() {
    let big = 2_250_000;
    let Some(rig) = Rig::new("link-release-slow", &["--rate-up", "100kbit"], big) else {
        return;
    };
    let (layer, size) = rig.big_layer.clone();
    rig.release()
        .stderr_may(r"release: .*")
        .stderr_like(rig.done_line())
        .run();
    let puts: Vec<Value> = (rig.exchanges().into_iter())
        .filter(|e| e["method"] == "PUT" && e["target"].as_str().unwrap().contains(&layer))
        .collect();
    assert_eq!(puts.len(), 1, "{puts:#?}");
    assert_eq!(puts[0]["status"], 201);
    assert_eq!(puts[0]["request"]["body"].as_u64(), Some(size));
    let (start, end) = span(&puts[0]);
    assert!(
        end - start >= 170_000.0,
        "the layer went up in {:.0} ms: the link did not hold it to 100 kbit/s",
        end - start
    );
    rig.pins_verify();
}
