//! What this machine has compressed before: uncompressed digest ->
//! compressed digest and size (as an engine's distribution metadata keeps
//! it), and the configs of images it pushed, so releasing an unchanged
//! family compresses nothing and reads no image from the engine.
//!
//! It is part of the image model, below every stage that pushes or reads
//! layers (the release's push, the rebuild's local manifest, the SBOM's
//! notes), so none of them reaches into another for it.
//!
//! The cache only saves work: compression is deterministic
//! ([`crate::image::compress`]), so a lost or cold cache gives the same digests,
//! later. It lives in `$SUNABA_CACHE_DIR`, else `$XDG_CACHE_HOME/sunaba-images`,
//! else `~/.cache/sunaba-images`:
//! - `layers/<COMPRESSOR>/<diff hex>`: `sha256:<hex> <size>`;
//! - `configs/<hex>`: a config's bytes (checked against the name on read);
//! - `layer-files/<blob hex>`: what a compressed layer blob holds at the
//!   SBOM's wanted paths (the SBOM's reader writes and reads these bytes,
//!   `attest::registry_image::LayerNotes`), so the attach step reads no
//!   blob the release (or one before it) read;
//! - `locations/<blob hex>`: the repositories this machine put that blob
//!   in, latest first, so a push to a new repository of the same registry
//!   mounts it rather than sending it.
//!
//! Every file is written whole (temp file + fsync + rename) and, but for
//! `locations/`, named by content, so two releases writing at once write
//! the same bytes (two writing one location entry at once: the last one
//! wins, and a location lost costs one upload).
//!
//! A layer entry is trusted: a push puts its digest in the manifest when
//! the repository has a blob of that digest and size, without reading the
//! blob (that is the point of the cache). So the cache must be this
//! user's alone: its directory is made 0700, and one owned by another user
//! or writable by group or others is refused (as ssh refuses such a key);
//! an entry file that is not this user's is a miss. There is no shared
//! fallback (no `/tmp` path): without a place of its own it is an error.

use crate::image::compress::{COMPRESSOR, Compressed};
use sha2::Digest as _;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    #[error(
        "no place for the layer cache: none of SUNABA_CACHE_DIR, XDG_CACHE_HOME and HOME is \
         set; set SUNABA_CACHE_DIR to a directory of your own"
    )]
    NoPlace,
    #[error("cannot create the layer cache {}: {source}", .dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("the layer cache {} is not a directory", .dir.display())]
    NotADirectory { dir: PathBuf },
    #[error(
        "refusing the layer cache {}: it is owned by uid {owner}, not by this user (uid {me}), \
         and its entries decide which blobs a pushed manifest names; point SUNABA_CACHE_DIR at \
         a directory of your own (or remove it, or `chown {me} {}` if it is yours)",
        .dir.display(), .dir.display()
    )]
    NotOwned { dir: PathBuf, owner: u32, me: u32 },
    #[error(
        "refusing the layer cache {}: mode {mode:04o} lets group or others write to it, and its \
         entries decide which blobs a pushed manifest names; `chmod 700 {}`",
        .dir.display(), .dir.display()
    )]
    Writable { dir: PathBuf, mode: u32 },
}

#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    dir: PathBuf,
    /// This user: an entry file owned by another is not served.
    uid: u32,
}

fn hex_of(digest: &str) -> Option<&str> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Where this user's cache lives, from the environment `env` (see the
/// module docs); `None` when nothing says.
fn place(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("SUNABA_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("sunaba-images")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/sunaba-images")))
}

impl LayerCache {
    /// The cache of this user (see the module docs for where), made if
    /// missing; refused when another user could have written it.
    pub(crate) fn for_user() -> Result<LayerCache, CacheError> {
        let dir = place(|k| std::env::var_os(k)).ok_or(CacheError::NoPlace)?;
        LayerCache::open(&dir)
    }

