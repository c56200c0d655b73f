//! `release` from the engine: what is missing is built and checked, the
//! client pushes each image by digest through the counting proxy,
//! the client stamps the version and promotes. A two-variant fixture family
//! of fake tools (seconds to build), and the real family once.

use crate::release::{
    Rig, attach_step, cost, family_aliases, family_tags, planned_tags, print_costs,
};
use crate::support::{self, EMPTY_PINS, Family, Project, Services, Variant};
use std::collections::BTreeMap;

/// A fragment installing `/usr/local/bin/<tool>` that prints `output`, and
/// whose `check DIR` reports a file holding DEFECT (the fixture's smoke).
pub fn write_fragment(project: &Project, name: &str, tool: &str, output: &str) {
    project.write_fragment(name, &support::checker_tool(tool, output));
}

/// The two-variant fixture family (`root`, and `kid` serving `fake`), its
/// `local` profile releasing to `repository` from the dev base, with no
/// pins yet; rendered.
pub fn fixture_family(repository: &str, s: &Services) -> Family {
    Family::new("kid")
        .repository("sunaba-release-fixture/unused")
        .upstream(&s.pinned_base())
        .tool("alpha")
        .tool("beta")
        .fragment("root", &["alpha"])
        .fragment("kid", &["beta"])
        .variant(Variant::new("root").fragments(&["root"]).aliased())
        .variant(
            Variant::new("kid")
                .parent("root")
                .fragments(&["kid"])
                .aliased()
                .serves_fake(),
        )
        .profile("repository", repository)
        .profile("upstream", &s.pinned_base())
}

/// A release rig (see [`Rig`]) whose project is [`fixture`] of
/// [`fixture_family`], releasing to `<proxy>/<ns>/fixture`.
fn fixture_rig(name: &str, s: &Services) -> Option<Rig> {
    Rig::with_project(name, "fixture", |repo| fixture(&fixture_family(repo, s)))
}

/// A project of [`fixture_family`], rendered, with no pins yet. Its
/// fragments carry the project's directory, so every build of it is cold:
/// these tests count what is built and pushed.
pub fn fixture(family: &Family) -> Project {
    let p = Project::fixture(family).file("image_pins.json", EMPTY_PINS);
    write_fragment(&p, "root", "alpha", "alpha 1.2.3");
    write_fragment(&p, "kid", "beta", "beta 2.0.0");
    p.render()
}

#[test]
#[ignore = "tier: engine"]
fn from_the_engine_missing_images_are_built_checked_pushed_stamped_and_a_failed_check_stops_it() {
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let rig = fixture_rig("engine", &s).unwrap();
    // Signed: the SBOM is read from the layers this client compressed.
    let key = sunaba_images::attest::PrivateKey::generate();
    let private = rig.project.path().join("release.key");
    key.save(&private, false).unwrap();
    let public = rig.project.path().join("release.pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    rig.cli()
        .args(["release", "--write", "--notes", "notes.md", "--signing-key"])
        .arg(&private)
        .stderr_free("the build's progress and the release's")
        .run();
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "pinned");
    // Only release tags, besides the referrers' fallback tags (`sha256-<hex>`
    // of each signed image: a registry without the referrers API has no
    // other place for them).
    let (fallback, tags): (BTreeMap<String, String>, BTreeMap<String, String>) = rig
        .published()
        .into_iter()
        .partition(|(t, _)| t.starts_with("sha256-"));
    assert_eq!(tags, planned_tags(&journal), "only release tags");
    let staged: Vec<String> = ["root", "kid"]
        .iter()
        .map(|v| {
            journal["staged"][v]["digest"]
                .as_str()
                .unwrap()
                .replace(':', "-")
        })
        .collect();
    assert_eq!(
        fallback.keys().cloned().collect::<Vec<_>>().len(),
        staged.len(),
        "one fallback index per signed image: {fallback:?}"
    );
    for tag in fallback.keys() {
        assert!(staged.contains(tag), "{tag} names no released image");
    }
    for v in ["root", "kid"] {
        let staged = &journal["staged"][v];
        assert_ne!(
            staged["pushed"], staged["digest"],
            "{v}: stamped after the push"
        );
        let p = &rig.pusher;
        let labels = p.wait(p.config_labels(&rig.repo, &format!("{v}-1.0.0")));
        assert_eq!(
            labels["org.opencontainers.image.version"], "1.0.0",
            "{labels}"
        );
        let record: serde_json::Value =
            serde_json::from_str(labels["dev.sunaba.check"].as_str().unwrap()).unwrap();
        assert_eq!(record["status"], "pass");
        assert_eq!(record["inputs"], labels["dev.sunaba.inputs"]);
    }
    rig.pins_verify(2);
    rig.cli()
        .args(["pins", "verify", "--key"])
        .arg(&public)
        .stdout("ok: 2 alias(es) pinned and verified in image_pins.json\n")
        .run();
    let pins: serde_json::Value = serde_json::from_str(&rig.pins_text()).unwrap();
    let referrers = pins["images"]["root"]["referrers"].as_object().unwrap();
    let (subject, _) = referrers.iter().next().unwrap();
    let sbom = attached_predicate(&rig, subject, "https://spdx.dev/Document/v2.3");
    let packages = sbom["packages"].as_array().unwrap();
    assert!(
        packages.len() > 50,
        "the image and dpkg's packages: {}",
        packages.len()
    );

    // Nothing changed: nothing is built, pushed or written.
    rig.engine_release_is_a_no_op();

    // A tool that no longer answers as images.toml says: its check fails,
    // and nothing at all is pushed.
    write_fragment(&rig.project, "kid", "beta", "beta two");
    let pins = rig.pins_text();
    rig.proxy.clear_log();
    let run = rig
        .cli()
        .args(["release", "--write"])
        .status(1)
        .stderr_free("the build's progress and its failure report")
        .run();
    assert!(
        run.stderr()
            .contains("error: kid: check failed: beta mismatch; nothing was released"),
        "{}",
        run.stderr()
    );
    assert_eq!(rig.writes(), 0, "{:#?}", rig.proxy.log());
    assert_eq!(rig.pins_text(), pins);
}

