//! The one error type of the registry module: a kind callers match on, and
//! the context (the reference or repository, the registry) every message
//! names. Messages say what to do; they never contain credentials or tokens.

use crate::name::Invalid;
use std::fmt;

/// A registry failure. Match on [`Error::kind`]:
///
/// ```
/// # use sunaba_images::registry::{Error, ErrorKind};
/// fn missing(e: &Error) -> bool {
///     matches!(e.kind(), ErrorKind::NotFound { .. })
/// }
/// ```
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    /// What the operation was about: a reference, a repository, or empty.
    context: String,
    /// The registry (`host[:port]`) concerned, or empty.
    registry: String,
}

/// What went wrong, with the details that differ by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    InvalidReference {
        input: String,
        reason: String,
    },
    InvalidPlatform {
        input: String,
        reason: String,
    },
    /// The client's own configuration (CA files, runtime) is unusable.
    Config {
        reason: String,
    },
    /// A credential file or helper could not be read.
    Credentials {
        reason: String,
    },
    /// The registry's TLS certificate is not trusted; retrying cannot help.
    UntrustedCertificate {
        reason: String,
    },
    /// A redirect from https to plain http: refused, as what was asked over
    /// TLS must not continue in the clear. Both URLs without query or
    /// credentials.
    InsecureRedirect {
        from: String,
        to: String,
    },
    /// A 401 from another origin than the registry's own (a host a redirect
    /// led to): its challenge is not answered, so no credential goes where
    /// the registry did not say.
    ForeignChallenge {
        /// Where the 401 came from (origin and path).
        location: String,
    },
    /// A token endpoint over plain http named by a registry spoken to over
    /// https (allowed only for loopback hosts and insecure registries).
    InsecureRealm {
        realm: String,
    },
    /// The registry redirected more often than the redirect layer follows.
    TooManyRedirects {
        limit: usize,
        /// Where the last redirect pointed (origin and path, no query).
        location: String,
    },
    /// HTTP 404.
    NotFound {
        detail: String,
    },
    /// Any other final non-success status.
    Status {
        status: u16,
        detail: String,
    },
    Unauthorized {
        status: u16,
        detail: String,
        /// What to do about it (which credentials were tried, where).
        hint: String,
    },
    /// The token endpoint failed; never turned into anonymous access.
    Token {
        realm: String,
        reason: String,
    },
    DigestMismatch {
        expected: String,
        /// Who claimed `expected`: a header, the reference, a descriptor.
        expected_from: &'static str,
        actual: String,
    },
    /// A write was answered with a digest that is not the one of the bytes
    /// sent: the registry stored something else (or says it did).
    AnsweredDigest {
        sent: String,
        answered: String,
    },
    TooLarge {
        what: &'static str,
        limit: usize,
    },
    Malformed {
        what: &'static str,
        reason: String,
    },
    MediaTypeMismatch {
        header: String,
        body: String,
    },
    NoMatchingPlatform {
        wanted: String,
        available: String,
    },
    /// Retries ran out (attempts or the total time bound).
    GaveUp {
        attempts: u32,
        elapsed_ms: u128,
        last: String,
    },
    Pagination {
        reason: String,
    },
    /// A platform image an index was to be assembled from is not in the
    /// repository (the context).
    MissingChild {
        digest: String,
    },
    /// The local file a blob was being sent from could not be read, or
    /// the blob was never finished (its writer stopped).
    Source {
        reason: String,
    },
    /// The platform images given cannot make one index (an index among
    /// them, an attestation, two images of one platform, none at all).
    Assembly {
        reason: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `kind` for an operation on `context` (reference or repository) at
    /// `registry`; either may be empty.
    pub(crate) fn new(
        kind: ErrorKind,
        context: impl Into<String>,
        registry: impl Into<String>,
    ) -> Error {
        Error {
            kind,
            context: context.into(),
            registry: registry.into(),
        }
    }

    /// A configuration error of the client or of the code driving it.
    pub fn config(reason: impl Into<String>) -> Error {
        Error::new(
            ErrorKind::Config {
                reason: reason.into(),
            },
            "",
            "",
        )
    }

    pub(crate) fn invalid_reference(input: &str, reason: impl Into<String>) -> Error {
        Error::from(Invalid::reference(input, reason))
    }

    pub(crate) fn credentials(registry: &str, reason: impl Into<String>) -> Error {
        let kind = ErrorKind::Credentials {
            reason: reason.into(),
        };
        Error::new(kind, "", registry)
    }

    pub(crate) fn malformed(context: &str, what: &'static str, reason: impl Into<String>) -> Error {
        let kind = ErrorKind::Malformed {
            what,
            reason: reason.into(),
        };
        Error::new(kind, context, "")
    }

    /// A final non-success response: 404 is [`ErrorKind::NotFound`], any
    /// other status [`ErrorKind::Status`]; the body's summary is kept.
    pub(crate) fn status(context: &str, registry: &str, status: u16, body: &[u8]) -> Error {
        let detail = error_detail(body);
        let kind = match status {
            404 => ErrorKind::NotFound { detail },
            status => ErrorKind::Status { status, detail },
        };
        Error::new(kind, context, registry)
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The reference or repository the failed operation was about ("" when
    /// none, e.g. for configuration errors).
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The registry concerned, when one was.
    pub fn registry(&self) -> Option<&str> {
        Some(self.registry.as_str()).filter(|r| !r.is_empty())
    }

    pub(crate) fn into_kind(self) -> ErrorKind {
        self.kind
    }
}

impl Error {
    /// The message without the context it opens with, for a caller that
    /// names the context itself (`r.io/a:1: not found …` → `not found …`).
    /// Why one attempt of a larger unit failed, for that unit's retry
    /// log: [`Error::without_context`], with a single attempt's "gave up
    /// after 1 attempt(s)" left out (the unit counts its own attempts, and
    /// names the registry before the reason).
    pub(crate) fn attempt_reason(&self) -> String {
        match &self.kind {
            ErrorKind::GaveUp {
                attempts: 1, last, ..
            } => last.clone(),
            _ => self.without_context(),
        }
    }

    pub fn without_context(&self) -> String {
        struct Kind<'a>(&'a Error);
        impl fmt::Display for Kind<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_kind(f)
            }
        }
        Kind(self).to_string()
    }

    fn fmt_kind(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind as K;
        let registry = self.registry().unwrap_or("(unknown)");
        match &self.kind {
            K::InvalidReference { input, reason } => {
                write!(f, "invalid image reference {input:?}: {reason}")
            }
            K::InvalidPlatform { input, reason } => {
                write!(f, "invalid platform {input:?}: {reason}")
            }
            K::Config { reason } => write!(f, "registry client configuration: {reason}"),
            K::Credentials { reason } => write!(f, "credentials for {registry}: {reason}"),
            K::UntrustedCertificate { reason } => write!(
                f,
                "cannot reach registry {registry}: {reason}; if the registry uses a private CA, trust it for \
                 this registry alone (certs.d/{registry}/ca.crt or --ca-cert {registry}=PEM, see \
                 docs/registry.md) or, for every host, pass it with --ca-cert"
            ),
            K::InsecureRedirect { from, to } => write!(
                f,
                "registry {registry} redirected from {from} to {to}: refusing to leave https for plain http"
            ),
            K::ForeignChallenge { location } => write!(
                f,
                "{location}, where registry {registry} redirected, asked for authorization (HTTP 401): \
                 credentials go only to the registry's own origin, so it gets none"
            ),
            K::InsecureRealm { realm } => write!(
                f,
                "registry {registry} is spoken to over https but names the token endpoint {realm} over \
                 plain http: refusing to send credentials there (allowed only for a loopback token \
                 endpoint, or with --insecure-registry {registry})"
            ),
            K::TooManyRedirects { limit, location } => write!(
                f,
                "registry {registry} redirected more than {limit} times (last to {location}); \
                 check the registry's address and its proxy"
            ),
            K::NotFound { detail } => {
                write!(f, "not found in registry {registry} (HTTP 404){detail}")
            }
            K::Status { status, detail } => {
                write!(f, "registry {registry} answered HTTP {status}{detail}")
            }
            K::Unauthorized {
                status,
                detail,
                hint,
            } => write!(
                f,
                "registry {registry} refused access (HTTP {status}){detail}; {hint}"
            ),
            K::Token { realm, reason } => write!(
                f,
                "token endpoint {realm} of registry {registry} failed: {reason}"
            ),
            K::DigestMismatch {
                expected,
                expected_from,
                actual,
            } => write!(
                f,
                "digest mismatch: expected {expected} ({expected_from}), but the bytes received hash to {actual}"
            ),
            K::AnsweredDigest { sent, answered } => write!(
                f,
                "registry {registry} answered Docker-Content-Digest {answered} for bytes that hash to {sent}: \
                 it did not store what was sent"
            ),
            K::TooLarge { what, limit } => write!(
                f,
                "{what} from registry {registry} exceeds the limit of {limit} bytes"
            ),
            K::Malformed { what, reason } => write!(f, "malformed {what}: {reason}"),
            K::MediaTypeMismatch { header, body } => write!(
                f,
                "the registry sent Content-Type {header:?} but the manifest's mediaType is {body:?}"
            ),
            K::NoMatchingPlatform { wanted, available } => write!(
                f,
                "no image for platform {wanted} (the index offers: {available})"
            ),
            K::GaveUp {
                attempts,
                elapsed_ms,
                last,
            } => write!(
                f,
                "gave up after {attempts} attempt(s) in {elapsed_ms} ms: {registry}: {last}"
            ),
            K::Pagination { reason } => write!(f, "tag listing: {reason}"),
            K::MissingChild { digest } => write!(
                f,
                "cannot assemble an index: the platform image {digest} is not in the repository \
                 (push each platform's image by digest first)"
            ),
            K::Assembly { reason } => write!(f, "cannot assemble an index: {reason}"),
            K::Source { reason } => write!(f, "the blob's bytes: {reason}"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind as K;
        // Every message about an operation starts with what it was about.
        let kind_needs_context = !matches!(
            self.kind,
            K::InvalidReference { .. }
                | K::InvalidPlatform { .. }
                | K::Config { .. }
                | K::Credentials { .. }
        );
        if kind_needs_context && !self.context.is_empty() {
            write!(f, "{}: ", self.context)?;
        }
        self.fmt_kind(f)
    }
}

impl std::error::Error for Error {}

/// Talking to a registry fails operationally, whatever the kind; a name
/// that does not parse is the name's usage error, kept by the wrapping.
impl crate::exit::HasStatus for Error {
    fn exit_status(&self) -> crate::exit::Status {
        match self.kind {
            ErrorKind::InvalidReference { .. } | ErrorKind::InvalidPlatform { .. } => {
                crate::exit::Status::Usage
            }
            _ => crate::exit::Status::Failure,
        }
    }
}

/// A name that did not parse, on the way to a request: the same message,
/// and a kind callers can match like any other.
impl From<Invalid> for Error {
    fn from(e: Invalid) -> Error {
        let kind = match e {
            Invalid::Reference { input, reason } => ErrorKind::InvalidReference { input, reason },
            Invalid::Platform { input, reason } => ErrorKind::InvalidPlatform { input, reason },
        };
        Error::new(kind, "", "")
    }
}

/// A short, credential-free summary of a registry error body, prefixed with
/// ": " (empty for an empty body).
pub(crate) fn error_detail(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errs {
        #[serde(default)]
        errors: Vec<E>,
        #[serde(default)]
        details: Option<String>,
        #[serde(default)]
        error: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct E {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let text = match serde_json::from_slice::<Errs>(body) {
        Ok(e) if !e.errors.is_empty() => e
            .errors
            .iter()
            .map(|e| format!("{} {}", e.code, e.message).trim().to_string())
            .collect::<Vec<_>>()
            .join("; "),
        Ok(Errs {
            details: Some(d), ..
        }) => d,
        Ok(Errs { error: Some(d), .. }) => d,
        _ => String::from_utf8_lossy(body).trim().to_string(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_are_summarised() {
        assert_eq!(
            error_detail(
                br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#
            ),
            ": MANIFEST_UNKNOWN manifest unknown"
        );
        assert_eq!(error_detail(b""), "");
        assert_eq!(error_detail(&vec![b'x'; 1000]).len(), 302);
    }

    #[test]
    fn messages_name_context_and_registry() {
        let e = Error::status("r.io/a:1", "r.io", 404, b"");
        assert!(matches!(e.kind(), ErrorKind::NotFound { .. }));
        assert_eq!(
            e.to_string(),
            "r.io/a:1: not found in registry r.io (HTTP 404)"
        );
        assert_eq!(e.without_context(), "not found in registry r.io (HTTP 404)");
        let e = Error::status("r.io/a:1", "r.io", 503, b"busy");
        assert_eq!(
            e.kind(),
            &ErrorKind::Status {
                status: 503,
                detail: ": busy".into()
            }
        );
        assert_eq!(e.registry(), Some("r.io"));
        let bad = "linux".parse::<crate::name::Platform>().unwrap_err();
        let e = Error::from(bad.clone());
        assert!(matches!(e.kind(), ErrorKind::InvalidPlatform { input, .. } if input == "linux"));
        assert_eq!(e.to_string(), bad.to_string(), "wrapping keeps the message");
        let e = Error::config("no runtime");
        assert_eq!(e.to_string(), "registry client configuration: no runtime");
        assert_eq!((e.context(), e.registry()), ("", None));
    }

    #[test]
    fn a_registry_failure_is_operational_and_a_name_that_does_not_parse_is_usage() {
        use crate::exit::{HasStatus, Status};
        let bad = "linux".parse::<crate::name::Platform>().unwrap_err();
        assert_eq!(Error::from(bad).exit_status(), Status::Usage);
        assert_eq!(
            Error::invalid_reference("-v", "no").exit_status(),
            Status::Usage
        );
        for e in [
            Error::status("r.io/a:1", "r.io", 404, b""),
            Error::status("r.io/a:1", "r.io", 503, b""),
            Error::config("no runtime"),
            Error::credentials("r.io", "unreadable"),
            Error::malformed("r.io/a:1", "manifest", "not JSON"),
        ] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
    }
}
