//! A hostile registry (issue 28): loopback servers the test controls, over
//! http and TLS, beside the real `docker-registry`, try to move a credential
//! or a signed URL somewhere the registry's user did not send it; and each
//! registry's CA vouches for that registry only.

use super::{PASSWORD, USER, cli, client, non_loopback_ip, reference, setup, with_creds};
use crate::support::distribution::{self, Auth, Registry};
use crate::support::proxy::{Fault, Proxy, rule};
use crate::support::server::{Reply, Request, Response, Server, serve, serve_tls};
use crate::support::{self, isolated_cli};
use std::path::Path;
use std::sync::{Arc, Mutex};
use sunaba_images::registry::{CertsDirs, ErrorKind, credentials::CredentialStore};

type Seen = Arc<Mutex<Vec<Request>>>;

/// A server on `bind` (TLS with the test PKI when `tls`) that answers
/// `answer(request)` and records every request.
async fn recording(
    bind: &str,
    tls: bool,
    answer: impl Fn(&Request) -> Response + Send + Sync + 'static,
) -> (Server, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let answer = Arc::new(answer);
    let handler = move |req: Request| {
        let (log, answer) = (log.clone(), answer.clone());
        async move {
            let resp = answer(&req);
            log.lock().unwrap().push(req);
            Reply::Send(resp)
        }
    };
    let server = if tls {
        serve_tls(bind, handler).await
    } else {
        serve(bind, handler).await
    };
    (server, seen)
}

/// A token endpoint that would hand a token to anyone.
fn token_endpoint(_: &Request) -> Response {
    Response::json(
        200,
        &serde_json::json!({"token": "t0ken", "expires_in": 300}),
    )
}

/// Requests that carried a credential: Authorization, or a refresh token
/// or password in the body.
fn with_credential(seen: &Seen) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|r| {
            let body = String::from_utf8_lossy(&r.body);
            r.header("authorization").is_some()
                || body.contains("refresh_token")
                || body.contains("password")
        })
        .count()
}

fn count(seen: &Seen) -> usize {
    seen.lock().unwrap().len()
}

/// A docker config.json at `dir/config.json` with these `auths` entries.
fn config_json(dir: &Path, auths: serde_json::Value) -> std::path::PathBuf {
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::json!({ "auths": auths }).to_string()).unwrap();
    path
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

