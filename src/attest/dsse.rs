//! DSSE envelopes (github.com/secure-systems-lab/dsse, v1.0): a payload,
//! its type, and signatures over the pre-authentication encoding
//! `DSSEv1 <len(type)> <type> <len(payload)> <payload>`.

use super::AttestError;
use super::key::{PrivateKey, PublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// The payload type of an in-toto statement.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Base64 (standard alphabet, padded) of the payload.
    pub payload: String,
    pub payload_type: String,
    pub signatures: Vec<Signature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// Base64 of the DER signature.
    pub sig: String,
    /// The key's hint; empty is allowed by DSSE, but we always say.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub keyid: String,
}

/// The pre-authentication encoding.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

impl Envelope {
    /// `payload` of `payload_type`, signed with `key`.
    pub fn sign(payload_type: &str, payload: &[u8], key: &PrivateKey) -> Envelope {
        Envelope {
            payload: STANDARD.encode(payload),
            payload_type: payload_type.to_string(),
            signatures: vec![Signature {
                sig: STANDARD.encode(key.sign(&pae(payload_type, payload))),
                keyid: key.public().hint(),
            }],
        }
    }

    /// The payload's bytes, once a signature by `key` over them verifies;
    /// `what` names the envelope in errors.
    pub fn verify(&self, key: &PublicKey, what: &str) -> Result<Vec<u8>, AttestError> {
        let malformed = |detail: String| AttestError::Malformed {
            what: what.to_string(),
            detail,
        };
        let payload = STANDARD
            .decode(&self.payload)
            .map_err(|e| malformed(format!("the payload is not base64 ({e})")))?;
        let message = pae(&self.payload_type, &payload);
        let signed = self.signatures.iter().any(|s| {
            STANDARD
                .decode(&s.sig)
                .is_ok_and(|sig| key.verifies(&message, &sig))
        });
        if !signed {
            return Err(AttestError::BadSignature {
                what: what.to_string(),
                hint: key.hint(),
            });
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_the_specs() {
        // The DSSE specification's own example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }

    #[test]
    fn an_envelope_verifies_with_its_key_only_and_any_change_breaks_it() {
        let key = PrivateKey::generate();
        let env = Envelope::sign(IN_TOTO, br#"{"_type":"x"}"#, &key);
        assert_eq!(env.verify(&key.public(), "e").unwrap(), br#"{"_type":"x"}"#);
        assert!(env.verify(&PrivateKey::generate().public(), "e").is_err());

        let mut other_type = env.clone();
        other_type.payload_type = "text/plain".into();
        assert!(matches!(
            other_type.verify(&key.public(), "e"),
            Err(AttestError::BadSignature { .. })
        ));
        let mut one_byte = env.clone();
        one_byte.payload = STANDARD.encode(br#"{"_type":"y"}"#);
        assert!(one_byte.verify(&key.public(), "e").is_err());
        let mut garbled = env.clone();
        garbled.payload = "%%%".into();
        assert!(matches!(
            garbled.verify(&key.public(), "e"),
            Err(AttestError::Malformed { .. })
        ));
        let json = serde_json::to_string(&env).unwrap();
        assert!(
            json.starts_with(r#"{"payload":""#)
                && json.contains(r#""payloadType":"application/vnd.in-toto+json""#),
            "{json}"
        );
    }
}
