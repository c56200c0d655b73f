//! `release --write --signing-key` (issue 19, attach and verify): every
//! released image gets a signature, a provenance, a test result and an
//! SBOM as OCI referrers — on the loopback registry (distribution 2.8, no
//! referrers API) listed in the `sha256-<hex>` fallback tag — the pinned
//! digests are those of an unsigned release, `pins verify --key` checks
//! them (and names each tampering), tools this project did not write
//! verify the bundles fetched back from the registry, and a release killed
//! while attaching converges on `--resume` with nothing listed twice.

use crate::release::{Rig, family_aliases, release_tags, variants};
use crate::support::{self, sha256};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use sunaba_images::attest::statement::{self, Resource};
use sunaba_images::attest::{Bundle, PrivateKey, dsse::IN_TOTO, referrer};

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A key pair in the project: `release.key` (0600) and `release.pub`.
fn keys(rig: &Rig) -> (PrivateKey, PathBuf, PathBuf) {
    let key = PrivateKey::generate();
    let private = rig.project.path().join("release.key");
    key.save(&private, false).unwrap();
    let public = rig.project.path().join("release.pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    (key, private, public)
}

fn pins(rig: &Rig) -> Value {
    serde_json::from_str(&rig.pins_text()).unwrap()
}

/// The fallback index of `subject` in the release repository.
fn fallback(rig: &Rig, subject: &str) -> Option<Vec<u8>> {
    let tag = subject.replace(':', "-");
    let p = &rig.pusher;
    p.wait(p.get(&rig.repo, &format!("manifests/{tag}")))
}

fn entries(index: &[u8]) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(index).unwrap();
    doc["manifests"].as_array().unwrap().clone()
}

/// `pins verify --key PUB`: its exit status and stdout.
fn verify(rig: &Rig, public: &Path, status: i32) -> String {
    rig.cli()
        .args(["pins", "verify", "--key", public.to_str().unwrap()])
        .status(status)
        .stdout_free("checked below")
        .stderr_may(r"pins verify: .*")
        .run()
        .stdout()
        .to_string()
}

/// The pins without their referrers, the release namespace made neutral.
fn digests_of(rig: &Rig) -> Value {
    let mut p = pins(rig);
    for pin in p["images"].as_object_mut().unwrap().values_mut() {
        pin.as_object_mut().unwrap().remove("referrers");
    }
    let text = p
        .to_string()
        .replace(&rig.ns, "NS")
        .replace(&rig.proxy.authority(), "PROXY");
    serde_json::from_str(&text).unwrap()
}

