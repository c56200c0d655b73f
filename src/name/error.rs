//! Why a name was refused. Parsing a name needs no registry, so its errors
//! are its own; the registry's [`crate::registry::Error`] wraps them (as
//! `ErrorKind::InvalidReference` / `InvalidPlatform`) where a name is
//! parsed on the way to a request.

/// A reference or platform that does not parse: the text as given and what
/// is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("invalid image reference {input:?}: {reason}")]
    Reference { input: String, reason: String },
    #[error("invalid platform {input:?}: {reason}")]
    Platform { input: String, reason: String },
}

impl Invalid {
    pub(crate) fn reference(input: &str, reason: impl Into<String>) -> Invalid {
        Invalid::Reference {
            input: input.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn platform(input: &str, reason: impl Into<String>) -> Invalid {
        Invalid::Platform {
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// Why a digest was refused: the reason only, for the caller to put after
/// the text it read (`bad digest "sha256:abc": sha256 digests have …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidDigest(pub(crate) String);

impl InvalidDigest {
    /// The reason, as the message says it.
    pub fn reason(&self) -> &str {
        &self.0
    }
}

/// Text that is no name is bad input, wherever it was read (the command
/// line, or a file such as image_pins.json): a usage error.
impl crate::exit::HasStatus for Invalid {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            Invalid::Reference { .. } | Invalid::Platform { .. } => crate::exit::Status::Usage,
        }
    }
}

impl crate::exit::HasStatus for InvalidDigest {
    fn exit_status(&self) -> crate::exit::Status {
        crate::exit::Status::Usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{HasStatus, Status};

    #[test]
    fn text_that_is_no_name_is_a_usage_error() {
        assert_eq!(Invalid::reference("-v", "no").exit_status(), Status::Usage);
        assert_eq!(
            Invalid::platform("linux", "no").exit_status(),
            Status::Usage
        );
        let digest = "sha256:abc".parse::<crate::name::Digest>().unwrap_err();
        assert_eq!(digest.exit_status(), Status::Usage);
    }
}
