//! Which CAs vouch for which registry, the way Docker does it: a registry's
//! own CAs (`certs.d/HOST[:PORT]/*.crt`, `--ca-cert HOST=PEM`) are trusted
//! for that registry only, on top of the system roots and the CAs given for
//! every host (`--ca-cert PEM`).
//!
//! "For that registry" means the requests made on its behalf: the registry
//! itself, the token endpoint its challenge names and the storage it
//! redirects blobs to (as Docker and containers/image do: one TLS
//! configuration per registry). Each registry with CAs of its own gets its
//! own connection pool with its own roots, so its CA is never consulted for
//! another registry's connections.
//!
//! Directories, the first that has a directory for the registry wins (as
//! containers-certs.d(5) does):
//! 1. `$SUNABA_CERTS_D` — when set, the only one (tests, CI);
//! 2. `$XDG_CONFIG_HOME/sunaba-images/certs.d` (`~/.config/…`);
//! 3. `$XDG_CONFIG_HOME/containers/certs.d` (podman's, per user);
//! 4. `/etc/containers/certs.d`;
//! 5. `/etc/docker/certs.d`.
//!
//! In the registry's directory every `*.crt` file is a PEM CA bundle
//! (Docker's rule). Client certificates (`*.cert` with `*.key`) are not
//! read. The directory is named after the registry as image references
//! write it: `host` or `host:port` (`reg.example:5000`, `docker.io`).

use super::Repository;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// CA files are small; a larger one is a mistake (or `/dev/zero`).
const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// More `*.crt` files than this in one registry's directory is a mistake.
const MAX_CA_FILES: usize = 64;

/// The `certs.d` directories to consult, in order.
#[derive(Debug, Clone, Default)]
pub struct CertsDirs {
    dirs: Vec<PathBuf>,
}

impl CertsDirs {
    /// The default directories, read from the environment.
    pub fn from_env() -> CertsDirs {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(dir) = env("SUNABA_CERTS_D") {
            return CertsDirs::with_dirs(vec![dir]);
        }
        let mut dirs = Vec::new();
        let config = env("XDG_CONFIG_HOME").or_else(|| env("HOME").map(|h| h.join(".config")));
        if let Some(config) = config {
            dirs.push(config.join("sunaba-images/certs.d"));
            dirs.push(config.join("containers/certs.d"));
        }
        dirs.push(PathBuf::from("/etc/containers/certs.d"));
        dirs.push(PathBuf::from("/etc/docker/certs.d"));
        CertsDirs { dirs }
    }

    /// Exactly these directories, in order (no environment lookups).
    pub fn with_dirs(dirs: Vec<PathBuf>) -> CertsDirs {
        CertsDirs { dirs }
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The CA files for `registry` (`host[:port]`): the `*.crt` files of
    /// the first `DIR/registry` directory that exists, sorted.
    pub(crate) fn ca_files(&self, registry: &str) -> Result<Vec<PathBuf>, String> {
        // A registry name is one path component (references guarantee it;
        // this keeps it so whatever the caller passes).
        if registry.is_empty() || registry.contains(['/', '\\']) || registry.starts_with('.') {
            return Ok(Vec::new());
        }
        for dir in &self.dirs {
            let host_dir = dir.join(registry);
            let entries = match std::fs::read_dir(&host_dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => continue,
                Err(e) => return Err(format!("cannot read {}: {e}", host_dir.display())),
            };
            let mut files = Vec::new();
            for entry in entries {
                let entry =
                    entry.map_err(|e| format!("cannot read {}: {e}", host_dir.display()))?;
                let path = entry.path();
                if path.extension().is_some_and(|x| x == "crt") {
                    files.push(path);
                }
            }
            if files.len() > MAX_CA_FILES {
                return Err(format!(
                    "{} holds {} .crt files, more than {MAX_CA_FILES}",
                    host_dir.display(),
                    files.len()
                ));
            }
            files.sort();
            return Ok(files);
        }
        Ok(Vec::new())
    }
}

/// The certificates of a PEM bundle file, read under a size cap; one that
/// holds none is an error.
pub(crate) fn read_pem_file(path: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let fail = |reason: String| format!("CA certificate {}: {reason}", path.display());
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(fail(format!("larger than {MAX_CA_FILE_BYTES} bytes")));
    }
    parse_pem(&pem).map_err(fail)
}

