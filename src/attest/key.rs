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
    pub fn load(source: &KeySource) -> Result<PrivateKey, AttestError> {
        let (what, pem) = match source {
            KeySource::File(path) => (
                path.display().to_string(),
                zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
                    AttestError::Io {
                        path: path.display().to_string(),
                        source,
                    }
                })?),
            ),
            KeySource::Env(name) => (
                format!("${name}"),
                zeroize::Zeroizing::new(
                    std::env::var(name)
                        .map_err(|_| AttestError::KeyEnvMissing { name: name.clone() })?,
                ),
            ),
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
        let io = |source| AttestError::Io {
            path: path.display().to_string(),
            source,
        };
        let pem = self
            .key
            .to_pkcs8_pem(LineEnding::LF)
            .expect("a P-256 key encodes as PKCS#8");
        if path.exists() && !force {
            return Err(AttestError::KeyExists {
                path: path.display().to_string(),
            });
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // A directory made for the key is the owner's alone too.
        let mut mkdir = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(mkdir.recursive(true), 0o700);
        mkdir.create(dir).map_err(io)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".key-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .tempfile_in(dir)
            .map_err(io)?;
        tmp.write_all(pem.as_bytes()).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }
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
