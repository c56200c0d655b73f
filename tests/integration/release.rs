//! `release` on the loopback registry, every request through the counting,
//! fault-injecting proxy. The checked images are small synthetic ones
//! (`support::oci::Pusher`) at `<ns>/ci:<variant>`, released with `--from`
//! (the client copies them: mounts, stamped configs, manifest PUTs); the
//! engine path is covered by `engine_release.rs`.

use crate::support::oci::{Image, Pusher};
use crate::support::proxy::{Fault, Proxy, rule, rule_exact};
use crate::support::{self, Cli, all_tools, check_label, sha256};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The shipped family's variants (read from images.toml: a new toolchain
/// changes the counts below, never this file).
pub fn variants() -> Vec<String> {
    support::shipped_variants()
}

/// The release tags of the whole family: `<variant>-X.Y.Z`, `-X.Y`, `-X`
/// and `<variant>`, four a variant.
pub fn family_tags() -> usize {
    4 * variants().len()
}

/// The aliases `pins verify` checks once the family is released.
pub fn family_aliases() -> usize {
    support::shipped_aliases().len()
}

/// A release test's world: a proxy in front of the dev registry, a project
/// publishing to `<proxy>/<ns>/sandbox`, and checked images at `<ns>/ci`.
pub struct Rig {
    /// Runs the proxy.
    _rt: tokio::runtime::Runtime,
    pub proxy: Proxy,
    /// Straight to the dev registry, for pushing and looking uncounted.
    pub pusher: Pusher,
    pub ns: String,
    /// The release repository's path in the registry (`<ns>/<path>`).
    pub repo: String,
    pub project: support::Project,
}

impl Rig {
    /// A rig releasing the real family's manifest (with synthetic images).
    pub fn new(name: &str) -> Option<Rig> {
        Rig::with_project(name, "sandbox", support::Project::shipped_publishing_to)
    }

    /// A rig whose project is `project(<proxy>/<ns>/<path>)`.
    pub fn with_project(
        name: &str,
        path: &str,
        project: impl FnOnce(&str) -> support::Project,
    ) -> Option<Rig> {
        let host = support::dev_registry()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let proxy = rt.block_on(Proxy::start(&format!("http://{host}"), "127.0.0.1:0", None));
        let ns = support::unique(&format!("release-{name}"));
        let project = project(&format!("{}/{ns}/{path}", proxy.authority()));
        Some(Rig {
            _rt: rt,
            proxy,
            pusher: Pusher::plain(&host),
            repo: format!("{ns}/{path}"),
            ns,
            project,
        })
    }

    pub fn source(&self) -> String {
        format!("{}/{}/ci", self.proxy.authority(), self.ns)
    }

    pub fn cli(&self) -> Cli {
        self.project.cli().args(["--profile", "local"])
    }

    /// `release --from <source> ARGS`, with its progress lines allowed.
    pub fn release(&self, args: &[&str]) -> Cli {
        self.cli()
            .args(["release", "--from", &self.source()])
            .args(args)
            .stderr_may(r"release: .*")
    }

    /// Pushes a checked image of every variant to `<ns>/ci:<variant>`; a
    /// variant in `failing` carries a failed check. `salt` makes new inputs.
    pub fn push_family(&self, salt: &str, failing: &[&str]) {
        for v in variants() {
            let status = if failing.contains(&v.as_str()) {
                "fail"
            } else {
                "pass"
            };
            self.push_variant(&v, salt, status);
        }
    }

    /// Pushes one checked image to `<ns>/ci:<variant>`; returns its digest.
    pub fn push_variant(&self, variant: &str, salt: &str, status: &str) -> String {
        let inputs = sha256(format!("{variant} {salt}").as_bytes());
        let image = Image::linux("amd64")
            .labels(check_label(status, variant, &inputs, &all_tools()))
            .layer(format!("layer of {variant} {salt}").into_bytes());
        let repo = format!("{}/ci", self.ns);
        let p = &self.pusher;
        p.wait(p.image(&repo, Some(variant), &image)).digest
    }