#[test]
#[ignore = "tier: registry"]
fn a_signed_release_attaches_referrers_that_verify_and_leaves_the_pinned_digests_as_unsigned() {
    let Some(unsigned) = Rig::new("attach-unsigned") else {
        return;
    };
    let rig = Rig::new("attach").unwrap();
    for r in [&unsigned, &rig] {
        r.push_family("v1", &[]);
    }
    let (key, private, public) = keys(&rig);
    let dry = unsigned.release(&[]).stdout_free("the plan").run();
    assert!(
        dry.stdout()
            .contains("attestations: none (no --signing-key)\n"),
        "{}",
        dry.stdout()
    );
    unsigned.proxy.clear_log();
    let started = std::time::Instant::now();
    unsigned.release(&["--write", "--notes", "notes.md"]).run();
    let unsigned_time = started.elapsed();
    let unsigned_requests = unsigned.proxy.log().len();
    let dry = rig
        .release(&["--signing-key", private.to_str().unwrap()])
        .stdout_free("the plan")
        .run();
    assert!(
        dry.stdout().contains(&format!(
            "attestations: signed with key {}",
            key.public().hint()
        )),
        "{}",
        dry.stdout()
    );
    rig.proxy.clear_log();
    let started = std::time::Instant::now();
    rig.release(&[
        "--write",
        "--notes",
        "notes.md",
        "--signing-key",
        private.to_str().unwrap(),
    ])
    .run();
    let signed_time = started.elapsed();
    let signed_requests = rig.proxy.log().len();
    eprintln!(
        "attach cost: {} extra request(s) for {} image(s) ({:.1} each); release {:.2}s signed, {:.2}s unsigned",
        signed_requests - unsigned_requests,
        variants().len(),
        (signed_requests - unsigned_requests) as f64 / variants().len() as f64,
        signed_time.as_secs_f64(),
        unsigned_time.as_secs_f64()
    );
    let (_, journal) = rig.journal();
    assert_eq!(journal["step"], "pinned");
    assert_eq!(
        journal["attached"].as_object().unwrap().len(),
        variants().len(),
        "one subject a single-platform variant"
    );
    // Attaching changed no pinned digest: the pins are the unsigned
    // release's, plus the referrers.
    assert_eq!(digests_of(&rig), digests_of(&unsigned));
    assert!(unsigned.pins_text().find("referrers").is_none());
    let ok = verify(&rig, &public, 0);
    assert_eq!(
        ok,
        format!(
            "ok: {} alias(es) pinned and verified in image_pins.json\n",
            family_aliases()
        )
    );

    // Every subject's fallback index lists exactly its pinned referrers,
    // each with its artifactType and annotations; their bundles, fetched
    // back by digest, verify with tools this project did not write.
    let dir = tempfile::tempdir().unwrap();
    let mut bundles = Vec::new();
    let p = &rig.pusher;
    for pin in pins(&rig)["images"].as_object().unwrap().values() {
        for (subject, referrers) in pin["referrers"].as_object().unwrap() {
            let listed = entries(&fallback(&rig, subject).unwrap());
            let digests: Vec<&str> = listed
                .iter()
                .map(|e| e["digest"].as_str().unwrap())
                .collect();
            let pinned: Vec<&str> = referrers
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            assert_eq!(digests, pinned, "{subject}");
            let types: Vec<&str> = listed
                .iter()
                .map(|e| e["annotations"][referrer::PREDICATE_TYPE].as_str().unwrap())
                .collect();
            assert_eq!(
                types,
                [
                    referrer::SIGN,
                    statement::PROVENANCE,
                    statement::TEST_RESULT,
                    referrer::SPDX
                ]
            );
            for e in &listed {
                assert_eq!(e["artifactType"], sunaba_images::attest::bundle::MEDIA_TYPE);
                let digest = e["digest"].as_str().unwrap();
                let m = p
                    .wait(p.get(&rig.repo, &format!("manifests/{digest}")))
                    .unwrap();
                assert_eq!(sha256(&m), digest);
                let m: Value = serde_json::from_slice(&m).unwrap();
                assert_eq!(m["subject"]["digest"], subject.as_str());
                let layer = m["layers"][0]["digest"].as_str().unwrap();
                let b = p.wait(p.get(&rig.repo, &format!("blobs/{layer}"))).unwrap();
                let file = dir.path().join(format!("{}.json", &layer[7..19]));
                std::fs::write(&file, b).unwrap();
                if !bundles.contains(&file) {
                    bundles.push(file);
                }
            }
        }
    }
    assert_eq!(bundles.len(), 4 * variants().len());
    if let Some(tools) = crate::attest::verifiers() {
        let files: Vec<&Path> = bundles.iter().map(PathBuf::as_path).collect();
        let (sigstore, dsse, said) = crate::attest::verify(&tools, &public, &files);
        assert!(sigstore && dsse, "{said}");
        statements_are_valid(&tools, &bundles, dir.path());
    }

    // skopeo reads the fallback index and sees each referrer's type.
    let subject = journal["attached"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap();
    let host = support::dev_registry().unwrap();
    let out = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!(
            "docker://{host}/{}:{}",
            rig.repo,
            subject.replace(':', "-")
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = raw["manifests"].as_array().unwrap();
    assert_eq!(listed.len(), 4);
    assert!(
        listed
            .iter()
            .all(|m| m["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"),
        "{raw}"
    );

    // One alias, or an image by reference, with `verify-attestations`.
    let (alias, pin) = pins(&rig)["images"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .map(|(a, p)| (a.clone(), p.clone()))
        .unwrap();
    let by_ref = format!(
        "{}@{}",
        pin["repository"].as_str().unwrap(),
        pin["digest"].as_str().unwrap()
    );
    for target in [alias.as_str(), by_ref.as_str()] {
        rig.cli()
            .args([
                "verify-attestations",
                target,
                "--key",
                public.to_str().unwrap(),
            ])
            .stdout(format!(
                "ok: {target}: the attestations of 1 image(s) verified with the key {}\n",
                key.public().hint()
            ))
            .run();
    }
    // Another key alone: the referrers the pin lists do not verify, each
    // a problem saying why, and the required ones are missing.
    let other_key = PrivateKey::generate();
    let other = rig.project.path().join("other.pub");
    std::fs::write(&other, other_key.public().to_pem()).unwrap();
    let digest = pin["digest"].as_str().unwrap();
    let out = rig
        .cli()
        .args([
            "verify-attestations",
            &alias,
            "--key",
            other.to_str().unwrap(),
        ])
        .status(2)
        .stdout_free("checked below")
        .stderr_line("verify-attestations: 8 problem(s)")
        .run()
        .stdout()
        .to_string();
    let missing = format!(
        "problem: {alias}: attestations of {digest}: no verified (signature|provenance|test result|SBOM) \\(.*\\) among 4 referrer\\(s\\)"
    );
    let unverified = format!(
        "problem: {alias}: attestations of {digest}: the pinned referrer sha256:[0-9a-f]{{64}} does not verify: \
         signed by no trusted key \\(it names the key {}\\)",
        key.public().hint()
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 8, "{out}");
    let (missing, unverified) = (
        regex::Regex::new(&format!("^{missing}$")).unwrap(),
        regex::Regex::new(&format!("^{unverified}$")).unwrap(),
    );
    assert!(lines[..4].iter().all(|l| missing.is_match(l)), "{out}");
    assert!(lines[4..].iter().all(|l| unverified.is_match(l)), "{out}");
    // Under `--format github` each problem is also an annotation at the
    // alias's pin.
    let line = std::fs::read_to_string(rig.project.path().join("image_pins.json"))
        .unwrap()
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("\"{alias}\"")))
        .unwrap()
        + 1;
    let run = rig
        .cli()
        .args(["verify-attestations", &alias, "--key"])
        .arg(&other)
        .args(["--format", "github"])
        .status(2)
        .stdout_free("compared line by line below")
        .stderr_line("verify-attestations: 8 problem(s)")
        .run();
    let expected: Vec<String> = (lines.iter())
        .map(|p| {
            format!(
                "::error file=image_pins.json,line={line},title=verify-attestations%3A {alias}::{}",
                p.strip_prefix("problem: ").unwrap().replace('%', "%25")
            )
        })
        .chain(lines.iter().map(|l| l.to_string()))
        .collect();
    assert_eq!(run.lines(), expected);
    // `--json`: the same findings, one document, and still exit 2.
    let run = rig
        .cli()
        .args(["verify-attestations", &alias, "--json", "--key"])
        .arg(&other)
        .status(2)
        .stdout_json()
        .stderr_line("verify-attestations: 8 problem(s)")
        .run();
    let doc = run.json();
    assert_eq!(doc["schema"], "sunaba-images/verify-attestations/v1");
    assert_eq!(
        (doc["target"].as_str(), doc["ok"].as_bool()),
        (Some(alias.as_str()), Some(false))
    );
    assert_eq!(doc["subjects"], 1);
    assert_eq!(
        doc["findings"].as_array().unwrap().len(),
        lines.len(),
        "{doc:#}"
    );
    // By reference nothing is pinned: the same referrers are listed as
    // ignored (warnings) beside the missing ones.
    let by_ref_out = rig
        .cli()
        .args(["verify-attestations", &by_ref, "--key"])
        .arg(&other)
        .status(2)
        .stdout_free("checked below")
        .stderr_line("verify-attestations: 4 problem(s)")
        .run()
        .stdout()
        .to_string();
    let ignored = format!(
        "warning: {}: attestations of {digest}: referrer sha256:[0-9a-f]{{64}} ignored: \
         signed by no trusted key \\(it names the key {}\\)",
        regex::escape(&by_ref),
        key.public().hint()
    );
    let ignored = regex::Regex::new(&format!("^{ignored}$")).unwrap();
    let lines: Vec<&str> = by_ref_out.lines().collect();
    assert_eq!(lines.len(), 8, "{by_ref_out}");
    assert!(
        lines[..4].iter().all(|l| ignored.is_match(l)),
        "{by_ref_out}"
    );
    assert!(
        lines[4..].iter().all(|l| l.starts_with("problem: ")),
        "{by_ref_out}"
    );

    // Key rotation: both keys trusted, each verifies what it signed.
    rig.cli()
        .args(["verify-attestations", &alias, "--key"])
        .arg(&other)
        .arg("--key")
        .arg(&public)
        .stdout(format!(
            "ok: {alias}: the attestations of 1 image(s) verified with one of the keys {}, {}\n",
            other_key.public().hint(),
            key.public().hint()
        ))
        .run();
    rig.cli()
        .args(["pins", "verify", "--key"])
        .arg(&other)
        .arg("--key")
        .arg(&public)
        .stdout(format!(
            "ok: {} alias(es) pinned and verified in image_pins.json\n",
            family_aliases()
        ))
        .stderr_may(r"pins verify: .*")
        .run();

    the_policy_must_be_read(&rig, &alias, &public);
    tampering_is_named(&rig, &key, &public);
    let listing = Listing::of_first_alias(&rig, &public);
    a_second_signer_is_listed_as_ignored(&listing);
    a_flood_of_referrers_is_refused_unread(&listing);
    registry_strings_are_printed_escaped(&listing);
}

/// `verify-attestations ALIAS` holds the alias to what images.toml says
/// its variant owes (its smoke suites): an images.toml that cannot be read
/// fails the run naming it, before any registry request, instead of
/// checking less. (No `--profile`: with one, the profile's settings need
/// images.toml anyway.)
fn the_policy_must_be_read(rig: &Rig, alias: &str, public: &Path) {
    /// Puts images.toml back however the checks end.
    struct Restore(PathBuf, String);
    impl Drop for Restore {
        fn drop(&mut self) {
            std::fs::write(&self.0, &self.1).unwrap();
        }
    }
    let manifest = rig.project.path().join("images.toml");
    let _restore = Restore(
        manifest.clone(),
        std::fs::read_to_string(&manifest).unwrap(),
    );
    let cli = || {
        (rig.project.cli())
            .args(["verify-attestations", alias, "--key"])
            .arg(public)
    };
    cli().stdout_like("ok: .*").run();
    std::fs::write(&manifest, "[family\n").unwrap();
    rig.proxy.clear_log();
    cli()
        .status(1)
        .stderr_like(format!(
            "error: cannot read the smoke suites {alias} owes from images.toml: \
             loading the image family manifest: images.toml: TOML parse error at line 1, column 8"
        ))
        .stderr_may(r"\s*\d*\s*\|.*|unclosed table, expected `\]`")
        .run();
    assert_eq!(
        rig.proxy.log().len(),
        0,
        "nothing was asked of the registry"
    );
    std::fs::remove_file(&manifest).unwrap();
    cli()
        .status(1)
        .stderr_line(format!(
            "error: cannot read the smoke suites {alias} owes from images.toml: \
             loading the image family manifest: cannot read images.toml: \
             No such file or directory (os error 2)"
        ))
        .run();
}

/// The statements inside the bundles: provenance and test results valid
/// to in-toto-attestation, the SBOMs to spdx-tools.
fn statements_are_valid(tools: &Path, bundles: &[PathBuf], dir: &Path) {
    use base64::Engine as _;
    let (mut intoto, mut spdx) = (Vec::new(), Vec::new());
    for (n, file) in bundles.iter().enumerate() {
        let bundle: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let payload = base64::engine::general_purpose::STANDARD
            .decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let statement: Value = serde_json::from_slice(&payload).unwrap();
        let out = dir.join(format!("statement-{n}.json"));
        match statement["predicateType"].as_str().unwrap() {
            statement::PROVENANCE | statement::TEST_RESULT => {
                std::fs::write(&out, &payload).unwrap();
                intoto.push(out);
            }
            referrer::SPDX => {
                std::fs::write(&out, statement["predicate"].to_string()).unwrap();
                spdx.push(out);
            }
            _ => {}
        }
    }
    assert_eq!(intoto.len(), 2 * variants().len());
    let args: Vec<&std::ffi::OsStr> = intoto.iter().map(|p| p.as_os_str()).collect();
    let script = support::repo_root().join("scripts/intoto-validate.py");
    let out = crate::attest::python(tools, &script, &args);
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(spdx.len(), variants().len());
    for sbom in &spdx {
        let out = crate::attest::python(
            tools,
            tools.join("python/bin/pyspdxtools"),
            &["-i".as_ref(), sbom.as_os_str()],
        );
        assert!(
            out.status.success(),
            "pyspdxtools: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Each tampering with one subject's referrers fails `pins verify --key`,
/// naming the alias and what is wrong; restoring the index makes it pass.
fn tampering_is_named(rig: &Rig, key: &PrivateKey, public: &Path) {
    let pins = pins(rig);
    let (alias, pin) = pins["images"].as_object().unwrap().iter().next().unwrap();
    let (subject, _) = pin["referrers"].as_object().unwrap().iter().next().unwrap();
    let other_subject = pins["images"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p["digest"].as_str().unwrap())
        .find(|d| d != subject)
        .unwrap()
        .to_string();
    let original = fallback(rig, subject).unwrap();
    let listed = entries(&original);
    let tag = subject.replace(':', "-");
    let p = &rig.pusher;
    let put_index = |manifests: Vec<Value>| {
        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        let bytes = serde_json::to_vec(&index).unwrap();
        p.wait(p.manifest(&rig.repo, &tag, OCI_INDEX, &bytes));
    };
    let descriptor = serde_json::json!({
        "mediaType": OCI_MANIFEST,
        "digest": subject,
        "size": p.wait(p.get(&rig.repo, &format!("manifests/{subject}"))).unwrap().len(),
    });
    // A referrer (pushed to the repository) of `statement` signed by
    // `signer`, about `about`; its index entry.
    let referrer_of =
        |about: &Value, predicate_type: &str, predicate: Value, signer: &PrivateKey| {
            let hex = about["digest"].as_str().unwrap()[7..].to_string();
            let subject = [Resource::sha256("x", &hex)];
            let payload = statement::statement(&subject, predicate_type, &predicate);
            let bundle = Bundle::sign(IN_TOTO, &payload, signer).to_json();
            p.wait(p.blob(&rig.repo, &bundle));
            p.wait(p.blob(&rig.repo, referrer::EMPTY_JSON));
            let desc: referrer::Descriptor = serde_json::from_value(about.clone()).unwrap();
            let m = referrer::manifest(&desc, &bundle, predicate_type);
            let digest = p.wait(p.manifest(&rig.repo, &sha256(&m), OCI_MANIFEST, &m));
            let entry = serde_json::to_value(referrer::entry(&m).unwrap()).unwrap();
            (digest, entry)
        };
    let passed = serde_json::json!({"result": "PASSED", "configuration": [], "passedTests": ["check"], "warnedTests": [], "failedTests": []});
    let failed = serde_json::json!({"result": "FAILED", "configuration": [], "passedTests": [], "warnedTests": [], "failedTests": ["check"]});
    let elsewhere =
        serde_json::json!({"mediaType": OCI_MANIFEST, "digest": other_subject, "size": 1});
    let other_key = PrivateKey::generate();
    let elsewhere_says = format!("its subject is {other_subject}, not the pinned image");
    let with_test_result = |entry: Value| {
        let mut m = listed.clone();
        m[2] = entry;
        m
    };
    let no_test_result =
        "no verified test result (https://in-toto.io/attestation/test-result/v0.1)";
    let stranger = format!(
        "ignored: signed by no trusted key (it names the key {})",
        other_key.public().hint()
    );
    // Each: the index, a problem it must cause, and the referrer it must
    // list as ignored (none: no ignored line at all).
    let cases: Vec<(&str, Vec<Value>, &str, Option<&str>)> = vec![
        (
            "a referrer replaced",
            with_test_result(
                referrer_of(&descriptor, statement::TEST_RESULT, passed.clone(), key).1,
            ),
            "is not listed and verified",
            None,
        ),
        (
            "a signature from another key",
            with_test_result(
                referrer_of(
                    &descriptor,
                    statement::TEST_RESULT,
                    passed.clone(),
                    &other_key,
                )
                .1,
            ),
            no_test_result,
            Some(&stranger),
        ),
        (
            "a subject pointing elsewhere",
            with_test_result(referrer_of(&elsewhere, statement::TEST_RESULT, passed, key).1),
            no_test_result,
            Some(&elsewhere_says),
        ),
        (
            "a missing test result",
            listed
                .iter()
                .filter(|e| e["annotations"][referrer::PREDICATE_TYPE] != statement::TEST_RESULT)
                .cloned()
                .collect(),
            no_test_result,
            None,
        ),
        (
            "a test result saying fail",
            with_test_result(referrer_of(&descriptor, statement::TEST_RESULT, failed, key).1),
            "the signed test result says FAILED, not PASSED",
            None,
        ),
    ];
    // A referrer whose bundle layer claims more than the limit: refused
    // before a byte of it is read.
    let oversized = {
        let mut m: Value = serde_json::from_slice(
            &p.wait(p.get(
                &rig.repo,
                &format!("manifests/{}", listed[2]["digest"].as_str().unwrap()),
            ))
            .unwrap(),
        )
        .unwrap();
        m["layers"][0]["size"] = Value::from(1u64 << 40);
        let bytes = serde_json::to_vec(&m).unwrap();
        p.wait(p.manifest(&rig.repo, &sha256(&bytes), OCI_MANIFEST, &bytes));
        let mut entry = listed[2].clone();
        entry["digest"] = Value::from(sha256(&bytes));
        entry["size"] = Value::from(bytes.len());
        with_test_result(entry)
    };
    let mut cases = cases;
    cases.push((
        "an oversized referrer",
        oversized,
        no_test_result,
        Some("its bundle is 1099511627776 bytes, over the limit of 33554432: not read"),
    ));
    for (what, manifests, says, ignored) in cases {
        put_index(manifests);
        let out = verify(rig, public, 2);
        let wanted = format!("problem: {alias}: attestations of {subject}: ");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&wanted) && l.contains(says)),
            "{what}: wanted a line {wanted}…{says}, got:\n{out}"
        );
        let warned: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("warning: {alias}: attestations of {subject}: ")))
            .collect();
        match ignored {
            Some(why) => assert!(
                warned.len() == 1 && warned[0].ends_with(why),
                "{what}: wanted one ignored referrer …{why}, got:\n{out}"
            ),
            None => assert!(warned.is_empty(), "{what}: {out}"),
        }
    }
    p.wait(p.manifest(&rig.repo, &tag, OCI_INDEX, &original));
    verify(rig, public, 0);
}

