//! The registry module and the `resolve`/`tags` commands against real CNCF
//! distribution instances (plain, TLS + htpasswd, token auth) started by
//! the tests, with a fault-injection proxy in between where needed; and
//! (`hostile`) registries the tests control that try to move credentials.

mod fixture;
mod hostile;

use crate::support::distribution::{self, Auth, PASSWORD, Registry, USER};
use crate::support::issuer::{self, Issuer};
use crate::support::oci::{self, pretty};
use crate::support::proxy::{Fault, LinkMode, Proxy, rule};
use crate::support::{self, isolated_cli, sha256};
use fixture::{Fixture, fixture};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use sunaba_images::registry::{
    Client, ClientBuilder, Clock, ErrorKind, ManifestCheck, Platform, Reference, Repository,
    ResolveOptions, RetryPolicy, Sleeper, credentials::CredentialStore,
};

fn setup(_test: &str) -> Option<&'static Fixture> {
    distribution::available().then(fixture)
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        total: Duration::from_secs(20),
    }
}

/// Anonymous client with quick retries.
/// A plain registry with the fixture content, a fault-injection proxy in
/// front of it, and an anonymous client. The registry is returned so it
/// lives as long as the test.
async fn behind_proxy(f: &Fixture) -> (Registry, Proxy, Client) {
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    (reg, proxy, client().build().unwrap())
}

fn client() -> ClientBuilder {
    Client::builder()
        .anonymous()
        .retry(fast_retry())
        .request_timeout(Duration::from_secs(5))
}

fn reference(s: &str) -> Reference {
    s.parse().unwrap()
}

fn platform(s: &str) -> Platform {
    s.parse().unwrap()
}

/// A docker config.json with `auths` for `registry`.
fn docker_config(dir: &Path, registry: &str, user: &str, password: &str) -> PathBuf {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        serde_json::json!({"auths": {format!("http://{registry}/v2/"): {"auth": auth}}})
            .to_string(),
    )
    .unwrap();
    path
}

fn with_creds(dir: &Path, registry: &str, password: &str) -> ClientBuilder {
    client().credentials(CredentialStore::with_files(vec![docker_config(
        dir, registry, USER, password,
    )]))
}