    /// The path of a tag's manifest, as the proxy sees its requests.
    pub fn manifest_path(&self, tag: &str) -> String {
        format!("/v2/{}/manifests/{tag}", self.repo)
    }

    /// Where every tag of the release repository points, looked up on the
    /// registry itself (not counted).
    pub fn published(&self) -> BTreeMap<String, String> {
        let repo = &self.repo;
        let p = &self.pusher;
        p.wait(async {
            let mut out = BTreeMap::new();
            for tag in p.tags(repo).await {
                out.insert(tag.clone(), p.tag_digest(repo, &tag).await.unwrap());
            }
            out
        })
    }

    /// The release tags PUT through the proxy so far (PUTs by digest, which
    /// is how staging writes, are not tag writes).
    pub fn tag_writes(&self) -> Vec<String> {
        self.proxy
            .log()
            .iter()
            .filter(|l| l.method == "PUT")
            .filter_map(|l| l.target.split("/manifests/").nth(1).map(str::to_string))
            .filter(|t| !t.starts_with("sha256:"))
            .collect()
    }

    pub fn writes(&self) -> usize {
        self.proxy
            .log()
            .iter()
            .filter(|l| matches!(l.method.as_str(), "PUT" | "POST" | "PATCH" | "DELETE"))
            .count()
    }

    pub fn pins_path(&self) -> PathBuf {
        self.project.path().join("image_pins.json")
    }

    pub fn pins_text(&self) -> String {
        std::fs::read_to_string(self.pins_path()).unwrap()
    }

    /// `pins verify` passes with `aliases` pins.
    pub fn pins_verify(&self, aliases: usize) {
        self.cli()
            .args(["pins", "verify"])
            .stdout(format!(
                "ok: {aliases} alias(es) pinned and verified in image_pins.json\n"
            ))
            .run();
    }

    /// An engine release with nothing changed: it builds nothing (every
    /// variant skipped) and writes nothing.
    pub fn engine_release_is_a_no_op(&self) {
        self.proxy.clear_log();
        self.cli()
            .args(["release", "--write"])
            .stdout("nothing to release: every image is as pinned\n")
            .stderr_free("the build's progress (every variant skipped)")
            .run();
        assert_eq!(self.writes(), 0, "{:#?}", self.proxy.log());
    }

    /// The journals, by id.
    pub fn journals(&self) -> BTreeMap<String, Value> {
        let dir = self.project.path().join("target/sunaba-release");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return BTreeMap::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_suffix(".json")?.to_string();
                let text = std::fs::read_to_string(e.path()).ok()?;
                Some((id, serde_json::from_str(&text).unwrap()))
            })
            .collect()
    }

    /// The one journal there is.
    pub fn journal(&self) -> (String, Value) {
        let mut all = self.journals();
        assert_eq!(all.len(), 1, "{:?}", all.keys());
        all.pop_first().unwrap()
    }
}

/// Tag -> digest every journal'd tag should have, from a journal.
pub fn planned_tags(journal: &Value) -> BTreeMap<String, String> {
    journal["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let variant = t["variant"].as_str().unwrap();
            let digest = journal["staged"][variant]["digest"].as_str().unwrap();
            (t["tag"].as_str().unwrap().to_string(), digest.to_string())
        })
        .collect()
}

/// The release tags of a published map (no staging tags, no referrers'
/// `sha256-<hex>` fallback tags).
pub fn release_tags(published: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    published
        .iter()
        .filter(|(t, _)| !t.starts_with("_staging-") && !t.starts_with("sha256-"))
        .map(|(t, d)| (t.clone(), d.clone()))
        .collect()
}

/// The tags of every journal, as a set.
pub fn journaled_tags<'a>(journals: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    journals
        .into_iter()
        .flat_map(|j| planned_tags(j).into_keys())
        .collect()
}

