//! Signing keys and signed bundles (issue 19, the foundations): `key
//! generate` writes a 0600 PKCS#8 private key it never prints and an SPKI
//! public key; a bundle this tool signs is verified by tools it did not
//! write — npm `@sigstore/verify` (bundles, by the public key, thresholds
//! 0) and PyPI `securesystemslib` (the DSSE envelope) — and each rejects a
//! wrong key and a one-byte change to the payload; the provenance and
//! test-result statements are valid to PyPI `in-toto-attestation` (parsed
//! strictly into the spec's protobuf messages); the SBOM of an image,
//! read from its layers, is valid SPDX 2.3 to PyPI `spdx-tools` (CycloneDX
//! 1.6 to `cyclonedx-python-lib`) and lists
//! what dpkg in the running image lists. The verifiers are
//! provisioned by `scripts/verifiers` (the gate runs it first).

use crate::support::{Cli, repo_root, require, services};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use sunaba_images::attest::statement::{self, BuildFacts, Resource};
use sunaba_images::attest::{Bundle, KeySource, PrivateKey, dsse::IN_TOTO};

/// The provisioned verifiers' directory, as `scripts/verifiers` names it
/// (it provisions them on first use; the gate runs it before the tests).
pub fn verifiers() -> Option<PathBuf> {
    let out = Command::new(repo_root().join("scripts/verifiers")).output();
    let dir = match out {
        Ok(o) if o.status.success() => Ok(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())),
        Ok(o) => Err(format!(
            "scripts/verifiers failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("scripts/verifiers: {e}")),
    };
    require(dir)
}

/// Runs `script` (a path) with the provisioned Python packages.
pub fn python(
    tools: &Path,
    script: impl AsRef<std::ffi::OsStr>,
    args: &[&std::ffi::OsStr],
) -> std::process::Output {
    Command::new("python3")
        .arg(script)
        .args(args)
        .env("PYTHONPATH", tools.join("python"))
        .output()
        .unwrap()
}

/// Runs both verifiers on `files` with `public_key`: (sigstore, dsse) passed.
pub fn verify(tools: &Path, public_key: &Path, files: &[&Path]) -> (bool, bool, String) {
    let sigstore = Command::new("node")
        .arg(repo_root().join("scripts/sigstore-verify.mjs"))
        .arg(tools)
        .arg(public_key)
        .args(files)
        .output()
        .unwrap();
    let mut args = vec![public_key.as_os_str()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    let dsse = python(tools, repo_root().join("scripts/dsse-verify.py"), &args);
    let said = format!(
        "sigstore: {}{}\ndsse: {}{}",
        String::from_utf8_lossy(&sigstore.stdout),
        String::from_utf8_lossy(&sigstore.stderr),
        String::from_utf8_lossy(&dsse.stdout),
        String::from_utf8_lossy(&dsse.stderr)
    );
    (sigstore.status.success(), dsse.status.success(), said)
}

#[test]
fn key_generate_writes_a_0600_private_key_it_never_prints_and_a_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = Cli::new(dir.path())
        .args(["key", "generate", "--private-key", "secret/release.key"])
        .stdout_line(
            "wrote the private key secret/release.key (mode 0600; keep it out of the repository)",
        )
        .stdout_like(
            r"wrote the public key keys/release.pub \(commit it\); its hint is [0-9a-f]{64}",
        )
        .run();
    let private = dir.path().join("secret/release.key");
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let pem = std::fs::read_to_string(&private).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!run.stdout().contains(&body) && !run.stderr().contains(&body));
    let key = PrivateKey::load(&KeySource::File(private.clone())).unwrap();
    let public = std::fs::read_to_string(dir.path().join("keys/release.pub")).unwrap();
    assert_eq!(public, key.public().to_pem());
    assert!(run.stdout().contains(&key.public().hint()));

    // A second run replaces nothing without --force.
    Cli::new(dir.path())
        .args(["key", "generate", "--private-key", "secret/release.key"])
        .status(1)
        .stderr_line("error: keys/release.pub exists already; pass --force to replace it")
        .run();
    assert_eq!(std::fs::read_to_string(&private).unwrap(), pem);
}