/// A released subject's fallback index and how to answer it: what a
/// registry lists beside a release's referrers.
struct Listing<'a> {
    rig: &'a Rig,
    public: &'a Path,
    subject: String,
    original: Vec<u8>,
    listed: Vec<Value>,
    tag: String,
    /// `alias: attestations of subject: `, as findings start.
    prefix: String,
    ok_line: String,
}

impl<'a> Listing<'a> {
    fn of_first_alias(rig: &'a Rig, public: &'a Path) -> Listing<'a> {
        let pins = pins(rig);
        let (alias, pin) = pins["images"].as_object().unwrap().iter().next().unwrap();
        let (subject, _) = pin["referrers"].as_object().unwrap().iter().next().unwrap();
        let original = fallback(rig, subject).unwrap();
        Listing {
            rig,
            public,
            listed: entries(&original),
            original,
            tag: subject.replace(':', "-"),
            prefix: format!("{alias}: attestations of {subject}: "),
            subject: subject.clone(),
            ok_line: format!(
                "ok: {} alias(es) pinned and verified in image_pins.json",
                family_aliases()
            ),
        }
    }

    fn index(&self, manifests: &[Value]) -> Vec<u8> {
        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        serde_json::to_vec(&index).unwrap()
    }

    /// The proxy answers the next `times` reads of the fallback tag with
    /// `body` (the registry itself refuses to store what tests list).
    fn answer(&self, body: Vec<u8>, times: usize) {
        use crate::support::proxy::{Fault, rule_exact};
        let path = format!("/v2/{}/manifests/{}", self.rig.repo, self.tag);
        let digest = sha256(&body);
        let proxy = &self.rig.proxy;
        proxy.add(rule_exact("GET", &path, Fault::Body(body), times));
        proxy.add(rule_exact("GET", &path, Fault::SetDigest(digest), times));
    }
}