/// Runs the CLI off the async runtime (the servers it talks to live there).
async fn cli(f: impl FnOnce() -> support::Run + Send + 'static) -> support::Run {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

fn skopeo_digest(image: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(&support::skopeo(&[], &[], image)).unwrap();
    v["Digest"].as_str().unwrap().to_string()
}

// ------------------------------------------------------------ acceptance ---

#[test]
#[ignore = "tier: registry"]
fn resolve_of_the_dev_base_image_matches_skopeo() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let image = std::env::var("SUNABA_BASE_IMAGE")
        .unwrap_or_else(|_| format!("{registry}/library/debian:trixie-slim"));
    let dir = tempfile::tempdir().unwrap();
    let run = isolated_cli(dir.path())
        .args(["resolve", &image])
        .stdout_like(format!(r"sha256:[0-9a-f]{{64}}\t{}", regex::escape(&image)))
        .run();
    let out = run.stdout();
    let (digest, name) = out.trim().split_once('\t').expect("DIGEST<TAB>REF");
    assert_eq!(name, image);
    assert_eq!(digest, skopeo_digest(&image));
    if let Ok(base_ref) = std::env::var("SUNABA_BASE_REF") {
        assert!(
            base_ref.ends_with(&format!("@{digest}")),
            "{base_ref} vs {digest}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn cli_resolve_matches_skopeo_and_json_has_index_and_platform_digests() {
    let Some(f) = setup("cli_resolve_matches_skopeo_and_json_has_index_and_platform_digests")
    else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let host = reg.authority();
    let home = tempfile::tempdir().unwrap();
    let (h, d, fx) = (host.clone(), home.path().to_path_buf(), f.clone());
    cli(move || {
        isolated_cli(&d)
            .args([
                "resolve",
                &format!("{h}/fixture/multi:latest"),
                &format!("{h}/fixture/single:v1"),
            ])
            .stdout(format!(
                "{}\t{h}/fixture/multi:latest\n{}\t{h}/fixture/single:v1\n",
                fx.index_digest, fx.single_digest
            ))
            .run()
    })
    .await;
    let (h2, h3) = (host.clone(), host.clone());
    let skopeo = tokio::task::spawn_blocking(move || {
        (
            skopeo_digest(&format!("{h2}/fixture/multi:latest")),
            skopeo_digest(&format!("{h3}/fixture/single:v1")),
        )
    })
    .await
    .unwrap();
    assert_eq!(skopeo, (f.index_digest.clone(), f.single_digest.clone()));

    let (h, d) = (host.clone(), home.path().to_path_buf());
    let run = cli(move || {
        isolated_cli(&d)
            .args(["resolve", "--json", &format!("{h}/fixture/multi:latest")])
            .stdout_json()
            .run()
    })
    .await;
    let v = run.json();
    assert_eq!(v["schema"], "sunaba-images/resolve/v1");
    let v = &v["references"];
    assert_eq!(v[0]["digest"], f.index_digest.as_str());
    assert_eq!(v[0]["index_digest"], f.index_digest.as_str());
    assert_eq!(
        v[0]["platforms"],
        serde_json::json!([
            {"platform": "linux/amd64", "digest": f.amd64_digest},
            {"platform": "linux/arm64/v8", "digest": f.arm64_digest},
        ])
    );
    let (h, d) = (host.clone(), home.path().to_path_buf());
    let run = cli(move || {
        isolated_cli(&d)
            .args([
                "resolve",
                "--json",
                "--platform",
                "linux/arm64",
                &format!("{h}/fixture/multi:latest"),
            ])
            .stdout_json()
            .run()
    })
    .await;
    let v = run.json()["references"].clone();
    assert_eq!(v[0]["digest"], f.arm64_digest.as_str());
    assert_eq!(v[0]["index_digest"], f.index_digest.as_str());
    assert_eq!(
        v[0]["selected"],
        serde_json::json!([{"platform": "linux/arm64", "digest": f.arm64_digest}])
    );

    // A list, or `all` (every platform the index lists, normalised): a
    // line per reference and platform; the single image is its own.
    let multi = format!("{host}/fixture/multi:latest");
    let single = format!("{host}/fixture/single:v1");
    let lines = format!(
        "{amd}\t{multi}\tlinux/amd64\n{arm}\t{multi}\tlinux/arm64\n",
        amd = f.amd64_digest,
        arm = f.arm64_digest
    );
    for platforms in ["linux/amd64,linux/arm64/v8", "all"] {
        let (d, m, want) = (home.path().to_path_buf(), multi.clone(), lines.clone());
        cli(move || {
            isolated_cli(&d)
                .args(["resolve", "--platform", platforms, &m])
                .stdout(want)
                .run()
        })
        .await;
    }
    let (d, m, s) = (home.path().to_path_buf(), multi.clone(), single.clone());
    let run = cli(move || {
        isolated_cli(&d)
            .args([
                "resolve",
                "--json",
                "--platform",
                "linux/arm64,linux/amd64",
                &m,
                &s,
            ])
            .status(1)
            .stdout_json()
            .stderr_like(
                r"error: .*/fixture/single:v1: no image for platform linux/arm64 \(the index offers: linux/amd64\)",
            )
            .stderr_line("error: 1 of 2 reference(s) could not be resolved")
            .run()
    })
    .await;
    let v = run.json()["references"].clone();
    assert_eq!(
        v[0]["digest"],
        f.index_digest.as_str(),
        "several: the top level"
    );
    assert_eq!(
        v[0]["selected"],
        serde_json::json!([
            {"platform": "linux/arm64", "digest": f.arm64_digest},
            {"platform": "linux/amd64", "digest": f.amd64_digest},
        ])
    );
    // The single image: no arm64 one, its amd64 one is itself.
    assert_eq!(v[1]["digest"], f.single_digest.as_str());
    assert_eq!(v[1]["selected"][0]["platform"], "linux/arm64");
    let why = v[1]["selected"][0]["error"].as_str().unwrap();
    assert!(
        why.ends_with("no image for platform linux/arm64 (the index offers: linux/amd64)"),
        "{why}"
    );
    assert_eq!(
        v[1]["selected"][1],
        serde_json::json!({"platform": "linux/amd64", "digest": f.single_digest})
    );
    // A platform the index does not have: the others print, the reference fails.
    let (d, m) = (home.path().to_path_buf(), multi.clone());
    cli(move || {
        isolated_cli(&d)
            .args(["resolve", "--platform", "linux/amd64,linux/s390x", &m])
            .status(1)
            .stdout(format!("{}\t{m}\tlinux/amd64\n", f.amd64_digest))
            .stderr_like("error: .*s390x.*")
            .stderr_line("error: 1 of 1 reference(s) could not be resolved")
            .run()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn cli_tags_lists_every_tag_of_a_2000_tag_repository_once() {
    let Some(f) = setup("cli_tags_lists_every_tag_of_a_2000_tag_repository_once") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    proxy.state.lock().unwrap().tag_page = Some(250);
    let (h, home) = (proxy.authority(), tempfile::tempdir().unwrap());
    let d = home.path().to_path_buf();
    let run = cli(move || {
        isolated_cli(&d)
            .args(["tags", &format!("{h}/fixture/many")])
            .stdout_may(r"t\d{4}")
            .run()
    })
    .await;
    let listed: Vec<String> = run.lines().into_iter().map(str::to_string).collect();
    assert!(listed.len() >= 2000);
    assert_eq!(
        listed, f.tags,
        "every tag once, in order, digest-shaped ones dropped"
    );
    assert!(
        proxy.count("GET", "/tags/list") >= 9,
        "{:?}",
        proxy.log().len()
    );
}

#[test]
fn cli_rejects_invalid_references_and_platforms_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    for (args, error) in [
        (
            &["resolve", "Debian:12"][..],
            "invalid image reference \"Debian:12\": repository path component \"Debian\" \
             must be lowercase",
        ),
        (
            &["resolve", "127.0.0.1:1/x@sha256:abc"],
            "invalid image reference \"127.0.0.1:1/x@sha256:abc\": digest \"sha256:abc\": \
             sha256 digests have exactly 64 hex digits, got \"abc\"",
        ),
        (
            &["tags", "127.0.0.1:1/x:tag"],
            "invalid image reference \"127.0.0.1:1/x:tag\": repository path component \
             \"x:tag\" contains ':' (only a registry port or a tag may use ':')",
        ),
    ] {
        // Bad syntax in an argument is a usage error, like clap's own.
        isolated_cli(dir.path())
            .args(args)
            .status(64)
            .stderr(format!("error: {error}\n"))
            .run();
    }
    // --platform is parsed by clap, which says which option.
    isolated_cli(dir.path())
        .args(["resolve", "--platform", "linux", "127.0.0.1:1/x:1"])
        .status(64)
        .stderr(
            "error: invalid value 'linux' for '--platform <LIST|all>': invalid platform \"linux\": \
             expected OS/ARCH or OS/ARCH/VARIANT, e.g. linux/amd64 or linux/arm64/v8\n\n\
             For more information, try '--help'.\n",
        )
        .run();
}

// --------------------------------------------------- 1. HEAD, then GET ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn head_first_with_every_manifest_type_then_get_when_head_is_not_enough() {
    let Some(f) = setup("head_first") else { return };
    let (_reg, proxy, c) = behind_proxy(f).await;
    let r = reference(&format!("{}/fixture/multi:latest", proxy.authority()));
    let quick = ResolveOptions::default();

    let res = c.resolve_with(&r, &quick).await.unwrap();
    assert_eq!(res.digest.to_string(), f.index_digest);
    assert_eq!(proxy.count("HEAD", "/manifests/latest"), 1);
    assert_eq!(
        proxy.count("GET", "/manifests/"),
        0,
        "one HEAD answers a tag"
    );
    let accept = proxy
        .log()
        .iter()
        .find(|l| l.method == "HEAD")
        .unwrap()
        .accept
        .clone()
        .unwrap();
    for t in [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ] {
        assert!(accept.contains(t), "Accept lacks {t}: {accept}");
    }

    // Without the digest header (or with an empty one), HEAD is not enough.
    for fault in [Fault::DropDigest, Fault::SetDigest(String::new())] {
        proxy.clear_log();
        proxy.add(rule(Some("HEAD"), "/manifests/latest", fault, 1));
        let res = c.resolve_with(&r, &quick).await.unwrap();
        assert_eq!(res.digest.to_string(), f.index_digest);
        assert_eq!(proxy.count("GET", "/manifests/latest"), 1);
    }
    // A failing HEAD (405, or a 404 that only GET explains) falls back to GET.
    proxy.clear_log();
    proxy.add(rule(
        Some("HEAD"),
        "/manifests/latest",
        Fault::Status(405, None),
        1,
    ));
    assert_eq!(
        c.resolve_with(&r, &quick).await.unwrap().digest.to_string(),
        f.index_digest
    );
    assert_eq!(proxy.count("GET", "/manifests/latest"), 1);
    let missing = reference(&format!("{}/fixture/multi:nope", proxy.authority()));
    let err = c.resolve_with(&missing, &quick).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NotFound { .. }), "{err}");
    assert!(
        err.to_string().contains("MANIFEST_UNKNOWN"),
        "the GET's error body explains: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn distribution_answers_404_when_accept_lacks_oci_types() {
    // The registry quirk the Accept header above guards against.
    let Some(f) = setup("distribution_quirk") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let resp = reqwest::Client::new()
        .head(format!(
            "http://{}/v2/fixture/multi/manifests/latest",
            reg.authority()
        ))
        .header(
            "Accept",
            "application/vnd.docker.distribution.manifest.v2+json",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

// ------------------------------------------- 2. digests of exact bytes ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn digests_are_hashes_of_the_exact_bytes_and_mismatches_are_errors() {
    let Some(f) = setup("digests") else { return };
    let (_reg, proxy, c) = behind_proxy(f).await;
    let host = proxy.authority();

    // The fixture is pretty-printed: re-serializing would change the digest.
    let compact =
        serde_json::to_vec(&serde_json::from_slice::<serde_json::Value>(&f.single_bytes).unwrap())
            .unwrap();
    assert_ne!(sha256(&compact), f.single_digest);
    let r = reference(&format!("{host}/fixture/single:v1"));
    let res = c.resolve(&r, None).await.unwrap();
    assert_eq!(res.digest.to_string(), f.single_digest);
    assert_eq!(proxy.count("GET", "/manifests/v1"), 1);

    // A wrong Docker-Content-Digest is a hard error naming both digests.
    let wrong = format!("sha256:{}", "0".repeat(64));
    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::SetDigest(wrong.clone()),
        1,
    ));
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(
        err.contains(&wrong) && err.contains(&f.single_digest),
        "{err}"
    );
    assert!(err.contains("Docker-Content-Digest"), "{err}");

    // The header's algorithm is used to check it.
    let sha512 = sunaba_images::registry::Digest::compute(
        sunaba_images::registry::Algorithm::Sha512,
        &f.single_bytes,
    );
    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::SetDigest(sha512.to_string()),
        1,
    ));
    assert_eq!(c.resolve(&r, None).await.unwrap().digest, sha512);
    let bad512 = format!("sha512:{}", "1".repeat(128));
    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::SetDigest(bad512.clone()),
        1,
    ));
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(
        err.contains(&bad512) && err.contains(&sha512.to_string()),
        "{err}"
    );

    // A reference that carries a digest is verified against the bytes.
    let pinned = reference(&format!("{host}/fixture/single@{}", f.single_digest));
    assert_eq!(
        c.resolve(&pinned, None).await.unwrap().digest.to_string(),
        f.single_digest
    );
    proxy.add(rule(
        Some("GET"),
        &f.single_digest,
        Fault::Body(f.index_bytes.clone()),
        1,
    ));
    proxy.add(rule(Some("GET"), &f.single_digest, Fault::DropDigest, 1));
    let err = c.resolve(&pinned, None).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::DigestMismatch {
                expected_from: "the reference",
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&f.single_digest) && msg.contains(&f.index_digest),
        "{msg}"
    );
}