#[test]
#[ignore = "needs: the verifiers scripts/verifiers provisions (npm, PyPI)"]
fn a_signed_bundle_verifies_with_independent_tools_and_tampering_is_rejected() {
    let Some(tools) = verifiers() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = PrivateKey::generate();
    let public = dir.path().join("release.pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    let statement = br#"{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"00"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED"}}"#;
    let bundle = Bundle::sign(IN_TOTO, statement, &key);
    let good = dir.path().join("good.json");
    std::fs::write(&good, bundle.to_json()).unwrap();
    let (sigstore, dsse, said) = verify(&tools, &public, &[&good]);
    assert!(sigstore && dsse, "{said}");

    // Another key: both refuse.
    let other = dir.path().join("other.pub");
    std::fs::write(&other, PrivateKey::generate().public().to_pem()).unwrap();
    let (sigstore, dsse, said) = verify(&tools, &other, &[&good]);
    assert!(!sigstore && !dsse, "{said}");

    // One byte of the payload changed (PASSED -> PASSES): both refuse.
    let mut tampered = bundle.clone();
    let changed = String::from_utf8(statement.to_vec())
        .unwrap()
        .replace("PASSED", "PASSES");
    use base64::Engine as _;
    tampered.dsse_envelope.payload = base64::engine::general_purpose::STANDARD.encode(changed);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, tampered.to_json()).unwrap();
    let (sigstore, dsse, said) = verify(&tools, &public, &[&bad]);
    assert!(!sigstore && !dsse, "{said}");
}

#[test]
#[ignore = "needs: the verifiers scripts/verifiers provisions (npm, PyPI)"]
fn provenance_and_test_result_statements_are_valid_to_in_toto_attestation() {
    let Some(tools) = verifiers() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let subject = [Resource::sha256(
        "127.0.0.1:5000/sunaba/sandbox",
        &format!("sha256:{}", "ab".repeat(32)),
    )];
    let facts = BuildFacts {
        repository: "https://example.invalid/sunaba-images".into(),
        git_ref: "refs/heads/main".into(),
        commit: "0123456789abcdef0123456789abcdef01234567".into(),
        variant: "go".into(),
        platform: "linux/amd64".into(),
        dependencies: vec![
            Resource::sha256("docker.io/library/debian:trixie-slim", &"cd".repeat(32)),
            Resource::sha256("docker/locks/js/package-lock.json", &"ef".repeat(32)),
        ],
        builder_version: "0.1.0".into(),
        invocation_id: "20261201T000000Z-abcd".into(),
    };
    let provenance = dir.path().join("provenance.json");
    std::fs::write(
        &provenance,
        statement::statement(
            &subject,
            statement::PROVENANCE,
            &statement::provenance(&facts),
        ),
    )
    .unwrap();
    let result = statement::TestResult {
        result: "PASSED",
        configuration: vec![Resource::sha256("smoke", &"01".repeat(32))],
        url: None,
        passed_tests: vec!["check".into(), "smoke:python/ruff@py".into()],
        warned_tests: vec![],
        failed_tests: vec![],
    };
    let test_result = dir.path().join("test-result.json");
    std::fs::write(
        &test_result,
        statement::statement(&subject, statement::TEST_RESULT, &result),
    )
    .unwrap();
    let validate = repo_root().join("scripts/intoto-validate.py");
    let out = python(
        &tools,
        &validate,
        &[provenance.as_os_str(), test_result.as_os_str()],
    );
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(
        said.lines().filter(|l| l.starts_with("valid ")).count(),
        2,
        "{said}"
    );

    // And it is no rubber stamp: a misspelt field is refused.
    let text = std::fs::read_to_string(&test_result)
        .unwrap()
        .replace("passedTests", "passTests");
    std::fs::write(&test_result, text).unwrap();
    let out = python(&tools, &validate, &[test_result.as_os_str()]);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
#[ignore = "tier: engine"]
fn the_sbom_of_an_image_is_valid_spdx_and_lists_what_dpkg_lists() {
    let Some(s) = services() else {
        return;
    };
    let Some(tools) = verifiers() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    Cli::new(dir.path())
        .env("SUNABA_ENGINE", &s.engine)
        .args([
            "sbom",
            "--image",
            &s.base_image,
            "--output",
            "base.spdx.json",
        ])
        .stderr_like(format!(
            r"sbom: {} \(\d+ packages\) written to base.spdx.json",
            regex::escape(&s.base_image)
        ))
        .stderr_like(format!(
            r"sbom: read {} from the engine \(.*\)",
            regex::escape(&s.base_image)
        ))
        .run();
    let path = dir.path().join("base.spdx.json");
    let out = python(
        &tools,
        tools.join("python/bin/pyspdxtools"),
        &["-i".as_ref(), path.as_os_str()],
    );
    assert!(
        out.status.success(),
        "pyspdxtools: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let ours: std::collections::BTreeSet<String> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["externalRefs"][0]["referenceLocator"].as_str())
        .map(|purl| {
            purl.split('@')
                .next()
                .unwrap()
                .trim_start_matches("pkg:deb/debian/")
                .replace("%2B", "+")
        })
        .collect();
    let listed = Command::new(&s.engine)
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "dpkg-query",
            &s.base_image,
        ])
        .args(["-W", "-f", "${db:Status-Status} ${Package}\\n"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let theirs: std::collections::BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("installed "))
        .map(str::to_string)
        .collect();
    assert!(!theirs.is_empty());
    assert_eq!(ours, theirs);

    // The CycloneDX form of the same facts, valid to cyclonedx-python-lib.
    Cli::new(dir.path())
        .env("SUNABA_ENGINE", &s.engine)
        .args([
            "sbom",
            "--image",
            &s.base_image,
            "--format",
            "cyclonedx-json",
        ])
        .args(["--output", "base.cdx.json"])
        .stderr_like(r"sbom: .* written to base.cdx.json")
        .stderr_like(r"sbom: read .* from the engine \(.*\)")
        .run();
    let bom = dir.path().join("base.cdx.json");
    let out = python(
        &tools,
        repo_root().join("scripts/cyclonedx-validate.py"),
        &[bom.as_os_str()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let cdx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("base.cdx.json")).unwrap()).unwrap();
    assert_eq!(cdx["components"].as_array().unwrap().len(), theirs.len());
}
