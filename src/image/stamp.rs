//! The version stamped on an image without touching its layers, as `crane
//! mutate --label` would: the config gets the label, the manifest the new
//! config descriptor, every layer stays as it is. The stamped bytes are a
//! pure function of the manifest, the config and the version, so the
//! release's staging (which puts them) and `pins verify --rebuild` (which
//! computes a pin's digest without a registry) make the same ones; both
//! call this, neither reaches into the other.

use crate::labels;
use crate::registry::Digest;
use bytes::Bytes;
use semver::Version;
use serde_json::Value;
use std::collections::BTreeMap;

/// Why an image could not be stamped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StampError {
    #[error("the config is not JSON")]
    ConfigNotJson(#[source] serde_json::Error),
    /// A part of the config the label goes into is not a JSON object.
    #[error("{0}")]
    ConfigShape(&'static str),
    #[error("the manifest is not JSON")]
    ManifestNotJson(#[source] serde_json::Error),
    #[error("the manifest has no config descriptor")]
    NoConfigDescriptor,
}

/// The config with the version label set (every other byte's meaning kept).
pub(crate) fn stamp_config(config: &[u8], version: &Version) -> Result<Vec<u8>, StampError> {
    let mut doc: Value = serde_json::from_slice(config).map_err(StampError::ConfigNotJson)?;
    let label = BTreeMap::from([(labels::VERSION.to_string(), version.to_string())]);
    super::config::set_labels(&mut doc, &label).map_err(StampError::ConfigShape)?;
    Ok(serde_json::to_vec(&doc).expect("a JSON value serialises"))
}

/// The manifest with its config descriptor pointing at another config.
pub(crate) fn restamp_manifest(
    manifest: &[u8],
    config: &Digest,
    size: usize,
) -> Result<Vec<u8>, StampError> {
    let mut doc: Value = serde_json::from_slice(manifest).map_err(StampError::ManifestNotJson)?;
    let descriptor = doc
        .get_mut("config")
        .and_then(Value::as_object_mut)
        .ok_or(StampError::NoConfigDescriptor)?;
    descriptor.insert("digest".into(), Value::String(config.to_string()));
    descriptor.insert("size".into(), Value::from(size));
    Ok(serde_json::to_vec(&doc).expect("a JSON value serialises"))
}

/// A stamped image manifest, not yet put anywhere.
pub(crate) struct Stamped {
    pub bytes: Bytes,
    pub digest: Digest,
    pub config: Digest,
}

/// The image of `manifest` and `config` with the version stamped: the
/// manifest a release puts (its digest is the pin's) and the new config.
/// Pure, so `pins verify --rebuild` computes a pin's digest without a
/// registry.
pub(crate) fn stamp(
    manifest: &[u8],
    config: &[u8],
    version: &Version,
) -> Result<(Stamped, Bytes), StampError> {
    let config = Bytes::from(stamp_config(config, version)?);
    Ok((pointed_at(manifest, &config)?, config))
}

/// `manifest` pointed at `stamped_config`, a config [`stamp_config`]
/// made (a release's push sends it with the image and keeps it, so it is
/// not stamped again).
pub(crate) fn pointed_at(manifest: &[u8], stamped_config: &[u8]) -> Result<Stamped, StampError> {
    let config = Digest::sha256(stamped_config);
    let bytes = Bytes::from(restamp_manifest(manifest, &config, stamped_config.len())?);
    Ok(Stamped {
        digest: Digest::sha256(&bytes),
        bytes,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_adds_one_label_and_points_at_the_new_config() {
        let v = Version::new(1, 2, 3);
        let config =
            br#"{"architecture":"amd64","config":{"Labels":{"a":"b"},"Env":["X=1"]},"os":"linux"}"#;
        let stamped = stamp_config(config, &v).unwrap();
        assert_eq!(
            String::from_utf8(stamped.clone()).unwrap(),
            r#"{"architecture":"amd64","config":{"Labels":{"a":"b","org.opencontainers.image.version":"1.2.3"},"Env":["X=1"]},"os":"linux"}"#
        );
        assert_eq!(stamp_config(&stamped, &v).unwrap(), stamped, "idempotent");
        for bare in [
            &br#"{"config":{"Labels":null}}"#[..],
            br#"{"config":{}}"#,
            br#"{}"#,
        ] {
            let s: Value = serde_json::from_slice(&stamp_config(bare, &v).unwrap()).unwrap();
            assert_eq!(s["config"]["Labels"][labels::VERSION], "1.2.3");
        }
        assert!(stamp_config(b"[1]", &v).is_err());

        let manifest = br#"{"schemaVersion":2,"config":{"mediaType":"m","size":1,"digest":"sha256:x"},"layers":[]}"#;
        let d = Digest::sha256(b"c");
        let out = restamp_manifest(manifest, &d, 42).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["config"]["digest"], d.to_string());
        assert_eq!(doc["config"]["size"], 42);
        assert_eq!(doc["config"]["mediaType"], "m");
    }
}
