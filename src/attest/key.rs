//! Key pairs: generating one, reading the private key from a file or an
//! environment variable, reading a public key, signing and verifying.

use super::AttestError;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use rand::RngCore as _;
use sha2::Digest as _;
use std::io::Write as _;
use std::path::Path;

/// Where the private key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(std::path::PathBuf),
    /// The name of an environment variable holding the PEM.
    Env(String),
}

/// A private signing key. Its bytes are zeroed when dropped (the crate's
/// `SecretKey` does) and it has no `Display`.
pub struct PrivateKey {
    key: SigningKey,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({})", self.public().hint())
    }
}

/// A public key, and the hint bundles name it by.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.hint())
    }
}

impl PrivateKey {
    /// A new key from the operating system's randomness (through `rand`'s
    /// OS-seeded CSPRNG); a draw that is not a valid scalar is drawn again.
    pub fn generate() -> PrivateKey {
        loop {
            let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
            rand::rng().fill_bytes(bytes.as_mut());
            if let Ok(secret) = p256::SecretKey::from_bytes((&*bytes).into()) {
                return PrivateKey {
                    key: SigningKey::from(secret),
                };
            }
        }
    }

    /// Reads a PKCS#8 PEM private key from `source`. Errors name the file
    /// or the variable, never the key's text.
    ///
    /// A file that its group or others may read is refused, as ssh refuses
    /// one: the key is as good as published already. A variable is
    /// withheld from every program this process starts from now on
    /// ([`crate::process::withhold_from_children`]), so docker, git and
    /// credential helpers never see the key.
    pub fn load(source: &KeySource) -> Result<PrivateKey, AttestError> {
        let (what, pem) = match source {
            KeySource::File(path) => (path.display().to_string(), read_private_file(path)?),
            KeySource::Env(name) => {
                crate::process::withhold_from_children(name);
                (
                    format!("${name}"),
                    zeroize::Zeroizing::new(
                        std::env::var(name)
                            .map_err(|_| AttestError::KeyEnvMissing { name: name.clone() })?,
                    ),
                )
            }
        };
        SigningKey::from_pkcs8_pem(pem.trim())
            .map(|key| PrivateKey { key })
            .map_err(|e| AttestError::Key {
                path: what,
                detail: format!("not a PKCS#8 PEM P-256 private key ({e})"),
            })
    }

    pub fn public(&self) -> PublicKey {
        PublicKey {
            key: *self.key.verifying_key(),
        }
    }

    /// The DER-encoded ECDSA P-256/SHA-256 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        let sig: Signature = self.key.sign(message);
        sig.to_der().as_bytes().to_vec()
    }

    /// Writes the key as PKCS#8 PEM to `path`, created with mode 0600 (no
    /// moment where another user could read it), refusing to replace a
    /// file unless `force`.
    pub fn save(&self, path: &Path, force: bool) -> Result<(), AttestError> {
        let pem = self
            .key
            .to_pkcs8_pem(LineEnding::LF)
            .expect("a P-256 key encodes as PKCS#8");
        write_key_file(path, pem.as_bytes(), 0o600, force)
    }
}

/// The largest key file read: a P-256 PEM is about 250 bytes, and a path
/// that names `/dev/zero` or a log must not be read to its end.
const MAX_KEY_FILE: u64 = 64 << 10;

/// A private key file's text, once its mode (of the file opened, not of
/// the path looked at before) lets only its owner read it.
fn read_private_file(path: &Path) -> Result<zeroize::Zeroizing<String>, AttestError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let io = |source| AttestError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_file() && mode & 0o077 != 0 {
        return Err(AttestError::Key {
            path: path.display().to_string(),
            detail: format!(
                "mode {mode:04o} gives its group or others access to the private key, \
                 so it is refused (as ssh refuses one); run `chmod 600 {}`",
                crate::process::sh_quote(&path.display().to_string())
            ),
        });
    }
    let mut text = zeroize::Zeroizing::new(String::new());
    file.take(MAX_KEY_FILE + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_KEY_FILE {
        return Err(AttestError::Key {
            path: path.display().to_string(),
            detail: format!("larger than {MAX_KEY_FILE} bytes: not a key"),
        });
    }
    Ok(text)
}