// --------------------------------------------- 3. index vs platforms ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn index_digest_by_default_and_best_platform_child_on_request() {
    let Some(f) = setup("platforms") else { return };
    let reg = Registry::start(&f.storage, Auth::None);
    let c = client().build().unwrap();
    let r = reference(&format!("{}/fixture/multi:latest", reg.authority()));

    let res = c.resolve(&r, None).await.unwrap();
    assert_eq!(res.digest.to_string(), f.index_digest);
    assert_eq!(
        res.index_digest.as_ref().unwrap().to_string(),
        f.index_digest
    );
    assert_eq!(res.media_type, oci::OCI_INDEX);
    let listed: Vec<(String, String)> = res
        .platforms
        .iter()
        .map(|(p, d)| (p.to_string(), d.to_string()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("linux/amd64".to_string(), f.amd64_digest.clone()),
            ("linux/arm64/v8".to_string(), f.arm64_digest.clone()),
        ],
        "attestations are not platforms"
    );
    for (p, want) in [
        ("linux/amd64", &f.amd64_digest),
        ("linux/arm64", &f.arm64_digest),
        ("linux/aarch64/v8", &f.arm64_digest),
    ] {
        let res = c.resolve(&r, Some(&platform(p))).await.unwrap();
        assert_eq!(&res.digest.to_string(), want, "{p}");
        assert_eq!(res.media_type, oci::OCI_MANIFEST);
        assert_eq!(
            res.index_digest.as_ref().unwrap().to_string(),
            f.index_digest
        );
    }
    let err = c
        .resolve(&r, Some(&platform("unknown/unknown")))
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NoMatchingPlatform { .. }),
        "the attestation is never chosen: {err}"
    );
    let err = c
        .resolve(&r, Some(&platform("linux/riscv64")))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("linux/amd64, linux/arm64/v8"), "{err}");
    assert!(!f.attestation_digest.is_empty());

    // Single-platform images: the platform comes from the config.
    let single = reference(&format!("{}/fixture/single:docker", reg.authority()));
    let res = c
        .resolve(&single, Some(&platform("linux/amd64")))
        .await
        .unwrap();
    assert_eq!(res.digest.to_string(), f.docker_digest);
    assert_eq!(res.media_type, oci::DOCKER_MANIFEST);
    assert_eq!(res.index_digest, None);
    let err = c
        .resolve(&single, Some(&platform("linux/arm64")))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("linux/amd64"), "{err}");
}

