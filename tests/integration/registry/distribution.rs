//! Real CNCF distribution (`docker-registry`) instances on loopback: plain
//! http, TLS + htpasswd, and token auth; test PKI made with the `openssl`
//! CLI; test content pushed through the registry HTTP API.

use sha2::Digest as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
pub const USER: &str = "tester";
/// Distinctive so tests can prove it never appears in output.
pub const PASSWORD: &str = "s3cret-Pa55word-xyzzy";
pub const SERVICE: &str = "sunaba-test-registry";
pub const ISSUER: &str = "sunaba-test-issuer";

/// The registry binary, or `None` (with a note) outside CI. Under CI a
/// missing binary is a failure.
pub fn available(test: &str) -> bool {
    let mut missing = Vec::new();
    for bin in [REGISTRY_BIN, "/usr/bin/openssl"] {
        if !Path::new(bin).exists() {
            missing.push(bin);
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: {} not installed (apt-get install docker-registry openssl)",
        missing.join(", ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}; CI is set, so this is a failure");
    }
    eprintln!("SKIPPED {msg}");
    false
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Test PKI: a CA, a server certificate for 127.0.0.1/localhost signed by
/// it, and an RSA key + self-signed certificate for signing tokens.
pub struct Pki {
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub token_key: PathBuf,
    pub token_cert: PathBuf,
    /// base64 (standard) DER of `token_cert`, for the JWT `x5c` header.
    pub token_cert_der_b64: String,
}

fn pki_create(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=sunaba test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "token.key",
            "-out",
            "token.pem",
            "-days",
            "2",
            "-subj",
            "/CN=sunaba test token issuer",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-in",
            "token.pem",
            "-outform",
            "DER",
            "-out",
            "token.der",
        ],
    );
    use base64::Engine as _;
    let der = std::fs::read(dir.join("token.der")).unwrap();
    Pki {
        ca_cert: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        token_key: dir.join("token.key"),
        token_cert: dir.join("token.pem"),
        token_cert_der_b64: base64::engine::general_purpose::STANDARD.encode(der),
    }
}

/// Per-process scratch directory under the cargo target dir; directories
/// of dead test processes are removed.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("registry-tests-")
                    && !Path::new(&format!("/proc/{pid}")).exists()
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(format!("registry-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| pki_create(&scratch().join("pki")))
}

/// How a registry instance authenticates.
pub enum Auth {
    None,
    /// TLS with the test CA's server certificate, htpasswd basic auth.
    TlsHtpasswd,
    /// Token auth against an issuer at `realm`.
    Token {
        realm: String,
    },
}

/// A running `docker-registry serve`; killed on drop.
pub struct Registry {
    pub port: u16,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts an instance serving `storage`.
    pub fn start(storage: &Path, auth: Auth) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: sunaba-test-secret\n",
            storage.display()
        );
        match &auth {
            Auth::None => {}
            Auth::TlsHtpasswd => {
                let pki = pki();
                let hash = bcrypt::hash(PASSWORD, 4).unwrap();
                let htpasswd = dir.path().join("htpasswd");
                std::fs::write(&htpasswd, format!("{USER}:{hash}\n")).unwrap();
                config.push_str(&format!(
                    "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: sunaba-test\n    path: {}\n",
                    pki.server_cert.display(),
                    pki.server_key.display(),
                    htpasswd.display()
                ));
            }
            Auth::Token { realm } => {
                config.push_str(&format!(
                    "auth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
                    pki().token_cert.display()
                ));
            }
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let mut reg = Registry { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return reg;
            }
            if let Ok(Some(status)) = reg.child.try_wait() {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(reg.dir.path().join("registry.log"))
                        .unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const TAG_COUNT: usize = 2100;

/// Pretty-printed with extra indentation and a trailing newline, so any
/// client that re-serializes before hashing gets a different digest.
pub fn pretty(v: &serde_json::Value) -> Vec<u8> {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    serde::Serialize::serialize(v, &mut ser).unwrap();
    buf.extend_from_slice(b"\n");
    buf
}

/// What the fixture holds (digests of the exact bytes pushed).
#[derive(Debug, Clone)]
pub struct Fixture {
    pub storage: PathBuf,
    pub index_digest: String,
    pub index_bytes: Vec<u8>,
    pub amd64_digest: String,
    pub arm64_digest: String,
    pub attestation_digest: String,
    pub amd64_config_digest: String,
    pub single_digest: String,
    pub single_bytes: Vec<u8>,
    pub docker_digest: String,
    pub many_digest: String,
    /// The `dev.sunaba.check` label of the amd64 image.
    pub check_label: String,
    pub tags: Vec<String>,
}

/// Pushes the fixture once per test process (through a plain instance that
/// is stopped afterwards); every test then serves the same storage with the
/// registry flavour it needs.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        std::thread::spawn(|| {
            let storage = scratch().join("storage");
            let _ = std::fs::remove_dir_all(&storage);
            std::fs::create_dir_all(&storage).unwrap();
            let registry = Registry::start(&storage, Auth::None);
            let rt = tokio::runtime::Runtime::new().unwrap();
            let f = rt.block_on(push_fixture(
                &format!("http://{}", registry.authority()),
                &storage,
            ));
            drop(registry);
            f
        })
        .join()
        .expect("pushing the registry fixture")
    })
}

