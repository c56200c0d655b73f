//! What this machine has compressed before: uncompressed digest ->
//! compressed digest and size (as an engine's distribution metadata keeps
//! it), and the configs of images it pushed, so releasing an unchanged
//! family compresses nothing and reads no image from the engine.
//!
//! The cache only saves work: compression is deterministic
//! ([`super::compress`]), so a lost or cold cache gives the same digests,
//! later. It lives in `$SUNABA_CACHE_DIR`, else `$XDG_CACHE_HOME/sunaba-images`,
//! else `~/.cache/sunaba-images`:
//! - `layers/<COMPRESSOR>/<diff hex>`: `sha256:<hex> <size>`;
//! - `configs/<hex>`: a config's bytes (checked against the name on read).
//!
//! Every file is written whole (temp file + fsync + rename) and named by
//! content, so two releases writing at once write the same bytes.

use super::compress::{COMPRESSOR, Compressed};
use sha2::Digest as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    dir: PathBuf,
}

fn hex_of(digest: &str) -> Option<&str> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl LayerCache {
    /// The cache of this user (see the module docs for where).
    pub(crate) fn for_user() -> LayerCache {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let dir = env("SUNABA_CACHE_DIR")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("sunaba-images")))
            .or_else(|| env("HOME").map(|h| h.join(".cache/sunaba-images")))
            .unwrap_or_else(|| std::env::temp_dir().join("sunaba-images-cache"));
        LayerCache { dir }
    }

    #[cfg(test)]
    pub(crate) fn at(dir: &Path) -> LayerCache {
        LayerCache {
            dir: dir.to_path_buf(),
        }
    }

    fn layer_path(&self, diff_id: &str) -> Option<PathBuf> {
        Some(
            self.dir
                .join("layers")
                .join(COMPRESSOR)
                .join(hex_of(diff_id)?),
        )
    }

    /// The compressed form of the layer `diff_id`, if this machine made it.
    /// An unreadable entry is a miss (it is written again).
    pub(crate) fn compressed(&self, diff_id: &str) -> Option<Compressed> {
        let text = std::fs::read_to_string(self.layer_path(diff_id)?).ok()?;
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

    /// The config whose digest is `digest`, if kept (and still its bytes).
    pub(crate) fn config(&self, digest: &str) -> Option<Vec<u8>> {
        let hex = hex_of(digest)?;
        let bytes = std::fs::read(self.dir.join("configs").join(hex)).ok()?;
        (hex::encode(sha2::Sha256::digest(&bytes)) == hex).then_some(bytes)
    }

    pub(crate) fn remember_config(&self, bytes: &[u8]) {
        let hex = hex::encode(sha2::Sha256::digest(bytes));
        let _ = write(&self.dir.join("configs").join(hex), bytes);
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), crate::fsutil::FsError> {
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    crate::fsutil::atomic_write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compression_and_a_config_are_remembered_and_a_bad_entry_is_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = LayerCache::at(tmp.path());
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
}
