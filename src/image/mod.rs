//! An image as the engine and the registry hold it: tars of layers, the
//! save stream that carries them, and each layer's two names (its diff_id,
//! the digest of the tar; its compressed digest, the blob's). Every stage
//! that reads or writes an image by its layers — the normaliser, the
//! release's push, the SBOM, the rebuild's comparison — works on this one
//! model, so the model is here and the stages' policy stays with them.
//!
//! - [`entries`]: a tar read from outside, walked with every header the
//!   tar crate would read into memory bounded;
//! - [`save_stream`]: the one walk over a `docker save` stream;
//! - [`files`]: an image's files read from its layers as the runtime
//!   applies them (whiteouts, opaque directories, links), without
//!   unpacking (the SBOM's reading, from an engine or a registry);
//! - [`compress`]: a layer compressed with the one pinned compressor, so
//!   its compressed digest is a function of the layer alone;
//! - [`config`]: an image config's layers (`rootfs.diff_ids`), the history
//!   step that made each, and labels set in place;
//! - [`layer_cache`]: what this machine compressed before (diff_id →
//!   compressed digest), the configs it pushed and notes kept by blob, so
//!   an unchanged layer is neither read nor compressed again;
//! - [`layer_store`]: the layers this process rewrote for a composition's
//!   parent and members, by diff_id (the composer reads them instead of
//!   saving those images again);
//! - [`layer_tar`]: a layer's entries as an index (data left where it
//!   sits) and the one tar format they are written in;
//! - [`load_archive`]: the `docker load` archive an image goes back into
//!   the engine as (the normaliser's rewrite, the relabeller's labels),
//!   and the configs this process wrote into one;
//! - [`local`]: a local image as a push would put it — one pass over its
//!   `save` giving each layer's diff_id and compressed form, its config
//!   and its schema-2 manifest (the release pushes it, the rebuild holds
//!   a pin to it);
//! - [`stamp`]: the version label set on an image without touching its
//!   layers (the release stages it, the rebuild computes its digest);
//! - [`dpkg`]: the Debian packages an image's dpkg status lists (read by
//!   the normaliser's package record and by the SBOM alike).
//!
//! Tests build their layers and save streams with `fixtures` (test code
//! only), whichever stage they test.

pub(crate) mod compress;
pub(crate) mod config;
pub(crate) mod dpkg;
pub(crate) mod entries;
pub(crate) mod files;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod layer_cache;
pub(crate) mod layer_store;
pub(crate) mod layer_tar;
pub(crate) mod load_archive;
pub(crate) mod local;
pub(crate) mod save_stream;
pub(crate) mod stamp;