// ------------------------------------- credentials go where the registry said

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_401_where_a_blob_was_redirected_sends_no_credential_to_the_realm_it_names() {
    let Some(f) = setup("foreign_challenge") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::TlsHtpasswd);
    let ca = std::fs::read(&distribution::pki().ca_cert).unwrap();
    let front = Proxy::start(
        &format!("https://{}", reg.authority()),
        "127.0.0.1:0",
        Some(&ca),
    )
    .await;
    // Third host: a token endpoint that takes whatever it is sent.
    let (realm, at_realm) = recording("127.0.0.1:0", false, token_endpoint).await;
    // Second host: where blobs are redirected; it asks for a token from the
    // third (on loopback, so only the origin rule can stop it).
    let challenge = format!(
        r#"Bearer realm="http://{}/token",service="storage""#,
        realm.authority()
    );
    let (storage, at_storage) = recording("127.0.0.1:0", false, move |_| {
        Response::new(401).header("WWW-Authenticate", challenge.clone())
    })
    .await;
    // Once: the 401 is fatal, so image_config asks once; later blob reads
    // go to the registry.
    front.add(rule(
        Some("GET"),
        "/blobs/",
        Fault::Redirect(format!("http://{}", storage.authority())),
        1,
    ));
    let dir = tempfile::tempdir().unwrap();
    let c = with_creds(dir.path(), &front.authority(), PASSWORD)
        .build()
        .unwrap();
    let image = reference(&format!("{}/fixture/single:v1", front.authority()));

    let err = c.image_config(&image, None).await.unwrap_err();
    assert_eq!(
        (count(&at_realm), with_credential(&at_realm)),
        (0, 0),
        "the third host is never asked, so it never gets a credential: {err}"
    );
    assert!(
        matches!(err.kind(), ErrorKind::ForeignChallenge { location } if location.contains(&storage.authority())),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&storage.authority()) && msg.contains("HTTP 401"),
        "{msg}"
    );
    assert!(count(&at_storage) >= 1, "the blob was redirected");
    assert_eq!(
        with_credential(&at_storage),
        0,
        "storage gets no Authorization"
    );

    // The registry's own challenge still stands: Basic to the registry.
    let config = c.image_config(&image, None).await.unwrap();
    assert_eq!(config.labels["dev.sunaba.check"], f.check_label);
    assert!(front.log().iter().any(|l| l.authorization));
    assert_eq!(
        (count(&at_realm), with_credential(&at_realm)),
        (0, 0),
        "nothing, and so no credential, ever reached the third host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn an_https_registry_cannot_redirect_to_plain_http_nor_name_a_plain_http_realm() {
    let Some(_) = setup("https_downgrades") else {
        return;
    };
    let Some(ip) = support::require(
        non_loopback_ip().ok_or_else(|| "no non-loopback address on this machine".to_string()),
    ) else {
        return;
    };
    let signature = "Sig-0f1e2d3c4b5a";
    // Where a downgraded redirect would land, and two token endpoints: one
    // reached over the network, one on loopback.
    let (plain, at_plain) = recording("127.0.0.1:0", false, |_| Response::new(200)).await;
    let (remote, at_remote) = recording("0.0.0.0:0", false, token_endpoint).await;
    let (local, at_local) = recording("127.0.0.1:0", false, token_endpoint).await;
    let remote_realm = format!("http://{ip}:{}/token", remote.addr.port());
    let local_realm = format!("http://{}/token", local.authority());
    let storage = format!(
        "http://{}/bucket/blob?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature={signature}",
        plain.authority()
    );
    let (downgrade_to, realms) = (storage.clone(), (remote_realm.clone(), local_realm.clone()));
    let (registry, _) = recording("127.0.0.1:0", true, move |req| {
        let path = req.path();
        let bearer = |realm: &str| {
            Response::new(401).header(
                "WWW-Authenticate",
                format!(r#"Bearer realm="{realm}",service="reg""#),
            )
        };
        if path.contains("/downgrade/") {
            Response::new(307).header("Location", downgrade_to.clone())
        } else if path.contains("/remote-realm/") && req.header("authorization").is_none() {
            bearer(&realms.0)
        } else if path.contains("/local-realm/") && req.header("authorization").is_none() {
            bearer(&realms.1)
        } else {
            Response::new(404)
        }
    })
    .await;
    let host = registry.authority();
    let ca = &distribution::pki().ca_cert;
    let dir = tempfile::tempdir().unwrap();
    let creds = config_json(
        dir.path(),
        serde_json::json!({host.clone(): {"auth": basic(USER, PASSWORD)}}),
    );
    let builder = || {
        client()
            .root_ca_file(ca)
            .credentials(CredentialStore::with_files(vec![creds.clone()]))
    };
    let c = builder().build().unwrap();

    // https -> http: refused, both URLs named, the signature nowhere.
    let err = c
        .resolve(&reference(&format!("{host}/downgrade/app:1")), None)
        .await
        .unwrap_err();
    let from = format!("https://{host}/v2/downgrade/app/manifests/1");
    let to = format!("http://{}/bucket/blob", plain.authority());
    assert_eq!(
        err.kind(),
        &ErrorKind::InsecureRedirect {
            from: from.clone(),
            to: to.clone()
        }
    );
    let msg = err.to_string();
    assert!(msg.contains(&from) && msg.contains(&to), "{msg}");
    assert!(!msg.contains(signature) && !msg.contains("X-Amz"), "{msg}");
    assert_eq!(count(&at_plain), 0, "nothing went out in the clear");

    // An http realm on another machine: refused before any request.
    let err = c
        .resolve(&reference(&format!("{host}/remote-realm/app:1")), None)
        .await
        .unwrap_err();
    let realm_named = format!("http://{ip}:{}/token", remote.addr.port());
    assert_eq!(
        err.kind(),
        &ErrorKind::InsecureRealm {
            realm: realm_named.clone()
        }
    );
    assert!(err.to_string().contains(&realm_named), "{err}");
    assert_eq!(count(&at_remote), 0, "the plain-http realm is never asked");

    // An http realm on loopback never crosses the network: allowed.
    let err = c
        .resolve(&reference(&format!("{host}/local-realm/app:1")), None)
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NotFound { .. }), "{err}");
    assert_eq!(with_credential(&at_local), 1);

    // An explicitly insecure registry may name one: the realm is asked.
    let c = builder()
        .insecure_registries([host.clone()])
        .build()
        .unwrap();
    let _ = c
        .resolve(&reference(&format!("{host}/remote-realm/app:1")), None)
        .await;
    assert_eq!(count(&at_remote), 1, "the control: the realm is reachable");

    // The CLI says the same and exits 1.
    let home = tempfile::tempdir().unwrap();
    let (d, ca, img) = (
        home.path().to_path_buf(),
        ca.clone(),
        format!("{host}/downgrade/app:1"),
    );
    let run = cli(move || {
        isolated_cli(&d)
            .args(["resolve", "--ca-cert"])
            .arg(&ca)
            .arg(&img)
            .status(1)
            .stderr_like(format!(
                "error: {}: registry {} redirected from {} to {}: refusing to leave https for plain http",
                regex::escape(&img),
                regex::escape(&host),
                regex::escape(&from),
                regex::escape(&to)
            ))
            .stderr_line("error: 1 of 1 reference(s) could not be resolved")
            .run()
    })
    .await;
    assert!(!run.stderr().contains(signature));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn an_error_for_a_pre_signed_url_holds_no_query_string() {
    let Some(f) = setup("presigned") else {
        return;
    };
    let reg = Registry::start(&f.storage, Auth::None);
    let front = Proxy::start(&format!("http://{}", reg.authority()), "127.0.0.1:0", None).await;
    // Storage that does not answer: the connection error is what reqwest
    // would print with the whole URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let signature = "c2lnbmF0dXJlLXNlY3JldA";
    front.add(rule(
        Some("GET"),
        "/blobs/",
        Fault::RedirectTo(format!(
            "http://{closed}/bucket/sha256-blob?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={signature}"
        )),
        usize::MAX,
    ));
    let c = client().build().unwrap();
    let image = reference(&format!("{}/fixture/single:v1", front.authority()));
    let err = c.image_config(&image, None).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::GaveUp { .. }), "{err:?}");
    let all = format!("{err} {err:?}");
    for leak in [signature, "X-Amz", "AWS4", "?"] {
        assert!(!all.contains(leak), "{leak:?} in {all}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_named_certificate_is_no_tls_failure() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = client()
        .retry(sunaba_images::registry::RetryPolicy {
            max_attempts: 2,
            ..super::fast_retry()
        })
        .build()
        .unwrap();
    let err = c
        .resolve(
            &reference(&format!("{closed}/acme/certificate-tools:1")),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::GaveUp { attempts: 2, .. }),
        "a connection error, retried: {err:?}"
    );
}