#[test]
#[ignore = "tier: registry"]
fn a_release_from_nothing_publishes_every_variant_and_a_second_run_writes_nothing() {
    let Some(rig) = Rig::new("from-nothing") else {
        return;
    };
    rig.push_family("v1", &[]);
    // The dry run changes nothing.
    let run = rig.release(&["--json"]).stdout_json().run();
    let report = run.json();
    assert_eq!(report["schema"], "sunaba-images/release/v1");
    assert_eq!(report["journal"], serde_json::Value::Null, "{report:#}");
    let plan = &report["plan"];
    assert_eq!(plan["variants"].as_array().unwrap().len(), variants().len());
    assert_eq!(rig.writes(), 0, "a dry run writes nothing");
    assert!(rig.journals().is_empty());

    let notes = rig.project.path().join("notes.md");
    rig.release(&["--write", "--notes", notes.to_str().unwrap()])
        .stderr_like(format!(
            r"release: \S+ done: {} image\(s\), {} release tag\(s\) at their images",
            variants().len(),
            family_tags()
        ))
        .run();
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "pinned");
    // The repository's tag list (the registry's tags/list) is the release
    // and moving tags, nothing else: staging wrote no tag (issue 21).
    let published = rig.published();
    assert_eq!(published, planned_tags(&journal));
    for v in variants() {
        for tag in [
            format!("{v}-1.0.0"),
            format!("{v}-1.0"),
            format!("{v}-1"),
            v.clone(),
        ] {
            assert!(published.contains_key(&tag), "{tag} missing: {published:?}");
        }
    }
    // Promotion sent no layer: the only blob bytes are the stamped configs.
    let text = std::fs::read_to_string(&notes).unwrap();
    assert!(
        text.contains("## python 1.0.0\n\nfirst release\n"),
        "{text}"
    );
    rig.pins_verify(family_aliases());
    let pins = rig.pins_text();

    rig.proxy.clear_log();
    rig.release(&["--write"])
        .stdout("nothing to release: every image is as pinned\n")
        .run();
    assert_eq!(rig.writes(), 0, "{:#?}", rig.proxy.log());
    assert_eq!(rig.pins_text(), pins);
    assert_eq!(rig.journals().len(), 1, "a no-op release leaves no journal");
}

fn count<'a>(items: impl IntoIterator<Item = &'a String>) -> BTreeMap<&'a str, usize> {
    let mut out = BTreeMap::new();
    for i in items {
        *out.entry(i.as_str()).or_default() += 1;
    }
    out
}

#[test]
#[ignore = "tier: registry"]
fn killed_after_the_kth_tag_write_a_resume_converges_without_putting_a_tag_twice() {
    let Some(reference) = Rig::new("kill-reference") else {
        return;
    };
    reference.push_family("v1", &[]);
    reference.release(&["--write", "--notes", "notes.md"]).run();
    let expected = reference.published();
    assert_eq!(expected.len(), family_tags());
    let expected_pins = reference.pins_text().replace(&reference.ns, "NS");

    // The first tag write, one in the middle, and the last.
    for k in [1, family_tags() / 2, family_tags()] {
        let rig = Rig::new(&format!("kill-{k}")).unwrap();
        rig.push_family("v1", &[]);
        let pins_before = rig.pins_text();
        // Dies the moment the registry has answered the k-th tag write,
        // before the journal records it.
        rig.release(&["--write", "--notes", "notes.md"])
            .env("SUNABA_FAILPOINT", format!("release.tag-answered#{k}"))
            .status(134)
            .stdout_free("killed in the middle, so nothing to check")
            .stderr_free("release progress up to the kill")
            .run();
        assert_eq!(
            rig.pins_text(),
            pins_before,
            "k={k}: the pins are untouched"
        );
        let (id, journal) = rig.journal();
        // A kind's tags are written at once: when the k-th answer came,
        // others may have been on their way too, and the journal records
        // answers in its own order.
        let done: Vec<String> = journal["tags"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["done"] == true)
            .map(|t| t["tag"].as_str().unwrap().to_string())
            .collect();
        let at_kill = rig.tag_writes();
        assert!(
            done.len() < k,
            "k={k}: the journal knows of answered writes only: {done:?}"
        );
        assert!(
            done.iter().all(|t| at_kill.contains(t)),
            "k={k}: {done:?} {at_kill:?}"
        );
        assert!(at_kill.len() >= k, "k={k}: {at_kill:?}");

        rig.cli()
            .args(["release", "--resume", &id, "--notes", "notes.md"])
            .stderr_may(r"release: .*")
            .run();
        assert_eq!(
            rig.published(),
            expected,
            "k={k}: the same end state, and only release tags in the tag list"
        );
        assert_eq!(
            rig.pins_text()
                .replace(&rig.ns, "NS")
                .replace(&rig.proxy.authority(), &reference.proxy.authority()),
            expected_pins
        );
        // A tag the journal knew was written is not written again; one that
        // was on its way at the kill is found at its image by the resume
        // (or, if the kill cut its request short, written once more).
        let writes = rig.tag_writes();
        for (tag, n) in count(&writes) {
            let again_allowed =
                at_kill.contains(&tag.to_string()) && !done.contains(&tag.to_string());
            assert!(
                n == 1 || (n == 2 && again_allowed),
                "k={k}: {tag} PUT {n} times: {writes:?}"
            );
        }
        assert_eq!(count(&writes).len(), family_tags(), "k={k}");
        rig.pins_verify(family_aliases());
    }
}