/// A second signer's referrer beside the release's own: the gate passes
/// and lists it as ignored; trusting its key too, nothing is ignored.
fn a_second_signer_is_listed_as_ignored(l: &Listing) {
    let (rig, public, p) = (l.rig, l.public, &l.rig.pusher);
    let (subject, prefix, ok_line) = (&l.subject, &l.prefix, &l.ok_line);
    let second = PrivateKey::generate();
    let hex = &subject[7..];
    let payload = statement::statement(
        &[Resource::sha256("x", hex)],
        referrer::SPDX,
        &serde_json::json!({}),
    );
    let bundle = Bundle::sign(IN_TOTO, &payload, &second).to_json();
    p.wait(p.blob(&rig.repo, &bundle));
    let about: referrer::Descriptor = serde_json::from_value(serde_json::json!({
        "mediaType": OCI_MANIFEST,
        "digest": subject,
        "size": p.wait(p.get(&rig.repo, &format!("manifests/{subject}"))).unwrap().len(),
    }))
    .unwrap();
    let m = referrer::manifest(&about, &bundle, referrer::SPDX);
    let stranger = p.wait(p.manifest(&rig.repo, &sha256(&m), OCI_MANIFEST, &m));
    let mut with_stranger = l.listed.clone();
    with_stranger.insert(
        1,
        serde_json::to_value(referrer::entry(&m).unwrap()).unwrap(),
    );
    p.wait(p.manifest(&rig.repo, &l.tag, OCI_INDEX, &l.index(&with_stranger)));
    let out = verify(rig, public, 0);
    assert_eq!(
        out,
        format!(
            "warning: {prefix}referrer {stranger} ignored: signed by no trusted key (it names the key {})\n{ok_line}\n",
            second.public().hint()
        )
    );
    // Trusting the second key too, its SBOM verifies: nothing is ignored.
    let second_pub = rig.project.path().join("second.pub");
    std::fs::write(&second_pub, second.public().to_pem()).unwrap();
    rig.cli()
        .args(["pins", "verify", "--key"])
        .arg(public)
        .arg("--key")
        .arg(&second_pub)
        .stdout(format!("{ok_line}\n"))
        .stderr_may(r"pins verify: .*")
        .run();
    p.wait(p.manifest(&rig.repo, &l.tag, OCI_INDEX, &l.original));
}