// ---------------------------------------------------- 4. credentials ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn basic_auth_over_tls_trusting_only_the_test_ca() {
    let Some(f) = setup("basic_tls") else { return };
    let reg = Registry::start(&f.storage, Auth::TlsHtpasswd);
    let host = reg.authority();
    let dir = tempfile::tempdir().unwrap();
    let ca = &distribution::pki().ca_cert;
    let r = reference(&format!("{host}/fixture/single:v1"));

    let c = with_creds(dir.path(), &host, PASSWORD)
        .root_ca_file(ca)
        .build()
        .unwrap();
    assert_eq!(
        c.resolve(&r, None).await.unwrap().digest.to_string(),
        f.single_digest
    );

    // Without the CA: a clear TLS failure, not a silent downgrade to http.
    let c = with_creds(dir.path(), &host, PASSWORD).build().unwrap();
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UntrustedCertificate { .. }),
        "not retried: {err}"
    );
    let err = err.to_string();
    assert!(
        err.contains("certificate") && err.contains("--ca-cert"),
        "{err}"
    );

    let wrong = "wrong-Pa55-for-test";
    let c = with_creds(dir.path(), &host, wrong)
        .root_ca_file(ca)
        .build()
        .unwrap();
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Unauthorized { status: 401, .. }),
        "{err}"
    );
    let msg = format!("{err} {err:?}");
    assert!(msg.contains(USER) && msg.contains("rejected"), "{msg}");
    assert!(
        !msg.contains(wrong) && !msg.contains(PASSWORD),
        "no secrets in errors: {msg}"
    );

    let c = client().root_ca_file(ca).build().unwrap();
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(err.contains("no credentials"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn bearer_tokens_anonymous_and_authenticated_cached_per_scope() {
    let Some(f) = setup("bearer") else { return };
    let iss = Issuer::start().await;
    let reg = Registry::start(&f.storage, Auth::Token { realm: iss.realm() });
    let host = reg.authority();

    // Anonymous pull on public/*: a token without credentials.
    let c = client().build().unwrap();
    c.resolve(&reference(&format!("{host}/public/app:1")), None)
        .await
        .unwrap();
    let log = iss.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].user, None);
    assert_eq!(log[0].scope.as_deref(), Some("repository:public/app:pull"));
    // ... but not on private repositories.
    let err = c
        .resolve(&reference(&format!("{host}/fixture/single:v1")), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Unauthorized { .. }),
        "{err}"
    );

    // With credentials, one token per scope for many requests.
    let dir = tempfile::tempdir().unwrap();
    let c = with_creds(dir.path(), &host, PASSWORD).build().unwrap();
    let before = iss.log().len();
    for tag in ["v1", "docker", "v1"] {
        c.resolve(&reference(&format!("{host}/fixture/single:{tag}")), None)
            .await
            .unwrap();
    }
    c.resolve(&reference(&format!("{host}/fixture/multi:latest")), None)
        .await
        .unwrap();
    let log = &iss.log()[before..];
    let scopes: Vec<_> = log.iter().map(|l| l.scope.clone().unwrap()).collect();
    assert_eq!(
        scopes,
        [
            "repository:fixture/single:pull",
            "repository:fixture/multi:pull"
        ]
    );
    assert!(log.iter().all(|l| l.user.as_deref() == Some(USER)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn token_endpoint_errors_are_reported_without_secrets() {
    let Some(f) = setup("token_errors") else {
        return;
    };
    let iss = Issuer::start().await;
    let reg = Registry::start(&f.storage, Auth::Token { realm: iss.realm() });
    let host = reg.authority();
    let dir = tempfile::tempdir().unwrap();
    let wrong = "wrong-Pa55-for-token";
    let c = with_creds(dir.path(), &host, wrong).build().unwrap();
    let err = c
        .resolve(&reference(&format!("{host}/public/app:1")), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Token { .. }),
        "not swallowed into anonymous access: {err}"
    );
    let msg = format!("{err} {err:?}");
    assert!(
        msg.contains("HTTP 401") && msg.contains("invalid username or password"),
        "{msg}"
    );
    assert!(msg.contains(&iss.realm()), "{msg}");
    assert!(!msg.contains(wrong), "{msg}");

    // Token bodies are size-capped.
    iss.state.lock().unwrap().pad_to = 2 << 20;
    let c = client().build().unwrap();
    let err = c
        .resolve(&reference(&format!("{host}/public/app:1")), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceeds the limit"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn expired_tokens_are_refreshed() {
    let Some(f) = setup("token_refresh") else {
        return;
    };
    let iss = Issuer::start().await;
    let reg = Registry::start(&f.storage, Auth::Token { realm: iss.realm() });
    let r = reference(&format!("{}/public/app:1", reg.authority()));

    // A token the registry rejects as expired is replaced once.
    iss.state.lock().unwrap().expired_tokens = 1;
    let c = client().build().unwrap();
    c.resolve(&r, None).await.unwrap();
    assert_eq!(iss.log().len(), 2);

    // A cached token is renewed when its expires_in has run out: the
    // client's clock is moved past it, nobody waits.
    iss.state.lock().unwrap().ttl = 2;
    let start = std::time::Instant::now();
    let skew = std::sync::Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let clock = {
        let skew = skew.clone();
        Clock::from_fn(move || start + *skew.lock().unwrap())
    };
    let c = client().clock(clock).build().unwrap();
    c.resolve(&r, None).await.unwrap();
    *skew.lock().unwrap() = Duration::from_millis(1700);
    c.resolve(&r, None).await.unwrap();
    assert_eq!(iss.log().len(), 3, "cached within its lifetime");
    *skew.lock().unwrap() = Duration::from_millis(2100);
    c.resolve(&r, None).await.unwrap();
    assert_eq!(iss.log().len(), 4, "renewed after expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn identity_tokens_use_the_refresh_token_grant() {
    let Some(f) = setup("identity_token") else {
        return;
    };
    let iss = Issuer::start().await;
    let reg = Registry::start(&f.storage, Auth::Token { realm: iss.realm() });
    let host = reg.authority();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        serde_json::json!({"auths": {host.clone(): {"identitytoken": issuer::REFRESH_TOKEN}}})
            .to_string(),
    )
    .unwrap();
    let c = client()
        .credentials(CredentialStore::with_files(vec![cfg]))
        .build()
        .unwrap();
    let res = c
        .resolve(&reference(&format!("{host}/fixture/single:v1")), None)
        .await
        .unwrap();
    assert_eq!(res.digest.to_string(), f.single_digest);
    let log = iss.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].method, "POST");
    assert_eq!(log[0].grant_type.as_deref(), Some("refresh_token"));
    assert_eq!(log[0].user.as_deref(), Some(USER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn cli_reads_helpers_and_podman_auth_files_and_never_prints_secrets() {
    let Some(f) = setup("cli_credentials") else {
        return;
    };
    let iss = Issuer::start().await;
    let reg = Registry::start(&f.storage, Auth::Token { realm: iss.realm() });
    let host = reg.authority();
    let image = format!("{host}/fixture/single:v1");
    let home = tempfile::tempdir().unwrap();

    // credHelpers in $DOCKER_CONFIG/config.json -> docker-credential-<name> get.
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("docker-credential-sunabatest");
    support::write_program(
        &helper,
        &format!(
            "#!/bin/sh\nread server\n[ \"$1\" = get ] || exit 1\n[ \"$server\" = \"{host}\" ] || {{ echo 'credentials not found in native keychain'; exit 1; }}\n\
             printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\n"
        ),
    );
    let docker_dir = home.path().join("docker");
    std::fs::create_dir_all(&docker_dir).unwrap();
    std::fs::write(
        docker_dir.join("config.json"),
        serde_json::json!({"credHelpers": {host.clone(): "sunabatest"}}).to_string(),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (d, dd, img, p) = (
        home.path().to_path_buf(),
        docker_dir.clone(),
        image.clone(),
        path.clone(),
    );
    let run = cli(move || {
        isolated_cli(&d)
            .env("PATH", &p)
            .env("DOCKER_CONFIG", &dd)
            .args(["resolve", "--json", &img])
            .stdout_json()
            .run()
    })
    .await;
    assert_eq!(
        run.json()["references"][0]["digest"],
        f.single_digest.as_str()
    );
    assert_eq!(iss.log().last().unwrap().user.as_deref(), Some(USER));
    assert!(!run.stdout().contains(PASSWORD) && !run.stderr().contains(PASSWORD));

    // credsStore: the same helper for every registry.
    std::fs::write(
        docker_dir.join("config.json"),
        serde_json::json!({"auths": {host.clone(): {}}, "credsStore": "sunabatest"}).to_string(),
    )
    .unwrap();
    let before = iss.log().len();
    let (d, dd, img, p, fx) = (
        home.path().to_path_buf(),
        docker_dir.clone(),
        image.clone(),
        path.clone(),
        f.clone(),
    );
    let run = cli(move || {
        isolated_cli(&d)
            .env("PATH", &p)
            .env("DOCKER_CONFIG", &dd)
            .args(["resolve", &img])
            .stdout(format!("{}\t{img}\n", fx.single_digest))
            .run()
    })
    .await;
    assert!(run.stdout().starts_with(&f.single_digest));
    assert_eq!(
        iss.log()[before..]
            .iter()
            .filter(|l| l.user.as_deref() == Some(USER))
            .count(),
        1
    );

    // Podman's REGISTRY_AUTH_FILE, with a wrong password: a clear error
    // that names the user and the file but never the password.
    let wrong = "wrong-Pa55-from-auth-json";
    let auth_file = home.path().join("auth.json");
    docker_config(home.path(), &host, USER, wrong);
    std::fs::rename(home.path().join("config.json"), &auth_file).unwrap();
    let (d, af, img) = (home.path().to_path_buf(), auth_file.clone(), image.clone());
    let run = cli(move || {
        isolated_cli(&d)
            .env("REGISTRY_AUTH_FILE", &af)
            .args(["resolve", &img])
            .status(1)
            .stderr_like(format!(
                "error: {}: .*invalid username or password.*",
                regex::escape(&img)
            ))
            .stderr_line("error: 1 of 1 reference(s) could not be resolved")
            .run()
    })
    .await;
    let all = format!("{}{}", run.stdout(), run.stderr());
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{wrong}"));
    assert!(!all.contains(wrong) && !all.contains(&b64), "{all}");

    // ... and with the right one it resolves.
    docker_config(home.path(), &host, USER, PASSWORD);
    std::fs::rename(home.path().join("config.json"), &auth_file).unwrap();
    let (d, af, img, fx) = (
        home.path().to_path_buf(),
        auth_file.clone(),
        image.clone(),
        f.clone(),
    );
    cli(move || {
        isolated_cli(&d)
            .env("REGISTRY_AUTH_FILE", &af)
            .args(["resolve", &img])
            .stdout(format!("{}\t{img}\n", fx.single_digest))
            .run()
    })
    .await;

    // The default locations: ~/.docker/config.json and
    // $XDG_RUNTIME_DIR/containers/auth.json.
    for (dir, file) in [(".docker", "config.json"), ("run/containers", "auth.json")] {
        let home = tempfile::tempdir().unwrap();
        let target = home.path().join(dir);
        std::fs::create_dir_all(&target).unwrap();
        docker_config(home.path(), &host, USER, PASSWORD);
        std::fs::rename(home.path().join("config.json"), target.join(file)).unwrap();
        let before = iss.log().len();
        let (d, img, fx) = (home.path().to_path_buf(), image.clone(), f.clone());
        cli(move || {
            isolated_cli(&d)
                .env("XDG_RUNTIME_DIR", d.join("run"))
                .args(["resolve", &img])
                .stdout(format!("{}\t{img}\n", fx.single_digest))
                .run()
        })
        .await;
        assert_eq!(
            iss.log()[before].user.as_deref(),
            Some(USER),
            "{dir}/{file}"
        );
    }
}

// -------------------------------------------------------- 5. retries ---

/// Time of the test's own for the retry layer: every wait it asks for is
/// recorded and moves the clock on by as much, at once; the clock also runs
/// with the machine's (exchanges that hang take real time).
#[derive(Clone)]
struct RecordedWaits {
    waits: std::sync::Arc<std::sync::Mutex<Vec<Duration>>>,
    /// How many of `waits` [`RecordedWaits::take`] has returned.
    taken: std::sync::Arc<std::sync::Mutex<usize>>,
}

impl RecordedWaits {
    fn new() -> Self {
        RecordedWaits {
            waits: Default::default(),
            taken: Default::default(),
        }
    }

    /// A client builder whose retry layer waits and measures by this.
    fn on(&self, builder: ClientBuilder) -> ClientBuilder {
        let (clock, sleeper) = (self.clone(), self.clone());
        builder
            .clock(Clock::from_fn(move || {
                Instant::now() + clock.waits.lock().unwrap().iter().sum()
            }))
            .sleeper(Sleeper::from_fn(move |delay| {
                sleeper.waits.lock().unwrap().push(delay);
                Box::pin(async {})
            }))
    }

    /// The waits asked for since the last call.
    fn take(&self) -> Vec<Duration> {
        let waits = self.waits.lock().unwrap();
        let mut taken = self.taken.lock().unwrap();
        let new = waits[*taken..].to_vec();
        *taken = waits.len();
        new
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn retry_after_is_honoured_in_seconds_and_http_date_form() {
    let Some(f) = setup("retry_after") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    let time = RecordedWaits::new();
    let c = time.on(client()).build().unwrap();
    let r = reference(&format!("{}/fixture/single:v1", proxy.authority()));

    proxy.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(429, Some("1".into())),
        1,
    ));
    c.resolve(&r, None).await.unwrap();
    assert_eq!(
        time.take(),
        [Duration::from_secs(1)],
        "as Retry-After: 1 said"
    );
    assert_eq!(proxy.count("GET", "/manifests/v1"), 2);

    // An HTTP date: the wait is until then (a date has whole seconds, and
    // some time passes before the client reads it).
    let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(10));
    proxy.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(503, Some(date.clone())),
        1,
    ));
    c.resolve(&r, None).await.unwrap();
    let waits = time.take();
    assert!(
        matches!(waits[..], [w] if w > Duration::from_secs(5) && w <= Duration::from_secs(10)),
        "Retry-After: {date}: {waits:?}"
    );
    assert_eq!(proxy.count("GET", "/manifests/v1"), 4);

    // A Retry-After beyond the total bound fails at once, saying so.
    let c = time
        .on(client().retry(RetryPolicy {
            total: Duration::from_secs(3),
            ..fast_retry()
        }))
        .build()
        .unwrap();
    proxy.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(429, Some("60".into())),
        1,
    ));
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::GaveUp { attempts: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("Retry-After asks for 60 s"),
        "{err}"
    );
    assert_eq!(time.take(), [], "no wait at all");
    assert_eq!(proxy.count("GET", "/manifests/v1"), 5);

    // Backoff stops short of the total bound: the waits add up to less
    // than it, and the next one would have passed it.
    let c = time
        .on(client().retry(RetryPolicy {
            max_attempts: 100,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(1),
            total: Duration::from_secs(10),
        }))
        .build()
        .unwrap();
    proxy.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(503, None),
        usize::MAX,
    ));
    let err = c.resolve(&r, None).await.unwrap_err();
    let waits = time.take();
    let waited: Duration = waits.iter().sum();
    let ErrorKind::GaveUp { attempts, .. } = err.kind() else {
        panic!("{err}");
    };
    assert_eq!(*attempts as usize, waits.len() + 1, "{err}");
    assert!(
        waits
            .iter()
            .all(|w| *w >= Duration::from_millis(500) && *w <= Duration::from_secs(1)),
        "jittered backoff within its cap: {waits:?}"
    );
    assert!(
        waited < Duration::from_secs(10) && waited > Duration::from_secs(9),
        "within the bound, the next wait past it: {waited:?} ({waits:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn transient_statuses_are_retried_with_a_cap_and_others_are_not() {
    let Some(f) = setup("retry_statuses") else {
        return;
    };
    let (reg, proxy, c) = behind_proxy(f).await;
    let r = reference(&format!("{}/fixture/single:v1", proxy.authority()));
    for code in [408, 429, 500, 502, 503, 504] {
        proxy.clear_log();
        proxy.add(rule(None, "/manifests/v1", Fault::Status(code, None), 2));
        c.resolve(&r, None)
            .await
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(proxy.count("GET", "/manifests/v1"), 3, "{code}");
    }
    proxy.clear_log();
    proxy.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(503, None),
        usize::MAX,
    ));
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::GaveUp { attempts: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("HTTP 503"), "{err}");
    assert_eq!(proxy.count("GET", "/manifests/v1"), 4);

    let proxy2 = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    proxy2.add(rule(
        None,
        "/manifests/v1",
        Fault::Status(403, None),
        usize::MAX,
    ));
    let r2 = reference(&format!("{}/fixture/single:v1", proxy2.authority()));
    let err = c.resolve(&r2, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Status { status: 403, .. }),
        "{err}"
    );
    assert_eq!(
        proxy2.count("GET", "/manifests/v1"),
        1,
        "403 is not retried"
    );

    // Connection errors are retried, within the bound.
    let closed = distribution::free_port();
    let r3 = reference(&format!("127.0.0.1:{closed}/fixture/single:v1"));
    let err = c.resolve(&r3, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::GaveUp { attempts: 4, .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn truncated_bodies_and_hanging_connections_are_retried_and_bounded() {
    let Some(f) = setup("truncate_hang") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    let c = client()
        .request_timeout(Duration::from_millis(700))
        .build()
        .unwrap();
    let r = reference(&format!("{}/fixture/single:v1", proxy.authority()));

    proxy.add(rule(Some("GET"), "/manifests/v1", Fault::Truncate, 1));
    assert_eq!(
        c.resolve(&r, None).await.unwrap().digest.to_string(),
        f.single_digest
    );
    assert_eq!(proxy.count("GET", "/manifests/v1"), 2);

    proxy.clear_log();
    proxy.add(rule(Some("GET"), "/manifests/v1", Fault::Hang, 1));
    assert_eq!(
        c.resolve(&r, None).await.unwrap().digest.to_string(),
        f.single_digest
    );
    assert_eq!(proxy.count("GET", "/manifests/v1"), 2);

    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::Truncate,
        usize::MAX,
    ));
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(err.contains("broke off"), "{err}");

    // Exchanges that hang use up the total bound, not the attempts: each
    // takes its full 500 ms (a timeout never fires early) and the backoff
    // between them is skipped, so 2 s hold four of them and a fifth cut
    // short at most.
    let c = RecordedWaits::new()
        .on(client()
            .request_timeout(Duration::from_millis(500))
            .retry(RetryPolicy {
                max_attempts: 100,
                total: Duration::from_secs(2),
                ..fast_retry()
            }))
        .build()
        .unwrap();
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    proxy.add(rule(None, "/manifests/v1", Fault::Hang, usize::MAX));
    let r = reference(&format!("{}/fixture/single:v1", proxy.authority()));
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::GaveUp {
                attempts: 1..=5,
                ..
            }
        ),
        "the total bound stopped it: {err}"
    );
    assert!(err.to_string().contains("no response within"), "{err}");
}

