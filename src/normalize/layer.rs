//! One layer, rewritten: the drop rules, the fixed order, hardlink groups
//! and the one tar format (see the module doc of `normalize`).

use super::read::{Entry, Kind};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

const BLOCK: u64 = 512;

/// The rendered Dockerfiles' `RUN --mount` targets (templates/Dockerfile.hbs):
/// BuildKit 0.8 leaves a stub for each in the layer.
const MOUNT_ROOTS: [&[u8]; 2] = [b"run/secrets", b"run/sunaba"];

/// Path order: component by component, bytewise (so `a/x` sorts before
/// `a-b`, and a directory right before its children).
pub(super) fn path_order(a: &[u8], b: &[u8]) -> Ordering {
    let key = |p: &[u8]| {
        p.iter()
            .map(|c| if *c == b'/' { 0 } else { *c })
            .collect::<Vec<_>>()
    };
    key(a).cmp(&key(b))
}

fn under(path: &[u8], root: &[u8]) -> bool {
    path == root || (path.starts_with(root) && path.get(root.len()) == Some(&b'/'))
}

/// Why `entry` is dropped, if it is (the mount stubs are decided apart).
fn dropped_for(entry: &Entry) -> Option<&'static str> {
    let p = entry.path.as_slice();
    let not_dir = entry.kind != Kind::Dir && !is_whiteout(p);
    if not_dir && p.starts_with(b"var/log/") {
        return Some("a build log (var/log)");
    }
    if entry.kind == Kind::File && p == b"var/cache/ldconfig/aux-cache" {
        return Some("ldconfig's aux-cache");
    }
    if not_dir && (p.starts_with(b"var/lib/apt/lists/") || p.starts_with(b"var/cache/apt/")) {
        return Some("apt's lists and caches");
    }
    None
}

fn is_whiteout(path: &[u8]) -> bool {
    let base = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    base.starts_with(b".wh.")
}

/// What one layer becomes: its entries in order, and what was dropped.
/// A link to a link names the file at the end of the chain.
fn chain_end<'a>(
    mut t: &'a [u8],
    files: &HashMap<&'a [u8], &'a Entry>,
    links: &HashMap<&'a [u8], &'a [u8]>,
) -> Option<&'a [u8]> {
    for _ in 0..64 {
        if files.contains_key(t) {
            return Some(t);
        }
        t = links.get(t)?;
    }
    None
}

pub(super) fn plan<'a>(
    entries: &'a [Entry],
    lower: &HashSet<Vec<u8>>,
    sde: u64,
) -> (Vec<Entry>, Vec<(String, &'static str)>) {
    // The last entry of a path wins, as unpacking would have it.
    let mut by_path: HashMap<&[u8], usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_path.insert(&e.path, i);
    }
    let mut live: Vec<&Entry> = by_path.values().map(|i| &entries[*i]).collect();
    live.sort_by(|a, b| path_order(&a.path, &b.path));

    let mut dropped: Vec<(String, &'static str)> = Vec::new();
    let mut drop_set: HashSet<&[u8]> = HashSet::new();
    for e in &live {
        if let Some(why) = dropped_for(e) {
            drop_set.insert(&e.path);
            dropped.push((String::from_utf8_lossy(&e.path).into_owned(), why));
        }
    }
    // Mount stubs: under a mount root, new in this layer, and empty: an
    // empty file, or a directory holding nothing but stubs.
    let in_roots = |p: &[u8]| MOUNT_ROOTS.iter().any(|r| under(p, r));
    let mut kept_in_roots: Vec<&[u8]> = Vec::new();
    let mut stub_dirs: Vec<&[u8]> = Vec::new();
    for e in &live {
        if !in_roots(&e.path) || drop_set.contains(e.path.as_slice()) {
            continue;
        }
        // A whiteout is a deletion, never a stub (it is empty too).
        if is_whiteout(&e.path) {
            kept_in_roots.push(&e.path);
            continue;
        }
        let new = !lower.contains(&e.path);
        match e.kind {
            Kind::File if new && e.size == 0 => {
                drop_set.insert(&e.path);
                dropped.push((
                    String::from_utf8_lossy(&e.path).into_owned(),
                    "a BuildKit mount stub",
                ));
            }
            Kind::Dir if new => stub_dirs.push(&e.path),
            _ => kept_in_roots.push(&e.path),
        }
    }
    for d in stub_dirs {
        if !kept_in_roots.iter().any(|k| *k != d && under(k, d)) {
            drop_set.insert(d);
            dropped.push((
                String::from_utf8_lossy(d).into_owned(),
                "a BuildKit mount stub",
            ));
        }
    }
    dropped.sort();

    // Hardlink groups: the first kept name in the new order carries the
    // data, the others link to it.
    let files: HashMap<&[u8], &Entry> = live
        .iter()
        .filter(|e| e.kind == Kind::File)
        .map(|e| (e.path.as_slice(), *e))
        .collect();
    let links: HashMap<&[u8], &[u8]> = live
        .iter()
        .filter(|e| e.kind == Kind::Hardlink)
        .map(|e| (e.path.as_slice(), e.link.as_slice()))
        .collect();
    let target_of = |t: &'a [u8]| chain_end(t, &files, &links);
    let mut carrier: BTreeMap<&[u8], &[u8]> = BTreeMap::new();
    let mut linked: HashSet<&[u8]> = HashSet::new();
    for e in &live {
        if e.kind == Kind::Hardlink
            && let Some(t) = target_of(&e.link)
        {
            linked.insert(t);
        }
    }
    let mut out = Vec::with_capacity(live.len());
    for e in &live {
        if drop_set.contains(e.path.as_slice()) {
            continue;
        }
        let mut w = (*e).clone();
        w.mtime = w.mtime.min(sde);
        let group = match e.kind {
            Kind::File if linked.contains(e.path.as_slice()) => Some(e.path.as_slice()),
            Kind::Hardlink => target_of(&e.link),
            _ => None,
        };
        if let Some(target) = group {
            match carrier.get(target) {
                Some(first) => {
                    w.kind = Kind::Hardlink;
                    w.link = first.to_vec();
                    w.size = 0;
                    w.pax.clear();
                }
                None => {
                    let t = files[target];
                    w = Entry {
                        path: e.path.clone(),
                        mtime: t.mtime.min(sde),
                        ..t.clone()
                    };
                    carrier.insert(target, &e.path);
                }
            }
        }
        out.push(w);
    }
    (out, dropped)
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
pub(super) fn header_bytes(e: &Entry) -> Vec<u8> {
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
pub(super) fn layer_size(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| header_bytes(e).len() as u64 + padded(e.size))
        .sum::<u64>()
        + 2 * BLOCK
}

/// Writes the layer tar: headers, then each file's data copied from the
/// spill, padded; then the two zero blocks.
pub(super) fn write_layer(
    entries: &[Entry],
    spill: &std::fs::File,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 256 << 10];
    for e in entries {
        out.write_all(&header_bytes(e))?;
        let mut done = 0u64;
        while done < e.size {
            let want = (e.size - done).min(buf.len() as u64) as usize;
            let n = spill.read_at(&mut buf[..want], e.data_at + done)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the spill ended early",
                ));
            }
            out.write_all(&buf[..n])?;
            done += n as u64;
        }
        let pad = (padded(e.size) - e.size) as usize;
        out.write_all(&[0u8; BLOCK as usize][..pad])?;
    }
    out.write_all(&[0u8; 2 * BLOCK as usize])
}
