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
    let other = rig.project.path().join("other.pub");
    std::fs::write(&other, PrivateKey::generate().public().to_pem()).unwrap();
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
        .stderr_like(r"verify-attestations: \d+ problem\(s\)")
        .run()
        .stdout()
        .to_string();
    assert!(
        out.contains(&format!(
            "problem: {alias}: attestations of {}: ",
            pin["digest"].as_str().unwrap()
        )) && out.contains("the signature does not verify with the key"),
        "{out}"
    );
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
        .stderr_like(r"verify-attestations: \d+ problem\(s\)")
        .run();
    let problems: Vec<&str> = out.lines().collect();
    let expected: Vec<String> = problems
        .iter()
        .map(|p| {
            let message = p.strip_prefix("problem: ").unwrap();
            format!(
                "::error file=image_pins.json,line={line},title=verify-attestations%3A {alias}::{}",
                message.replace('%', "%25")
            )
        })
        .chain(problems.iter().map(|p| p.to_string()))
        .collect();
    assert_eq!(run.lines(), expected);
    // `--json`: the same findings, one document, and still exit 2.
    let run = rig
        .cli()
        .args(["verify-attestations", &alias, "--json", "--key"])
        .arg(&other)
        .status(2)
        .stdout_json()
        .stderr_like(r"verify-attestations: \d+ problem\(s\)")
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
        problems.len(),
        "{doc:#}"
    );

    tampering_is_named(&rig, &key, &public);
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
    let cases: Vec<(&str, Vec<Value>, &str)> = vec![
        (
            "a referrer replaced",
            with_test_result(
                referrer_of(&descriptor, statement::TEST_RESULT, passed.clone(), key).1,
            ),
            "is not listed and verified",
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
            "the signature does not verify with the key",
        ),
        (
            "a subject pointing elsewhere",
            with_test_result(referrer_of(&elsewhere, statement::TEST_RESULT, passed, key).1),
            &elsewhere_says,
        ),
        (
            "a missing test result",
            listed
                .iter()
                .filter(|e| e["annotations"][referrer::PREDICATE_TYPE] != statement::TEST_RESULT)
                .cloned()
                .collect(),
            "no verified test result (https://in-toto.io/attestation/test-result/v0.1)",
        ),
        (
            "a test result saying fail",
            with_test_result(referrer_of(&descriptor, statement::TEST_RESULT, failed, key).1),
            "the signed test result says FAILED, not PASSED",
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
        "its bundle is 1099511627776 bytes, over the limit of 33554432",
    ));
    for (what, manifests, says) in cases {
        put_index(manifests);
        let out = verify(rig, public, 2);
        let wanted = format!("problem: {alias}: attestations of {subject}: ");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&wanted) && l.contains(says)),
            "{what}: wanted a line {wanted}…{says}, got:\n{out}"
        );
    }
    p.wait(p.manifest(&rig.repo, &tag, OCI_INDEX, &original));
    verify(rig, public, 0);
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
    rig.release(&[
        "--write",
        "--notes",
        "notes.md",
        "--signing-key-env",
        "SUNABA_TEST_RELEASE_KEY",
    ])
    .env(
        "SUNABA_TEST_RELEASE_KEY",
        std::fs::read_to_string(&private).unwrap(),
    )
    .run();
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