// ---------------------------------------------------- 6. concurrency ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn many_references_resolve_concurrently_bounded_per_registry_in_order() {
    let Some(f) = setup("concurrency") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    proxy.state.lock().unwrap().delay = Duration::from_millis(15);
    let c = client().per_registry_limit(4).build().unwrap();
    let mut refs: Vec<Reference> = f
        .tags
        .iter()
        .rev()
        .take(150)
        .map(|t| reference(&format!("{}/fixture/many:{t}", proxy.authority())))
        .collect();
    refs.push(reference(&format!(
        "{}/fixture/many:missing",
        proxy.authority()
    )));
    refs.push(refs[0].clone());
    let results = c.resolve_many(&refs, &ResolveOptions::default()).await;
    assert_eq!(results.len(), refs.len());
    for (i, (res, r)) in results.iter().zip(&refs).enumerate() {
        if i == 150 {
            assert!(
                matches!(
                    res.as_ref().map_err(|e| e.kind()),
                    Err(ErrorKind::NotFound { .. })
                ),
                "{res:?}"
            );
        } else {
            let res = res.as_ref().unwrap();
            assert_eq!(&res.reference, r, "results in input order");
            assert_eq!(res.digest.to_string(), f.many_digest);
        }
    }
    let max = proxy.max_inflight.load(std::sync::atomic::Ordering::SeqCst);
    assert!((2..=4).contains(&max), "in flight at once: {max}");
    let conns = proxy
        .server
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    // Without keep-alive there would be one connection per request (150+);
    // a connection can return to the pool just after its permit is released,
    // so a few more than the limit may be opened.
    assert!(
        conns <= 20,
        "keep-alive: {conns} connections for {} requests",
        proxy.log().len()
    );
}

