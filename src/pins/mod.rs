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

use crate::policy::Inventory;
use semver::Version;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub const FILE_NAME: &str = "image_pins.json";
pub const SCHEMA: u64 = 1;

/// A content digest `<algorithm>:<hex>` (sha256 or sha512, lowercase hex).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad digest {0:?}: expected sha256:<64 lowercase hex> or sha512:<128 lowercase hex>")]
pub struct BadDigest(pub String);

impl Digest {
    pub fn parse(text: &str) -> Result<Digest, BadDigest> {
        let ok = match text.split_once(':') {
            Some(("sha256", hex)) => is_hex(hex, 64),
            Some(("sha512", hex)) => is_hex(hex, 128),
            _ => false,
        };
        if ok {
            Ok(Digest(text.to_string()))
        } else {
            Err(BadDigest(text.to_string()))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// `sha256:0123456789ab` for tables.
    pub fn short(&self) -> &str {
        let end = self.0.find(':').map_or(0, |i| i + 13).min(self.0.len());
        &self.0[..end]
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl TryFrom<String> for Digest {
    type Error = BadDigest;
    fn try_from(s: String) -> Result<Self, BadDigest> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

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
        Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap()
    }

    #[test]
    fn digests_are_validated() {
        let good = [
            format!("sha256:{}", "0".repeat(64)),
            format!("sha512:{}", "f".repeat(128)),
        ];
        for g in &good {
            assert!(Digest::parse(g).is_ok(), "{g}");
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
            assert!(Digest::parse(b).is_err(), "{b}");
        }
        assert_eq!(d('a').short(), "sha256:aaaaaaaaaaaa");
    }
}
