//! OCI 1.1 referrer manifests carrying Sigstore bundles, and the referrers
//! index (the fallback tag's content) that lists them — pure: bytes in,
//! bytes out, so the same bundle for the same subject is the same manifest
//! digest, and merging the same entries twice changes nothing.
//!
//! A referrer is what cosign v3 writes for a bundle: an OCI image manifest
//! with `artifactType` the bundle's media type, the empty config
//! descriptor (image-spec 1.1's guidance for artifacts), one layer (the
//! bundle), `subject` the image, and the annotations
//! `dev.sigstore.bundle.content` / `dev.sigstore.bundle.predicateType`.
//! No `created` annotation: the bytes carry no clock.

use super::AttestError;
use super::bundle::MEDIA_TYPE as BUNDLE;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// The predicate of an image signature (cosign's, in a DSSE statement).
pub const SIGN: &str = "https://sigstore.dev/cosign/sign/v1";
/// The in-toto predicate type of an SPDX 2.3 document.
pub const SPDX: &str = "https://spdx.dev/Document/v2.3";
pub const CONTENT: &str = "dev.sigstore.bundle.content";
pub const PREDICATE_TYPE: &str = "dev.sigstore.bundle.predicateType";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// The empty JSON object, the content of the empty descriptor.
pub const EMPTY_JSON: &[u8] = b"{}";

/// A content descriptor (`mediaType`, `digest`, `size`), plus what a
/// referrers index entry carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: sha256(bytes),
            size: bytes.len() as u64,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The annotations of a bundle's referrer.
pub fn annotations(predicate_type: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CONTENT.to_string(), "dsse-envelope".to_string()),
        (PREDICATE_TYPE.to_string(), predicate_type.to_string()),
    ])
}

/// The referrer manifest of `bundle` (its JSON bytes) about `subject`.
pub fn manifest(subject: &Descriptor, bundle: &[u8], predicate_type: &str) -> Vec<u8> {
    let empty = Descriptor::of(OCI_EMPTY, EMPTY_JSON);
    let layer = Descriptor::of(BUNDLE, bundle);
    let subject = Descriptor {
        artifact_type: None,
        annotations: BTreeMap::new(),
        ..subject.clone()
    };
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE,
        "config": empty,
        "layers": [layer],
        "subject": subject,
        "annotations": annotations(predicate_type),
    }))
    .expect("a manifest serialises")
}

/// The index entry for a referrer manifest (its bytes): its descriptor
/// with the `artifactType` and annotations copied from it.
pub fn entry(manifest: &[u8]) -> Result<Descriptor, AttestError> {
    let parsed = Referrer::parse("a referrer", manifest)?;
    Ok(Descriptor {
        media_type: OCI_MANIFEST.to_string(),
        digest: sha256(manifest),
        size: manifest.len() as u64,
        artifact_type: parsed.artifact_type,
        annotations: parsed.annotations,
    })
}

/// What a referrer manifest says (the fields verification reads).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Referrer {
    #[serde(default)]
    pub artifact_type: Option<String>,
    pub layers: Vec<Descriptor>,
    pub subject: Option<Descriptor>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Referrer {
    pub fn parse(what: &str, bytes: &[u8]) -> Result<Referrer, AttestError> {
        serde_json::from_slice(bytes).map_err(|source| AttestError::NotJson {
            what: what.to_string(),
            expected: "a referrer manifest",
            source,
        })
    }

    /// The bundle layer, when it is the one layer and a bundle.
    pub fn bundle(&self) -> Option<&Descriptor> {
        match self.layers.as_slice() {
            [one] if one.media_type == BUNDLE => Some(one),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct IndexIn {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// The entries of a referrers index.
pub fn entries(what: &str, index: &[u8]) -> Result<Vec<Descriptor>, AttestError> {
    serde_json::from_slice::<IndexIn>(index)
        .map(|i| i.manifests)
        .map_err(|source| AttestError::NotJson {
            what: what.to_string(),
            expected: "an image index",
            source,
        })
}

/// The referrers index `existing` (the fallback tag's bytes, if any) with
/// `new` added: entries already listed (by digest) are not listed again,
/// and every other entry is kept as it was, in its place. `None` when
/// nothing is to be added (no write needed).
pub fn merge(existing: Option<&[u8]>, new: &[Descriptor]) -> Result<Option<Vec<u8>>, AttestError> {
    let mut manifests: Vec<serde_json::Value> = match existing {
        Some(bytes) => {
            let doc: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|source| AttestError::NotJson {
                    what: "the referrers index".into(),
                    expected: "JSON",
                    source,
                })?;
            doc["manifests"].as_array().cloned().unwrap_or_default()
        }
        None => Vec::new(),
    };
    let mut added = false;
    for d in new {
        let listed = manifests
            .iter()
            .any(|m| m["digest"].as_str() == Some(d.digest.as_str()));
        if !listed {
            manifests.push(serde_json::to_value(d).expect("a descriptor serialises"));
            added = true;
        }
    }
    if !added && existing.is_some() {
        return Ok(None);
    }
    Ok(Some(
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": manifests,
        }))
        .expect("an index serialises"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Descriptor {
        Descriptor::of(OCI_MANIFEST, br#"{"schemaVersion":2}"#)
    }

    #[test]
    fn a_referrer_is_an_artifact_manifest_about_its_subject() {
        let m = manifest(&subject(), b"{\"bundle\":1}", SIGN);
        assert_eq!(
            m,
            manifest(&subject(), b"{\"bundle\":1}", SIGN),
            "deterministic"
        );
        let doc: serde_json::Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(doc["artifactType"], BUNDLE);
        assert_eq!(doc["config"]["mediaType"], OCI_EMPTY);
        assert_eq!(
            doc["config"]["digest"],
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(doc["config"]["size"], 2);
        assert_eq!(doc["subject"]["digest"], subject().digest);
        assert_eq!(doc["annotations"][PREDICATE_TYPE], SIGN);
        assert_eq!(doc["annotations"][CONTENT], "dsse-envelope");
        let r = Referrer::parse("r", &m).unwrap();
        assert_eq!(r.bundle().unwrap().digest, sha256(b"{\"bundle\":1}"));
        let e = entry(&m).unwrap();
        assert_eq!(e.artifact_type.as_deref(), Some(BUNDLE));
        assert_eq!(e.annotations[PREDICATE_TYPE], SIGN);
        assert_eq!(e.digest, sha256(&m));
    }

    #[test]
    fn merging_keeps_what_is_listed_and_never_lists_twice() {
        let a = entry(&manifest(&subject(), b"a", SIGN)).unwrap();
        let b = entry(&manifest(&subject(), b"b", SPDX)).unwrap();
        let first = merge(None, std::slice::from_ref(&a)).unwrap().unwrap();
        assert_eq!(merge(Some(&first), std::slice::from_ref(&a)).unwrap(), None);
        // Someone else's entry stays, in its place.
        let foreign = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"x","digest":"sha256:00","size":1,"artifactType":"y"}]}"#;
        let both = merge(Some(foreign), &[a.clone(), b.clone(), a.clone()])
            .unwrap()
            .unwrap();
        let listed = entries("i", &both).unwrap();
        let digests: Vec<&str> = listed.iter().map(|d| d.digest.as_str()).collect();
        assert_eq!(digests, ["sha256:00", a.digest.as_str(), b.digest.as_str()]);
        assert_eq!(listed[2].annotations[PREDICATE_TYPE], SPDX);
        assert_eq!(listed[1].artifact_type.as_deref(), Some(BUNDLE));
    }
}