/// A registry listing 10,000 more referrers (the proxy rewrites the
/// fallback index the real registry answers): refused unread, in bounded
/// time, naming the limit.
fn a_flood_of_referrers_is_refused_unread(l: &Listing) {
    let (rig, public) = (l.rig, l.public);
    let mut flood = l.listed.clone();
    for n in 0..10_000u32 {
        let mut e = l.listed[0].clone();
        e["digest"] = Value::from(sha256(&n.to_be_bytes()));
        flood.push(e);
    }
    let body = l.index(&flood);
    l.answer(body.clone(), 1);
    rig.proxy.clear_log();
    let started = std::time::Instant::now();
    let out = verify(rig, public, 2);
    let took = started.elapsed();
    let requests = rig.proxy.log();
    eprintln!(
        "a listing of {} referrers ({} bytes): refused in {:.2}s with {} request(s) for the whole family",
        flood.len(),
        body.len(),
        took.as_secs_f64(),
        requests.len()
    );
    assert_eq!(
        out,
        format!(
            "problem: {}the registry lists 10004 referrers of it, over the limit of 64: none was read\n",
            l.prefix
        )
    );
    let fetched: Vec<&str> = (requests.iter())
        .filter(|r| {
            flood[4..]
                .iter()
                .any(|e| r.target.contains(e["digest"].as_str().unwrap()))
        })
        .map(|r| r.target.as_str())
        .collect();
    assert!(fetched.is_empty(), "{fetched:?}");
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");
}

