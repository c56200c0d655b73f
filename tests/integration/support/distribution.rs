//! Real CNCF distribution (`docker-registry`) instances on loopback: plain
//! http, TLS + htpasswd, and token auth; test PKI made with the `openssl`
//! CLI. Content is pushed with `support::oci::Pusher`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
pub const USER: &str = "tester";
/// Distinctive so tests can prove it never appears in output.
pub const PASSWORD: &str = "s3cret-Pa55word-xyzzy";
pub const SERVICE: &str = "sunaba-test-registry";
pub const ISSUER: &str = "sunaba-test-issuer";

/// Whether `docker-registry` and `openssl` are installed (see
/// [`super::require`]: a test skips without them, or fails under CI).
pub fn available() -> bool {
    if !super::selected(super::Tier::Registry) {
        return false;
    }
    let missing: Vec<&str> = [REGISTRY_BIN, "/usr/bin/openssl"]
        .into_iter()
        .filter(|bin| !Path::new(bin).exists())
        .collect();
    super::require(if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} not installed (apt-get install docker-registry openssl)",
            missing.join(", ")
        ))
    })
    .is_some()
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
pub fn scratch() -> &'static PathBuf {
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
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\n\
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
        let log_path = dir.path().join("registry.log");
        let mut log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start docker-registry");
        // The readiness signal: the registry logs "listening on ADDR" once
        // its socket is bound (connections from then on queue). Its log is
        // copied to registry.log as it comes; the sender is dropped (the
        // wait below ends) when it exits instead.
        let (ready, listening) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::{BufRead as _, Write as _};
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log, "{line}");
                if line.contains("msg=\"listening on ") {
                    let _ = ready.send(());
                }
            }
        });
        let reg = Registry { port, child, dir };
        if listening.recv_timeout(Duration::from_secs(15)).is_err() {
            panic!(
                "docker-registry did not start on port {port}: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        reg
    }
}
