//! Layer compression at push, owned by this tool so that a compressed
//! digest is a function of the uncompressed layer alone.
//!
//! The engine keeps layers uncompressed, and the manifest digest a pin
//! names covers the *compressed* bytes: whatever compresses decides the
//! digest. An engine's push compresses with its own Go version's gzip, at
//! its own settings, and remembers what it sent in its distribution
//! metadata — another engine, or the same one after a prune, gives other
//! digests for the same image. So the layers are compressed here, with one
//! compressor at fixed settings:
//!
//! - gzip (RFC 1952) by `flate2` on its `rust_backend`, `miniz_oxide`, both
//!   pinned exactly in Cargo.toml (a new deflate implementation may choose
//!   other matches: other bytes, other digests);
//! - level 6, the gzip default; header mtime 0, no file name, no comment,
//!   OS byte 255 ("unknown"), no extra field.
//!
//! [`COMPRESSOR`] names that choice; it is part of every key of the
//! [`LayerCache`], so a change of settings never reads an old answer.

use sha2::Digest as _;
use std::io::{Read, Write};

/// The compressor and its settings, as the layer cache keys them.
pub(crate) const COMPRESSOR: &str = "gzip-6-miniz_oxide-0.9.1";

/// What compressing one layer gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compressed {
    /// `sha256:…` of the uncompressed layer (its diff_id).
    pub diff_id: String,
    /// `sha256:…` of the gzip stream (the blob's digest).
    pub digest: String,
    pub size: u64,
}

/// Counts and hashes what is written (or read) through it.
pub(crate) struct Hashing<W> {
    inner: W,
    hash: sha2::Sha256,
    bytes: u64,
}

impl<W> Hashing<W> {
    pub(crate) fn new(inner: W) -> Hashing<W> {
        Hashing {
            inner,
            hash: sha2::Sha256::new(),
            bytes: 0,
        }
    }

    /// `sha256:…` of what was written, and the writer.
    pub(crate) fn finish(self) -> (String, W) {
        (hex(self.hash), self.inner)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: std::io::Read> std::io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

fn hex(h: sha2::Sha256) -> String {
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Compresses `input` (an uncompressed layer tar) into `output`, hashing
/// both sides as it goes; nothing is held in memory but the buffers.
pub(crate) fn gzip(mut input: impl Read, output: impl Write) -> std::io::Result<Compressed> {
    let out = Hashing {
        inner: output,
        hash: sha2::Sha256::new(),
        bytes: 0,
    };
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(out, flate2::Compression::new(6));
    let mut raw = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        raw.update(&buf[..n]);
        gz.write_all(&buf[..n])?;
    }
    let mut out = gz.finish()?;
    out.flush()?;
    Ok(Compressed {
        diff_id: hex(raw),
        digest: hex(out.hash),
        size: out.bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_layer_gives_the_same_bytes_and_they_decompress_to_it() {
        let layer: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let first = gzip(layer.as_slice(), &mut a).unwrap();
        let second = gzip(layer.as_slice(), &mut b).unwrap();
        assert_eq!(first, second);
        assert_eq!(a, b);
        assert_eq!(first.size, a.len() as u64);
        assert_eq!(
            first.digest,
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&a)))
        );
        assert_eq!(
            first.diff_id,
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&layer)))
        );
        // The header says nothing of when or where: mtime 0, no name, OS 255.
        assert_eq!(&a[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(a.as_slice())
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, layer);
    }

    /// A golden digest: it moves only when the compressor does, and then
    /// every released layer's digest moves with it — bump [`COMPRESSOR`]
    /// (and say so in the release notes) rather than bless this silently.
    #[test]
    fn the_compressor_is_the_pinned_one() {
        let layer = b"sunaba layer\n".repeat(10_000);
        let got = gzip(layer.as_slice(), std::io::sink()).unwrap();
        assert_eq!(
            (got.digest.as_str(), got.size),
            (
                "sha256:9c6cbae1312f10d97582e951f62de7a4c9c741f3bdd56652ecface8236e5936c",
                303
            ),
            "the compressor's output changed"
        );
        let lock = include_str!("../../Cargo.lock");
        let miniz = lock
            .split("\n[[package]]\n")
            .find(|p| p.starts_with("name = \"miniz_oxide\"\n"))
            .and_then(|p| p.lines().nth(1))
            .expect("miniz_oxide in Cargo.lock");
        assert_eq!(
            format!(
                "gzip-6-miniz_oxide-{}",
                miniz.trim_start_matches("version = ").trim_matches('"')
            ),
            COMPRESSOR
        );
    }
}
