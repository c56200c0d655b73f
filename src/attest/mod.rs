//! Signed statements about released images (issue 19): keys, DSSE
//! envelopes and Sigstore bundles. What is signed (SBOM, provenance, test
//! results) and where it goes (OCI referrers) build on this.
//!
//! # Choices, and why
//! - **ECDSA P-256 with SHA-256**, the signature DER-encoded: what cosign
//!   uses for key pairs, so cosign, `@sigstore/verify` and
//!   `securesystemslib` verify what this signs. The arithmetic is the
//!   RustCrypto `p256`/`ecdsa` crates' (RFC 6979 deterministic nonces: one
//!   key and one payload give one signature, and no RNG is needed to sign).
//!   No cryptography is written here.
//! - **Keys as PKCS#8 PEM** (private) and SPKI PEM (public), the formats
//!   `openssl`, cosign's `import-key-pair` and Python's `cryptography` read.
//!   The private key is written with mode 0600 and never printed; it is
//!   read from a file or from an environment variable the caller names
//!   (a CI secret), never from argv.
//! - **DSSE** (`dsse.rs`): the payload is signed through the
//!   pre-authentication encoding, so a signature over one payload type can
//!   never be replayed as another.
//! - **Sigstore bundle v0.3** (`bundle.rs`) with a public-key hint and no
//!   transparency-log entries: verifiable offline with the public key.
//!   The hint is the SHA-256 of the key's SPKI DER, in hex, so a verifier
//!   holding several keys finds the one that signed.

pub mod bundle;
pub mod dsse;
pub(crate) mod image_source;
pub mod key;
pub mod locked;
pub mod referrer;
pub(crate) mod registry_image;
pub mod sbom;
pub mod statement;

pub use bundle::Bundle;
pub use dsse::Envelope;
pub use key::{KeySource, PrivateKey, PublicKey};

#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    #[error("{path}: {detail}")]
    Key { path: String, detail: String },
    #[error(
        "the environment variable {name} is not set (it should hold the PKCS#8 PEM private key)"
    )]
    KeyEnvMissing { name: String },
    #[error("{path} exists already; pass --force to replace it (the old key is lost then)")]
    KeyExists { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{what}: {detail}")]
    Malformed { what: String, detail: String },
    /// A document that does not parse as the JSON it should be.
    #[error("{what}: not {expected}")]
    NotJson {
        what: String,
        expected: &'static str,
        source: serde_json::Error,
    },
    #[error("{what}: the signature does not verify with the key {hint}")]
    BadSignature { what: String, hint: String },
    /// An image manifest whose layers cannot be read.
    #[error("{image}: the manifest's layers")]
    Layers {
        image: String,
        #[source]
        source: serde_json::Error,
    },
    /// Text that names no local image and is no reference either.
    #[error("{reference} is not a local image, nor a registry reference to read")]
    NoImage {
        reference: String,
        #[source]
        source: crate::name::Invalid,
    },
    #[error("reading {image} from {engine}")]
    ReadLocal {
        image: String,
        engine: String,
        #[source]
        source: Box<AttestError>,
    },
    /// An image's files that cannot be read: its save stream or a layer.
    #[error(transparent)]
    Read(#[from] crate::image::files::ReadError),
    /// The engine's `save` (the program itself).
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    #[error(transparent)]
    Registry(#[from] crate::registry::Error),
}

/// A key, a signature or an image that cannot be used is an operational
/// failure; text that is no image reference says its own status.
impl crate::exit::HasStatus for AttestError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            AttestError::Key { .. }
            | AttestError::KeyEnvMissing { .. }
            | AttestError::KeyExists { .. }
            | AttestError::Io { .. }
            | AttestError::Malformed { .. }
            | AttestError::NotJson { .. }
            | AttestError::BadSignature { .. }
            | AttestError::Layers { .. }
            | AttestError::Read(_) => Status::Failure,
            AttestError::NoImage { source, .. } => source.exit_status(),
            AttestError::ReadLocal { source, .. } => source.exit_status(),
            AttestError::Process(e) => e.exit_status(),
            AttestError::Registry(e) => e.exit_status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{HasStatus, Status};

    #[test]
    fn an_unusable_key_or_image_fails_and_a_reference_that_is_none_is_usage() {
        let s = String::new;
        for e in [
            AttestError::Key {
                path: s(),
                detail: s(),
            },
            AttestError::KeyEnvMissing { name: s() },
            AttestError::KeyExists { path: s() },
            AttestError::Malformed {
                what: s(),
                detail: s(),
            },
            AttestError::NotJson {
                what: s(),
                expected: "JSON",
                source: serde_json::from_str::<u8>("x").unwrap_err(),
            },
            AttestError::BadSignature {
                what: s(),
                hint: s(),
            },
            AttestError::Process(crate::process::ProcessError::NotFound { program: s() }),
            AttestError::Read(crate::image::files::ReadError::Stream {
                image: s(),
                problem: s(),
            }),
        ] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
        let no_image = AttestError::NoImage {
            reference: "-v".into(),
            source: "-v".parse::<crate::name::Reference>().unwrap_err(),
        };
        assert_eq!(no_image.exit_status(), Status::Usage);
        let read = AttestError::ReadLocal {
            image: "i".into(),
            engine: "docker".into(),
            source: Box::new(AttestError::Process(
                crate::process::ProcessError::NotFound { program: s() },
            )),
        };
        assert_eq!(read.exit_status(), Status::Failure);
    }
}
