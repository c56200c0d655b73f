//! Our registry client through the shaped link (`sunaba-link`), not only
//! on loopback: the real `sunaba-images` CLI against the dev registry with
//! the link in between, its project publishing to the link's authority.
//! The link's exchange log is the evidence: which requests were in flight
//! together, which ones a fault hit, and what came after them.

use crate::pins::{self, pin_everything};
use crate::support::link::Link;
use crate::support::oci::Pusher;
use crate::support::{self, all_tools};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A pinned family whose project (and pins) name the link, not the
/// registry: every request of the CLI crosses the link.
struct Pinned {
    link: Link,
    p: pins::Project,
}

impl Pinned {
    /// Starts a link to the dev registry with `flags`, pushes a passing
    /// image of every variant (straight to the registry) and pins every
    /// alias through the link.
    fn new(name: &str, flags: &[&str]) -> Option<Pinned> {
        let registry = support::dev_registry()?;
        let link = Link::start(&registry, flags);
        let repo = format!("{}/sandbox", support::unique(&format!("link-{name}")));
        let p = pins::Project {
            dir: support::Project::shipped_publishing_to(&format!("{}/{repo}", link.authority())),
            registry: Pusher::plain(&registry),
            host: link.authority().to_string(),
            repo,
        };
        pin_everything(&p);
        Some(Pinned { link, p })
    }

    /// `pins verify` that passes.
    fn verify_passes(&self) {
        self.p
            .cli()
            .args(["pins", "verify"])
            .stdout(format!(
                "ok: {} alias(es) pinned and verified in image_pins.json\n",
                support::shipped_aliases().len()
            ))
            .run();
    }

