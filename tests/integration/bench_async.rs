//! Not tests: `scripts/bench-async` runs them. Wall time of the commands
//! whose registry requests issue 31 made concurrent, through the counting
//! proxy in front of the dev registry, which can add a delay to every
//! request (`BENCH_DELAY_MS`, a stand-in for a round trip: on loopback
//! concurrency has little to win). The family is the shipped manifest with
//! synthetic checked images (support::oci), released from the registry
//! (`release --from`), six aliases; each figure is `BENCH_RUNS` runs.

use crate::release::{Rig, family_aliases};
use crate::support::proxy::Proxy;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn delay() -> Duration {
    let ms = std::env::var("BENCH_DELAY_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Duration::from_millis(ms)
}

/// One command's figures over its runs.
struct Row {
    name: String,
    seconds: Vec<f64>,
    requests: usize,
    max_in_flight: usize,
}

impl Row {
    fn print(&self) {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        eprintln!(
            "bench: {:<40} runs {:>2}  median {:>7.3} s  min {:>7.3} s  requests {:>4}  max in flight {:>3}",
            self.name,
            s.len(),
            s[s.len() / 2],
            s[0],
            self.requests,
            self.max_in_flight
        );
    }
}

/// Times `run` (one command) through `proxy`: its seconds, the requests of
/// its last run and the most requests in flight at once over all runs.
fn measure(name: &str, proxy: &Proxy, runs: usize, mut run: impl FnMut(usize)) -> Row {
    let mut row = Row {
        name: name.to_string(),
        seconds: Vec::new(),
        requests: 0,
        max_in_flight: 0,
    };
    for i in 0..runs {
        proxy.clear_log();
        proxy.max_inflight.store(0, Ordering::SeqCst);
        let started = Instant::now();
        run(i);
        row.seconds.push(started.elapsed().as_secs_f64());
        row.requests = proxy.log().len();
        row.max_in_flight = row
            .max_in_flight
            .max(proxy.max_inflight.load(Ordering::SeqCst));
    }
    row
}

fn rig(name: &str) -> Option<Rig> {
    let rig = Rig::new(name)?;
    rig.proxy.state.lock().unwrap().delay = delay();
    rig.push_family("v1", &[]);
    Some(rig)
}

/// A key pair in the project: `release.key` and `release.pub`.
fn keys(rig: &Rig) -> (String, String) {
    let key = sunaba_images::attest::PrivateKey::generate();
    let private = rig.project.path().join("release.key");
    key.save(&private, false).unwrap();
    let public = rig.project.path().join("release.pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    let s = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    (s(private), s(public))
}

#[test]
#[ignore = "benchmark: run by scripts/bench-async"]
fn bench_async_release_and_pins_verify() {
    let (runs, aliases) = (runs(), family_aliases());
    eprintln!(
        "bench: {aliases} aliases, {runs} runs each, {} ms added per request",
        delay().as_millis()
    );
    let mut rows = Vec::new();

    // A first, signed release into an empty repository: stage (copy the
    // layers, stamp), attach the referrers, promote. A fresh rig each run.
    let mut rigs: Vec<Rig> = (0..runs)
        .map(|i| rig(&format!("bench-async-first-{i}")).expect("the dev registry"))
        .collect();
    let mut keys: Vec<(String, String)> = rigs.iter().map(keys).collect();
    let mut row = Row {
        name: "release --write, first, signed".into(),
        seconds: Vec::new(),
        requests: 0,
        max_in_flight: 0,
    };
    for (rig, (private, _)) in rigs.iter().zip(&keys) {
        let one = measure(&row.name, &rig.proxy, 1, |_| {
            rig.release(&["--write", "--signing-key", private])
                .stdout_free("release notes")
                .stderr_may(r"attested .*|attached .*")
                .run();
        });
        row.seconds.extend(one.seconds);
        row.requests = one.requests;
        row.max_in_flight = row.max_in_flight.max(one.max_in_flight);
    }
    rows.push(row);

    let rig = rigs.pop().unwrap();
    let (_, public) = keys.pop().unwrap();
    rows.push(measure(
        "release --write, unchanged family",
        &rig.proxy,
        runs,
        |_| {
            rig.release(&["--write"])
                .stdout("nothing to release: every image is as pinned\n")
                .run();
        },
    ));
    rows.push(measure(
        &format!("pins verify, {aliases} aliases"),
        &rig.proxy,
        runs,
        |_| rig.pins_verify(aliases),
    ));
    rows.push(measure(
        &format!("pins verify --key, {aliases} aliases"),
        &rig.proxy,
        runs,
        |_| {
            rig.cli()
                .args(["pins", "verify", "--key", &public])
                .stdout_free("the attestations checked")
                .stderr_may(r"pins verify: .*")
                .run();
        },
    ));
    for row in &rows {
        row.print();
    }
}
