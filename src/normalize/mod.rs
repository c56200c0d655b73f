//! Normalising what the engine built, so a pinned digest is a function of
//! the inputs and not of the clock: the image is read as a `docker save`
//! (`podman save --format docker-archive`) stream, every layer this family
//! built is rewritten deterministically, the config is rewritten, and the
//! result is written as a `docker load` archive. The engine keeps layers
//! uncompressed and names an image by its config digest, so after a load
//! the image ID itself is reproducible.
//!
//! Docker 20.10 carries BuildKit 0.8, which predates `SOURCE_DATE_EPOCH`
//! and `rewrite-timestamp`; this does by hand what later BuildKit and
//! go-containerregistry's `mutate.Canonical` do, on any engine.
//!
//! # Streaming, bounded memory
//! Reading ([`read`]) is one pass over the save stream (the walk of
//! [`crate::image::save_stream`]): each layer's raw
//! bytes go to one spill file in a temporary directory while its entries
//! are indexed (path, metadata and where the data sits in the spill, never
//! the data). The save stream lists layers in the engine's order, not the
//! image's, and the order of a layer's entries is the engine's too, so the
//! rewrite ([`write`]) happens after the whole stream is read, from the
//! spill. Memory is the index (a few hundred bytes per entry) plus copy
//! buffers (measured: 38 MiB peak RSS on a 1.5 GB image); disk is the
//! image's size once, in `$TMPDIR` (removed when done). The written layer's
//! size is known from its headers before a byte is written, so the archive
//! streams straight into `load` without a second copy on disk.
//!
//! # Layers
//! The first layers that the image shares with the image it was built FROM
//! (the pinned upstream, or the parent variant, already normalised) are
//! copied byte for byte: the upstream's are a function of its pinned digest
//! already, and rewriting them would cut the image off its base's blobs.
//! Each other layer is written anew:
//! - entries in a fixed order: path by path component, bytewise (a parent
//!   directory before its children; the order Go's `filepath.Walk` and
//!   `tar --sort=name` give); a path the layer holds twice keeps its last
//!   entry (what unpacking would have left);
//! - every mtime clamped to `SOURCE_DATE_EPOCH`; atime, ctime, uname and
//!   gname dropped; PAX `SCHILY.dev`/`ino`/`nlink` (inode numbers) dropped;
//! - kept exactly: uid/gid, mode (setuid, setgid and sticky bits too),
//!   xattrs and every other PAX record, symlink targets, device numbers,
//!   whiteouts (`.wh.<name>`) and opaque-directory markers (`.wh..wh..opq`);
//! - hardlinks: sorting can put a link before the file it names, so the
//!   first name of a group in the new order carries the data and the
//!   others link to it (as `tar --sort=name` does);
//! - one tar format ([`crate::image::layer_tar`]): POSIX ustar headers, a PAX extended header only where
//!   ustar cannot say it (a path or link over 100 bytes, ids or a size too
//!   large, xattrs), with fixed name and fields; then two zero blocks.
//!
//! # What is dropped, and why that is safe
//! Found by diffing two `--no-cache` builds of one commit, entry by entry:
//! - BuildKit's mount-point stubs: `run/secrets` and `run/sunaba` (the
//!   rendered Dockerfiles' `RUN --mount` targets) and the empty files and
//!   directories under them, when no lower layer has the path. BuildKit
//!   0.8 creates them to mount onto and leaves them in the layer with the
//!   build's time; nothing was ever written there (a non-empty file, or
//!   anything a lower layer had, is kept).
//! - files and links under `var/log/` (apt, dpkg and alternatives logs:
//!   build-time history of this build, never read; directories are kept,
//!   as apt and dpkg expect them).
//! - `var/cache/ldconfig/aux-cache` (ldconfig's cache of inode numbers and
//!   times, different on every build; only a speed-up, rebuilt on demand).
//! - files under `var/lib/apt/lists/` and `var/cache/apt/` (the package
//!   lists and caches of the mirror as the build saw it; `apt-get update`
//!   fetches them again). `sunaba_cleanup` removes all of these already;
//!   this is the net under a fragment that forgets.
//!
//! # Config
//! `created` and every history `created` = `SOURCE_DATE_EPOCH`;
//! `container`, `container_config`, `docker_version` and `hostname`
//! (also `config.Hostname`) removed; `rootfs.diff_ids` recomputed; every
//! object's keys sorted, no whitespace.
//!
//! # The package record
//! The Debian packages each fragment's layer installed are read from the
//! layers' dpkg status and set as the `dev.sunaba.packages` label
//! ([`packages`]): the one build input a mirror can move under a commit,
//! recorded where a rebuild's verdict can name it.
//!
//! # Bad input
//! A truncated or corrupt stream (a short layer, a bad header, a layer
//! whose bytes do not hash to its diff_id), a path that is absolute or has
//! a `..` component, a sparse entry or one claiming more bytes than its
//! layer holds (a tar bomb), a PAX or GNU long-name header over its cap
//! (refused before the tar crate reads it into memory: see
//! [`crate::image::entries`]) are each an error naming the image and the
//! layer; nothing is written to the engine then (see [`round_trip`]).