    /// `(alias, pinned digest, pinned tag)` of every pin.
    fn pins(&self) -> Vec<(String, String, String)> {
        let pins = self.p.pins();
        pins["images"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(alias, pin)| {
                (
                    alias.clone(),
                    pin["digest"].as_str().unwrap().to_string(),
                    pin["tag"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The path of a manifest of the pinned repository (`tag` or digest).
    fn manifest_path(&self, reference: &str) -> String {
        format!("/v2/{}/manifests/{reference}", self.p.repo)
    }

    /// The finished exchanges, by method and exact target, in id order.
    fn exchanges_of(&self, method: &str, target: &str) -> Vec<Value> {
        let mut out: Vec<Value> = self.link.settled_stats()["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["method"] == method && e["target"] == target)
            .cloned()
            .collect();
        out.sort_by_key(|e| e["id"].as_u64());
        out
    }
}

/// When an exchange started and ended, in the link's ms.
fn span(e: &Value) -> (f64, f64) {
    let start = e["start_ms"].as_f64().unwrap();
    (start, start + e["ms"].as_f64().unwrap())
}

/// The most aliases with an exchange in flight at one moment: at each
/// exchange's start, the aliases of those started and not yet ended.
fn most_aliases_in_flight(labelled: &[(String, (f64, f64))]) -> usize {
    labelled
        .iter()
        .map(|(_, (at, _))| {
            labelled
                .iter()
                .filter(|(_, (start, end))| start <= at && at < end)
                .map(|(alias, _)| alias.as_str())
                .collect::<BTreeSet<_>>()
                .len()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn overlap_counts_aliases_in_flight_together_not_exchanges() {
    let l = |alias: &str, start: f64, end: f64| (alias.to_string(), (start, end));
    // One alias's requests overlapping each other are one alias.
    assert_eq!(
        most_aliases_in_flight(&[l("a", 0.0, 10.0), l("a", 1.0, 5.0), l("b", 10.0, 12.0)]),
        1
    );
    assert_eq!(
        most_aliases_in_flight(&[l("a", 0.0, 10.0), l("b", 9.0, 12.0), l("c", 9.5, 9.6)]),
        3
    );
    assert_eq!(most_aliases_in_flight(&[]), 0);
}

/// Over a 40 ms link with a bandwidth limit, `pins verify` passes, and the
/// aliases are checked at once: the link saw requests of different aliases
/// in flight together (no timing threshold: the overlap is in the log).
#[test]
#[ignore = "tier: registry"]
fn pins_verify_over_a_latent_link_passes_with_aliases_in_flight_together() {
    let Some(rig) = Pinned::new("verify-rtt", &["--rtt", "40ms", "--rate", "20mbit"]) else {
        return;
    };
    rig.link.clear_stats();
    rig.verify_passes();
    let stats = rig.link.settled_stats();
    let exchanges = stats["exchanges"].as_array().unwrap();
    assert!(
        exchanges.iter().all(|e| e["outcome"] == "complete"),
        "{stats:#}"
    );
    // An exchange is an alias's when it names that alias's digest or tag.
    let pins = rig.pins();
    assert!(pins.len() > 1, "{pins:?}");
    let labelled: Vec<(String, (f64, f64))> = exchanges
        .iter()
        .filter_map(|e| {
            let target = e["target"].as_str().unwrap();
            let (alias, ..) = pins.iter().find(|(_, digest, tag)| {
                target.ends_with(&format!("/manifests/{digest}"))
                    || target.ends_with(&format!("/manifests/{tag}"))
            })?;
            Some((alias.clone(), span(e)))
        })
        .collect();
    let aliases: BTreeSet<&str> = labelled.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(aliases.len(), pins.len(), "every alias was asked about");
    let most = most_aliases_in_flight(&labelled);
    eprintln!(
        "pins verify over 40 ms: {} exchanges, at most {most} of {} aliases in flight together",
        exchanges.len(),
        pins.len()
    );
    assert!(most > 1, "one alias at a time: {labelled:#?}");
}

/// Faults `pins verify` must survive, each on one alias's manifest GET:
/// a burst of 503s, a 429 with `Retry-After: 1`, a reset part-way through
/// the body. Each time the command passes, and the link's log shows the
/// faulted request asked again and answered whole.
#[test]
#[ignore = "tier: registry"]
fn pins_verify_survives_a_503_burst_a_429_and_a_reset_mid_manifest() {
    let Some(rig) = Pinned::new("verify-faults", &[]) else {
        return;
    };
    let pins = rig.pins();
    let manifest_of = |alias: &str| {
        let (_, digest, _) = pins.iter().find(|(a, ..)| a == alias).unwrap();
        rig.manifest_path(digest)
    };
    // `pins verify` with `times` faults on the GETs of `target`: the GETs
    // of it the link saw, in order.
    let verify_with = |target: &str, times: u64, fault: Value| -> Vec<Value> {
        assert_eq!(rig.link.admin("DELETE", "/_link/rules", None).0, 204);
        rig.link.clear_stats();
        rig.link.add_rules(json!({
            "method": "GET", "path": format!("^{}$", regex::escape(target)),
            "times": times, "fault": fault
        }));
        rig.verify_passes();
        let gets = rig.exchanges_of("GET", target);
        assert!(gets.len() > times as usize, "{gets:#?}");
        assert!(
            gets[times as usize..].iter().all(|e| e["fault"].is_null()
                && (e["status"].as_u64(), e["outcome"].as_str()) == (Some(200), Some("complete"))),
            "after the faults, every GET is answered whole: {gets:#?}"
        );
        gets
    };

    // Three 503s in a row, then the answer: the fourth try of one request.
    let target = manifest_of("python");
    let gets = verify_with(&target, 3, json!({"status": {"code": 503}}));
    for e in &gets[..3] {
        assert_eq!(
            (&e["status"], &e["fault"], &e["outcome"]),
            (&json!(503), &json!("status 503"), &json!("complete")),
            "{gets:#?}"
        );
    }

    // A 429 asking for a second: the next try comes no sooner (the link's
    // clock: the 429's last byte left before the retry's head arrived).
    let target = manifest_of("go");
    let gets = verify_with(
        &target,
        1,
        json!({"status": {"code": 429, "retry_after": "1"}}),
    );
    assert_eq!(gets[0]["status"], 429, "{gets:#?}");
    assert_eq!(gets[0]["fault"], "status 429 (Retry-After: 1)");
    let (_, answered) = span(&gets[0]);
    let (retried, _) = span(&gets[1]);
    assert!(
        retried - answered >= 1000.0,
        "the retry came {:.0} ms after the 429",
        retried - answered
    );

    // A reset 64 bytes into the manifest's body: asked again, whole.
    let target = manifest_of("js");
    let gets = verify_with(
        &target,
        1,
        json!({"reset": {"at": "response_body", "after": 64}}),
    );
    assert_eq!(
        (
            &gets[0]["status"],
            &gets[0]["outcome"],
            &gets[0]["response"]["body"]
        ),
        (&json!(200), &json!("reset"), &json!(64)),
        "{gets:#?}"
    );
}

/// A request that stalls for good, under a short `--registry-timeout`:
/// the command gives up within a bound (the timeout, not the stall), names
/// the registry (the link's authority) and what it was reading, and exits
/// 1 (an operational failure, docs/contracts.md); `pin --write` writes
/// nothing. The same short timeout without a stall passes (the link
/// answers the client's https probe at once, as the registry does).
#[test]
#[ignore = "tier: registry"]
fn a_stalled_manifest_fails_within_the_timeout_naming_the_registry_and_writes_nothing() {
    let Some(rig) = Pinned::new("stall", &[]) else {
        return;
    };
    let timeout = ["--registry-timeout", "2s"];
    rig.p
        .cli()
        .args(["pins", "verify"])
        .args(timeout)
        .stdout(format!(
            "ok: {} alias(es) pinned and verified in image_pins.json\n",
            support::shipped_aliases().len()
        ))
        .run();
    let link = regex::escape(rig.link.authority());
    let repo = regex::escape(&rig.p.repo);
    let gave_up =
        format!(r"gave up after 1 attempt\(s\) in \d+ ms: {link}: http: no response within \d+ ms");
    let stall = |target: String| {
        rig.link.add_rules(json!({
            "method": "GET", "path": format!("^{}$", regex::escape(&target)),
            "fault": {"stall": {"at": "response_head"}}
        }));
    };
    // Give up within a bound: the timeout (2 s) and slack, far below the
    // stall (for good) or the default timeout (2 min).
    let bound = Duration::from_secs(30);

    // A newer python to pin, whose manifest never comes.
    let before = std::fs::read(rig.p.pins_path()).unwrap();
    rig.p.push("python", "1.1.0", &all_tools());
    stall(rig.manifest_path("python-1.1.0"));
    let started = Instant::now();
    rig.p
        .cli()
        .args(["pin", "--write"])
        .args(timeout)
        .status(1)
        .stderr_like(format!(
            "error: nothing was written: python: {link}/{repo}:python-1.1.0: {gave_up}"
        ))
        .run();
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    assert_eq!(std::fs::read(rig.p.pins_path()).unwrap(), before);
    let stalled = rig.exchanges_of("GET", &rig.manifest_path("python-1.1.0"));
    assert_eq!(stalled.len(), 1, "{stalled:#?}");
    assert_eq!(stalled[0]["status"], Value::Null);

    // `pins verify` whose check of one pin never gets its answer: that pin
    // could not be checked (an error, not a problem), the others pass.
    let pins = rig.pins();
    let (_, python, _) = pins.iter().find(|(a, ..)| a == "python").unwrap();
    stall(rig.manifest_path(python));
    let started = Instant::now();
    rig.p
        .cli()
        .args(["pins", "verify"])
        .args(timeout)
        .status(1)
        .stdout_like(format!(
            "error: python: cannot check {link}/{repo}@{}: {gave_up}",
            regex::escape(python)
        ))
        .stderr("pins verify: 0 problem(s); 1 check(s) could not be made (see the error lines)\n")
        .run();
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    assert_eq!(std::fs::read(rig.p.pins_path()).unwrap(), before);
}
