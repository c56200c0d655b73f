//! `image_pins.json` as data: what each alias of the image family resolves to
//! for a server release ([`Pin`]), and the content digests it names. Reading
//! and writing the file is `file`; planning, verifying and the next version
//! are the submodules of the same names.

pub mod attestations;
mod file;
pub(crate) mod github;
pub mod next;
pub mod plan;
pub mod registry_source;
pub mod source;
pub mod verify;

pub use file::{PinsError, PinsFile, locate_alias};

/// The digests a pin names are the registry's: serialised as `sha256:<hex>`.
pub use crate::registry::Digest;

use crate::name::{AsWritten, Image, Platform, Reference, Repository};

use crate::semver_rules::Inventory;
use semver::Version;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FILE_NAME: &str = "image_pins.json";
pub const SCHEMA: u64 = 1;

/// What one alias runs. Field order here is the order in the file.
///
/// The repository is parsed where the file is read, and kept in the words
/// the file has (a rewrite of the file changes no byte of it). `R` is
/// `String` only between reading the file's text and parsing it
/// (`file.rs`), so the error can name the alias and the line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin<R = AsWritten<Repository>> {
    pub repository: R,
    pub tag: String,
    pub version: Version,
    /// The digest to run: the index digest for a multi-platform image.
    pub digest: Digest,
    /// `os/arch[/variant]` -> the platform's manifest digest; keys are
    /// normalised as they are read (`linux/arm64/v8` is `linux/arm64`).
    pub platforms: BTreeMap<Platform, Digest>,
    /// Tool -> version, from the image's check record.
    pub tools: Inventory,
    /// The signed referrers a release attached (issue 19): subject (the
    /// index or a platform image) -> its referrer manifests' digests, in
    /// the order attached. Absent when none were (an unsigned release, a
    /// pin made by `pin`), so pins files from before still load.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub referrers: BTreeMap<Digest, Vec<Digest>>,
}

impl Pin<String> {
    /// The same pin with its repository parsed; the error is the parser's.
    pub(crate) fn parse_repository(self) -> Result<Pin, crate::name::Invalid> {
        Ok(Pin {
            repository: self.repository.parse()?,
            tag: self.tag,
            version: self.version,
            digest: self.digest,
            platforms: self.platforms,
            tools: self.tools,
            referrers: self.referrers,
        })
    }
}

impl Pin {
    /// The reference a server passes to `docker run`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }

    /// The image to run on an engine of `platform`: for a multi-platform
    /// image its platform's own image, by digest (an engine that keeps one
    /// image per reference would otherwise run whichever platform it pulled
    /// the index for first); a single image as it is.
    pub fn image_for(&self, platform: &Platform) -> Result<Image, String> {
        let digest = if self.platforms.len() <= 1 {
            &self.digest
        } else {
            self.platforms.get(&platform.normalized()).ok_or_else(|| {
                format!(
                    "{} has no image for {platform} (it has {})",
                    self.reference(),
                    self.platforms
                        .keys()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?
        };
        Ok(AsWritten::<Reference>::by_digest(&self.repository, digest).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn d(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    #[test]
    fn an_engine_runs_its_platform_s_own_image_of_an_index() {
        let pin = |platforms: &[(&str, char)]| Pin {
            repository: "r/x".parse().unwrap(),
            tag: "x-1.0.0".into(),
            version: Version::new(1, 0, 0),
            digest: d('f'),
            platforms: platforms
                .iter()
                .map(|(p, c)| (p.parse().unwrap(), d(*c)))
                .collect(),
            tools: Default::default(),
            referrers: Default::default(),
        };
        let two = pin(&[("linux/amd64", 'a'), ("linux/arm64", 'b')]);
        let image = |pin: &Pin, platform: &str| {
            pin.image_for(&platform.parse().unwrap())
                .map(|i| i.to_string())
        };
        assert_eq!(
            image(&two, "linux/arm64/v8").unwrap(),
            format!("r/x@{}", d('b'))
        );
        assert_eq!(
            image(&two, "linux/amd64").unwrap(),
            format!("r/x@{}", d('a'))
        );
        assert_eq!(
            image(&two, "linux/s390x").unwrap_err(),
            format!(
                "r/x@{} has no image for linux/s390x (it has linux/amd64, linux/arm64)",
                d('f')
            )
        );
        let one = pin(&[("linux/amd64", 'a')]);
        assert_eq!(image(&one, "linux/arm64").unwrap(), one.reference());
    }

    #[test]
    fn digests_are_validated() {
        let good = [
            format!("sha256:{}", "0".repeat(64)),
            format!("sha512:{}", "f".repeat(128)),
        ];
        for g in &good {
            assert!(g.parse::<Digest>().is_ok(), "{g}");
        }
        let bad = [
            String::new(),
            "sha256:".into(),
            format!("sha256:{}", "0".repeat(63)),
            format!("sha256:{}", "A".repeat(64)),
            format!("sha256:{}", "g".repeat(64)),
            format!("md5:{}", "0".repeat(32)),
            format!("sha512:{}", "0".repeat(64)),
            "0".repeat(64),
        ];
        for b in &bad {
            assert!(b.parse::<Digest>().is_err(), "{b}");
        }
        assert_eq!(d('a').short(), "sha256:aaaaaaaaaaaa");
    }
}