/// A maintainer adds a toolchain in one sitting, with no code and no test
/// changed: a made-up `toyc` (fragment, tool, a variant on the root, joined
/// to the default, a language with its marker and extension, a smoke suite
/// and its sample projects) is images.toml lines and files; then render,
/// detect, and a release from the engine (which builds and checks what is
/// missing) publishes and pins it with the rest.
#[test]
#[ignore = "tier: engine"]
fn a_toolchain_added_as_images_toml_lines_is_rendered_detected_built_checked_and_released() {
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let rig = fixture_rig("new-toolchain", &s).unwrap();
    let root = rig.project.path();
    write_fragment(&rig.project, "toy", "toyc", "toyc 0.3.1");
    for (project, text) in [("pass", "fine\n"), ("defect", "a DEFECT\n")] {
        let dir = root.join("tests/smoke/toylang").join(project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), text).unwrap();
    }
    let manifest = root.join("images.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let text = support::edit_manifest_list(&text, &["variants", "kid", "fragments"], |f| {
        f.push("toy".into())
    });
    let mut text = support::edit_manifest_list(&text, &["variants", "kid", "serves"], |f| {
        f.push("toylang".into())
    });
    text.push_str(
        r#"
[languages.toylang]
tools = ["toyc"]
markers = ["toy.mod"]
extensions = ["toy"]

[tools.toyc]
probe = ["toyc", "--version"]
version = 'toyc ([0-9]+\.[0-9]+\.[0-9]+)'
min = "0.3.0"

[fragments.toy]
script = "docker/install-toy.sh"
provides = ["toyc"]

[variants.toy]
parent = "root"
fragments = ["toy"]
aliases = ["toy"]
serves = ["toylang"]
size_budget = "500MiB"

[smoke.toylang]
[[smoke.toylang.commands]]
run = ["toyc", "check", "."]
expect.pass = { exit = 0, output = "^toyc: clean" }
expect.defect = { exit = 1, output = "DEFECT in ./a.txt" }
"#,
    );
    std::fs::write(&manifest, text).unwrap();
    support::Cli::new(root)
        .args(["render"])
        .stdout_line("created   docker/Dockerfile.toy")
        .stdout_line("created   docker/healthcheck/toy.sh")
        .stdout_line("updated   docker/Dockerfile.kid")
        .stdout_line("updated   docker/healthcheck/kid.sh")
        .stdout_like(r"render: 4 file\(s\) written, 0 removed, \d+ unchanged")
        .run();
    support::Cli::new(root)
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("toy.mod"), "").unwrap();
    support::Cli::new(project.path())
        .args(["--manifest"])
        .args([&manifest])
        .args(["detect", "."])
        .stdout("toylang  .  tools: toyc (global)\n")
        .run();

    rig.cli()
        .args(["release", "--write", "--notes", "notes.md"])
        .stderr_free("the build's progress and the release's")
        .run();
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "pinned");
    let published = rig.published();
    assert_eq!(published, planned_tags(&journal));
    for tag in ["toy-1.0.0", "toy", "kid-1.0.0", "root-1.0.0"] {
        assert!(published.contains_key(tag), "{tag}: {published:?}");
    }
    let p = &rig.pusher;
    let labels = p.wait(p.config_labels(&rig.repo, "toy-1.0.0"));
    let record: serde_json::Value =
        serde_json::from_str(labels["dev.sunaba.check"].as_str().unwrap()).unwrap();
    assert_eq!(record["status"], "pass", "{record}");
    assert_eq!(record["tools"]["toyc"], "0.3.1", "{record}");
    assert_eq!(record["smoke"]["suites"]["toylang"], 2, "{record}");
    rig.pins_verify(3);
}