/// Writes `bytes` to a new file `path` with `mode`: a temp file beside it,
/// fsynced, then linked into place only if nothing is there
/// (`persist_noclobber`: no window between looking and writing where a key
/// made meanwhile is lost), or renamed over what is there with `force`.
fn write_key_file(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<(), AttestError> {
    let io = |source| AttestError::Io {
        path: path.display().to_string(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // A directory made for a private key is the owner's alone too.
    let mut mkdir = std::fs::DirBuilder::new();
    let dir_mode = if mode & 0o077 == 0 { 0o700 } else { 0o755 };
    std::os::unix::fs::DirBuilderExt::mode(mkdir.recursive(true), dir_mode);
    mkdir.create(dir).map_err(io)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".key-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .tempfile_in(dir)
        .map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    let placed = if force {
        tmp.persist(path)
    } else {
        tmp.persist_noclobber(path)
    };
    match placed {
        Ok(_) => {}
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(AttestError::KeyExists {
                path: path.display().to_string(),
            });
        }
        Err(e) => return Err(io(e.error)),
    }
    if let Ok(d) = std::fs::File::open(dir) {
        // Makes the new name itself durable; not all filesystems allow it.
        let _ = d.sync_all();
    }
    Ok(())
}

impl PublicKey {
    pub fn from_pem(what: &str, pem: &str) -> Result<PublicKey, AttestError> {
        VerifyingKey::from_public_key_pem(pem.trim())
            .map(|key| PublicKey { key })
            .map_err(|e| AttestError::Key {
                path: what.to_string(),
                detail: format!("not an SPKI PEM P-256 public key ({e})"),
            })
    }

    pub fn load(path: &Path) -> Result<PublicKey, AttestError> {
        let pem = std::fs::read_to_string(path).map_err(|source| AttestError::Io {
            path: path.display().to_string(),
            source,
        })?;
        PublicKey::from_pem(&path.display().to_string(), &pem)
    }

    /// Writes the SPKI PEM to `path` (mode 0644: it is public), refusing to
    /// replace a file unless `force`, as [`PrivateKey::save`] does.
    pub fn save(&self, path: &Path, force: bool) -> Result<(), AttestError> {
        write_key_file(path, self.to_pem().as_bytes(), 0o644, force)
    }

    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("a P-256 key encodes as SPKI")
    }

    /// The SHA-256 of the key's SPKI DER, in hex: how bundles name it.
    pub fn hint(&self) -> String {
        let der = self
            .key
            .to_public_key_der()
            .expect("a P-256 key encodes as SPKI");
        hex::encode(sha2::Sha256::digest(der.as_bytes()))
    }

    /// Whether `signature` (DER) signs `message` with this key.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        Signature::from_der(signature)
            .map(|sig| self.key.verify(message, &sig).is_ok())
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_generated_key_signs_what_its_public_key_verifies_and_nothing_else() {
        let key = PrivateKey::generate();
        let public = key.public();
        let sig = key.sign(b"payload");
        assert!(public.verifies(b"payload", &sig));
        assert!(!public.verifies(b"payloaD", &sig));
        assert!(!PrivateKey::generate().public().verifies(b"payload", &sig));
        // RFC 6979: one key, one message, one signature.
        assert_eq!(key.sign(b"payload"), sig);
        assert_eq!(public.hint().len(), 64);
        assert_ne!(public.hint(), PrivateKey::generate().public().hint());
    }

    #[test]
    fn keys_round_trip_through_pem_files_and_the_private_one_is_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("release.key");
        let key = PrivateKey::generate();
        key.save(&path, false).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{text}");
        let back = PrivateKey::load(&KeySource::File(path.clone())).unwrap();
        assert_eq!(back.public(), key.public());
        // Not replaced by accident.
        let err = PrivateKey::generate().save(&path, false).unwrap_err();
        assert!(matches!(err, AttestError::KeyExists { .. }), "{err}");
        assert_eq!(
            PrivateKey::load(&KeySource::File(path)).unwrap().public(),
            key.public()
        );

        let pem = key.public().to_pem();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{pem}");
        assert_eq!(PublicKey::from_pem("k", &pem).unwrap(), key.public());
    }

    #[test]
    fn a_key_file_its_group_or_others_can_read_is_refused_naming_the_mode_and_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("release.key");
        let key = PrivateKey::generate();
        key.save(&path, false).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = PrivateKey::load(&KeySource::File(path.clone()))
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                format!(
                    "{}: mode {mode:04o} gives its group or others access to the private key, \
                     so it is refused (as ssh refuses one); run `chmod 600 {}`",
                    path.display(),
                    path.display()
                )
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let back = PrivateKey::load(&KeySource::File(path.clone())).unwrap();
            assert_eq!(back.public(), key.public(), "{mode:o}");
        }
    }

    #[test]
    fn a_key_file_is_read_only_up_to_a_bound() {
        // Not /dev/zero read to the end of memory.
        let err = PrivateKey::load(&KeySource::File("/dev/zero".into()))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "/dev/zero: larger than 65536 bytes: not a key");
    }

    #[test]
    fn saving_never_replaces_what_is_at_the_path_without_force_not_even_a_dangling_link() {
        // `exists()` says no for a symlink to nothing, and a rename then
        // replaced the link: the check and the write must be one step.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("release.key");
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &path).unwrap();
        let err = PrivateKey::generate().save(&path, false).unwrap_err();
        assert!(matches!(err, AttestError::KeyExists { .. }), "{err}");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        // With force the replacement is whole (a rename), never a mix.
        let key = PrivateKey::generate();
        key.save(&path, true).unwrap();
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        let back = PrivateKey::load(&KeySource::File(path.clone())).unwrap();
        assert_eq!(back.public(), key.public());
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["release.key"], "no temp file left");
    }

    #[test]
    fn a_public_key_is_saved_0644_and_replaced_only_with_force() {
        let tmp = tempfile::tempdir().unwrap();
        let public = tmp.path().join("keys/release.pub");
        let key = PrivateKey::generate().public();
        key.save(&public, false).unwrap();
        let meta = std::fs::metadata(&public).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        let err = PrivateKey::generate()
            .public()
            .save(&public, false)
            .unwrap_err();
        assert!(matches!(err, AttestError::KeyExists { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&public).unwrap(), key.to_pem());
        let other = PrivateKey::generate().public();
        other.save(&public, true).unwrap();
        assert_eq!(std::fs::read_to_string(&public).unwrap(), other.to_pem());
    }

    #[test]
    fn a_key_from_a_variable_is_withheld_from_every_child() {
        let name = "SUNABA_TEST_KEY_WITHHELD";
        // Withheld even when the variable is not there (or not a key).
        let _ = PrivateKey::load(&KeySource::Env(name.into()));
        let out = crate::process::Cmd::new("env")
            .env(name, "-----BEGIN PRIVATE KEY-----")
            .run()
            .unwrap();
        assert!(!out.stdout.contains(name), "{}", out.stdout);
    }

    #[test]
    fn a_bad_key_names_its_place_and_never_its_text() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("bad.key");
        std::fs::write(
            &path,
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let err = PrivateKey::load(&KeySource::File(path.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
        let err = PrivateKey::load(&KeySource::Env("SUNABA_TEST_NO_SUCH_KEY_VAR".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SUNABA_TEST_NO_SUCH_KEY_VAR is not set"),
            "{err}"
        );
    }
}