// ------------------------------------------------------------ 7. tags ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn tag_listing_follows_links_and_refuses_loops_and_other_hosts() {
    let Some(f) = setup("tags") else { return };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    proxy.state.lock().unwrap().tag_page = Some(300);
    let c = client().build().unwrap();
    let repo: Repository = format!("{}/fixture/many", proxy.authority())
        .parse()
        .unwrap();

    let tags = c.list_tags(&repo).await.unwrap();
    assert_eq!(tags, f.tags);
    let pages: Vec<_> = proxy
        .log()
        .into_iter()
        .filter(|l| l.target.contains("/tags/list"))
        .collect();
    assert_eq!(pages.len(), 8, "2,101 tags in pages of 300");
    let n: usize = pages[0]
        .target
        .split("n=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n <= 1000, "page size asked for: {n}");

    proxy.state.lock().unwrap().link_mode = LinkMode::Absolute;
    assert_eq!(c.list_tags(&repo).await.unwrap(), f.tags);

    proxy.state.lock().unwrap().link_mode = LinkMode::Loop;
    let err = c.list_tags(&repo).await.unwrap_err().to_string();
    assert!(err.contains("loop"), "{err}");

    proxy.state.lock().unwrap().link_mode = LinkMode::OtherHost("127.0.0.2:1".into());
    let err = c.list_tags(&repo).await.unwrap_err().to_string();
    assert!(err.contains("another host"), "{err}");

    proxy.state.lock().unwrap().tag_page = None;
    proxy.add(rule(
        Some("GET"),
        "/tags/list",
        Fault::Body(br#"{"name":"fixture/many","tags":null}"#.to_vec()),
        1,
    ));
    assert_eq!(c.list_tags(&repo).await.unwrap(), Vec::<String>::new());
    proxy.add(rule(
        Some("GET"),
        "/tags/list",
        Fault::Body(br#"{"name":"fixture/many","tags":["a","","b","a"]}"#.to_vec()),
        1,
    ));
    assert_eq!(c.list_tags(&repo).await.unwrap(), ["a", "b"]);
}

/// A registry whose tag pages never end: `page(n)` is page n's body and
/// whether it is the last; every other page links to the next. Returns the
/// server and the count of pages asked for.
async fn endless_tags(
    page: impl Fn(usize) -> (Vec<u8>, bool) + Send + Sync + 'static,
) -> (
    crate::support::server::Server,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use crate::support::server::{Reply, Response, serve};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pages = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = pages.clone();
    let server = serve("127.0.0.1:0", move |req| {
        let reply = if req.path().ends_with("/tags/list") {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let (body, last) = page(n);
            let mut r = Response::new(200)
                .header("Content-Type", "application/json")
                .body(body);
            if !last {
                r = r.header(
                    "Link",
                    format!("</v2/x/y/tags/list?n=1000&last=p{n}>; rel=\"next\""),
                );
            }
            r
        } else {
            Response::json(200, &serde_json::json!({}))
        };
        async move { Reply::Send(reply) }
    })
    .await;
    (server, pages)
}

/// Tag listing is bounded in tags, bytes and pages, each with an error
/// naming the cap and what was read; the servers give up (a last page)
/// only well past each cap, so an unbounded listing would succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_tag_listing_stops_at_a_cap_naming_it() {
    use std::sync::atomic::Ordering;
    let c = client().build().unwrap();
    let list = |server: &crate::support::server::Server| {
        let repo: Repository = format!("{}/x/y", server.authority()).parse().unwrap();
        let c = c.clone();
        async move { c.list_tags(&repo).await }
    };

    // 1000 new tags a page: the tag cap (100,000) at page 101.
    let tags = |tags: Vec<String>| serde_json::to_vec(&serde_json::json!({"tags": tags})).unwrap();
    let (server, pages) = endless_tags(move |n| {
        (
            tags((0..1000).map(|i| format!("t{n}-{i}")).collect()),
            n >= 150,
        )
    })
    .await;
    let started = Instant::now();
    let err = list(&server).await.unwrap_err().to_string();
    assert!(
        err.contains(
            "tag listing: over the cap of 100000 tags (refused after 101 pages, 101000 tags, "
        ),
        "{err}"
    );
    assert_eq!(pages.load(Ordering::SeqCst), 101);
    assert!(started.elapsed() < Duration::from_secs(30));

    // One tag and ~4 MB of padding a page: the byte cap (64 MiB) at page 17.
    let padded = |n: usize| format!(r#"{{"tags": ["p{n}"]{}}}"#, " ".repeat(4_000_000));
    let (server, pages) = endless_tags(move |n| (padded(n).into_bytes(), n >= 30)).await;
    let err = list(&server).await.unwrap_err().to_string();
    assert!(
        err.contains(
            "tag listing: over the cap of 67108864 bytes (refused after 17 pages, 17 tags, "
        ),
        "{err}"
    );
    assert_eq!(pages.load(Ordering::SeqCst), 17);

    // Empty pages: the page cap (1,000).
    let (server, pages) = endless_tags(|n| (br#"{"tags": []}"#.to_vec(), n >= 1100)).await;
    let err = list(&server).await.unwrap_err().to_string();
    assert!(
        err.contains("tag listing: over the cap of 1000 pages (refused after 1000 pages, 0 tags, "),
        "{err}"
    );
    assert_eq!(pages.load(Ordering::SeqCst), 1000);
}

// ---------------------------------------------- 8. schemes, redirects ---

/// A local address that is not loopback (the default route's source).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.200:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn plain_http_only_for_loopback_or_insecure_registries() {
    let Some(f) = setup("schemes") else { return };
    let Some(ip) = support::require(
        non_loopback_ip().ok_or_else(|| "no non-loopback address on this machine".to_string()),
    ) else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let proxy = Proxy::start(&format!("http://{}", reg.authority()), "0.0.0.0:0", None).await;
    let port = proxy.server.addr.port();
    let loopback = reference(&format!("127.0.0.1:{port}/fixture/single:v1"));
    let remote_host = format!("{ip}:{port}");
    let remote = reference(&format!("{remote_host}/fixture/single:v1"));
    let one_try = RetryPolicy {
        max_attempts: 1,
        ..fast_retry()
    };

    let c = client().retry(one_try.clone()).build().unwrap();
    assert_eq!(
        c.resolve(&loopback, None).await.unwrap().digest.to_string(),
        f.single_digest
    );
    proxy.clear_log();
    let err = c.resolve(&remote, None).await.unwrap_err().to_string();
    assert!(err.contains("https"), "{err}");
    assert!(
        proxy.log().is_empty(),
        "no plain-http request to a non-loopback registry"
    );

    let c = client()
        .retry(one_try)
        .insecure_registries([remote_host.clone()])
        .build()
        .unwrap();
    assert_eq!(
        c.resolve(&remote, None).await.unwrap().digest.to_string(),
        f.single_digest
    );

    let home = tempfile::tempdir().unwrap();
    let (d, rh, img) = (
        home.path().to_path_buf(),
        remote_host.clone(),
        remote.to_string(),
    );
    let digest = f.single_digest.clone();
    cli(move || {
        isolated_cli(&d)
            .args(["resolve", "--insecure-registry", &rh, &img])
            .stdout(format!("{digest}\t{img}\n"))
            .run()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn authorization_is_never_sent_across_hosts_on_redirects() {
    let Some(f) = setup("redirects") else { return };
    let reg = Registry::start(&f.storage, Auth::TlsHtpasswd);
    let ca = std::fs::read(&distribution::pki().ca_cert).unwrap();
    let upstream = format!("https://{}", reg.authority());
    // The "storage backend" a blob is redirected to: another origin that
    // authenticates upstream by itself.
    let storage = Proxy::start(&upstream, "127.0.0.1:0", Some(&ca)).await;
    {
        use base64::Engine as _;
        storage.state.lock().unwrap().inject_authorization = Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        ));
    }
    let front = Proxy::start(&upstream, "127.0.0.1:0", Some(&ca)).await;
    front.add(rule(
        Some("GET"),
        "/blobs/",
        Fault::Redirect(format!("http://{}", storage.authority())),
        usize::MAX,
    ));
    let dir = tempfile::tempdir().unwrap();
    let c = with_creds(dir.path(), &front.authority(), PASSWORD)
        .build()
        .unwrap();
    let config = c
        .image_config(
            &reference(&format!("{}/fixture/single:v1", front.authority())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(config.labels["dev.sunaba.check"], f.check_label);
    let blob = front
        .log()
        .into_iter()
        .find(|l| l.target.contains("/blobs/"))
        .unwrap();
    assert!(blob.authorization, "the registry itself gets credentials");
    let redirected = storage.log();
    assert!(!redirected.is_empty());
    assert!(
        redirected.iter().all(|l| !l.authorization),
        "{redirected:?}"
    );
}

// ------------------------------------------ 9. caps, malformed bodies ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn oversized_malformed_and_mislabelled_manifests_are_clear_errors() {
    let Some(f) = setup("malformed") else { return };
    let (_reg, proxy, c) = behind_proxy(f).await;
    let r = reference(&format!("{}/fixture/single:v1", proxy.authority()));

    let mut huge = b"{\"schemaVersion\":2,\"pad\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 5 << 20));
    huge.extend(b"\"}");
    proxy.add(rule(Some("GET"), "/manifests/v1", Fault::Body(huge), 1));
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::TooLarge { limit: 4194304, .. }),
        "{err}"
    );

    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::Body(b"<html>503 gateway</html>".to_vec()),
        1,
    ));
    proxy.add(rule(Some("GET"), "/manifests/v1", Fault::DropDigest, 1));
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(err.contains("not JSON") && err.contains("<html>"), "{err}");

    let not_a_manifest =
        pretty(&serde_json::json!({"schemaVersion": 2, "mediaType": oci::OCI_MANIFEST}));
    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::Body(not_a_manifest),
        1,
    ));
    proxy.add(rule(Some("GET"), "/manifests/v1", Fault::DropDigest, 1));
    let err = c.resolve(&r, None).await.unwrap_err().to_string();
    assert!(err.contains("structure"), "{err}");

    proxy.add(rule(
        Some("GET"),
        "/manifests/v1",
        Fault::SetContentType(oci::OCI_INDEX.into()),
        1,
    ));
    let err = c.resolve(&r, None).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::MediaTypeMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(oci::OCI_MANIFEST), "{err}");
}

