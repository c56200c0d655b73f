//! A name kept in the words its author wrote, known to parse.
//!
//! A pins file and a command line name images the way a person wrote them
//! (`r/x`, `debian:12`), and that text is what goes back into the file
//! (reviewed in pull requests, so it must not change under a rewrite) and
//! onto an engine's command line (an engine resolves a short name its own
//! way: Podman looks for `localhost/…` before it asks a registry, so the
//! canonical `docker.io/…` form could run another image). What the text
//! means is the parsed value. Having one proves the text parsed, and so
//! that it is no option word: a reference or repository starts with a
//! letter, a digit or `[`, never `-`, and holds no whitespace, control
//! character or `=`.

use super::{Digest, Invalid, Reference, Repository};
use std::fmt;
use std::str::FromStr;

/// `text`, which parses as `T` to `parsed`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AsWritten<T> {
    text: String,
    parsed: T,
}

impl<T> AsWritten<T> {
    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
    /// What the text means.
    pub fn parsed(&self) -> &T {
        &self.parsed
    }
}

impl<T: FromStr<Err = Invalid>> FromStr for AsWritten<T> {
    type Err = Invalid;
    fn from_str(text: &str) -> Result<Self, Invalid> {
        Ok(AsWritten {
            parsed: text.parse()?,
            text: text.to_string(),
        })
    }
}

/// A value made here rather than read is written in its canonical form.
impl From<Repository> for AsWritten<Repository> {
    fn from(parsed: Repository) -> Self {
        AsWritten {
            text: parsed.to_string(),
            parsed,
        }
    }
}

impl AsWritten<Reference> {
    /// `digest` in `repository`, written as the repository was:
    /// `repository@digest`.
    pub fn by_digest(repository: &AsWritten<Repository>, digest: &Digest) -> Self {
        AsWritten {
            text: format!("{}@{digest}", repository.text),
            parsed: Reference::in_repo(&repository.parsed, digest.clone()),
        }
    }
}

impl<T> fmt::Display for AsWritten<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<T> serde::Serialize for AsWritten<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Reads the text and parses it; a value that does not parse is the
/// parser's error.
impl<'de, T: FromStr<Err = Invalid>> serde::Deserialize<'de> for AsWritten<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_kept_and_the_meaning_parsed() {
        let repo: AsWritten<Repository> = "r/x".parse().unwrap();
        assert_eq!(repo.as_str(), "r/x");
        assert_eq!(repo.to_string(), "r/x");
        assert_eq!(repo.parsed().to_string(), "docker.io/r/x");
        assert_eq!(serde_json::to_string(&repo).unwrap(), r#""r/x""#);
        assert_eq!(
            serde_json::from_str::<AsWritten<Repository>>(r#""r/x""#).unwrap(),
            repo
        );
        let made = AsWritten::from("ubuntu".parse::<Repository>().unwrap());
        assert_eq!(made.as_str(), "docker.io/library/ubuntu");
    }

    #[test]
    fn a_reference_by_digest_is_written_in_the_repository_s_words() {
        let repo: AsWritten<Repository> = "r/x".parse().unwrap();
        let digest: Digest = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        let by_digest = AsWritten::<Reference>::by_digest(&repo, &digest);
        assert_eq!(by_digest.as_str(), format!("r/x@{digest}"));
        // The same as parsing that text.
        assert_eq!(
            by_digest,
            by_digest.as_str().parse::<AsWritten<Reference>>().unwrap()
        );
    }

    #[test]
    fn text_that_is_not_a_name_is_the_parser_s_error() {
        for bad in ["-v=/:/host", "--privileged", "a b", ""] {
            let e = bad.parse::<AsWritten<Repository>>().unwrap_err();
            assert!(matches!(&e, Invalid::Reference { input, .. } if input == bad));
            let e = serde_json::from_value::<AsWritten<Reference>>(bad.into()).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid image reference {bad:?}")),
                "{e}"
            );
        }
    }
}
