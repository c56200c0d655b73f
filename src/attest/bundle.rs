//! Sigstore bundles v0.3 (sigstore/protobuf-specs `Bundle`, JSON form)
//! carrying a DSSE envelope, verified by a public key: the
//! verification material is the key's hint alone and there are no
//! transparency-log entries (`tlogEntries: []`), so a verifier needs the
//! public key and nothing online.

use super::AttestError;
use super::dsse::Envelope;
use super::key::{PrivateKey, PublicKey};
use serde::{Deserialize, Serialize};

pub const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    pub media_type: String,
    pub verification_material: VerificationMaterial,
    pub dsse_envelope: Envelope,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMaterial {
    pub public_key: KeyHint,
    #[serde(default)]
    pub tlog_entries: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHint {
    pub hint: String,
}

impl Bundle {
    /// A bundle of `payload` (of `payload_type`) signed with `key`.
    pub fn sign(payload_type: &str, payload: &[u8], key: &PrivateKey) -> Bundle {
        Bundle {
            media_type: MEDIA_TYPE.to_string(),
            verification_material: VerificationMaterial {
                public_key: KeyHint {
                    hint: key.public().hint(),
                },
                tlog_entries: Vec::new(),
            },
            dsse_envelope: Envelope::sign(payload_type, payload, key),
        }
    }

    /// Reads a bundle; `what` names it in errors.
    pub fn parse(what: &str, bytes: &[u8]) -> Result<Bundle, AttestError> {
        let bundle: Bundle =
            serde_json::from_slice(bytes).map_err(|source| AttestError::NotJson {
                what: what.to_string(),
                expected: "a Sigstore bundle",
                source,
            })?;
        if bundle.media_type != MEDIA_TYPE {
            return Err(AttestError::Malformed {
                what: what.to_string(),
                detail: format!("media type {:?}, not {MEDIA_TYPE}", bundle.media_type),
            });
        }
        Ok(bundle)
    }

    /// The signed payload, once the envelope verifies with `key` (the
    /// hint is a name, not a proof: only the signature is trusted).
    pub fn verify(&self, key: &PublicKey, what: &str) -> Result<Vec<u8>, AttestError> {
        self.dsse_envelope.verify(key, what)
    }

    /// The signed payload and the key that signed it, once the envelope
    /// verifies with one of `keys` (the hint is not consulted).
    pub fn verify_any<'k>(
        &self,
        keys: &'k [PublicKey],
        what: &str,
    ) -> Result<(Vec<u8>, &'k PublicKey), AttestError> {
        self.dsse_envelope.verify_any(keys, what)
    }

    /// The key the bundle says signed it: a name an attacker may write,
    /// for messages only.
    pub fn claimed_hint(&self) -> &str {
        &self.verification_material.public_key.hint
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a bundle serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::dsse::IN_TOTO;

    #[test]
    fn a_bundle_round_trips_and_verifies_with_its_key_only() {
        let key = PrivateKey::generate();
        let bundle = Bundle::sign(IN_TOTO, b"{}", &key);
        let json = bundle.to_json();
        let text = String::from_utf8(json.clone()).unwrap();
        assert!(text.starts_with(&format!(
            r#"{{"mediaType":"{MEDIA_TYPE}","verificationMaterial":{{"publicKey":{{"hint":"{}"}},"tlogEntries":[]}},"dsseEnvelope":{{"#,
            key.public().hint()
        )), "{text}");
        let back = Bundle::parse("b", &json).unwrap();
        assert_eq!(back, bundle);
        assert_eq!(back.verify(&key.public(), "b").unwrap(), b"{}");
        assert!(back.verify(&PrivateKey::generate().public(), "b").is_err());
        let err = Bundle::parse("b", br#"{"mediaType":"x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("b: not a Sigstore bundle"), "{err}");
    }
}