/// The certificates of a PEM bundle; one that holds none is an error.
pub(crate) fn parse_pem(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, String> {
    let certs = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

/// A `--ca-cert` value: `PEM` (trusted for every registry) or `HOST=PEM`
/// (trusted for the registry `HOST` only; `HOST` as image references write
/// it, `host` or `host:port`). A path that holds `=` is given with a `/`
/// before it (`./a=b.pem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaCert {
    /// `None`: every registry.
    pub registry: Option<String>,
    pub path: PathBuf,
}

/// Why a `--ca-cert` value is refused (clap names the option and value).
impl std::str::FromStr for CaCert {
    type Err = String;

    fn from_str(s: &str) -> Result<CaCert, String> {
        let scoped = s
            .split_once('=')
            .filter(|(host, _)| !host.is_empty() && !host.contains('/'));
        let Some((host, path)) = scoped else {
            return Ok(CaCert {
                registry: None,
                path: PathBuf::from(s),
            });
        };
        // A registry host is what a reference takes as one: it has a `.` or
        // a port, or is `localhost` ("HOST/x" parses with HOST as registry).
        let is_registry = format!("{host}/x")
            .parse::<Repository>()
            .is_ok_and(|r| r.registry() == host);
        if !is_registry {
            return Err(format!(
                "{host:?} is not a registry host as image references write it \
                 (host.domain or host:port); a file whose name holds `=` is written ./{s}"
            ));
        }
        if path.is_empty() {
            return Err(format!("no PEM file after `{host}=`"));
        }
        Ok(CaCert {
            registry: Some(host.to_string()),
            path: PathBuf::from(path),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_cert_values_are_global_or_for_one_registry() {
        let parse = |s: &str| s.parse::<CaCert>();
        assert_eq!(
            parse("/etc/ca.pem").unwrap(),
            CaCert {
                registry: None,
                path: "/etc/ca.pem".into()
            }
        );
        assert_eq!(
            parse("reg.example:5000=ca.pem").unwrap(),
            CaCert {
                registry: Some("reg.example:5000".into()),
                path: "ca.pem".into()
            }
        );
        for (value, registry) in [
            ("localhost=c.pem", "localhost"),
            ("127.0.0.1:5000=c.pem", "127.0.0.1:5000"),
            ("[::1]:5000=c.pem", "[::1]:5000"),
            ("docker.io=/x/c.pem", "docker.io"),
        ] {
            assert_eq!(parse(value).unwrap().registry.as_deref(), Some(registry));
        }
        assert_eq!(
            parse("./a=b.pem").unwrap().registry,
            None,
            "a path with `=` after a `/`"
        );
        assert_eq!(parse("=b.pem").unwrap().registry, None);
        for (bad, why) in [
            ("myhost=c.pem", "\"myhost\" is not a registry host"),
            ("reg.example=", "no PEM file after `reg.example=`"),
            ("a b=c.pem", "\"a b\" is not a registry host"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_first_directory_with_the_registry_wins_and_only_crt_files_count() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        for (dir, reg) in [
            (&a, "reg.example:5000"),
            (&b, "reg.example:5000"),
            (&b, "other.example"),
        ] {
            std::fs::create_dir_all(dir.join(reg)).unwrap();
        }
        for f in ["ca.crt", "extra.crt", "client.cert", "client.key", "README"] {
            std::fs::write(a.join("reg.example:5000").join(f), "x").unwrap();
        }
        std::fs::write(b.join("other.example/ca.crt"), "x").unwrap();
        let dirs = CertsDirs::with_dirs(vec![a.clone(), b.clone()]);
        assert_eq!(
            dirs.ca_files("reg.example:5000").unwrap(),
            [
                a.join("reg.example:5000/ca.crt"),
                a.join("reg.example:5000/extra.crt")
            ]
        );
        assert_eq!(
            dirs.ca_files("other.example").unwrap(),
            [b.join("other.example/ca.crt")]
        );
        assert!(
            dirs.ca_files("reg.example").unwrap().is_empty(),
            "the port is part of the name"
        );
        assert!(dirs.ca_files("..").unwrap().is_empty());
        assert!(dirs.ca_files("a/../b").unwrap().is_empty());
    }

    #[test]
    fn pem_files_are_bounded_and_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "no pem here\n").unwrap();
        let e = read_pem_file(&empty).unwrap_err();
        assert!(
            e.contains("empty.crt") && e.contains("no PEM certificate"),
            "{e}"
        );
        let big = dir.path().join("big.crt");
        std::fs::write(&big, vec![b'a'; (MAX_CA_FILE_BYTES + 1) as usize]).unwrap();
        let e = read_pem_file(&big).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let e = read_pem_file(&dir.path().join("absent.crt")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }
}
