//! Layers this process wrote, by diff_id: the normaliser keeps a copy of
//! each layer it rewrites for an image that a composition in the same run
//! takes layers from (a union variant's parent and members), in the
//! process's scratch directory. The composer then reads those layers from
//! here instead of from the engine's `save` of the parent and every member
//! (8.3 s for `full`'s on the dev engine, most of its assembly). Any layer
//! or config it lacks, and it reads the save as before.
//!
//! A copy is written as its layer is written into the normaliser's load
//! archive and hashed with it, so the name it is filed under is the digest
//! of exactly its bytes. Keeping is best effort: a copy that cannot be made
//! (a full disk) is dropped, the normalisation goes on, and the composer
//! falls back to the save. The files go with the scratch directory.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

static LAYERS: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());

/// The file holding the layer `diff_id`, if this process kept it.
pub(crate) fn get(diff_id: &str) -> Option<PathBuf> {
    let layers = LAYERS.lock().unwrap_or_else(|e| e.into_inner());
    layers.get(diff_id).filter(|p| p.is_file()).cloned()
}

/// A layer being copied while it is written elsewhere: [`LayerCopy::writer`]
/// sends every byte to `out` and to the copy, [`LayerCopy::keep`] files it.
pub(crate) struct LayerCopy {
    file: Option<tempfile::NamedTempFile>,
}

impl LayerCopy {
    /// A new copy in the scratch directory; one that cannot be made copies
    /// nothing.
    pub(crate) fn start() -> LayerCopy {
        let file = crate::scratch::dir().ok().and_then(|dir| {
            let dir = dir.join("layers");
            std::fs::create_dir_all(&dir).ok()?;
            tempfile::Builder::new()
                .prefix("layer-")
                .tempfile_in(dir)
                .ok()
        });
        LayerCopy { file }
    }

    /// Writes to `out`, and to the copy while the copy works.
    pub(crate) fn writer<'a>(&'a mut self, out: &'a mut dyn Write) -> Both<'a> {
        Both {
            out,
            copy: self
                .file
                .as_mut()
                .map(|f| std::io::BufWriter::with_capacity(1 << 20, f.as_file_mut())),
            failed: false,
        }
    }

    /// Files the copy as the layer `diff_id` (the digest of what was
    /// written through the writer), unless copying failed.
    pub(crate) fn keep(self, diff_id: &str, copied_whole: bool) {
        let Some(file) = self.file.filter(|_| copied_whole) else {
            return;
        };
        let Some(dir) = file.path().parent().map(std::path::Path::to_path_buf) else {
            return;
        };
        let path = dir.join(diff_id.trim_start_matches("sha256:"));
        if file.persist(&path).is_ok() {
            let mut layers = LAYERS.lock().unwrap_or_else(|e| e.into_inner());
            layers.insert(diff_id.to_string(), path);
        }
    }
}

/// Both destinations of a copied layer. A failing copy stops copying; only
/// `out`'s errors are the writer's.
pub(crate) struct Both<'a> {
    out: &'a mut dyn Write,
    copy: Option<std::io::BufWriter<&'a mut std::fs::File>>,
    failed: bool,
}

impl Both<'_> {
    /// Whether the copy holds everything written (flushed).
    pub(crate) fn finish(mut self) -> bool {
        match self.copy.take() {
            Some(mut c) => !self.failed && c.flush().is_ok(),
            None => false,
        }
    }
}

impl Write for Both<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        if let Some(c) = &mut self.copy
            && c.write_all(&buf[..n]).is_err()
        {
            self.copy = None;
            self.failed = true;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest as _;

    #[test]
    fn a_copied_layer_is_found_by_the_digest_of_its_bytes() {
        let bytes = b"layer-store-test: a layer's bytes".repeat(1000);
        let diff_id = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        let mut out = Vec::new();
        let mut copy = LayerCopy::start();
        let mut w = copy.writer(&mut out);
        w.write_all(&bytes[..10]).unwrap();
        w.write_all(&bytes[10..]).unwrap();
        let whole = w.finish();
        assert!(whole);
        copy.keep(&diff_id, whole);
        assert_eq!(out, bytes, "the archive gets every byte");
        let path = get(&diff_id).expect("kept");
        assert_eq!(std::fs::read(path).unwrap(), bytes);
        assert!(get("sha256:0000").is_none());
        // A copy that did not get everything is never filed.
        let mut copy = LayerCopy::start();
        let _ = copy.writer(&mut Vec::new()).finish();
        copy.keep("sha256:partial", false);
        assert!(get("sha256:partial").is_none());
    }
}
