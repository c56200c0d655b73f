//! What an engine is told to run: a reference, or an image ID.

use super::{AsWritten, Digest, Invalid, Reference};
use std::fmt;
use std::str::FromStr;

/// An image to start. Either way the text cannot be read as an option
/// (see [`AsWritten`]; a digest starts with its algorithm's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A reference, in its author's words (a pin's `repository@digest`, or
    /// `run --image`).
    Named(AsWritten<Reference>),
    /// An image ID (`sha256:…`), as the engine reported it: what `check`
    /// runs, so a tag moved meanwhile cannot change what is checked.
    Id(Digest),
}

impl FromStr for Image {
    type Err = Invalid;
    /// A digest is an ID, as the engines read it (`sha256:<hex>` would
    /// otherwise parse as the tag `<hex>` of a repository `sha256`); any
    /// other text is a reference.
    fn from_str(text: &str) -> Result<Image, Invalid> {
        match text.parse::<Digest>() {
            Ok(id) => Ok(Image::Id(id)),
            Err(_) => Ok(Image::Named(text.parse()?)),
        }
    }
}

impl From<AsWritten<Reference>> for Image {
    fn from(reference: AsWritten<Reference>) -> Image {
        Image::Named(reference)
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Image::Named(reference) => reference.fmt(f),
            Image::Id(id) => id.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_an_id_anything_else_a_reference_as_written() {
        let id = format!("sha256:{}", "0".repeat(64));
        assert_eq!(id.parse::<Image>().unwrap(), Image::Id(id.parse().unwrap()));
        let named: Image = "debian:12".parse().unwrap();
        assert!(matches!(&named, Image::Named(r) if r.parsed().tag() == Some("12")));
        assert_eq!(named.to_string(), "debian:12");
        for bad in ["--privileged", "-v=/:/host", "x y", "sha256:-x"] {
            assert!(bad.parse::<Image>().is_err(), "{bad}");
        }
    }
}
