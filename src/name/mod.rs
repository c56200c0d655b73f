//! Names: what the project calls things, apart from how they are fetched.
//!
//! - `reference.rs`: [`Reference`] (`registry/path[:tag][@digest]`, with the
//!   Docker Hub defaults) and [`Repository`] (registry and path);
//! - `digest.rs`: [`Digest`], computed over exact bytes;
//! - `platform.rs`: [`Platform`] (`os/arch[/variant]`), normalised once
//!   where text enters, then compared as a value;
//! - `written.rs`: [`AsWritten`], a name kept in its author's words
//!   (what a pins file and an engine's command line carry), known to parse;
//! - `image.rs`: [`Image`], what an engine is told to run (a reference or
//!   an image ID);
//! - `error.rs`: [`Invalid`] and [`InvalidDigest`], why text is not a name.
//!
//! Nothing here talks to a registry or knows HTTP; `registry` builds on
//! these types and re-exports them.
//!
//! [`Unknown`] is the one error for a name the project does not declare —
//! a variant, alias, fragment, language or platform given on the command
//! line — so the same mistake reads and exits the same way in every command
//! (`exit` maps it to the usage status, 64).

mod digest;
mod error;
mod image;
mod platform;
pub(crate) mod reference;
mod written;

pub use digest::{Algorithm, Digest};
pub(crate) use error::{Invalid, InvalidDigest};
pub(crate) use image::Image;
pub use platform::{Platform, best_match};
pub use reference::{Reference, Repository};
pub(crate) use written::AsWritten;

use std::fmt;

/// A name that is not among the ones declared where it was looked up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Unknown {
    /// What kind of name: `variant`, `alias`, `fragment`, `platform`, …
    pub what: &'static str,
    pub name: String,
    /// Where names of that kind are declared, as a person finds it
    /// (`images.toml`, `image_pins.json`, `images.toml [languages]`).
    pub place: String,
    /// The names that are declared there, sorted.
    pub known: Vec<String>,
    /// What to do instead, when there is more to say than the list.
    pub hint: Option<String>,
}

impl Unknown {
    pub fn new(
        what: &'static str,
        name: impl Into<String>,
        place: impl Into<String>,
        known: impl IntoIterator<Item = impl Into<String>>,
    ) -> Unknown {
        Unknown {
            what,
            name: name.into(),
            place: place.into(),
            known: known
                .into_iter()
                .map(Into::into)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Unknown {
        self.hint = Some(hint.into());
        self
    }

    /// `name` when `known` has it, else the error naming what is known.
    pub fn check<'a>(
        what: &'static str,
        name: &str,
        place: &str,
        known: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), Unknown> {
        if known.clone().into_iter().any(|k| k == name) {
            Ok(())
        } else {
            Err(Unknown::new(what, name, place, known))
        }
    }
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = if self.known.is_empty() {
            "none".to_string()
        } else {
            self.known.join(", ")
        };
        write!(
            f,
            "unknown {} `{}` ({} declares: {known})",
            self.what, self.name, self.place
        )?;
        match &self.hint {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

/// A name the project does not declare, asked for on the command line: a
/// usage error, whatever context it was met in.
impl crate::exit::HasStatus for Unknown {
    fn exit_status(&self) -> crate::exit::Status {
        crate::exit::Status::Usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_a_usage_error() {
        use crate::exit::{HasStatus, Status};
        let e = Unknown::new("variant", "rust", "images.toml", ["go"]);
        assert_eq!(e.exit_status(), Status::Usage);
    }

    #[test]
    fn names_the_kind_the_name_the_place_and_what_is_there() {
        let e = Unknown::new("variant", "rust", "images.toml", ["go", "base"]);
        assert_eq!(
            e.to_string(),
            "unknown variant `rust` (images.toml declares: base, go)"
        );
        let none = Unknown::new("alias", "full", "image_pins.json", Vec::<String>::new());
        assert_eq!(
            none.with_hint("pin it first").to_string(),
            "unknown alias `full` (image_pins.json declares: none); pin it first"
        );
    }

    #[test]
    fn check_passes_a_declared_name() {
        assert!(Unknown::check("fragment", "go", "images.toml", ["core", "go"]).is_ok());
        let e = Unknown::check("fragment", "golang", "images.toml", ["core", "go"]).unwrap_err();
        assert_eq!(e.known, ["core", "go"]);
    }
}
