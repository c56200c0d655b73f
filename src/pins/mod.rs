//! `image_pins.json` as data: what each alias of the image family resolves to
//! for a server release ([`Pin`]), and the content digests it names. Reading
//! and writing the file is `file`; planning, verifying and the next version
//! are the submodules of the same names.

mod file;
pub mod next;
pub mod plan;
pub mod registry_source;
pub mod source;
pub mod verify;

pub use file::{PinsError, PinsFile, locate_alias, remove_stale_temps};

/// The digests a pin names are the registry's: serialised as `sha256:<hex>`.
pub use crate::registry::Digest;

use crate::policy::Inventory;
use semver::Version;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FILE_NAME: &str = "image_pins.json";
pub const SCHEMA: u64 = 1;

/// What one alias runs. Field order here is the order in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub repository: String,
    pub tag: String,
    pub version: Version,
    /// The digest to run: the index digest for a multi-platform image.
    pub digest: Digest,
    /// `os/arch[/variant]` -> the platform's manifest digest.
    pub platforms: BTreeMap<String, Digest>,
    /// Tool -> version, from the image's check record.
    pub tools: Inventory,
}

impl Pin {
    /// The reference a server passes to `docker run`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
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