pub struct Pusher {
    pub http: reqwest::Client,
    pub base: String,
}

impl Pusher {
    pub async fn blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let resp = self
            .http
            .post(format!("{}/v2/{repo}/blobs/uploads/", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202, "start upload to {repo}");
        let location = resp.headers()["location"].to_str().unwrap().to_string();
        let url = reqwest::Url::parse(&self.base)
            .unwrap()
            .join(&location)
            .unwrap();
        let sep = if url.query().is_some() { '&' } else { '?' };
        let resp = self
            .http
            .put(format!("{url}{sep}digest={digest}"))
            .header("Content-Type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201, "finish upload to {repo}");
        digest
    }

    pub async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> String {
        let resp = self
            .http
            .put(format!("{}/v2/{repo}/manifests/{reference}", self.base))
            .header("Content-Type", media_type)
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let digest = resp
            .headers()
            .get("docker-content-digest")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            status,
            201,
            "push {repo}:{reference}: {}",
            resp.text().await.unwrap_or_default()
        );
        let digest = digest.expect("digest header");
        assert_eq!(digest, sha256(bytes), "distribution hashes the exact bytes");
        digest
    }

    /// Pushes a config and one layer, then the manifest; returns
    /// (manifest digest, manifest bytes, config digest).
    pub async fn image(
        &self,
        repo: &str,
        tag: &str,
        docker: bool,
        platform: (&str, &str, Option<&str>),
        labels: serde_json::Value,
    ) -> (String, Vec<u8>, String) {
        let mut config = serde_json::json!({
            "architecture": platform.1,
            "os": platform.0,
            "created": "2026-11-30T07:00:00Z",
            "config": {"Labels": labels, "Env": ["PATH=/usr/bin"]},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        if let Some(v) = platform.2 {
            config["variant"] = serde_json::json!(v);
        }
        let layer = format!("layer for {repo} {platform:?}").into_bytes();
        let config_bytes = pretty(&config);
        let config_digest = self.blob(repo, &config_bytes).await;
        let layer_digest = self.blob(repo, &layer).await;
        config["rootfs"]["diff_ids"] = serde_json::json!([layer_digest]);
        let (mt, cmt, lmt) = if docker {
            (
                DOCKER_MANIFEST,
                DOCKER_CONFIG,
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
            )
        } else {
            (
                OCI_MANIFEST,
                OCI_CONFIG,
                "application/vnd.oci.image.layer.v1.tar+gzip",
            )
        };
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": mt,
            "config": {"mediaType": cmt, "digest": config_digest, "size": config_bytes.len()},
            "layers": [{"mediaType": lmt, "digest": layer_digest, "size": layer.len()}],
        });
        let bytes = pretty(&manifest);
        let digest = self.manifest(repo, tag, mt, &bytes).await;
        (digest, bytes, config_digest)
    }
}