#[test]
#[ignore = "tier: registry"]
fn one_failing_check_publishes_nothing_and_names_the_variant() {
    let Some(rig) = Rig::new("failing-check") else {
        return;
    };
    rig.push_family("v1", &["go"]);
    let pins = rig.pins_text();
    rig.release(&["--write"])
        .status(1)
        .stderr(
            "error: go: cannot be released: check record status is \"fail\", not \"pass\"; \
             nothing was written\n",
        )
        .run();
    assert_eq!(rig.writes(), 0, "{:#?}", rig.proxy.log());
    assert_eq!(rig.pins_text(), pins);
    assert!(rig.journals().is_empty());
}

#[test]
#[ignore = "tier: registry"]
fn an_immutable_tag_at_another_digest_stops_the_release_with_zero_tag_writes() {
    let Some(rig) = Rig::new("immutable") else {
        return;
    };
    rig.push_family("v1", &[]);
    let repo = rig.repo.clone();
    let squatter = Image::linux("amd64").layer(b"published by someone else".to_vec());
    let p = &rig.pusher;
    let other = p
        .wait(p.image(&repo, Some("python-1.0.0"), &squatter))
        .digest;
    let pins = rig.pins_text();
    let run = rig
        .release(&["--write"])
        .status(1)
        .stderr_like(format!(
            "error: release \\S+ stopped .*: immutable tag python-1.0.0 already points at {other}, \
             not the planned sha256:[0-9a-f]{{64}}; no release tag was written .*"
        ))
        .run();
    assert!(
        !run.stderr().contains("base-1.0.0 already"),
        "only python conflicts"
    );
    assert_eq!(rig.tag_writes(), Vec::<String>::new());
    assert_eq!(rig.pins_text(), pins);
    assert_eq!(p.wait(p.tag_digest(&repo, "python-1.0.0")), Some(other));
    let tags: Vec<String> = rig.published().into_keys().collect();
    assert_eq!(
        tags,
        ["python-1.0.0"],
        "the stopped release staged untagged"
    );
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "staged");
    assert!(
        journal["failure"]
            .as_str()
            .unwrap()
            .contains("python-1.0.0")
    );
}