    /// The cache in `dir`: made 0700 if missing (its missing parents too);
    /// an existing one must be a directory owned by this user that group
    /// and others cannot write to.
    pub(crate) fn open(dir: &Path) -> Result<LayerCache, CacheError> {
        let err = |source| CacheError::Create {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(err)?;
        // Followed if it is a symlink: what counts is the directory the
        // entries are read from.
        let meta = std::fs::metadata(dir).map_err(err)?;
        let dir = dir.to_path_buf();
        if !meta.is_dir() {
            return Err(CacheError::NotADirectory { dir });
        }
        let me = crate::scratch::effective_uid();
        if meta.uid() != me {
            return Err(CacheError::NotOwned {
                dir,
                owner: meta.uid(),
                me,
            });
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(CacheError::Writable { dir, mode });
        }
        Ok(LayerCache { dir, uid: me })
    }

    fn layer_path(&self, diff_id: &str) -> Option<PathBuf> {
        Some(
            self.dir
                .join("layers")
                .join(COMPRESSOR)
                .join(hex_of(diff_id)?),
        )
    }

    /// The bytes of the entry at `path`, if it is a file of this user's
    /// (one planted by another, through a directory made before the
    /// cache's own was checked, is a miss) and at most `limit` bytes.
    fn read_entry(&self, path: &Path, limit: u64) -> Option<Vec<u8>> {
        let file = std::fs::File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.uid() != self.uid || meta.len() > limit {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// The compressed form of the layer `diff_id`, if this machine made it.
    /// An unreadable entry is a miss (it is written again).
    pub(crate) fn compressed(&self, diff_id: &str) -> Option<Compressed> {
        let bytes = self.read_entry(&self.layer_path(diff_id)?, 1024)?;
        let text = String::from_utf8(bytes).ok()?;
        let (digest, size) = text.trim().split_once(' ')?;
        hex_of(digest)?;
        Some(Compressed {
            diff_id: diff_id.to_string(),
            digest: digest.to_string(),
            size: size.parse().ok()?,
        })
    }

    /// Remembers a compression. A cache that cannot be written is no
    /// error: the next release compresses again, to the same digest.
    pub(crate) fn remember(&self, c: &Compressed) {
        if let Some(path) = self.layer_path(&c.diff_id) {
            let _ = write(&path, format!("{} {}\n", c.digest, c.size).as_bytes());
        }
    }

    /// The repositories (`registry/path`) this machine has put the blob
    /// `digest` in, the latest first: where a push to another repository
    /// of the same registry can mount it from instead of sending it.
    pub(crate) fn locations(&self, digest: &str) -> Vec<String> {
        let Some(path) = self.location_path(digest) else {
            return Vec::new();
        };
        let bytes = self.read_entry(&path, 64 << 10).unwrap_or_default();
        String::from_utf8(bytes)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Remembers that the blob `digest` is in `repository` (the latest
    /// [`MAX_LOCATIONS`] are kept). Not written, it is no error.
    pub(crate) fn remember_location(&self, digest: &str, repository: &str) {
        let Some(path) = self.location_path(digest) else {
            return;
        };
        let mut all = self.locations(digest);
        if all.first().map(String::as_str) == Some(repository) {
            return;
        }
        all.retain(|r| r != repository);
        all.insert(0, repository.to_string());
        all.truncate(MAX_LOCATIONS);
        let _ = write(&path, format!("{}\n", all.join("\n")).as_bytes());
    }

    fn location_path(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.join("locations").join(hex_of(digest)?))
    }

    /// The config whose digest is `digest`, if kept (and still its bytes).
    pub(crate) fn config(&self, digest: &str) -> Option<Vec<u8>> {
        let hex = hex_of(digest)?;
        let bytes = self.read_entry(&self.dir.join("configs").join(hex), 64 << 20)?;
        (hex::encode(sha2::Sha256::digest(&bytes)) == hex).then_some(bytes)
    }

    pub(crate) fn remember_config(&self, bytes: &[u8]) {
        let hex = hex::encode(sha2::Sha256::digest(bytes));
        let _ = write(&self.dir.join("configs").join(hex), bytes);
    }
}

/// How many repositories a blob's location entry keeps.
const MAX_LOCATIONS: usize = 8;

/// The largest layer-files entry read: three wanted files of 64 MB at most
/// (`image::files`' cap), in base64, and the paths links lead to.
const MAX_LAYER_FILES: u64 = 384 << 20;

/// The layer-files entries: bytes the SBOM's reader keeps by a layer
/// blob's digest (`attest::registry_image` says what they mean). One is
/// trusted as a layer entry is (see the module docs): it decides what the
/// SBOM a release signs lists.
impl LayerCache {
    /// The layer-files entry of `blob`, if one is kept (and this user's).
    pub(crate) fn layer_files(&self, blob: &crate::registry::Digest) -> Option<Vec<u8>> {
        self.read_entry(&self.layer_files_path(blob)?, MAX_LAYER_FILES)
    }

    /// Whether a layer-files entry of `blob` is kept (without reading it).
    pub(crate) fn has_layer_files(&self, blob: &crate::registry::Digest) -> bool {
        (self.layer_files_path(blob))
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.is_file() && m.uid() == self.uid)
    }

    /// Keeps `bytes` as the layer-files entry of `blob`. Not written, it is
    /// no error: the blob is read again next time.
    pub(crate) fn remember_layer_files(&self, blob: &crate::registry::Digest, bytes: &[u8]) {
        if let Some(path) = self.layer_files_path(blob) {
            let _ = write(&path, bytes);
        }
    }

    fn layer_files_path(&self, blob: &crate::registry::Digest) -> Option<PathBuf> {
        let blob = blob.to_string();
        Some(self.dir.join("layer-files").join(hex_of(&blob)?))
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), crate::fsutil::FsError> {
    if let Some(parent) = path.parent() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent);
    }
    crate::fsutil::atomic_write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compression_and_a_config_are_remembered_and_a_bad_entry_is_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = LayerCache::open(tmp.path()).unwrap();
        let diff_id = format!("sha256:{}", "a".repeat(64));
        assert_eq!(cache.compressed(&diff_id), None);
        let c = Compressed {
            diff_id: diff_id.clone(),
            digest: format!("sha256:{}", "b".repeat(64)),
            size: 42,
        };
        cache.remember(&c);
        assert_eq!(cache.compressed(&diff_id), Some(c));
        assert!(
            tmp.path()
                .join("layers")
                .join(COMPRESSOR)
                .join("a".repeat(64))
                .is_file()
        );

        let config = br#"{"os":"linux"}"#;
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(config)));
        assert_eq!(cache.config(&digest), None);
        cache.remember_config(config);
        assert_eq!(cache.config(&digest).as_deref(), Some(&config[..]));
        // A config file whose bytes are not its name's is not served.
        std::fs::write(tmp.path().join("configs").join(&digest[7..]), b"{}").unwrap();
        assert_eq!(cache.config(&digest), None);
        // Nor a garbled layer entry, nor a name that is not a digest.
        std::fs::write(cache.layer_path(&diff_id).unwrap(), "nonsense").unwrap();
        assert_eq!(cache.compressed(&diff_id), None);
        assert_eq!(cache.compressed("sha256:../../etc"), None);
    }

    #[test]
    fn a_new_cache_is_made_0700_and_found_where_the_environment_says() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("home/.cache/sunaba-images");
        LayerCache::open(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            place(env(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")])),
            Some(PathBuf::from("/x/sunaba-images"))
        );
        assert_eq!(
            place(env(&[("HOME", "/h"), ("SUNABA_CACHE_DIR", "/c")])),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(
            place(env(&[("HOME", "/h"), ("XDG_CACHE_HOME", "")])),
            Some(PathBuf::from("/h/.cache/sunaba-images"))
        );
        // Never a shared fallback such as /tmp/sunaba-images-cache.
        assert_eq!(place(env(&[])), None);
    }

    #[test]
    fn a_cache_others_can_write_is_refused_naming_the_mode_and_the_fix() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o775, 0o757, 0o1777] {
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let err = LayerCache::open(tmp.path()).unwrap_err();
            assert!(matches!(err, CacheError::Writable { .. }), "{err:?}");
            let msg = err.to_string();
            let dir = tmp.path().display();
            assert!(
                msg.starts_with(&format!("refusing the layer cache {dir}: mode {mode:04o} "))
                    && msg.ends_with(&format!("`chmod 700 {dir}`")),
                "{msg}"
            );
        }
        // Readable by others is no trust problem (the entries are digests).
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        LayerCache::open(tmp.path()).unwrap();
    }

    /// Root only (CI runs as root): a directory given to `nobody`.
    #[test]
    fn a_cache_owned_by_another_user_is_refused_and_its_entries_never_read() {
        const NOBODY: u32 = 65534;
        if crate::scratch::effective_uid() != 0 {
            // Never a silent pass where it must run.
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipped: chown to another user needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        let planted = LayerCache::open(&dir).unwrap();
        let diff_id = format!("sha256:{}", "a".repeat(64));
        planted.remember(&Compressed {
            diff_id: diff_id.clone(),
            digest: format!("sha256:{}", "b".repeat(64)),
            size: 42,
        });
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        let err = LayerCache::open(&dir).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                CacheError::NotOwned {
                    owner: NOBODY,
                    me: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            msg.starts_with(&format!(
                "refusing the layer cache {}: it is owned by uid {NOBODY}, not by this user (uid 0)",
                dir.display()
            )) && msg.contains("SUNABA_CACHE_DIR"),
            "{msg}"
        );

        // An entry file another user made (through a subdirectory that was
        // open to them before) is a miss in a cache that is ours.
        std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        let cache = LayerCache::open(&dir).unwrap();
        assert!(cache.compressed(&diff_id).is_some());
        let entry = cache.layer_path(&diff_id).unwrap();
        std::os::unix::fs::chown(&entry, Some(NOBODY), None).unwrap();
        assert_eq!(cache.compressed(&diff_id), None);
    }
}