/// A listed digest holding a terminal escape sequence is printed escaped,
/// as people, GitHub and JSON read it.
fn registry_strings_are_printed_escaped(l: &Listing) {
    let (rig, public) = (l.rig, l.public);
    let (subject, prefix, ok_line) = (&l.subject, &l.prefix, &l.ok_line);
    let mut evil = l.listed.clone();
    let mut entry = l.listed[0].clone();
    entry["digest"] = Value::from("sha256:\u{1b}]0;pwned\u{7}");
    evil.push(entry);
    l.answer(l.index(&evil), 3);
    let escaped = r#"referrer sha256:\u{1b}]0;pwned\u{7} ignored: sha256 digests have exactly 64 hex digits, got "\u{1b}]0;pwned\u{7}""#;
    let out = verify(rig, public, 0);
    assert_eq!(out, format!("warning: {prefix}{escaped}\n{ok_line}\n"));
    let run = rig
        .cli()
        .args(["pins", "verify", "--format", "github", "--key"])
        .arg(public)
        .stdout_free("checked below")
        .stderr_may(r"pins verify: .*")
        .run();
    assert!(
        run.stdout().contains(&format!("::{prefix}{escaped}")) && !run.stdout().contains('\u{1b}'),
        "{}",
        run.stdout()
    );
    let run = rig
        .cli()
        .args(["pins", "verify", "--json", "--key"])
        .arg(public)
        .stdout_json()
        .stderr_may(r"pins verify: .*")
        .run();
    assert!(!run.stdout().contains('\u{1b}') && !run.stdout().contains("\\u001b"));
    let findings = run.json()["findings"].clone();
    assert_eq!(
        findings[0]["message"],
        format!("attestations of {subject}: {escaped}")
    );
}