#[test]
#[ignore = "tier: registry"]
fn faults_a_5xx_is_retried_a_wrong_digest_fails_and_a_refused_mount_uploads() {
    let Some(rig) = Rig::new("faults") else {
        return;
    };
    rig.push_family("v1", &[]);
    // Every mount is answered 202 (distribution opens an upload instead).
    rig.proxy
        .add(rule(Some("POST"), "mount=", Fault::DropQuery, usize::MAX));
    rig.proxy.add(rule_exact(
        "PUT",
        &rig.manifest_path("python-1.0.0"),
        Fault::Status(503, None),
        1,
    ));
    let wrong = sha256(b"not what was sent");
    rig.proxy.add(rule_exact(
        "PUT",
        &rig.manifest_path("go-1"),
        Fault::SetDigest(wrong.clone()),
        1,
    ));
    let pins = rig.pins_text();
    rig.release(&["--write"])
        .status(1)
        .stderr_like(format!(
            "error: release \\S+ stopped .*: moving go-1 to sha256:[0-9a-f]{{64}}: \
             .*go-1: registry \\S+ answered Docker-Content-Digest {wrong} for bytes that hash to \
             sha256:[0-9a-f]{{64}}: it did not store what was sent"
        ))
        .run();
    assert_eq!(rig.pins_text(), pins, "a failed release pins nothing");
    let writes = rig.tag_writes();
    assert_eq!(count(&writes)["python-1.0.0"], 2, "the 503 was retried");
    let log = rig.proxy.log();
    let uploads = log
        .iter()
        .filter(|l| l.method == "PUT" && l.target.contains("/blobs/uploads/"))
        .count();
    let n = variants().len();
    assert_eq!(
        uploads,
        2 * n,
        "{n} layers into the refused mounts' sessions, {n} stamped configs"
    );
    let mounts = log.iter().filter(|l| l.target.contains("mount=")).count();
    assert_eq!(mounts, n);

    let (id, _) = rig.journal();
    rig.cli()
        .args(["release", "--resume", &id, "--notes", "notes.md"])
        .stderr_may(r"release: .*")
        .run();
    assert_eq!(
        count(&rig.tag_writes())["go-1"],
        1,
        "go-1 was stored: its HEAD says so"
    );
    rig.pins_verify(family_aliases());
}

#[test]
#[ignore = "tier: registry"]
fn a_one_variant_change_moves_its_tags_and_a_rollback_puts_them_back() {
    let Some(rig) = Rig::new("rollback") else {
        return;
    };
    rig.push_family("v1", &[]);
    rig.release(&["--write", "--notes", "notes.md"]).run();
    let first = rig.published();
    let pins = rig.pins_text();
    let first_journals: BTreeSet<String> = rig.journals().into_keys().collect();

    rig.push_variant("python", "v2", "pass");
    let run = rig.release(&[]).stdout_free("the plan table").run();
    assert!(
        run.stdout().contains("python   1.0.0 -> 1.0.1"),
        "{}",
        run.stdout()
    );
    rig.proxy.clear_log();
    let run = rig
        .release(&["--write"])
        .stdout_free("the release notes")
        .run();
    assert!(
        run.stdout().contains(
            "## python 1.0.1\n\npatch release (was 1.0.0): inputs changed, no tool did\n"
        ),
        "{}",
        run.stdout()
    );
    // The immutable tag first; the moving ones at once, in any order.
    let writes = rig.tag_writes();
    assert_eq!(writes[0], "python-1.0.1", "{writes:?}");
    assert_eq!(
        writes[1..]
            .iter()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["python-1.0", "python-1", "python"]),
        "{writes:?}"
    );
    assert_eq!(writes.len(), 4, "{writes:?}");
    let second = rig.published();
    assert_ne!(second["python"], first["python"]);
    assert_eq!(second["python-1.0.1"], second["python"]);
    assert_eq!(second["go"], first["go"], "go is untouched");

    // The second release's journal: the one the first did not leave (no
    // reliance on how ids sort).
    let id = (rig.journals().into_keys())
        .find(|id| !first_journals.contains(id))
        .expect("the second release's journal");
    rig.cli()
        .args(["release", "--rollback", &id])
        .stdout_line(format!("python-1.0: back at {}", first["python-1.0"]))
        .stdout_line(format!("python-1: back at {}", first["python-1"]))
        .stdout_line(format!("python: back at {}", first["python"]))
        .stdout_line("pin of python: back to what it was")
        .run();
    let rolled = rig.published();
    assert_eq!(rolled["python"], first["python"]);
    assert_eq!(
        rolled.keys().cloned().collect::<BTreeSet<_>>(),
        journaled_tags(rig.journals().values()),
        "after two releases and a rollback, only their release tags"
    );
    assert_eq!(
        rolled["python-1.0.1"], second["python-1.0.1"],
        "immutable tags stay"
    );
    assert_eq!(rig.pins_text(), pins);
}

