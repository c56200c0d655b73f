//! Content digests (`sha256:<hex>`, `sha384:`, `sha512:`) computed over the
//! exact bytes received — never over re-serialized JSON, which would differ
//! from the registry's digest for any manifest not in canonical form.

use super::InvalidDigest;
use sha2::Digest as _;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha384 => "sha384",
            Algorithm::Sha512 => "sha512",
        }
    }
    fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha384 => 96,
            Algorithm::Sha512 => 128,
        }
    }
}

/// A validated digest; the hex part is always lowercase.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

impl Digest {
    /// The digest of `bytes` with `algorithm`.
    pub fn compute(algorithm: Algorithm, bytes: &[u8]) -> Digest {
        let hex = match algorithm {
            Algorithm::Sha256 => hex::encode(sha2::Sha256::digest(bytes)),
            Algorithm::Sha384 => hex::encode(sha2::Sha384::digest(bytes)),
            Algorithm::Sha512 => hex::encode(sha2::Sha512::digest(bytes)),
        };
        Digest { algorithm, hex }
    }
    /// The sha256 digest of `bytes`.
    pub fn sha256(bytes: &[u8]) -> Digest {
        Digest::compute(Algorithm::Sha256, bytes)
    }
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    pub fn hex(&self) -> &str {
        &self.hex
    }
    /// `sha256:0123456789ab`: the algorithm and 12 hex digits, for tables.
    pub fn short(&self) -> String {
        format!("{}:{}", self.algorithm.name(), &self.hex[..12])
    }

    /// Whether `bytes` hash to this digest (with this digest's algorithm).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        Digest::compute(self.algorithm, bytes) == *self
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

impl FromStr for Digest {
    /// The reason, for the caller to put in context.
    type Err = InvalidDigest;
    fn from_str(s: &str) -> Result<Self, InvalidDigest> {
        let bad = |reason: String| InvalidDigest(reason);
        let (alg, hex) = s.split_once(':').ok_or_else(|| {
            bad("a digest is <algorithm>:<hex>, e.g. sha256:<64 hex digits>".to_string())
        })?;
        let algorithm = match alg {
            "sha256" => Algorithm::Sha256,
            "sha384" => Algorithm::Sha384,
            "sha512" => Algorithm::Sha512,
            other => {
                return Err(bad(format!(
                    "unsupported digest algorithm {other:?} (sha256, sha384 and sha512 are supported)"
                )));
            }
        };
        let want = algorithm.hex_len();
        if hex.len() != want || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(format!(
                "{alg} digests have exactly {want} hex digits, got {:?}",
                hex
            )));
        }
        if hex.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad(format!("{alg} digest hex must be lowercase")));
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_string(),
        })
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        // The value leads, so a message about a reviewed file (image_pins.json)
        // or a manifest says which string was refused.
        s.parse()
            .map_err(|why| serde::de::Error::custom(format!("bad digest {s:?}: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computes_and_parses() {
        let d = Digest::sha256(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert!(d.matches(b""));
        assert!(!d.matches(b" "));
        let d512 = Digest::compute(Algorithm::Sha512, b"x");
        assert_eq!(d512.hex().len(), 128);
        assert!(d512.to_string().parse::<Digest>().unwrap().matches(b"x"));
    }

    #[test]
    fn rejects_malformed() {
        assert!(
            "sha256"
                .parse::<Digest>()
                .unwrap_err()
                .reason()
                .contains("<algorithm>:<hex>")
        );
        assert!(
            "md5:00"
                .parse::<Digest>()
                .unwrap_err()
                .reason()
                .contains("unsupported")
        );
        assert!(
            "sha256:abc"
                .parse::<Digest>()
                .unwrap_err()
                .reason()
                .contains("64 hex")
        );
        let upper = format!("sha256:{}", "A".repeat(64));
        assert!(
            upper
                .parse::<Digest>()
                .unwrap_err()
                .reason()
                .contains("lowercase")
        );
    }
}