#[test]
#[ignore = "tier: registry"]
fn killed_while_attaching_a_resume_converges_listing_nothing_twice() {
    let Some(reference) = Rig::new("attach-kill-ref") else {
        return;
    };
    reference.push_family("v1", &[]);
    let (_, private, public) = keys(&reference);
    let sign = ["--signing-key", private.to_str().unwrap()];
    reference
        .release(&[&["--write", "--notes", "notes.md"][..], &sign].concat())
        .run();
    let expected = digests_of(&reference);
    let per_subject = 4;
    let total = per_subject * variants().len();
    for (point, n) in [
        ("release.referrer-answered", 1),
        ("release.referrer-answered", total / 2 + 1),
        ("release.referrers-listed", variants().len()),
    ] {
        let rig = Rig::new(&format!("attach-kill-{n}")).unwrap();
        rig.push_family("v1", &[]);
        // The same key: the referrers must come out the same.
        std::fs::copy(&private, rig.project.path().join("release.key")).unwrap();
        let key = rig.project.path().join("release.key");
        let sign = ["--signing-key", key.to_str().unwrap()];
        let pins_before = rig.pins_text();
        rig.release(&[&["--write", "--notes", "notes.md"][..], &sign].concat())
            .env("SUNABA_FAILPOINT", format!("{point}#{n}"))
            .status(134)
            .stdout_free("killed while attaching")
            .stderr_free("progress up to the kill")
            .run();
        assert_eq!(
            rig.pins_text(),
            pins_before,
            "{point}#{n}: pins are written last"
        );
        let (id, journal) = rig.journal();
        assert_eq!(journal["step"], "promoted", "{point}#{n}");
        let tags = release_tags(&rig.published());
        rig.cli()
            .args(["release", "--resume", &id, "--notes", "notes.md"])
            .status(1)
            .stdout_free("refused")
            .stderr_like(r"error: .*signs with the key [0-9a-f]{64}; pass it .*")
            .stderr_may(r"release: .*|\s+.*")
            .run();
        rig.cli()
            .args(["release", "--resume", &id, "--notes", "notes.md"])
            .args(sign)
            .stderr_may(r"release: .*")
            .run();
        // The tags did not move while attaching; the pins are the
        // uninterrupted release's, referrers and all.
        assert_eq!(release_tags(&rig.published()), tags, "{point}#{n}");
        assert_eq!(digests_of(&rig), expected, "{point}#{n}");
        // Each subject lists what its pin lists, once: a subject redone
        // after the kill made the same referrers (deterministic bytes).
        let pinned: BTreeMap<String, Value> = pins(&rig)["images"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|p| p["referrers"].as_object().unwrap().clone())
            .collect();
        assert_eq!(pinned.len(), variants().len());
        for subject in journal_subjects(&rig) {
            let listed = entries(&fallback(&rig, &subject).unwrap());
            let mut digests: Vec<&str> = listed
                .iter()
                .map(|e| e["digest"].as_str().unwrap())
                .collect();
            let want: Vec<&str> = pinned[&subject]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            assert_eq!(digests, want, "{point}#{n}: {subject}");
            digests.sort();
            digests.dedup();
            assert_eq!(digests.len(), per_subject, "{point}#{n}: listed twice");
        }
        verify(&rig, &public, 0);
    }
}

