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
        self.verify_any(std::slice::from_ref(key), what)
            .map(|(payload, _)| payload)
    }

    /// The payload's bytes and the key that signed them, once a signature
    /// by one of `keys` verifies (several trusted keys: a key rotated out
    /// still verifies what it signed). The signatures' `keyid`s are hints
    /// an attacker writes, so every signature is tried with every key; an
    /// envelope with more than [`MAX_SIGNATURES`] is refused unread, so
    /// that the work stays bounded whatever the envelope holds.
    pub fn verify_any<'k>(
        &self,
        keys: &'k [PublicKey],
        what: &str,
    ) -> Result<(Vec<u8>, &'k PublicKey), AttestError> {
        let malformed = |detail: String| AttestError::Malformed {
            what: what.to_string(),
            detail,
        };
        if self.signatures.len() > MAX_SIGNATURES {
            return Err(malformed(format!(
                "{} signatures, more than the {MAX_SIGNATURES} read",
                self.signatures.len()
            )));
        }
        let payload = STANDARD
            .decode(&self.payload)
            .map_err(|e| malformed(format!("the payload is not base64 ({e})")))?;
        let message = pae(&self.payload_type, &payload);
        let signatures: Vec<Vec<u8>> = self
            .signatures
            .iter()
            .filter_map(|s| STANDARD.decode(&s.sig).ok())
            .collect();
        let signer = keys
            .iter()
            .find(|key| signatures.iter().any(|sig| key.verifies(&message, sig)));
        match signer {
            Some(key) => Ok((payload, key)),
            None => Err(AttestError::BadSignature {
                what: what.to_string(),
                hint: keys
                    .iter()
                    .map(PublicKey::hint)
                    .collect::<Vec<_>>()
                    .join(" or "),
            }),
        }
    }
}

/// The most signatures an envelope may carry: one per signer, and a
/// release has one signer.
pub const MAX_SIGNATURES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_of_several_keys_verifies_what_it_signed_and_says_which() {
        let (old, new) = (PrivateKey::generate(), PrivateKey::generate());
        let keys = [new.public(), old.public()];
        let by_old = Envelope::sign(IN_TOTO, b"{}", &old);
        let (payload, signer) = by_old.verify_any(&keys, "e").unwrap();
        assert_eq!((payload.as_slice(), signer), (&b"{}"[..], &old.public()));
        let stranger = Envelope::sign(IN_TOTO, b"{}", &PrivateKey::generate());
        let err = stranger.verify_any(&keys, "e").unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "e: the signature does not verify with the key {} or {}",
                new.public().hint(),
                old.public().hint()
            )
        );
        // A stranger's signature beside ours: ours counts.
        let mut both = stranger.clone();
        both.signatures.extend(by_old.signatures.clone());
        assert_eq!(both.verify_any(&keys, "e").unwrap().1, &old.public());
        // Beyond the bound nothing is tried, ours among them or not.
        let mut flood = by_old.clone();
        flood.signatures = vec![by_old.signatures[0].clone(); MAX_SIGNATURES + 1];
        let err = flood.verify_any(&keys, "e").unwrap_err().to_string();
        assert_eq!(err, "e: 17 signatures, more than the 16 read");
    }

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