/// The shipped family from the engine through the proxy: every variant is
/// published (built where missing), the tags point at the planned digests,
/// `pins verify` passes, and a second run writes nothing.
#[test]
#[ignore = "tier: engine"]
fn the_real_family_is_released_from_the_engine_and_a_second_run_writes_nothing() {
    if support::services().is_none() {
        return;
    }
    let _heavy = support::machine_lock();
    let rig = Rig::new("real-family").unwrap();
    rig.cli()
        .args(["release", "--write", "--notes", "notes.md"])
        .stderr_free("progress of a real build (apt, PyPI, npm) and of the release")
        .run();
    let (_, journal) = rig.journal();
    let planned = planned_tags(&journal);
    assert_eq!(planned.len(), family_tags());
    assert_eq!(
        rig.published(),
        planned,
        "only release tags in the tag list"
    );
    rig.pins_verify(family_aliases());
    rig.engine_release_is_a_no_op();
}

/// Not a test: `scripts/bench-release` runs it. The engine's push counted
/// too (its blob HEADs and uploads are the staging column).
#[test]
#[ignore = "benchmark: run by scripts/bench-release"]
fn bench_engine_release_request_economy() {
    let Some(s) = support::services() else {
        return;
    };
    let rig = fixture_rig("bench-engine", &s).unwrap();
    let mut rows = Vec::new();
    let mut measure = |name: &str, stdout: Option<&str>| {
        rig.proxy.clear_log();
        let started = std::time::Instant::now();
        let cli = rig
            .cli()
            .args(["release", "--write"])
            .stderr_free("the build's progress and the release's");
        match stdout {
            Some(s) => cli.stdout(s).run(),
            None => cli.stdout_free("release notes").run(),
        };
        rows.push((
            name.to_string(),
            cost(&rig.proxy.log(), &rig.repo),
            started.elapsed().as_secs_f64(),
        ));
    };
    measure("first release (2 variants)", None);
    measure(
        "no change",
        Some("nothing to release: every image is as pinned\n"),
    );
    write_fragment(&rig.project, "kid", "beta", "beta 2.0.1");
    measure("one variant changed (kid)", None);
    print_costs("engine source, 2 aliases", 2, &rows);
    for (name, c, _) in &rows {
        assert_eq!(c.promotion_blob_bytes, 0, "{name}: promotion sends no blob");
    }
    assert_eq!(rows[1].1.staging_writes + rows[1].1.tag_puts, 0);
    assert_eq!(rows[2].1.tag_puts, 4);
}