async fn push_fixture(base: &str, storage: &Path) -> Fixture {
    let p = Pusher {
        http: reqwest::Client::new(),
        base: base.to_string(),
    };
    let check_label = r#"{"schema":1,"status":"pass","variant":"base","inputs":"sha256:00","checked_at":"2026-11-30T07:00:00Z","tools":{"rg":"14.1.1"}}"#.to_string();
    let labels = serde_json::json!({"dev.sunaba.check": check_label, "dev.sunaba.variant": "base"});

    // An index with two platforms and a BuildKit-style attestation entry.
    let repo = "fixture/multi";
    let (amd64, amd64_bytes, amd64_config) = p
        .image(
            repo,
            "amd64-only",
            false,
            ("linux", "amd64", None),
            labels.clone(),
        )
        .await;
    let (arm64, arm64_bytes, _) = p
        .image(
            repo,
            "arm64-only",
            false,
            ("linux", "arm64", Some("v8")),
            serde_json::json!({"arch": "arm64"}),
        )
        .await;
    let statement = b"{\"_type\":\"https://in-toto.io/Statement/v0.1\"}".to_vec();
    let st_digest = p.blob(repo, &statement).await;
    let att_config = b"{\"architecture\":\"unknown\",\"os\":\"unknown\",\"config\":{},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}".to_vec();
    let att_config_digest = p.blob(repo, &att_config).await;
    let att = pretty(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": att_config_digest, "size": att_config.len()},
        "layers": [{"mediaType": "application/vnd.in-toto+json", "digest": st_digest, "size": statement.len()}],
    }));
    let att_digest = p.manifest(repo, &sha256(&att), OCI_MANIFEST, &att).await;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": amd64, "size": amd64_bytes.len(),
             "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": OCI_MANIFEST, "digest": arm64, "size": arm64_bytes.len(),
             "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
            {"mediaType": OCI_MANIFEST, "digest": att_digest, "size": att.len(),
             "platform": {"architecture": "unknown", "os": "unknown"},
             "annotations": {"vnd.docker.reference.type": "attestation-manifest",
                             "vnd.docker.reference.digest": amd64}},
        ],
    });
    let index_bytes = pretty(&index);
    let index_digest = p.manifest(repo, "latest", OCI_INDEX, &index_bytes).await;

    let (single, single_bytes, _) = p
        .image(
            "fixture/single",
            "v1",
            false,
            ("linux", "amd64", None),
            labels.clone(),
        )
        .await;
    let (docker, _, _) = p
        .image(
            "fixture/single",
            "docker",
            true,
            ("linux", "amd64", None),
            labels.clone(),
        )
        .await;
    // Anonymous-pull content for the token registry.
    p.image(
        "public/app",
        "1",
        false,
        ("linux", "amd64", None),
        labels.clone(),
    )
    .await;

    // 2,000+ tags (plus a cosign-style digest-shaped one) on one manifest.
    let (many, many_bytes, _) = p
        .image(
            "fixture/many",
            "t0000",
            false,
            ("linux", "amd64", None),
            serde_json::json!({}),
        )
        .await;
    let tags: Vec<String> = (0..TAG_COUNT).map(|i| format!("t{i:04}")).collect();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    let extra = format!("sha256-{}.sig", &many[7..]);
    for tag in tags.iter().skip(1).cloned().chain([extra]) {
        let (http, base, bytes, sem) = (
            p.http.clone(),
            p.base.clone(),
            many_bytes.clone(),
            sem.clone(),
        );
        tasks.spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            Pusher { http, base }
                .manifest("fixture/many", &tag, OCI_MANIFEST, &bytes)
                .await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    Fixture {
        storage: storage.to_path_buf(),
        index_digest,
        index_bytes,
        amd64_digest: amd64,
        arm64_digest: arm64,
        attestation_digest: att_digest,
        amd64_config_digest: amd64_config,
        single_digest: single,
        single_bytes,
        docker_digest: docker,
        many_digest: many,
        check_label,
        tags,
    }
}