/// What one release run cost, counted at the proxy.
pub struct Cost {
    pub requests: usize,
    /// GETs (plan reads, copies, read-backs) and blob HEADs.
    pub reads: usize,
    /// POSTs and PUTs of blobs, and manifest PUTs by digest (staging).
    pub staging_writes: usize,
    pub tag_heads: usize,
    pub tag_puts: usize,
    /// Blob bytes sent once the first release tag was touched.
    pub promotion_blob_bytes: usize,
}

pub fn cost(log: &[crate::support::proxy::Logged], repo: &str) -> Cost {
    let manifests = format!("/v2/{repo}/manifests/");
    let is_tag = |l: &crate::support::proxy::Logged| {
        l.target
            .strip_prefix(&manifests)
            .is_some_and(|t| !t.starts_with("sha256:"))
    };
    let first_tag = log.iter().position(&is_tag).unwrap_or(log.len());
    let count =
        |f: &dyn Fn(&crate::support::proxy::Logged) -> bool| log.iter().filter(|l| f(l)).count();
    Cost {
        requests: log.len(),
        reads: count(&|l| !is_tag(l) && matches!(l.method.as_str(), "GET" | "HEAD")),
        staging_writes: count(&|l| !is_tag(l) && matches!(l.method.as_str(), "POST" | "PUT")),
        tag_heads: count(&|l| is_tag(l) && l.method == "HEAD"),
        tag_puts: count(&|l| is_tag(l) && l.method == "PUT"),
        promotion_blob_bytes: log[first_tag..]
            .iter()
            .filter(|l| l.target.contains("/blobs/"))
            .map(|l| l.body)
            .sum(),
    }
}

/// The attach step of one release run, as the lab notes count it: the
/// requests after the last release tag was written, and the seconds from
/// that tag's PUT to the last request (the last referrer listed).
pub fn attach_step(log: &[crate::support::proxy::Logged], repo: &str) -> (usize, f64) {
    let manifests = format!("/v2/{repo}/manifests/");
    let Some(last_tag) = log.iter().rposition(|l| {
        l.method == "PUT"
            && l.target
                .strip_prefix(&manifests)
                .is_some_and(|t| !t.starts_with("sha256"))
    }) else {
        return (0, 0.0);
    };
    let after = &log[last_tag + 1..];
    let seconds = after
        .last()
        .map_or(0.0, |l| (l.at - log[last_tag].at).as_secs_f64());
    (after.len(), seconds)
}

/// Prints one row per run (to stderr: stdout belongs to the test harness).
pub fn print_costs(title: &str, aliases: usize, rows: &[(String, Cost, f64)]) {
    eprintln!(
        "\n{:<36} {:>8} {:>9} {:>6} {:>8} {:>8} {:>7} {:>17} {:>7}",
        title,
        "requests",
        "per alias",
        "reads",
        "staging",
        "tag HEAD",
        "tag PUT",
        "promo blob bytes",
        "seconds"
    );
    for (name, c, s) in rows {
        eprintln!(
            "{:<36} {:>8} {:>9.1} {:>6} {:>8} {:>8} {:>7} {:>17} {:>7.2}",
            name,
            c.requests,
            c.requests as f64 / aliases as f64,
            c.reads,
            c.staging_writes,
            c.tag_heads,
            c.tag_puts,
            c.promotion_blob_bytes,
            s
        );
    }
}