// ---------------------------------------- a registry's CA vouches for it only

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_registry_ca_vouches_for_its_registry_only() {
    let Some(f) = setup("registry_ca") else {
        return;
    };
    // Two TLS registries whose certificates the one test CA signed.
    let (a, b) = (
        Registry::start(&f.storage, Auth::TlsHtpasswd),
        Registry::start(&f.storage, Auth::TlsHtpasswd),
    );
    let (ha, hb) = (a.authority(), b.authority());
    let ca = distribution::pki().ca_cert.clone();
    let home = tempfile::tempdir().unwrap();
    let docker = home.path().join(".docker");
    std::fs::create_dir_all(&docker).unwrap();
    let creds = config_json(
        &docker,
        serde_json::json!({
            ha.clone(): {"auth": basic(USER, PASSWORD)},
            hb.clone(): {"auth": basic(USER, PASSWORD)},
        }),
    );
    let image = |host: &str| reference(&format!("{host}/fixture/single:v1"));
    let untrusted = |e: &sunaba_images::registry::Error| {
        matches!(e.kind(), ErrorKind::UntrustedCertificate { .. })
    };
    let base = || {
        client()
            .credentials(CredentialStore::with_files(vec![creds.clone()]))
            .certs_dirs(CertsDirs::with_dirs(Vec::new()))
    };

    // Given for A: A is trusted, B is not.
    let c = base().registry_ca_file(ha.clone(), &ca).build().unwrap();
    assert_eq!(
        c.resolve(&image(&ha), None)
            .await
            .unwrap()
            .digest
            .to_string(),
        f.single_digest
    );
    let err = c.resolve(&image(&hb), None).await.unwrap_err();
    assert!(untrusted(&err), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&format!("--ca-cert {hb}=PEM")), "{msg}");

    // certs.d/A/ca.crt: the same.
    let certs_d = home.path().join("certs.d");
    std::fs::create_dir_all(certs_d.join(&ha)).unwrap();
    std::fs::copy(&ca, certs_d.join(&ha).join("ca.crt")).unwrap();
    let c = base()
        .certs_dirs(CertsDirs::with_dirs(vec![certs_d.clone()]))
        .build()
        .unwrap();
    assert!(c.resolve(&image(&ha), None).await.is_ok());
    assert!(untrusted(&c.resolve(&image(&hb), None).await.unwrap_err()));

    // A bad CA file in certs.d is an error of its registry only.
    std::fs::create_dir_all(certs_d.join(&hb)).unwrap();
    std::fs::write(certs_d.join(&hb).join("ca.crt"), "not a certificate\n").unwrap();
    let c = base()
        .certs_dirs(CertsDirs::with_dirs(vec![certs_d.clone()]))
        .build()
        .unwrap();
    let err = c.resolve(&image(&hb), None).await.unwrap_err().to_string();
    assert!(
        err.contains(&hb) && err.contains("ca.crt") && err.contains("no PEM certificate"),
        "{err}"
    );
    assert!(c.resolve(&image(&ha), None).await.is_ok());
    std::fs::remove_dir_all(certs_d.join(&hb)).unwrap();

    // The command line: `--ca-cert HOST=PEM`, `$SUNABA_CERTS_D`, and the
    // global `--ca-cert PEM` for every host.
    let digest = f.single_digest.clone();
    let resolve = move |env: Option<&Path>, args: Vec<String>, host: &str, ok: bool| {
        let (d, env, img, digest) = (
            home_dir(&creds),
            env.map(Path::to_path_buf),
            format!("{host}/fixture/single:v1"),
            digest.clone(),
        );
        async move {
            cli(move || {
                let mut cmd = isolated_cli(&d).arg("resolve").args(&args).arg(&img);
                if let Some(dir) = env {
                    cmd = cmd.env("SUNABA_CERTS_D", dir);
                }
                if ok {
                    cmd.stdout(format!("{digest}\t{img}\n")).run()
                } else {
                    cmd.status(1)
                        .stderr_like(format!(
                            "error: {}: cannot reach registry .*invalid peer certificate: UnknownIssuer.*",
                            regex::escape(&img)
                        ))
                        .stderr_line("error: 1 of 1 reference(s) could not be resolved")
                        .run()
                }
            })
            .await
        }
    };
    let scoped = vec!["--ca-cert".to_string(), format!("{ha}={}", ca.display())];
    resolve(None, scoped.clone(), &ha, true).await;
    resolve(None, scoped, &hb, false).await;
    resolve(Some(&certs_d), vec![], &ha, true).await;
    resolve(Some(&certs_d), vec![], &hb, false).await;
    let global = vec!["--ca-cert".to_string(), ca.display().to_string()];
    resolve(None, global.clone(), &ha, true).await;
    resolve(None, global, &hb, true).await;
}

