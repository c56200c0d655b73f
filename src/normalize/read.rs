//! The one pass over the save stream: small files (manifest, config) in
//! memory, every layer's raw bytes to the spill file while its entries are
//! indexed and checked.

use super::NormalizeError;
use crate::image::entries::{self, BoundedTar};
use crate::image::layer_tar::{Entry, Kind};
use crate::image::save_stream::{StreamError, WalkError, walk};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use tar::EntryType;

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
    let mut layers = BTreeMap::new();
    let files = walk(input, |name, size, entry| {
        let layer = read_layer(image, name, entry, size, &mut spill)?;
        layers.insert(name.to_string(), layer);
        Ok(())
    })
    .map_err(|e| match e {
        WalkError::Stream(e) => stream_failure(image, e),
        WalkError::Layer(e) => e,
    })?;
    spill.out.flush().map_err(io("cannot write the spill"))?;
    let spill = std::fs::File::open(&spill_path).map_err(io("cannot reopen the spill"))?;
    Ok(Staged {
        image: image.to_string(),
        spill,
        layers,
        files: files.small,
        links: files.links,
        _dir: dir,
    })
}

/// What is wrong with the save stream, as the normaliser says it.
pub(super) fn stream_failure(image: &str, e: StreamError) -> NormalizeError {
    let image = image.to_string();
    match e {
        StreamError::Truncated(detail) => NormalizeError::Truncated { image, detail },
        StreamError::Corrupt(detail) => NormalizeError::Corrupt { image, detail },
        StreamError::Oversized(source) => NormalizeError::Oversized {
            image,
            place: "the save stream".into(),
            source: Box::new(source),
        },
    }
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
    input: &mut (impl Read + ?Sized),
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
        let mut archive = BoundedTar::new(&mut tee);
        let iter = archive
            .entries()
            .map_err(|e| layer_err(format!("not a tar archive: {e}")))?;
        for entry in iter {
            let mut entry = entry.map_err(|e| match entries::oversized(&e) {
                Some(o) => NormalizeError::Oversized {
                    image: image.to_string(),
                    place: format!("layer {name}"),
                    source: Box::new(o.clone()),
                },
                // The crate's message may quote the layer's bytes.
                None => layer_err(entries::shown(e.to_string())),
            })?;
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
    let shown = entries::shown(&raw_path);
    let at = Place {
        image,
        layer,
        path: &shown,
    };
    let header = entry.header().clone();
    let kind = kind_of(&at, header.entry_type())?;
    let path = clean_path(&raw_path).map_err(|problem| at.bad_path(shown.clone(), problem))?;
    if path.is_empty() {
        // The layer's root (`./`): its metadata is the engine's, not ours.
        return Ok(None);
    }
    let link = link_of(&at, kind, entry)?;
    let mut owner = Owner::of(&at, &header)?;
    let pax = pax_records(&at, entry, &mut owner)?;
    let (size, data_at) = data_within_layer(&at, entry, layer_size)?;
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
        mode: owner.mode,
        uid: owner.uid,
        gid: owner.gid,
        mtime: owner.mtime,
        dev,
        pax,
        // Only a file's data is data: a hardlink or directory that claims
        // bytes has them skipped, never copied.
        size: if kind == Kind::File { size } else { 0 },
        data_at,
    }))
}

/// Where an entry is (its path as shown), for its errors.
struct Place<'a> {
    image: &'a str,
    layer: &'a str,
    path: &'a str,
}

impl Place<'_> {
    fn bad_path(&self, path: String, problem: &'static str) -> NormalizeError {
        NormalizeError::BadPath {
            image: self.image.to_string(),
            layer: self.layer.to_string(),
            path,
            problem,
        }
    }

    fn sparse(&self) -> NormalizeError {
        NormalizeError::Sparse {
            image: self.image.to_string(),
            layer: self.layer.to_string(),
            path: self.path.to_string(),
        }
    }

    /// The tar crate could not read `what` of the entry (its message may
    /// quote the layer's bytes: shown escaped).
    fn corrupt(&self, what: &str, e: std::io::Error) -> NormalizeError {
        NormalizeError::CorruptLayer {
            image: self.image.to_string(),
            layer: self.layer.to_string(),
            detail: format!("{}: {what}{}", self.path, entries::shown(e.to_string())),
        }
    }
}

/// What the entry is; sparse files and types an image has no use for are
/// refused.
fn kind_of(at: &Place, entry_type: EntryType) -> Result<Kind, NormalizeError> {
    Ok(match entry_type {
        EntryType::Regular | EntryType::Continuous => Kind::File,
        EntryType::Directory => Kind::Dir,
        EntryType::Symlink => Kind::Symlink,
        EntryType::Link => Kind::Hardlink,
        EntryType::Char => Kind::Char,
        EntryType::Block => Kind::Block,
        EntryType::Fifo => Kind::Fifo,
        EntryType::GNUSparse => return Err(at.sparse()),
        other => {
            return Err(NormalizeError::EntryType {
                image: at.image.to_string(),
                layer: at.layer.to_string(),
                path: at.path.to_string(),
                kind: format!("{other:?}"),
            });
        }
    })
}