/// Not a test: `scripts/bench-release` runs it and prints the figures.
#[test]
#[ignore = "benchmark: run by scripts/bench-release"]
fn bench_release_request_economy() {
    let Some(rig) = Rig::new("bench") else {
        return;
    };
    let aliases = family_aliases();
    let mut rows = Vec::new();
    let mut measure = |name: &str, rig: &Rig, args: &[&str], stdout: Option<&str>| {
        rig.proxy.clear_log();
        let started = std::time::Instant::now();
        let cli = rig.release(args);
        match stdout {
            Some(s) => cli.stdout(s).run(),
            None => cli.stdout_free("release notes").run(),
        };
        let seconds = started.elapsed().as_secs_f64();
        if std::env::var_os("BENCH_LOG").is_some() {
            for l in rig.proxy.log() {
                eprintln!("  {} {} ({} bytes)", l.method, l.target, l.body);
            }
        }
        rows.push((name.to_string(), cost(&rig.proxy.log(), &rig.repo), seconds));
    };
    rig.push_family("v1", &[]);
    let first = format!("first release ({} variants)", variants().len());
    measure(&first, &rig, &["--write"], None);
    measure(
        "no change",
        &rig,
        &["--write"],
        Some("nothing to release: every image is as pinned\n"),
    );
    rig.push_variant("python", "v2", "pass");
    measure("one variant changed (python)", &rig, &["--write"], None);
    print_costs(
        &format!("registry source, {aliases} aliases"),
        aliases,
        &rows,
    );
    for (name, c, _) in &rows {
        assert_eq!(c.promotion_blob_bytes, 0, "{name}: promotion sends no blob");
        assert!(
            c.tag_heads <= family_tags() && c.tag_puts <= c.tag_heads,
            "{name}: HEAD + PUT per tag at most"
        );
    }
    let one = &rows[2].1;
    assert_eq!(
        one.tag_puts, 4,
        "python's immutable tag and its three moving tags"
    );
    assert_eq!(one.tag_heads, 4, "one HEAD per tag");
    let none = &rows[1].1;
    assert_eq!(
        none.tag_puts + none.staging_writes + none.tag_heads,
        0,
        "a no-change release writes nothing"
    );

    // The same first release, signed (issue 19's goal: SBOM + provenance +
    // signing + attaching <= 3 s and <= 12 requests per platform image).
    let signed = Rig::new("bench-signed").unwrap();
    signed.push_family("v1", &[]);
    let key = signed.project.path().join("release.key");
    sunaba_images::attest::PrivateKey::generate()
        .save(&key, false)
        .unwrap();
    signed.proxy.clear_log();
    let started = std::time::Instant::now();
    signed
        .release(&["--write", "--signing-key", key.to_str().unwrap()])
        .stdout_free("release notes")
        .stderr_may(r"attested .*|attached .*")
        .run();
    let seconds = started.elapsed().as_secs_f64();
    let with = cost(&signed.proxy.log(), &signed.repo);
    let (plain, plain_seconds) = (&rows[0].1, rows[0].2);
    let images = variants().len();
    eprintln!(
        "signed first release: {} requests, {seconds:.2} s; unsigned {} requests, {plain_seconds:.2} s; \
         attaching: {:.1} requests and {:.2} s per platform image (goal <= 12 and <= 3 s)",
        with.requests,
        plain.requests,
        (with.requests as f64 - plain.requests as f64) / images as f64,
        (seconds - plain_seconds) / images as f64
    );
}

