//! Talking to OCI registries: resolving tags to digests, listing tags,
//! reading image configs, verifying pinned manifests, and the writes a
//! release needs (blob uploads and mounts, manifest PUTs).
//!
//! # Layout
//!
//! - `transport/`: the layers every request goes through, one file each —
//!   retry, authorization (challenge parsing, bearer tokens), scheme,
//!   redirects and size caps;
//! - `credentials.rs`: where a registry's credentials come from (docker and
//!   podman files, credential helpers), beside the transport that uses them
//!   as go-containerregistry's `authn` is;
//! - `client.rs`: composes them per registry (connection pool, concurrency
//!   limit, state);
//! - `manifest.rs`, `index.rs`, `config.rs`, `resolve.rs`, `tags.rs`: what
//!   is asked of a registry, on top of the client;
//! - `referrers.rs`: OCI 1.1 referrers (the API, the fallback tag);
//! - `in_order.rs`: independent requests in flight together, answered in
//!   the order they were asked;
//! - `blob.rs`, `push.rs`: what is written — blobs (HEAD first, upload,
//!   cross-repository mount; reads resumed with `Range`) and manifests
//!   (exact bytes, digest checked);
//! - `upload.rs`: a blob's bytes into upload sessions — one PUT, or PATCHes
//!   for a blob over a chunk, resumed where the registry says it stands;
//! - `assemble.rs`: an index from platform images already in a repository,
//!   byte-identical on re-assembly;
//! - `certs.rs`: which CAs vouch for which registry (`certs.d`,
//!   `--ca-cert HOST=PEM`, the global `--ca-cert PEM`);
//! - `host.rs`: where a registry's API is served (Docker Hub's is not
//!   `docker.io`) and whether it may be reached over plain http;
//! - the names involved ([`Reference`], [`Repository`], [`Digest`],
//!   [`Platform`]) live in [`crate::name`], which knows no HTTP; they are
//!   re-exported here, and a name that does not parse becomes
//!   [`ErrorKind::InvalidReference`] or [`ErrorKind::InvalidPlatform`];
//! - `error.rs`: the one [`Error`], whose [`Error::kind`] callers match.
//!
//! # Why `reqwest` and not `oci-client`
//!
//! `oci-client` is not a dependency. It is a fine puller, but a resolver
//! that pinning can trust needs things it does not offer, so the HTTP side is
//! written on `reqwest` here and only the data model comes from `oci-spec`
//! (`ImageIndex`, `ImageManifest`, `ImageConfiguration`):
//!
//! - tag listing in `oci-client` does not follow `Link: <…>; rel="next"`, so it
//!   silently returns the first page of a large repository ([`Client::list_tags`]);
//! - it has no retries, `Retry-After` or total time bound ([`RetryPolicy`]);
//! - it reads no docker/podman credential files or helpers ([`credentials`]);
//! - it maps token-endpoint failures to anonymous access, hiding why a
//!   private image "does not exist" ([`ErrorKind::Token`]);
//! - it offers no HEAD-first resolution with a GET fallback, no check of
//!   `Docker-Content-Digest` against the received bytes with the header's
//!   algorithm, and no size caps ([`Client::resolve`]).
//!
//! Every request to one registry shares a connection pool (HTTP keep-alive)
//! and a per-registry concurrency limit; tokens are cached per registry and
//! scope until shortly before they expire.

mod assemble;
mod blob;
mod certs;
mod client;
mod config;
pub mod credentials;
mod error;
#[cfg(test)]
pub(crate) mod fake;
mod host;
mod in_order;
mod index;
mod manifest;
#[cfg(test)]
mod proptests;
mod push;
mod referrers;
mod resolve;
mod tags;
mod transport;
mod upload;

pub use crate::name::{Algorithm, Digest, Platform, Reference, Repository, best_match};
pub use assemble::{
    AssembleError, AssembledIndex, Child, ChildRef, IndexReport, PlatformEntry, assemble,
};
pub use blob::{BlobCopy, MAX_COPIED_BLOB};
pub use certs::{CaCert, CertsDirs};
pub use client::{Client, ClientBuilder};
pub use config::{ImageConfig, config_descriptor};
pub use credentials::CredentialStore;
pub use error::{Error, ErrorKind, Result};
pub use host::{api_host, is_loopback};
pub(crate) use in_order::{REQUESTS, in_order};
pub(crate) use index::Index;
pub use manifest::{Manifest, ManifestCheck};
pub use referrers::{fallback_reference, fallback_tag};
pub use resolve::{ResolveOptions, Resolved};
/// The retry loop, for the other HTTP clients (the package indexes).
pub(crate) use transport::Failure;
pub(crate) use transport::redirect::redacted as redacted_url;
pub use transport::retry::RetryPolicy;
pub(crate) use transport::retry::{Exhausted, exchange_timeout, retry_after, retryable};
pub use transport::{Clock, Sleep, Sleeper};
pub use upload::Growing;
pub use upload::UPLOAD_CHUNK;

/// OCI and Docker manifest media types.
pub mod media_type {
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
    /// The empty descriptor's type (OCI image-spec 1.1): an artifact's config.
    pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";

    pub fn is_index(mt: &str) -> bool {
        mt == OCI_INDEX || mt == DOCKER_LIST
    }
    pub fn is_manifest(mt: &str) -> bool {
        mt == OCI_MANIFEST || mt == DOCKER_MANIFEST
    }
}