/// Not a test: `scripts/bench-release` runs it. What the attach step of a
/// signed release from the engine costs (issue 29, acceptance 5: <= 15
/// requests per image): a first release with a cold layer cache, one with
/// nothing changed, one after `kid` changed; `BENCH_LOG` prints each
/// attach step's requests.
#[test]
#[ignore = "benchmark: run by scripts/bench-release"]
fn bench_engine_attach_request_economy() {
    let Some(s) = support::services() else {
        return;
    };
    let rig = fixture_rig("bench-attach", &s).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let key = rig.project.path().join("release.key");
    sunaba_images::attest::PrivateKey::generate()
        .save(&key, false)
        .unwrap();
    let measure = |name: &str, images: usize, stdout: Option<&str>| {
        rig.proxy.clear_log();
        let started = std::time::Instant::now();
        let cli = rig
            .cli()
            .env("SUNABA_CACHE_DIR", cache.path())
            .args(["release", "--write", "--signing-key"])
            .arg(&key)
            .stderr_free("the build's progress and the release's");
        match stdout {
            Some(s) => cli.stdout(s).run(),
            None => cli.stdout_free("release notes").run(),
        };
        let seconds = started.elapsed().as_secs_f64();
        let log = rig.proxy.log();
        let (requests, attach_seconds) = attach_step(&log, &rig.repo);
        let from = log.len() - requests;
        let blob_gets = (log[from..].iter())
            .filter(|l| l.method == "GET" && l.target.contains("/blobs/"))
            .count();
        if std::env::var_os("BENCH_LOG").is_some() {
            for l in &log[from..] {
                eprintln!("  {} {} ({} bytes)", l.method, l.target, l.body);
            }
        }
        eprintln!(
            "attach, {name}: {requests} requests ({:.1} per image, {blob_gets} blob GETs), \
             {attach_seconds:.2} s ({:.2} per image); the release {} requests, {seconds:.1} s",
            requests as f64 / images.max(1) as f64,
            attach_seconds / images.max(1) as f64,
            log.len(),
        );
        requests
    };
    let first = measure(
        "first release, engine source, cold cache (2 images)",
        2,
        None,
    );
    // Per image (four referrers on distribution 2.8: 4 × (bundle POST,
    // PUT; referrer PUT) + the fallback tag's GET and PUT = 14), and once
    // per release the empty config the referrers share (HEAD, POST, PUT):
    // over the real family's six images that is 14.5 per image.
    const ONCE_PER_RELEASE: usize = 3;
    assert!(
        first <= 2 * 15 + ONCE_PER_RELEASE,
        "<= 15 requests per image and the shared empty config: {first}"
    );
    let none = measure(
        "no change",
        0,
        Some("nothing to release: every image is as pinned\n"),
    );
    assert_eq!(none, 0);
    write_fragment(&rig.project, "kid", "beta", "beta 2.0.1");
    let one = measure("one variant changed (kid, 1 image)", 1, None);
    assert!(one <= 15, "<= 15 requests per image: {one}");
}

/// The attached SBOM of `subject` (the SPDX predicate of its signed
/// referrer, listed in the fallback tag), serialised as `sbom` writes it.
fn attached_sbom(rig: &Rig, subject: &str) -> Vec<u8> {
    let predicate = attached_predicate(rig, subject, "https://spdx.dev/Document/v2.3");
    serde_json::to_vec_pretty(&predicate).unwrap()
}

/// The predicate of `subject`'s signed referrer of `predicate_type`.
fn attached_predicate(rig: &Rig, subject: &str, predicate_type: &str) -> serde_json::Value {
    use base64::Engine as _;
    let p = &rig.pusher;
    let tag = subject.replace(':', "-");
    let index: serde_json::Value = serde_json::from_slice(
        &p.wait(p.get(&rig.repo, &format!("manifests/{tag}")))
            .unwrap(),
    )
    .unwrap();
    let entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["dev.sigstore.bundle.predicateType"] == predicate_type)
        .expect("the referrer is listed");
    let digest = entry["digest"].as_str().unwrap();
    let m: serde_json::Value = serde_json::from_slice(
        &p.wait(p.get(&rig.repo, &format!("manifests/{digest}")))
            .unwrap(),
    )
    .unwrap();
    let layer = m["layers"][0]["digest"].as_str().unwrap();
    let bundle: serde_json::Value =
        serde_json::from_slice(&p.wait(p.get(&rig.repo, &format!("blobs/{layer}"))).unwrap())
            .unwrap();
    let payload = base64::engine::general_purpose::STANDARD
        .decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
        .unwrap();
    let statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(statement["subject"][0]["digest"]["sha256"], subject[7..]);
    statement["predicate"].clone()
}