mod archive;
mod config;
mod layer;
mod packages;
mod read;
mod relabel;
pub(crate) mod round_trip;

pub(crate) use read::read;
pub(crate) use relabel::relabel;
use round_trip::load_and_verify;
pub(crate) use round_trip::normalize_image;

#[derive(Debug, thiserror::Error)]
pub(crate) enum NormalizeError {
    #[error("{image}: the save stream is truncated: {detail}")]
    Truncated { image: String, detail: String },
    #[error("{image}: the save stream is corrupt: {detail}")]
    Corrupt { image: String, detail: String },
    #[error("{image}: layer {layer}: the tar is corrupt: {detail}")]
    CorruptLayer {
        image: String,
        layer: String,
        detail: String,
    },
    #[error("{image}: layer {layer}: entry `{path}` {problem}")]
    BadPath {
        image: String,
        layer: String,
        path: String,
        problem: &'static str,
    },
    #[error(
        "{image}: layer {layer}: entry `{path}` claims {claimed} bytes but only {left} bytes of \
         the layer are left (a tar bomb, or a truncated layer)"
    )]
    TarBomb {
        image: String,
        layer: String,
        path: String,
        claimed: u64,
        left: u64,
    },
    #[error(
        "{image}: layer {layer}: entry `{path}` is sparse; engines never write sparse entries, \
         and expanding one could turn a small layer into a huge one"
    )]
    Sparse {
        image: String,
        layer: String,
        path: String,
    },
    #[error("{image}: layer {layer}: entry `{path}` has an unsupported type ({kind})")]
    EntryType {
        image: String,
        layer: String,
        path: String,
        kind: String,
    },
    /// A PAX or GNU long-name header over its cap (the tar crate would
    /// read it whole into memory).
    #[error("{image}: {place}: {source}")]
    Oversized {
        image: String,
        /// `layer NAME` or `the save stream`.
        place: String,
        source: Box<crate::image::entries::Oversized>,
    },
    #[error("{image}: {context}: {source}")]
    Io {
        image: String,
        context: String,
        source: std::io::Error,
    },
    #[error("{image}: {source}")]
    Engine {
        image: String,
        source: crate::engine::EngineError,
    },
}

/// How to normalise one image.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// The commit time: every mtime is clamped to it, and it is `created`.
    pub source_date_epoch: u64,
    /// The diff_ids of the image this one was built FROM: the layers the
    /// image starts with that match them are copied byte for byte.
    pub base_diff_ids: Vec<String>,
    /// Tags the loaded image gets (`RepoTags` of the written archive).
    pub tags: Vec<String>,
    /// The fragments' script file names → fragment names, to attribute the
    /// packages a layer installed ([`packages`]).
    pub fragment_scripts: std::collections::BTreeMap<String, String>,
    /// The FROM image's layers are named in the archive, not sent: the
    /// engine has them (the image was just saved from it) and looks each up
    /// by its chain ID before it opens the file (Docker). Set by
    /// [`normalize_image`] from the engine.
    pub kept_by_name: bool,
    /// Keep a copy of each rewritten layer in the process's layer store
    /// ([`crate::image::layer_store`]): the image is a composition's parent
    /// or member, whose layers the composer reads from there.
    pub keep_layers: bool,
}

/// What normalising one image did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    pub layers: Vec<LayerReport>,
    /// `sha256:…` of the written config: the image ID after a load.
    pub config_digest: String,
    /// Bytes of the written archive.
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LayerReport {
    pub diff_id_before: String,
    pub diff_id_after: String,
    /// Copied byte for byte (a layer of the FROM image).
    pub kept: bool,
    pub entries: usize,
    /// Paths dropped, with the rule that dropped each.
    pub dropped: Vec<(String, &'static str)>,
}

/// Reads a save stream and writes the normalised `docker load` archive:
/// [`read`] then [`Staged::write`].
#[cfg(test)]
pub(crate) fn normalize(
    image: &str,
    input: impl std::io::Read,
    output: impl std::io::Write,
    opts: &Options,
    spill_dir: &std::path::Path,
) -> Result<Report, NormalizeError> {
    read(image, input, spill_dir)?.write(output, opts)
}

#[cfg(test)]
pub(crate) mod tests;