/// A symlink's target as written, a hardlink's cleaned like a path (and
/// refused as one), nothing for other kinds.
fn link_of<R: Read>(
    at: &Place,
    kind: Kind,
    entry: &tar::Entry<R>,
) -> Result<Vec<u8>, NormalizeError> {
    Ok(match kind {
        Kind::Symlink => entry.link_name_bytes().unwrap_or_default().into_owned(),
        Kind::Hardlink => {
            let raw = entry.link_name_bytes().unwrap_or_default().into_owned();
            clean_path(&raw).map_err(|problem| {
                at.bad_path(
                    format!("{} (a hardlink to {})", at.path, entries::shown(&raw)),
                    problem,
                )
            })?
        }
        _ => Vec::new(),
    })
}

/// The entry's owner, mode and time as its header says them (PAX records
/// may say the owner and time again: [`pax_records`]).
struct Owner {
    uid: u64,
    gid: u64,
    mtime: u64,
    mode: u32,
}

impl Owner {
    fn of(at: &Place, header: &tar::Header) -> Result<Owner, NormalizeError> {
        let field = |r: std::io::Result<u64>| r.map_err(|e| at.corrupt("", e));
        Ok(Owner {
            uid: field(header.uid())?,
            gid: field(header.gid())?,
            mtime: field(header.mtime())?,
            mode: field(header.mode().map(u64::from))? as u32,
        })
    }
}

/// The entry's PAX records worth keeping, by key; the owner and time they
/// say go to `owner`, what has no meaning in an image is dropped, and a
/// sparse file is refused.
fn pax_records<R: Read>(
    at: &Place,
    entry: &mut tar::Entry<R>,
    owner: &mut Owner,
) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, NormalizeError> {
    let mut pax = BTreeMap::new();
    let Some(exts) = entry
        .pax_extensions()
        .map_err(|e| at.corrupt("PAX header: ", e))?
    else {
        return Ok(pax);
    };
    for ext in exts {
        let ext = ext.map_err(|e| at.corrupt("PAX record: ", e))?;
        let number = || {
            std::str::from_utf8(ext.value_bytes())
                .ok()
                .and_then(|v| v.split('.').next()?.parse::<u64>().ok())
        };
        match ext.key_bytes() {
            // Said by the header we write, or by the tar crate already.
            b"path" | b"linkpath" | b"size" => {}
            b"uid" => owner.uid = number().unwrap_or(owner.uid),
            b"gid" => owner.gid = number().unwrap_or(owner.gid),
            b"mtime" => owner.mtime = number().unwrap_or(owner.mtime),
            // Dropped: times of no meaning in an image, names the
            // numeric ids already say, inode numbers of the build host.
            b"atime" | b"ctime" | b"uname" | b"gname" | b"SCHILY.dev" | b"SCHILY.ino"
            | b"SCHILY.nlink" => {}
            key if key.starts_with(b"GNU.sparse.") => return Err(at.sparse()),
            key => {
                pax.insert(key.to_vec(), ext.value_bytes().to_vec());
            }
        }
    }
    Ok(pax)
}

/// The entry's size and where its data starts in the layer; an entry
/// claiming more bytes than the layer has left is a tar bomb.
fn data_within_layer<R: Read>(
    at: &Place,
    entry: &tar::Entry<R>,
    layer_size: u64,
) -> Result<(u64, u64), NormalizeError> {
    let size = entry.size();
    let data_at = entry.raw_file_position();
    let left = layer_size.saturating_sub(data_at);
    if size > left {
        return Err(NormalizeError::TarBomb {
            image: at.image.to_string(),
            layer: at.layer.to_string(),
            path: at.path.to_string(),
            claimed: size,
            left,
        });
    }
    Ok((size, data_at))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::fixtures::{file, layer, save_stream};

    #[test]
    fn a_long_name_over_its_cap_in_a_layer_is_refused_naming_image_and_layer() {
        // A GNU long name of 1 MiB: the tar crate would read it whole.
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_entry_type(EntryType::GNULongName);
        h.set_size(1 << 20);
        h.set_cksum();
        let mut l = h.as_bytes().to_vec();
        l.extend(vec![b'n'; 1 << 20]);
        l.extend(layer(&[file("x", "data")]));
        let stream = save_stream(&[l], "2026-12-01T19:00:00Z");
        let dir = tempfile::tempdir().unwrap();
        let err = read("r:t", stream.as_slice(), dir.path()).err().unwrap();
        assert!(matches!(err, NormalizeError::Oversized { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with("r:t: layer "), "{msg}");
        assert!(
            msg.ends_with(
                "/layer.tar: the GNU long name header `././@LongLink` at byte 0 (entry 1) \
                 declares 1048576 bytes, over the cap of 65536 bytes"
            ),
            "{msg}"
        );
    }
}