/// The home directory whose `.docker/config.json` is `config`.
fn home_dir(config: &Path) -> std::path::PathBuf {
    config.parent().unwrap().parent().unwrap().to_path_buf()
}

// ------------------------------------------------ a config.json gone wrong

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier: registry"]
async fn a_wrong_typed_config_json_entry_shows_no_secret_and_spares_other_registries() {
    let Some(f) = setup("config_json_types") else {
        return;
    };
    let (good, bad) = (
        Registry::start(&f.storage, Auth::TlsHtpasswd),
        Registry::start(&f.storage, Auth::TlsHtpasswd),
    );
    let (hg, hb) = (good.authority(), bad.authority());
    let home = tempfile::tempdir().unwrap();
    let docker = home.path().join(".docker");
    std::fs::create_dir_all(&docker).unwrap();
    let secret = basic(USER, PASSWORD);
    // `bad`'s entry is the bare `auth` string where an object belongs.
    let config = config_json(
        &docker,
        serde_json::json!({hb.clone(): secret.clone(), hg.clone(): {"auth": secret.clone()}}),
    );
    let ca = distribution::pki().ca_cert.clone();
    let run = |host: &str, ok: bool| {
        let (d, ca, img, digest, config) = (
            home.path().to_path_buf(),
            ca.clone(),
            format!("{host}/fixture/single:v1"),
            f.single_digest.clone(),
            config.clone(),
        );
        let hb = hb.clone();
        cli(move || {
            let cmd = isolated_cli(&d)
                .args(["resolve", "--ca-cert"])
                .arg(&ca)
                .arg(&img);
            if ok {
                return cmd.stdout(format!("{digest}\t{img}\n")).run();
            }
            cmd.status(1)
                .stderr_line(format!(
                    "error: credentials for {hb}: {}: auths[\"{hb}\"] is a string, not an object",
                    config.display()
                ))
                .stderr_line("error: 1 of 1 reference(s) could not be resolved")
                .run()
        })
    };
    run(&hg, true).await;
    let failed = run(&hb, false).await;
    let all = format!("{}{}", failed.stdout(), failed.stderr());
    // No byte of the secret: neither its base64, nor the password, nor any
    // 4-character piece of either.
    for secret_text in [secret.as_str(), PASSWORD] {
        for piece in secret_text.as_bytes().windows(4) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert!(!all.contains(piece), "{piece:?} of a secret in {all}");
        }
    }
}
