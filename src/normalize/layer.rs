//! One layer, rewritten: the drop rules, the fixed order and hardlink
//! groups (see the module doc of `normalize`); the entries are written in
//! the one tar format of [`crate::image::layer_tar`].

use crate::image::layer_tar::{Entry, Kind};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

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