/// A release into a registry with token auth, from another registry: the
/// tokens asked for are `pull,push` on the target (the source is read
/// anonymously), and the blobs cross registries by their bytes (no mount).
#[test]
#[ignore = "tier: registry"]
fn a_release_to_a_token_auth_registry_asks_for_push_scopes_and_copies_across_registries() {
    use crate::support::distribution::{self, Auth, PASSWORD, Registry, USER};
    use crate::support::issuer::Issuer;
    let Some(source) = Rig::new("token-source") else {
        return;
    };
    if !distribution::available() {
        return;
    }
    source.push_family("v1", &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let issuer = rt.block_on(Issuer::start());
    let storage = tempfile::tempdir().unwrap();
    let registry = Registry::start(
        storage.path(),
        Auth::Token {
            realm: issuer.realm(),
        },
    );
    let repo = format!("{}/sandbox", source.ns);
    let project =
        support::Project::shipped_publishing_to(&format!("{}/{repo}", registry.authority()));
    let home = project.path().join("home");
    std::fs::create_dir_all(home.join(".docker")).unwrap();
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        home.join(".docker/config.json"),
        serde_json::json!({"auths": {registry.authority(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    support::isolated_cli(project.path())
        .env("HOME", &home)
        .args([
            "--profile",
            "local",
            "release",
            "--write",
            "--notes",
            "notes.md",
        ])
        .arg("--from")
        .arg(source.source())
        .stderr_may("release: .*")
        .run();
    let scopes: std::collections::BTreeSet<String> =
        issuer.log().into_iter().filter_map(|l| l.scope).collect();
    assert!(
        scopes.contains(&format!("repository:{repo}:pull,push")),
        "{scopes:?}"
    );
    assert!(issuer.log().iter().all(|l| l.user.as_deref() == Some(USER)));
    let copied = source
        .proxy
        .log()
        .iter()
        .filter(|l| l.method == "GET" && l.target.contains("/ci/blobs/"))
        .count();
    // The plan reads each config, the copy each layer, the stamp each config.
    assert_eq!(
        copied,
        3 * variants().len(),
        "no blob read twice for one purpose"
    );
    support::isolated_cli(project.path())
        .env("HOME", &home)
        .args(["--profile", "local", "pins", "verify"])
        .stdout(format!(
            "ok: {} alias(es) pinned and verified in image_pins.json\n",
            family_aliases()
        ))
        .run();
}

#[test]
#[ignore = "tier: registry"]
fn a_two_platform_source_is_released_as_an_index_pinned_per_platform_and_verified() {
    let Some(rig) = Rig::new("two-platform") else {
        return;
    };
    rig.push_family("v1", &[]);
    // python as an index of an amd64 and an arm64/v8 image (arm64 listed
    // first, with an annotation: the staged index is assembled anew).
    let inputs = sha256(b"python two-platform");
    let labels = check_label("pass", "python", &inputs, &all_tools());
    let repo = format!("{}/ci", rig.ns);
    let p = &rig.pusher;
    let (amd, arm) = p.wait(async {
        let amd = Image::linux("amd64")
            .labels(&labels)
            .layer(b"python amd64".to_vec());
        let arm = Image::linux("arm64")
            .variant("v8")
            .labels(&labels)
            .layer(b"python arm64".to_vec());
        let amd = p.image(&repo, None, &amd).await;
        let arm = p.image(&repo, None, &arm).await;
        let manifests = vec![
            arm.descriptor(
                serde_json::json!({"os": "linux", "architecture": "arm64", "variant": "v8"}),
            ),
            amd.descriptor(serde_json::json!({"os": "linux", "architecture": "amd64"})),
        ];
        p.index(&repo, "python", manifests).await;
        (amd, arm)
    });
    rig.release(&["--write", "--notes", "notes.md"]).run();
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "pinned");
    let staged = &journal["staged"]["python"];
    assert_eq!(
        staged["media_type"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(staged["config"], Value::Null);
    let platforms = staged["platforms"].as_object().unwrap();
    assert_eq!(
        platforms.keys().collect::<Vec<_>>(),
        ["linux/amd64", "linux/arm64"]
    );
    for d in platforms.values() {
        assert_ne!(d, amd.digest.as_str(), "stamped, so new digests");
        assert_ne!(d, arm.digest.as_str());
    }
    let published = rig.published();
    assert_eq!(
        published["python-1.0.0"],
        staged["digest"].as_str().unwrap()
    );
    assert_eq!(
        published,
        planned_tags(&journal),
        "the platform images and the index were staged untagged"
    );
    let pins: Value = serde_json::from_str(&rig.pins_text()).unwrap();
    let pin = &pins["images"]["python"];
    assert_eq!(pin["digest"], staged["digest"]);
    assert_eq!(pin["platforms"], staged["platforms"]);
    // `resolve --platform` picks the pinned arm64 image out of the index.
    let image = format!("{}/{}:python-1.0.0", rig.proxy.authority(), rig.repo);
    rig.cli()
        .args(["resolve", "--platform", "linux/arm64", &image])
        .stdout(format!(
            "{}\t{image}\n",
            platforms["linux/arm64"].as_str().unwrap()
        ))
        .run();
    rig.pins_verify(family_aliases());
    // Nothing changed: nothing to release, nothing written.
    rig.proxy.clear_log();
    rig.release(&["--write"])
        .stdout("nothing to release: every image is as pinned\n")
        .run();
    assert_eq!(rig.writes(), 0, "{:#?}", rig.proxy.log());
}
