//! Reading OCI registries: resolving tags to digests, listing tags, reading
//! image configs and verifying pinned manifests.
//!
//! # Why mostly `reqwest` and not `oci-client`
//!
//! `oci-client` is a fine puller, but a resolver that pinning can trust needs
//! things it does not offer, so the HTTP side is written on `reqwest` here and
//! only the data model comes from `oci-spec` (`ImageIndex`, `ImageManifest`,
//! `ImageConfiguration`):
//!
//! - tag listing in `oci-client` does not follow `Link: <…>; rel="next"`, so it
//!   silently returns the first page of a large repository ([`Client::list_tags`]);
//! - it has no retries, `Retry-After` or total time bound ([`RetryPolicy`]);
//! - it reads no docker/podman credential files or helpers ([`auth`]);
//! - it maps token-endpoint failures to anonymous access, hiding why a
//!   private image "does not exist" ([`Error::Token`]);
//! - it offers no HEAD-first resolution with a GET fallback, no check of
//!   `Docker-Content-Digest` against the received bytes with the header's
//!   algorithm, and no size caps ([`Client::resolve`]).
//!
//! Every request to one registry shares a connection pool (HTTP keep-alive)
//! and a per-registry concurrency limit; tokens are cached per registry and
//! scope until shortly before they expire.

pub mod auth;
mod client;
mod digest;
mod platform;
mod reference;
mod resolve;
mod tags;

pub use client::{Client, ClientBuilder, RetryPolicy};
pub use digest::{Algorithm, Digest};
pub use platform::Platform;
pub use reference::{Reference, Repository, api_host, is_loopback};
pub use resolve::{ImageConfig, ManifestCheck, ResolveOptions, Resolved};

/// OCI and Docker manifest media types.
pub mod media_type {
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

    pub fn is_index(mt: &str) -> bool {
        mt == OCI_INDEX || mt == DOCKER_LIST
    }
    pub fn is_manifest(mt: &str) -> bool {
        mt == OCI_MANIFEST || mt == DOCKER_MANIFEST
    }
}

/// Errors of the registry module. Messages name the reference or registry
/// and the HTTP status involved; they never contain credentials or tokens.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid image reference {input:?}: {reason}")]
    InvalidReference { input: String, reason: String },

    #[error("invalid platform {input:?}: {reason}")]
    InvalidPlatform { input: String, reason: String },

    #[error("registry client configuration: {reason}")]
    Config { reason: String },

    #[error("{context}: cannot reach registry {registry}: {reason}")]
    Connect {
        context: String,
        registry: String,
        reason: String,
    },

    #[error("{context}: not found in registry {registry} (HTTP 404){detail}")]
    NotFound {
        context: String,
        registry: String,
        detail: String,
    },

    #[error("{context}: registry {registry} answered HTTP {status}{detail}")]
    Status {
        context: String,
        registry: String,
        status: u16,
        detail: String,
    },

    #[error("{context}: registry {registry} refused access (HTTP {status}){detail}; {hint}")]
    Unauthorized {
        context: String,
        registry: String,
        status: u16,
        detail: String,
        hint: String,
    },

    #[error("{context}: token endpoint {realm} of registry {registry} failed: {reason}")]
    Token {
        context: String,
        registry: String,
        realm: String,
        reason: String,
    },

    #[error(
        "{context}: digest mismatch: expected {expected} ({expected_from}), but the bytes received hash to {actual}"
    )]
    DigestMismatch {
        context: String,
        expected: String,
        expected_from: &'static str,
        actual: String,
    },

    #[error("{context}: {what} from registry {registry} exceeds the limit of {limit} bytes")]
    TooLarge {
        context: String,
        registry: String,
        what: &'static str,
        limit: usize,
    },

    #[error("{context}: malformed {what}: {reason}")]
    Malformed {
        context: String,
        what: &'static str,
        reason: String,
    },

    #[error(
        "{context}: the registry sent Content-Type {header:?} but the manifest's mediaType is {body:?}"
    )]
    MediaTypeMismatch {
        context: String,
        header: String,
        body: String,
    },

    #[error("{context}: no image for platform {wanted} (the index offers: {available})")]
    NoMatchingPlatform {
        context: String,
        wanted: String,
        available: String,
    },

    #[error("{context}: gave up after {attempts} attempt(s) in {elapsed_ms} ms: {last}")]
    GaveUp {
        context: String,
        attempts: u32,
        elapsed_ms: u128,
        last: String,
    },

    #[error("{context}: tag listing: {reason}")]
    Pagination { context: String, reason: String },

    #[error("credentials for {registry}: {reason}")]
    Credentials { registry: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