// ------------------------------------- image configs and verification ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn image_config_labels_come_from_a_verified_config_blob() {
    let Some(f) = setup("image_config") else {
        return;
    };
    let (_reg, proxy, c) = behind_proxy(f).await;
    let r = reference(&format!("{}/fixture/multi:latest", proxy.authority()));

    let cfg = c
        .image_config(&r, Some(&platform("linux/amd64")))
        .await
        .unwrap();
    assert_eq!(cfg.labels["dev.sunaba.check"], f.check_label);
    assert_eq!(cfg.digest.to_string(), f.amd64_config_digest);
    assert_eq!(cfg.manifest_digest.to_string(), f.amd64_digest);
    assert_eq!(cfg.platform.to_string(), "linux/amd64");
    let arm = c
        .image_config(&r, Some(&platform("linux/arm64")))
        .await
        .unwrap();
    assert_eq!(arm.labels.get("arch").map(String::as_str), Some("arm64"));
    assert!(
        !proxy
            .log()
            .iter()
            .any(|l| l.target.contains("/blobs/") && !l.target.contains("sha256:"))
    );

    proxy.add(rule(
        Some("GET"),
        &f.amd64_config_digest,
        Fault::Body(b"{\"os\":\"linux\"}".to_vec()),
        1,
    ));
    let err = c
        .image_config(&r, Some(&platform("linux/amd64")))
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::DigestMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&f.amd64_config_digest), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn verify_manifest_distinguishes_verified_missing_and_tampered() {
    let Some(f) = setup("verify") else { return };
    let (_reg, proxy, c) = behind_proxy(f).await;
    let host = proxy.authority();
    let pinned = reference(&format!("{host}/fixture/single:v1@{}", f.single_digest));
    assert_eq!(
        c.verify_manifest(&pinned).await.unwrap(),
        ManifestCheck::Verified {
            media_type: oci::OCI_MANIFEST.into(),
            size: f.single_bytes.len()
        }
    );
    let absent = reference(&format!("{host}/fixture/single@sha256:{}", "a".repeat(64)));
    assert_eq!(
        c.verify_manifest(&absent).await.unwrap(),
        ManifestCheck::Missing
    );
    proxy.add(rule(
        Some("GET"),
        &f.single_digest,
        Fault::Body(f.index_bytes.clone()),
        1,
    ));
    proxy.add(rule(Some("GET"), &f.single_digest, Fault::DropDigest, 1));
    assert!(matches!(
        c.verify_manifest(&pinned)
            .await
            .as_ref()
            .map_err(|e| e.kind()),
        Err(ErrorKind::DigestMismatch { .. })
    ));
    assert!(
        c.verify_manifest(&reference(&format!("{host}/fixture/single:v1")))
            .await
            .is_err()
    );
}