/// `sbom` of one released image, read four ways — the alias (its pinned
/// digest, from the registry), `--image REPO@DIGEST` with the engine
/// lacking it (the registry), the same once the engine has pulled it (the
/// engine's `save`), and the SBOM the signed release attached (read from
/// the pushed layers) — is one document, byte for byte, with
/// dpkg's packages in it; an unknown platform is refused naming the
/// platform the image has. Built from a clean checkout on a branch, the
/// provenance names the commit and the branch as its ref.
#[test]
#[ignore = "tier: engine"]
fn the_sbom_of_a_released_image_is_the_same_bytes_however_it_is_read() {
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let rig = fixture_rig("sbom-same", &s).unwrap();
    // A clean checkout on a branch: the build records HEAD as the
    // revision, and the provenance gets the branch as its ref.
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(rig.project.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    std::fs::write(
        rig.project.path().join(".gitignore"),
        "target/\nrelease.key\nnotes.md\n*.json.tmp*\n",
    )
    .unwrap();
    git(&["init", "-q", "-b", "trunk"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fixture"]);
    let head = git(&["rev-parse", "HEAD"]);
    let key = sunaba_images::attest::PrivateKey::generate();
    let private = rig.project.path().join("release.key");
    key.save(&private, false).unwrap();
    rig.cli()
        .args(["release", "--write", "--notes", "notes.md", "--signing-key"])
        .arg(&private)
        .env_remove("GITHUB_REF")
        .env_remove("GITHUB_SHA")
        .stderr_free("the build's progress and the release's")
        .run();
    let pins: serde_json::Value = serde_json::from_str(&rig.pins_text()).unwrap();
    let pin = &pins["images"]["root"];
    let digest = pin["digest"].as_str().unwrap();
    let by_digest = format!("{}@{digest}", pin["repository"].as_str().unwrap());
    let provenance = attached_predicate(&rig, digest, "https://slsa.dev/provenance/v1");
    let parameters = &provenance["buildDefinition"]["externalParameters"];
    assert_eq!(parameters["commit"], head.as_str(), "{provenance}");
    assert_eq!(parameters["ref"], "refs/heads/trunk", "{provenance}");
    let attached = attached_sbom(&rig, digest);
    let text = String::from_utf8(attached.clone()).unwrap();
    assert!(
        text.contains("\"pkg:deb/debian/bash@")
            && text.contains(&format!("\"name\": \"{by_digest}\"")),
        "{text}"
    );
    let sbom = |args: &[&str], output: &str, from: &str| -> Vec<u8> {
        rig.cli()
            .env("SUNABA_ENGINE", &s.engine)
            .arg("sbom")
            .args(args)
            .args(["--output", output])
            .stderr_line(format!("sbom: read {by_digest} from {from}"))
            .stderr_like(format!(r"sbom: .* \(\d+ packages\) written to {output}"))
            .run();
        std::fs::read(rig.project.path().join(output)).unwrap()
    };
    let registry = "the registry (linux/amd64)";
    assert_eq!(
        sbom(&["root"], "alias.json", registry),
        attached,
        "by alias"
    );
    let gone = std::process::Command::new(&s.engine)
        .args(["image", "inspect", &by_digest])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "the engine has not pulled it yet");
    assert_eq!(
        sbom(&["--image", &by_digest], "ref.json", registry),
        attached,
        "by reference, from the registry"
    );
    let pulled = std::process::Command::new(&s.engine)
        .args(["pull", "--quiet", &by_digest])
        .output()
        .unwrap();
    assert!(pulled.status.success(), "{pulled:?}");
    let local = rig
        .cli()
        .env("SUNABA_ENGINE", &s.engine)
        .args(["sbom", "--image", &by_digest, "--output", "local.json"])
        .stderr_like(format!(
            r"sbom: read {} from the engine \(.*, image sha256:[0-9a-f]{{64}}\)",
            regex::escape(&by_digest)
        ))
        .stderr_like(r"sbom: .* \(\d+ packages\) written to local.json")
        .run();
    drop(local);
    let _ = std::process::Command::new(&s.engine)
        .args(["image", "rm", &by_digest])
        .output();
    assert_eq!(
        std::fs::read(rig.project.path().join("local.json")).unwrap(),
        attached,
        "by reference, from the engine"
    );
    rig.cli()
        .env("SUNABA_ENGINE", &s.engine)
        .args(["sbom", "root", "--platform", "linux/s390x"])
        .status(1)
        .stderr_like(r"error: .*linux/s390x.*linux/amd64.*")
        .run();
}
