//! Image indexes (manifest lists): their entries, and choosing the entry
//! that runs on a platform.

use super::{Digest, Error, ErrorKind, Platform, Result};
use crate::name::best_match;

/// One manifest an index lists.
#[derive(Debug)]
pub(crate) struct IndexEntry {
    pub digest: Digest,
    pub media_type: String,
    pub platform: Option<Platform>,
}

/// An index's entries, in its order.
#[derive(Debug)]
pub(crate) struct Index {
    pub entries: Vec<IndexEntry>,
}

impl Index {
    /// Parses the bytes of an index; anything else is a clean error.
    pub(crate) fn parse(context: &str, bytes: &[u8]) -> Result<Index> {
        let index: oci_spec::image::ImageIndex = serde_json::from_slice(bytes)
            .map_err(|e| Error::malformed(context, "index", e.to_string()))?;
        let entries = index
            .manifests()
            .iter()
            .map(|d| {
                let digest = d.digest().to_string().parse().map_err(|reason| {
                    Error::malformed(context, "index", format!("entry digest: {reason}"))
                })?;
                let platform = d
                    .platform()
                    .as_ref()
                    .map(|p| {
                        Platform::from_parts(
                            &p.os().to_string(),
                            &p.architecture().to_string(),
                            p.variant().as_deref(),
                        )
                    })
                    .transpose()
                    .map_err(|e| Error::malformed(context, "index", format!("entry {e}")))?;
                Ok(IndexEntry {
                    digest,
                    media_type: d.media_type().to_string(),
                    platform,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Index { entries })
    }

    /// Runnable platforms and their manifest digests (no attestations).
    pub(crate) fn platforms(&self) -> Vec<(Platform, Digest)> {
        self.entries
            .iter()
            .filter_map(|e| Some((e.platform.clone()?, e.digest.clone())))
            .filter(|(p, _)| !p.is_unknown())
            .collect()
    }

    /// The entry that best runs on `wanted`, or an error that lists what
    /// the index offers.
    pub(crate) fn choose(&self, context: &str, wanted: &Platform) -> Result<&IndexEntry> {
        let candidates: Vec<Option<Platform>> =
            self.entries.iter().map(|e| e.platform.clone()).collect();
        match best_match(wanted, &candidates) {
            Some(i) => Ok(&self.entries[i]),
            None => Err(no_matching_platform(
                context,
                wanted,
                platform_list(&self.platforms()),
            )),
        }
    }
}

/// Whether a single-platform image (of `actual`) runs on `wanted`.
pub(crate) fn check_platform(context: &str, wanted: &Platform, actual: &Platform) -> Result<()> {
    if best_match(wanted, &[Some(actual.clone())]).is_some() {
        return Ok(());
    }
    Err(no_matching_platform(context, wanted, actual.to_string()))
}

fn no_matching_platform(context: &str, wanted: &Platform, available: String) -> Error {
    let kind = ErrorKind::NoMatchingPlatform {
        wanted: wanted.to_string(),
        available,
    };
    Error::new(kind, context, "")
}

fn platform_list(platforms: &[(Platform, Digest)]) -> String {
    if platforms.is_empty() {
        return "no runnable platforms".into();
    }
    platforms
        .iter()
        .map(|(p, _)| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_with(platforms: &[&str]) -> Vec<u8> {
        let manifests: Vec<_> = platforms
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (os, rest) = p.split_once('/').unwrap();
                serde_json::json!({
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": Digest::sha256(&[i as u8]).to_string(),
                    "size": 1,
                    "platform": {"os": os, "architecture": rest},
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": manifests}))
            .unwrap()
    }

    #[test]
    fn a_platform_no_name_could_be_is_a_malformed_index_shown_escaped() {
        let err = Index::parse("r", &index_with(&["linux/amd64\u{1b}]0;pwned\u{7}"])).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Malformed { what: "index", .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains(r#"linux/amd64\u{1b}]0;pwned\u{7}"#), "{text}");
        // A part that reads as an option, the same.
        assert!(Index::parse("r", &index_with(&["linux/--privileged"])).is_err());
    }

    #[test]
    fn choosing_lists_what_is_offered() {
        let index = Index::parse("r", &index_with(&["linux/amd64", "unknown/unknown"])).unwrap();
        assert_eq!(index.platforms().len(), 1, "attestations are not platforms");
        let amd64: Platform = "linux/amd64".parse().unwrap();
        assert_eq!(
            index.choose("r", &amd64).unwrap().digest,
            Digest::sha256(&[0])
        );
        let err = index
            .choose("r", &"linux/riscv64".parse().unwrap())
            .unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::NoMatchingPlatform { .. }));
        assert!(err.to_string().contains("offers: linux/amd64)"), "{err}");
        let empty = Index::parse("r", &index_with(&[])).unwrap();
        let err = empty.choose("r", &amd64).unwrap_err().to_string();
        assert!(err.contains("no runnable platforms"), "{err}");
        assert!(check_platform("r", &amd64, &amd64).is_ok());
        assert!(check_platform("r", &"linux/arm64".parse().unwrap(), &amd64).is_err());
    }

    #[test]
    fn bad_indexes_are_errors() {
        assert!(Index::parse("r", b"{}").is_err());
        let bad_digest =
            br#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:00","size":1}]}"#;
        let err = Index::parse("r", bad_digest).err().unwrap().to_string();
        assert!(err.contains("malformed index"), "{err}");
    }
}