fn journal_subjects(rig: &Rig) -> Vec<String> {
    let (_, journal) = rig.journal();
    journal["attached"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
#[ignore = "tier: registry"]
fn a_two_platform_variant_has_its_index_and_each_platform_attested() {
    let Some(rig) = Rig::new("attach-two-platform") else {
        return;
    };
    rig.push_family("v1", &[]);
    let inputs = sha256(b"python two-platform");
    let labels = support::check_label("pass", "python", &inputs, &support::all_tools());
    let repo = format!("{}/ci", rig.ns);
    let p = &rig.pusher;
    p.wait(async {
        let amd = crate::support::oci::Image::linux("amd64")
            .labels(&labels)
            .layer(b"python amd64".to_vec());
        let arm = crate::support::oci::Image::linux("arm64")
            .variant("v8")
            .labels(&labels)
            .layer(b"python arm64".to_vec());
        let amd = p.image(&repo, None, &amd).await;
        let arm = p.image(&repo, None, &arm).await;
        let manifests = vec![
            amd.descriptor(serde_json::json!({"os": "linux", "architecture": "amd64"})),
            arm.descriptor(
                serde_json::json!({"os": "linux", "architecture": "arm64", "variant": "v8"}),
            ),
        ];
        p.index(&repo, "python", manifests).await;
    });
    let (_, private, public) = keys(&rig);
    // A `git` first on PATH that writes down the environment it was given
    // (the release asks git for the checkout's ref), then runs the real one.
    let bin = rig.project.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let dump = rig.project.path().join("git-env");
    let script = bin.join("git");
    support::write_program(
        &script,
        &format!(
            "#!/bin/sh\nenv >> '{}'\nexec '{real}' \"$@\"\n",
            dump.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let pem = std::fs::read_to_string(&private).unwrap();
    rig.release(&[
        "--write",
        "--notes",
        "notes.md",
        "--signing-key-env",
        "SUNABA_TEST_RELEASE_KEY",
    ])
    .env("SUNABA_TEST_RELEASE_KEY", &pem)
    .env("PATH", &path)
    .env_remove("GITHUB_REF")
    .env_remove("GITHUB_SHA")
    .run();
    // git ran, and saw neither the variable nor the key.
    let seen = std::fs::read_to_string(&dump).unwrap();
    assert!(seen.contains(&format!("PATH={path}\n")), "{seen}");
    assert!(!seen.contains("SUNABA_TEST_RELEASE_KEY"), "{seen}");
    let body = pem.lines().nth(1).unwrap();
    assert!(!seen.contains("PRIVATE KEY") && !seen.contains(body));
    let pins = pins(&rig);
    let pin = &pins["images"]["python"];
    let referrers = pin["referrers"].as_object().unwrap();
    assert_eq!(referrers.len(), 3, "the index and its two platforms");
    let index = pin["digest"].as_str().unwrap();
    assert_eq!(referrers[index].as_array().unwrap().len(), 2);
    for d in pin["platforms"].as_object().unwrap().values() {
        assert_eq!(referrers[d.as_str().unwrap()].as_array().unwrap().len(), 4);
    }
    let types: Vec<Value> = entries(&fallback(&rig, index).unwrap())
        .iter()
        .map(|e| e["annotations"][referrer::PREDICATE_TYPE].clone())
        .collect();
    assert_eq!(types, [referrer::SIGN, statement::PROVENANCE]);
    verify(&rig, &public, 0);
    // By reference: the index is read, and its platforms checked with it.
    let by_ref = format!("{}@{index}", pin["repository"].as_str().unwrap());
    let hint = PrivateKey::load(&sunaba_images::attest::KeySource::File(private))
        .unwrap()
        .public()
        .hint();
    rig.cli()
        .args([
            "verify-attestations",
            &by_ref,
            "--key",
            public.to_str().unwrap(),
        ])
        .stdout(format!(
            "ok: {by_ref}: the attestations of 3 image(s) verified with the key {hint}\n"
        ))
        .run();
}

#[test]
#[ignore = "tier: registry"]
fn the_attached_sbom_of_a_real_image_is_read_from_its_gzip_layers_in_the_registry() {
    let Some(host) = support::dev_registry() else {
        return;
    };
    let Ok(reference) = std::env::var("SUNABA_BASE_REF_AMD64") else {
        return;
    };
    let (name, digest) = reference.rsplit_once('@').unwrap();
    let repo = name.strip_prefix(&format!("{host}/")).unwrap();
    let p = crate::support::oci::Pusher::plain(&host);
    let manifest: Value =
        serde_json::from_slice(&p.wait(p.get(repo, &format!("manifests/{digest}"))).unwrap())
            .unwrap();
    let layers: Vec<(String, Vec<u8>)> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let d = l["digest"].as_str().unwrap();
            let bytes = p.wait(p.get(repo, &format!("blobs/{d}"))).unwrap();
            (l["mediaType"].as_str().unwrap().to_string(), bytes)
        })
        .collect();
    let subject = sunaba_images::attest::sbom::Subject {
        name: reference.clone(),
        digest: digest.to_string(),
        created: "2026-12-01T19:51:38.438140424Z".into(),
    };
    let (doc, packages) =
        sunaba_images::attest::sbom::of_layers(&subject, &layers, &[], "0").unwrap();
    assert!(packages > 50, "{packages} packages");
    let text = String::from_utf8(doc).unwrap();
    assert!(
        text.contains("\"pkg:deb/debian/bash@") && text.contains("distro=debian-13"),
        "{text}"
    );
    assert!(
        text.contains("\"created\": \"2026-12-01T19:51:38Z\""),
        "{text}"
    );
}
