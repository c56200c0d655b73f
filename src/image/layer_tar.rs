//! A layer's entries, and the one tar format they are written in. An
//! entry is indexed (path, type, owner, mode, times, device, PAX records,
//! and where its data sits in a file, never the data), so a layer of any
//! size is planned in memory and written from disk; its size is known from
//! its headers before a byte is written, so a `docker load` archive can
//! carry it without a second copy.
//!
//! The format is fixed, so the same entries give the same bytes, whoever
//! writes them: POSIX ustar headers, a PAX extended header only where
//! ustar cannot say it (a path or link over 100 bytes, ids or a size too
//! large, xattrs and the other records an entry keeps), with a fixed name
//! and fields; then two zero blocks. The normaliser writes every layer it
//! rewrites this way.

use std::collections::BTreeMap;

const BLOCK: u64 = 512;

/// What a layer entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Hardlink,
    Char,
    Block,
    Fifo,
}

/// One entry of a layer, as indexed: everything but the data, which stays
/// in a file (the normaliser's spill) at `data_at`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// Without `./` and without a trailing `/`.
    pub(crate) path: Vec<u8>,
    pub(crate) kind: Kind,
    /// A symlink's target as written; a hardlink's target path, cleaned
    /// like `path`.
    pub(crate) link: Vec<u8>,
    pub(crate) mode: u32,
    pub(crate) uid: u64,
    pub(crate) gid: u64,
    pub(crate) mtime: u64,
    pub(crate) dev: (u32, u32),
    /// PAX records kept as they are (xattrs and anything unknown), by key.
    pub(crate) pax: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(crate) size: u64,
    pub(crate) data_at: u64,
}

/// PAX record `"<len> <key>=<value>\n"`, `len` counting itself.
fn pax_record(key: &[u8], value: &[u8]) -> Vec<u8> {
    let rest = key.len() + value.len() + 3;
    let mut len = rest + 1;
    while rest + len.to_string().len() != len {
        len = rest + len.to_string().len();
    }
    let mut r = format!("{len} ").into_bytes();
    r.extend_from_slice(key);
    r.push(b'=');
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

fn padded(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

const USTAR_MAX_ID: u64 = 0o7777777;
const USTAR_MAX_SIZE: u64 = 0o77777777777;

/// The header blocks of one entry: a PAX extended header where ustar
/// cannot say it all, then the ustar header.
pub(crate) fn header_bytes(e: &Entry) -> Vec<u8> {
    let mut name = e.path.clone();
    if e.kind == Kind::Dir {
        name.push(b'/');
    }
    let mut records: BTreeMap<Vec<u8>, Vec<u8>> = e.pax.clone();
    if name.len() > 100 {
        records.insert(b"path".to_vec(), name.clone());
    }
    if e.link.len() > 100 {
        records.insert(b"linkpath".to_vec(), e.link.clone());
    }
    for (key, v, max) in [
        ("uid", e.uid, USTAR_MAX_ID),
        ("gid", e.gid, USTAR_MAX_ID),
        ("size", e.size, USTAR_MAX_SIZE),
    ] {
        if v > max {
            records.insert(key.as_bytes().to_vec(), v.to_string().into_bytes());
        }
    }
    let mut out = Vec::with_capacity(1024);
    if !records.is_empty() {
        let body: Vec<u8> = records.iter().flat_map(|(k, v)| pax_record(k, v)).collect();
        let mut h = tar::Header::new_ustar();
        set_bytes(&mut h.as_old_mut().name, b"././@PaxHeader");
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(body.len() as u64);
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&body);
        out.resize(
            out.len() + (padded(body.len() as u64) as usize - body.len()),
            0,
        );
    }
    let mut h = tar::Header::new_ustar();
    set_bytes(&mut h.as_old_mut().name, &name);
    set_bytes(&mut h.as_old_mut().linkname, &e.link);
    h.set_mode(e.mode);
    h.set_uid(if e.uid > USTAR_MAX_ID { 0 } else { e.uid });
    h.set_gid(if e.gid > USTAR_MAX_ID { 0 } else { e.gid });
    h.set_size(if e.size > USTAR_MAX_SIZE { 0 } else { e.size });
    h.set_mtime(e.mtime);
    h.set_entry_type(match e.kind {
        Kind::File => tar::EntryType::Regular,
        Kind::Dir => tar::EntryType::Directory,
        Kind::Symlink => tar::EntryType::Symlink,
        Kind::Hardlink => tar::EntryType::Link,
        Kind::Char => tar::EntryType::Char,
        Kind::Block => tar::EntryType::Block,
        Kind::Fifo => tar::EntryType::Fifo,
    });
    if matches!(e.kind, Kind::Char | Kind::Block) {
        // A ustar header always has the fields.
        let _ = h.set_device_major(e.dev.0);
        let _ = h.set_device_minor(e.dev.1);
    }
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out
}

/// The first `dst.len()` bytes of `src` (the rest, if any, is in PAX).
fn set_bytes(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

/// Bytes of the layer tar `entries` make: known before a byte is written,
/// so the archive's header for it can come first.
pub(crate) fn layer_size(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| header_bytes(e).len() as u64 + padded(e.size))
        .sum::<u64>()
        + 2 * BLOCK
}

/// Writes the layer tar: headers, then each file's data copied from
/// `spill` (at its `data_at`), padded; then the two zero blocks.
pub(crate) fn write_layer(
    entries: &[Entry],
    spill: &std::fs::File,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    for e in entries {
        out.write_all(&header_bytes(e))?;
        copy_range(spill, e.data_at, e.size, &mut buf, out)?;
        let pad = (padded(e.size) - e.size) as usize;
        out.write_all(&[0u8; BLOCK as usize][..pad])?;
    }
    out.write_all(&[0u8; 2 * BLOCK as usize])
}

/// Copies `len` bytes of `spill` from `at` to `out` through `buf`; a spill
/// that ends before them is an error.
pub(crate) fn copy_range(
    spill: &std::fs::File,
    at: u64,
    len: u64,
    buf: &mut [u8],
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = spill.read_at(&mut buf[..want], at + done)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the spill ended early",
            ));
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// Entries written from a data file read back as they were indexed,
    /// a long path and a large id through PAX, in the size said before.
    #[test]
    fn entries_are_written_in_the_size_known_before_and_read_back() {
        let long = format!("usr/{}/file", "d".repeat(120)).into_bytes();
        let entry = |path: &[u8], kind, size, data_at| Entry {
            path: path.to_vec(),
            kind,
            link: Vec::new(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1_700_000_000,
            dev: (0, 0),
            pax: BTreeMap::new(),
            size,
            data_at,
        };
        let entries = [
            entry(b"usr", Kind::Dir, 0, 0),
            Entry {
                uid: 1 << 24,
                ..entry(&long, Kind::File, 5, 3)
            },
        ];
        let mut data = tempfile::tempfile().unwrap();
        data.write_all(b"xxxhello").unwrap();
        let mut out = Vec::new();
        write_layer(&entries, &data, &mut out).unwrap();
        assert_eq!(out.len() as u64, layer_size(&entries));
        let mut archive = tar::Archive::new(out.as_slice());
        let mut seen = Vec::new();
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            let mut body = String::new();
            e.read_to_string(&mut body).unwrap();
            let uid = e.header().uid().unwrap();
            seen.push((e.path_bytes().into_owned(), uid, body));
        }
        assert_eq!(
            seen,
            [
                (b"usr/".to_vec(), 0, String::new()),
                (long, 1 << 24, "hello".to_string())
            ]
        );
    }
}
