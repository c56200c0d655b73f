//! Signing keys and signed bundles (issue 19, the foundations): `key
//! generate` writes a 0600 PKCS#8 private key it never prints and an SPKI
//! public key; a bundle this tool signs is verified by tools it did not
//! write — npm `@sigstore/verify` (bundles, by the public key, thresholds
//! 0) and PyPI `securesystemslib` (the DSSE envelope) — and each rejects a
//! wrong key and a one-byte change to the payload. The verifiers are
//! provisioned by `scripts/verifiers` (the gate runs it first).

use crate::support::{Cli, repo_root, require};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use sunaba_images::attest::{Bundle, KeySource, PrivateKey, dsse::IN_TOTO};

/// The provisioned verifiers' directory.
fn verifiers() -> Option<PathBuf> {
    let dir = std::fs::read_dir(repo_root().join("target/tools"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("verifiers-"))
                && p.join("ready").is_file()
        });
    require(dir.ok_or_else(|| "no verifiers in target/tools (run scripts/verifiers)".to_string()))
}

/// Runs both verifiers on `files` with `public_key`: (sigstore, dsse) passed.
fn verify(tools: &Path, public_key: &Path, files: &[&Path]) -> (bool, bool, String) {
    let sigstore = Command::new("node")
        .arg(repo_root().join("scripts/sigstore-verify.mjs"))
        .arg(tools)
        .arg(public_key)
        .args(files)
        .output()
        .unwrap();
    let dsse = Command::new("python3")
        .arg(repo_root().join("scripts/dsse-verify.py"))
        .arg(public_key)
        .args(files)
        .env("PYTHONPATH", tools.join("python"))
        .output()
        .unwrap();
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
