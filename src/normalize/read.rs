//! The one pass over the save stream: small files (manifest, config) in
//! memory, every layer's raw bytes to the spill file while its entries are
//! indexed and checked.

use super::NormalizeError;
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use tar::EntryType;

/// Files of the save stream other than layers (manifest.json, the config,
/// the legacy per-layer `json`) are read into memory up to this size.
pub(super) const SMALL_FILE_LIMIT: u64 = 64 << 20;

/// What a layer entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    Symlink,
    Hardlink,
    Char,
    Block,
    Fifo,
}

/// One entry of a layer, as indexed: everything but the data, which stays
/// in the spill at `data_at`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    /// Without `./` and without a trailing `/`.
    pub(super) path: Vec<u8>,
    pub(super) kind: Kind,
    /// A symlink's target as written; a hardlink's target path, cleaned
    /// like `path`.
    pub(super) link: Vec<u8>,
    pub(super) mode: u32,
    pub(super) uid: u64,
    pub(super) gid: u64,
    pub(super) mtime: u64,
    pub(super) dev: (u32, u32),
    /// PAX records kept as they are (xattrs and anything unknown), by key.
    pub(super) pax: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(super) size: u64,
    pub(super) data_at: u64,
}

/// One layer file of the stream.
#[derive(Debug)]
pub(super) struct Layer {
    /// Where its raw bytes start in the spill, and how many there are.
    pub(super) spill_at: u64,
    pub(super) len: u64,
    /// `sha256:…` of the raw bytes.
    pub(super) diff_id: String,
    pub(super) entries: Vec<Entry>,
}

/// A save stream, read: ready to be written normalised.
pub(crate) struct Staged {
    pub(super) image: String,
    pub(super) spill: std::fs::File,
    pub(super) layers: BTreeMap<String, Layer>,
    /// Small files by path.
    pub(super) files: BTreeMap<String, Vec<u8>>,
    /// Symlinks between files of the stream (Docker saves a layer that
    /// occurs twice once, and links the second name to the first).
    pub(super) links: BTreeMap<String, String>,
    // Removed (with the spill) when the staged image is dropped.
    _dir: tempfile::TempDir,
}

/// Reads a `docker save` stream of `image` (named in errors) into a spill
/// under `spill_dir`.
pub(crate) fn read(
    image: &str,
    input: impl Read,
    spill_dir: &Path,
) -> Result<Staged, NormalizeError> {
    let io = |context: &str| {
        let context = context.to_string();
        move |source| NormalizeError::Io {
            image: image.to_string(),
            context,
            source,
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("sunaba-normalize-")
        .tempdir_in(spill_dir)
        .map_err(io("cannot create a spill directory"))?;
    let spill_path = dir.path().join("layers");
    let spill_file = std::fs::File::create(&spill_path).map_err(io("cannot create the spill"))?;
    let mut spill = Spill {
        out: BufWriter::with_capacity(1 << 20, spill_file),
        at: 0,
    };
    let corrupt = |detail: String| NormalizeError::Corrupt {
        image: image.to_string(),
        detail,
    };
    let mut layers = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut links = BTreeMap::new();
    let mut outer = tar::Archive::new(input);
    let entries = outer
        .entries()
        .map_err(|e| corrupt(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| stream_error(image, e))?;
        let name = clean_outer(&entry.path_bytes());
        match entry.header().entry_type() {
            EntryType::Directory => {}
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default();
                links.insert(name.clone(), resolve_outer(&name, &target));
            }
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.size();
                let mut entry = BufReader::with_capacity(64 << 10, entry);
                if is_layer(&name, &mut entry).map_err(|e| stream_error(image, e))? {
                    let layer = read_layer(image, &name, &mut entry, size, &mut spill)?;
                    layers.insert(name, layer);
                } else if size > SMALL_FILE_LIMIT {
                    return Err(corrupt(format!(
                        "{name} ({size} bytes) is neither a layer nor a small metadata file"
                    )));
                } else {
                    let mut bytes = Vec::with_capacity(size as usize);
                    entry
                        .read_to_end(&mut bytes)
                        .map_err(|e| stream_error(image, e))?;
                    if (bytes.len() as u64) < size {
                        return Err(NormalizeError::Truncated {
                            image: image.to_string(),
                            detail: format!("{name} ends after {} of {size} bytes", bytes.len()),
                        });
                    }
                    files.insert(name, bytes);
                }
            }
            other => {
                return Err(corrupt(format!(
                    "{name} is a {other:?}, not a file, directory or symlink"
                )));
            }
        }
    }
    spill.out.flush().map_err(io("cannot write the spill"))?;
    let spill = std::fs::File::open(&spill_path).map_err(io("cannot reopen the spill"))?;
    Ok(Staged {
        image: image.to_string(),
        spill,
        layers,
        files,
        links,
        _dir: dir,
    })
}

/// A short read of the outer stream is a truncation; anything else that
/// breaks it, corruption.
pub(super) fn stream_error(image: &str, e: std::io::Error) -> NormalizeError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof || e.to_string().contains("entire block") {
        NormalizeError::Truncated {
            image: image.to_string(),
            detail: e.to_string(),
        }
    } else {
        NormalizeError::Corrupt {
            image: image.to_string(),
            detail: e.to_string(),
        }
    }
}

pub(crate) fn clean_outer(path: &[u8]) -> String {
    let s = String::from_utf8_lossy(path);
    s.trim_start_matches("./").to_string()
}

/// A symlink's target, as a path of the stream (relative to the link's
/// directory, as Docker writes them: `../<id>/layer.tar`).
pub(crate) fn resolve_outer(link: &str, target: &[u8]) -> String {
    let target = String::from_utf8_lossy(target);
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Layers are `<id>/layer.tar` (Docker), `<hex>.tar` (Podman), or blobs of
/// an OCI layout (Docker 25 and later) that do not start like JSON.
pub(super) fn is_layer(name: &str, entry: &mut impl BufRead) -> std::io::Result<bool> {
    if name.ends_with(".tar") {
        return Ok(true);
    }
    if !name.starts_with("blobs/") {
        return Ok(false);
    }
    Ok(entry.fill_buf()?.first().is_some_and(|b| *b != b'{'))
}

struct Spill {
    out: BufWriter<std::fs::File>,
    at: u64,
}

/// Everything read through it goes to the spill and the hash.
struct Tee<'a, R> {
    inner: R,
    spill: &'a mut Spill,
    hash: sha2::Sha256,
    read: u64,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.spill.out.write_all(&buf[..n])?;
        self.spill.at += n as u64;
        self.hash.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

fn read_layer(
    image: &str,
    name: &str,
    input: &mut impl Read,
    size: u64,
    spill: &mut Spill,
) -> Result<Layer, NormalizeError> {
    let spill_at = spill.at;
    let layer_err = |detail: String| NormalizeError::CorruptLayer {
        image: image.to_string(),
        layer: name.to_string(),
        detail,
    };
    let mut tee = Tee {
        inner: input,
        spill,
        hash: sha2::Sha256::new(),
        read: 0,
    };
    let mut entries = Vec::new();
    let parsed = (|| {
        let mut archive = tar::Archive::new(&mut tee);
        let iter = archive
            .entries()
            .map_err(|e| layer_err(format!("not a tar archive: {e}")))?;
        for entry in iter {
            let mut entry = entry.map_err(|e| layer_err(e.to_string()))?;
            if let Some(e) = index_entry(image, name, &mut entry, size)? {
                entries.push(e);
            }
        }
        Ok(())
    })();
    // The end-of-archive blocks and any padding belong to the layer's
    // bytes; and a layer cut short is a truncation, whatever the tar
    // parser made of its last bytes.
    let drained = std::io::copy(&mut tee, &mut std::io::sink());
    if tee.read < size {
        return Err(NormalizeError::Truncated {
            image: image.to_string(),
            detail: format!("layer {name} ends after {} of {size} bytes", tee.read),
        });
    }
    parsed?;
    drained.map_err(|e| layer_err(e.to_string()))?;
    Ok(Layer {
        spill_at,
        len: size,
        diff_id: format!("sha256:{}", hex::encode(tee.hash.finalize())),
        entries: entries
            .into_iter()
            .map(|mut e: Entry| {
                e.data_at += spill_at;
                e
            })
            .collect(),
    })
}

fn index_entry<R: Read>(
    image: &str,
    layer: &str,
    entry: &mut tar::Entry<R>,
    layer_size: u64,
) -> Result<Option<Entry>, NormalizeError> {
    let raw_path = entry.path_bytes().into_owned();
    let shown = String::from_utf8_lossy(&raw_path).into_owned();
    let bad = |problem: &'static str| NormalizeError::BadPath {
        image: image.to_string(),
        layer: layer.to_string(),
        path: shown.clone(),
        problem,
    };
    let header = entry.header().clone();
    let kind = match header.entry_type() {
        EntryType::Regular | EntryType::Continuous => Kind::File,
        EntryType::Directory => Kind::Dir,
        EntryType::Symlink => Kind::Symlink,
        EntryType::Link => Kind::Hardlink,
        EntryType::Char => Kind::Char,
        EntryType::Block => Kind::Block,
        EntryType::Fifo => Kind::Fifo,
        EntryType::GNUSparse => {
            return Err(NormalizeError::Sparse {
                image: image.to_string(),
                layer: layer.to_string(),
                path: shown,
            });
        }
        other => {
            return Err(NormalizeError::EntryType {
                image: image.to_string(),
                layer: layer.to_string(),
                path: shown,
                kind: format!("{other:?}"),
            });
        }
    };
    let path = clean_path(&raw_path).map_err(bad)?;
    if path.is_empty() {
        // The layer's root (`./`): its metadata is the engine's, not ours.
        return Ok(None);
    }
    let link = match kind {
        Kind::Symlink => entry.link_name_bytes().unwrap_or_default().into_owned(),
        Kind::Hardlink => {
            let raw = entry.link_name_bytes().unwrap_or_default().into_owned();
            clean_path(&raw).map_err(|problem| NormalizeError::BadPath {
                image: image.to_string(),
                layer: layer.to_string(),
                path: format!("{shown} (a hardlink to {})", String::from_utf8_lossy(&raw)),
                problem,
            })?
        }
        _ => Vec::new(),
    };
    let field = |r: std::io::Result<u64>| {
        r.map_err(|e| NormalizeError::CorruptLayer {
            image: image.to_string(),
            layer: layer.to_string(),
            detail: format!("{shown}: {e}"),
        })
    };
    let mut uid = field(header.uid())?;
    let mut gid = field(header.gid())?;
    let mut mtime = field(header.mtime())?;
    let mode = field(header.mode().map(u64::from))? as u32;
    let mut pax = BTreeMap::new();
    if let Some(exts) = entry
        .pax_extensions()
        .map_err(|e| NormalizeError::CorruptLayer {
            image: image.to_string(),
            layer: layer.to_string(),
            detail: format!("{shown}: PAX header: {e}"),
        })?
    {
        for ext in exts {
            let ext = ext.map_err(|e| NormalizeError::CorruptLayer {
                image: image.to_string(),
                layer: layer.to_string(),
                detail: format!("{shown}: PAX record: {e}"),
            })?;
            let number = || {
                std::str::from_utf8(ext.value_bytes())
                    .ok()
                    .and_then(|v| v.split('.').next()?.parse::<u64>().ok())
            };
            match ext.key_bytes() {
                // Said by the header we write, or by the tar crate already.
                b"path" | b"linkpath" | b"size" => {}
                b"uid" => uid = number().unwrap_or(uid),
                b"gid" => gid = number().unwrap_or(gid),
                b"mtime" => mtime = number().unwrap_or(mtime),
                // Dropped: times of no meaning in an image, names the
                // numeric ids already say, inode numbers of the build host.
                b"atime" | b"ctime" | b"uname" | b"gname" | b"SCHILY.dev" | b"SCHILY.ino"
                | b"SCHILY.nlink" => {}
                key if key.starts_with(b"GNU.sparse.") => {
                    return Err(NormalizeError::Sparse {
                        image: image.to_string(),
                        layer: layer.to_string(),
                        path: shown,
                    });
                }
                key => {
                    pax.insert(key.to_vec(), ext.value_bytes().to_vec());
                }
            }
        }
    }
    let size = entry.size();
    let data_at = entry.raw_file_position();
    let left = layer_size.saturating_sub(data_at);
    if size > left {
        return Err(NormalizeError::TarBomb {
            image: image.to_string(),
            layer: layer.to_string(),
            path: shown,
            claimed: size,
            left,
        });
    }
    let dev = match kind {
        Kind::Char | Kind::Block => (
            header.device_major().ok().flatten().unwrap_or(0),
            header.device_minor().ok().flatten().unwrap_or(0),
        ),
        _ => (0, 0),
    };
    Ok(Some(Entry {
        path,
        kind,
        link,
        mode,
        uid,
        gid,
        mtime,
        dev,
        pax,
        // Only a file's data is data: a hardlink or directory that claims
        // bytes has them skipped, never copied.
        size: if kind == Kind::File { size } else { 0 },
        data_at,
    }))
}

/// A layer path without `./` and trailing `/`; absolute paths and `..`
/// components are refused (unpacked, they would reach outside the root).
pub(super) fn clean_path(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.first() == Some(&b'/') {
        return Err("is an absolute path");
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("has a `..` component"),
            p => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(p);
            }
        }
    }
    Ok(out)
}
