//! Reading a few files of an image's final filesystem — the files an SBOM
//! is made from — from its layers, as the runtime applies them, without
//! unpacking anything: each layer is read once as it passes, what it says
//! about the paths the reading follows is noted (memory holds those
//! files only), and the notes are applied bottom first. The SBOM reads
//! its files this way today (from the engine's `save` or a registry's
//! blobs); the rules are the image's, not the SBOM's, so they are here.
//!
//! # The runtime's rules (OCI image-spec, "Applying Changesets")
//! - `DIR/.wh.NAME` deletes `DIR/NAME` of the lower layers — a file, or a
//!   directory with everything in it;
//! - `DIR/.wh..wh..opq` hides everything the lower layers have in `DIR`;
//! - whiteouts apply to the lower layers only, before the layer's own
//!   entries (whatever their order in the tar): what the same layer writes
//!   stays;
//! - an entry that is not a directory replaces what was at its path,
//!   a directory of the lower layers with everything in it; a directory
//!   over a lower directory merges with it; an entry inside a directory
//!   makes the directory one in this layer, written or not;
//! - within a layer the last entry of a path wins, and a hardlink is the
//!   file at its target as this layer wrote it before (Docker's applier
//!   links inside the layer being applied: a hardlink to a path the layer
//!   has not written fails there, and is an error here).
//!
//! # Links
//! A wanted path is looked up as the kernel would in the final
//! filesystem: symlinks in any component are followed (relative to the
//! link's directory, absolute ones from the image's root, `..` at the root
//! staying there, at most 40), so `etc/os-release -> ../usr/lib/os-release`
//! reads `usr/lib/os-release`. What a layer holds at a path the reading
//! did not follow is not known after the layer has passed, so a link to a
//! new place makes another round: the reading adds the path
//! ([`Reading::follow`]) and the layers are read again (a registry's blobs
//! by digest, the engine's image by another `save`). Real images need none
//! or one; a reading that keeps finding new places stops at
//! [`MAX_FOLLOWED`] paths.
//!
//! # Bad layers
//! A layer that does not read as a tar (plain, or gzip, told by its first
//! bytes as the runtime tells it), whose headers are over their caps
//! ([`crate::image::entries`]), or whose entries no runtime would apply (a
//! path out of the root, a hardlink to nothing) is an error naming the
//! layer and the image — never a layer with nothing in it.

use crate::image::entries::{self, BoundedTar, Oversized, shown};
use crate::image::save_stream::{self, StreamError, WalkError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::rc::Rc;

/// The largest wanted file kept (dpkg's status of a big image is ~2 MB).
const WANTED_LIMIT: u64 = 64 << 20;
/// Symlinks followed in one lookup (Linux's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;
/// Paths a reading follows links to, beyond the wanted ones.
pub(crate) const MAX_FOLLOWED: usize = 16;

/// Why an image's files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The save stream itself is not what `save` writes.
    #[error("{image}: the save stream {problem}")]
    Stream { image: String, problem: String },
    /// A layer the runtime could not apply.
    #[error("{image}: layer {layer}: {detail}")]
    Layer {
        image: String,
        layer: String,
        detail: String,
    },
    /// A PAX or GNU long-name header over its cap, refused before it was
    /// read into memory.
    #[error("{image}: {place}: {header} declares {size} bytes, over the cap of {cap} bytes")]
    HeaderTooLarge {
        image: String,
        /// `layer DIGEST …` or `the save stream`.
        place: String,
        /// Which header, where, before which entry.
        header: String,
        size: u64,
        cap: u64,
    },
    /// The links of the wanted paths lead to too many places.
    #[error(
        "{image}: the links of {path} lead to more than {cap} other paths; a real image's \
         need one or two"
    )]
    TooManyLinks {
        image: String,
        path: String,
        cap: usize,
    },
}

impl ReadError {
    fn oversized(image: &str, place: String, o: &Oversized) -> ReadError {
        ReadError::HeaderTooLarge {
            image: image.to_string(),
            place,
            header: o.header(),
            size: o.size,
            cap: o.cap,
        }
    }

    fn stream(image: &str, e: StreamError) -> ReadError {
        let image = image.to_string();
        match e {
            StreamError::Truncated(d) => ReadError::Stream {
                image,
                problem: format!("is truncated: {d}"),
            },
            StreamError::Corrupt(d) => ReadError::Stream {
                image,
                problem: format!("is corrupt: {d}"),
            },
            StreamError::Oversized(o) => ReadError::oversized(&image, "the save stream".into(), &o),
        }
    }
}

/// Why one layer could not be read, before it is named.
#[derive(Debug, Clone)]
pub(crate) enum LayerFault {
    Unreadable(String),
    Oversized(Oversized),
}

impl LayerFault {
    fn io(e: std::io::Error) -> LayerFault {
        match entries::oversized(&e) {
            Some(o) => LayerFault::Oversized(o.clone()),
            // The crate's message may quote the layer's bytes.
            None => LayerFault::Unreadable(format!("the tar is corrupt: {}", shown(e.to_string()))),
        }
    }

    /// The error, naming the image and the layer.
    pub(crate) fn named(self, image: &str, layer: &str) -> ReadError {
        match self {
            LayerFault::Unreadable(detail) => ReadError::Layer {
                image: image.to_string(),
                layer: layer.to_string(),
                detail,
            },
            LayerFault::Oversized(o) => ReadError::oversized(image, format!("layer {layer}"), &o),
        }
    }
}

/// What a layer has at a path.
#[derive(Debug, Clone)]
enum Node {
    Dir,
    /// A regular file; its bytes when the path is one the reading keeps.
    File(Option<Rc<[u8]>>),
    /// A symlink, its target as written.
    Symlink(String),
    /// A hardlink to a path the reading did not keep.
    Hardlink(String),
    /// Anything else that is not a directory (a device, a FIFO).
    Other,
}

/// What one layer says about the paths a reading follows: read once, kept
/// (small: the followed files only) and composed with the image's other
/// layers by [`Reading::compose`]. A family's images share their base
/// layers, so a release reads each distinct blob once.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerFiles {
    /// What the layer leaves at each followed path, or a directory above
    /// one, after its own entries (the last entry of a path wins).
    nodes: BTreeMap<String, Node>,
    /// Paths of the lower layers it deletes (`.wh.NAME`).
    whiteouts: BTreeSet<String>,
    /// Directories whose lower contents it hides (`.wh..wh..opq`); `""`
    /// is the root.
    opaque: BTreeSet<String>,
    /// The paths of the reading it was read for.
    read_for: BTreeSet<String>,
}

/// The version of [`LayerFiles::encode`]'s bytes: kept notes of another
/// are not read (they are made again from the blob).
const NOTES_FORMAT: u32 = 1;

/// [`LayerFiles`] as kept between releases: JSON, a kept file's bytes in
/// base64 (dpkg's status is text, but nothing says a wanted file is).
#[derive(serde::Serialize, serde::Deserialize)]
struct Notes {
    format: u32,
    nodes: Vec<(String, NoteNode)>,
    whiteouts: BTreeSet<String>,
    opaque: BTreeSet<String>,
    read_for: BTreeSet<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum NoteNode {
    Dir,
    File(Option<String>),
    Symlink(String),
    Hardlink(String),
    Other,
}

impl LayerFiles {
    /// What the layer said, as bytes to keep (by the layer blob's digest)
    /// so that a later release needs not read the blob again.
    pub(crate) fn encode(&self) -> Vec<u8> {
        use base64::Engine as _;
        let b64 = &base64::engine::general_purpose::STANDARD;
        let nodes = (self.nodes.iter())
            .map(|(path, node)| {
                let node = match node {
                    Node::Dir => NoteNode::Dir,
                    Node::File(bytes) => NoteNode::File(bytes.as_ref().map(|b| b64.encode(b))),
                    Node::Symlink(t) => NoteNode::Symlink(t.clone()),
                    Node::Hardlink(t) => NoteNode::Hardlink(t.clone()),
                    Node::Other => NoteNode::Other,
                };
                (path.clone(), node)
            })
            .collect();
        let notes = Notes {
            format: NOTES_FORMAT,
            nodes,
            whiteouts: self.whiteouts.clone(),
            opaque: self.opaque.clone(),
            read_for: self.read_for.clone(),
        };
        serde_json::to_vec(&notes).expect("the notes serialise")
    }

    /// What [`LayerFiles::encode`] wrote; `None` for bytes that are not
    /// that (another format, a garbled file): the blob is read instead.
    pub(crate) fn decode(bytes: &[u8]) -> Option<LayerFiles> {
        use base64::Engine as _;
        let b64 = &base64::engine::general_purpose::STANDARD;
        let notes: Notes = serde_json::from_slice(bytes).ok()?;
        if notes.format != NOTES_FORMAT {
            return None;
        }
        let mut nodes = BTreeMap::new();
        for (path, node) in notes.nodes {
            let node = match node {
                NoteNode::Dir => Node::Dir,
                NoteNode::File(None) => Node::File(None),
                NoteNode::File(Some(text)) => Node::File(Some(b64.decode(text).ok()?.into())),
                NoteNode::Symlink(t) => Node::Symlink(t),
                NoteNode::Hardlink(t) => Node::Hardlink(t),
                NoteNode::Other => Node::Other,
            };
            nodes.insert(path, node);
        }
        Some(LayerFiles {
            nodes,
            whiteouts: notes.whiteouts,
            opaque: notes.opaque,
            read_for: notes.read_for,
        })
    }
}

/// The paths a reading keeps: the wanted ones and the places their links
/// lead to; and what it notes: those and every directory above them.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    wanted: Vec<String>,
    paths: BTreeSet<String>,
    tracked: BTreeSet<String>,
}

/// The outcome of composing an image's layers.
#[derive(Debug)]
pub(crate) enum Composed {
    /// The final contents of each wanted path the image has.
    Files(BTreeMap<String, Vec<u8>>),
    /// The links lead to these paths, which the layers were not read for.
    Needs(BTreeSet<String>),
}

impl Reading {
    pub(crate) fn new(wanted: &[&str]) -> Reading {
        let mut r = Reading {
            wanted: wanted.iter().map(|w| w.to_string()).collect(),
            paths: BTreeSet::new(),
            tracked: BTreeSet::new(),
        };
        for w in wanted {
            r.add(w);
        }
        r
    }

    fn add(&mut self, path: &str) {
        self.paths.insert(path.to_string());
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            self.tracked.insert(path[..at + i].to_string());
            at += i + 1;
        }
        self.tracked.insert(path.to_string());
    }

    /// Adds the paths a composition needs; an error when the links lead
    /// to too many.
    pub(crate) fn follow(&mut self, image: &str, needs: BTreeSet<String>) -> Result<(), ReadError> {
        let before = self.paths.len();
        let path = needs.iter().next().cloned().unwrap_or_default();
        for p in &needs {
            self.add(p);
        }
        if self.paths.len() == before || self.paths.len() > self.wanted.len() + MAX_FOLLOWED {
            return Err(ReadError::TooManyLinks {
                image: image.to_string(),
                path: shown(&path),
                cap: MAX_FOLLOWED,
            });
        }
        Ok(())
    }

    /// Whether `layer` was read for every path of this reading (a layer
    /// read for more is as good).
    pub(crate) fn covered_by(&self, layer: &LayerFiles) -> bool {
        layer.read_for.is_superset(&self.paths)
    }

    /// Reads one layer blob as a stream: a tar, or a gzip-compressed one
    /// (every member, as Go's reader takes them), told by its first bytes
    /// as the runtime tells them; zstd is refused.
    pub(crate) fn scan_blob(&self, input: impl Read) -> Result<LayerFiles, LayerFault> {
        match entries::layer_tar(input) {
            Ok(tar) => self.scan_tar(tar),
            Err(entries::NotATar::Io(e)) => Err(LayerFault::io(e)),
            Err(entries::NotATar::Zstd) => {
                Err(LayerFault::Unreadable(entries::ZSTD_REFUSED.into()))
            }
        }
    }

    /// Reads one layer tar, noting what it says about the tracked paths.
    pub(crate) fn scan_tar(&self, input: impl Read) -> Result<LayerFiles, LayerFault> {
        let mut out = LayerFiles {
            read_for: self.paths.clone(),
            ..LayerFiles::default()
        };
        let mut tar = BoundedTar::new(input);
        for entry in tar.entries().map_err(LayerFault::io)? {
            let mut entry = entry.map_err(LayerFault::io)?;
            let raw = entry.path_bytes().into_owned();
            let bad = |problem: &str| {
                LayerFault::Unreadable(format!("entry `{}` {problem}", shown(&raw)))
            };
            let path = clean_path(&raw).map_err(bad)?;
            if path.is_empty() {
                continue;
            }
            let (dir, base) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            self.implicit_dirs(&mut out, dir);
            if let Some(name) = base.strip_prefix(".wh.") {
                if name == ".wh..opq" {
                    if dir.is_empty() || self.tracked.contains(dir) {
                        out.opaque.insert(dir.to_string());
                    }
                } else if !name.starts_with(".wh.") {
                    let deleted = join(dir, name);
                    if self.tracked.contains(&deleted) {
                        out.whiteouts.insert(deleted);
                    }
                }
                // Other `.wh..wh.` names are AUFS's bookkeeping, no path.
                continue;
            }
            if !self.tracked.contains(&path) {
                continue;
            }
            let node = match entry.header().entry_type() {
                tar::EntryType::Directory => Node::Dir,
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    if self.paths.contains(&path) {
                        Node::File(Some(read_wanted(&mut entry, &path)?))
                    } else {
                        Node::File(None)
                    }
                }
                tar::EntryType::Symlink => Node::Symlink(
                    String::from_utf8_lossy(&entry.link_name_bytes().unwrap_or_default())
                        .into_owned(),
                ),
                tar::EntryType::Link => {
                    let raw = entry.link_name_bytes().unwrap_or_default().into_owned();
                    let target = clean_path(&raw).map_err(|problem| {
                        LayerFault::Unreadable(format!(
                            "entry `{}` (a hardlink to `{}`) {problem}",
                            shown(&path),
                            shown(&raw)
                        ))
                    })?;
                    self.hardlink(&out, &path, target)?
                }
                tar::EntryType::GNUSparse => {
                    return Err(LayerFault::Unreadable(format!(
                        "entry `{}` is a GNU sparse file, which no engine writes",
                        shown(&path)
                    )));
                }
                tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => Node::Other,
                // A global PAX header is no file.
                tar::EntryType::XGlobalHeader => continue,
                other => {
                    return Err(LayerFault::Unreadable(format!(
                        "entry `{}` has a type no runtime applies ({other:?})",
                        shown(&path)
                    )));
                }
            };
            if !matches!(node, Node::Dir) {
                remove_under(&mut out.nodes, &path);
            }
            out.nodes.insert(path, node);
        }
        Ok(out)
    }

    /// Each tracked directory at or above `dir` is a directory in this
    /// layer: an entry is in it.
    fn implicit_dirs(&self, out: &mut LayerFiles, dir: &str) {
        if dir.is_empty() {
            return;
        }
        let mut end = 0;
        loop {
            let next = dir[end..].find('/').map(|i| end + i);
            let prefix = &dir[..next.unwrap_or(dir.len())];
            if !self.tracked.contains(prefix) {
                // Nothing tracked is below an untracked directory.
                return;
            }
            if !matches!(out.nodes.get(prefix), Some(Node::Dir)) {
                remove_under(&mut out.nodes, prefix);
                out.nodes.insert(prefix.to_string(), Node::Dir);
            }
            match next {
                Some(i) => end = i + 1,
                None => return,
            }
        }
    }

    /// A hardlink at `path` to `target`: what this layer wrote at `target`
    /// before it, when the reading tracks `target`.
    fn hardlink(&self, out: &LayerFiles, path: &str, target: String) -> Result<Node, LayerFault> {
        if !self.tracked.contains(&target) {
            return Ok(Node::Hardlink(target));
        }
        match out.nodes.get(&target) {
            Some(Node::Dir) => Err(LayerFault::Unreadable(format!(
                "entry `{}` is a hardlink to the directory `{}`",
                shown(path),
                shown(&target)
            ))),
            Some(Node::File(None)) => Ok(Node::Hardlink(target)),
            Some(node) => Ok(node.clone()),
            None => Err(LayerFault::Unreadable(format!(
                "entry `{}` is a hardlink to `{}`, which the layer has not written before it \
                 (the runtime cannot apply it)",
                shown(path),
                shown(&target)
            ))),
        }
    }

    /// The final contents of the wanted paths of an image whose layers,
    /// bottom first, said `layers` (each read for this reading: see
    /// [`Reading::covered_by`]).
    pub(crate) fn compose<'a>(&self, layers: impl IntoIterator<Item = &'a LayerFiles>) -> Composed {
        let mut merged: BTreeMap<String, Node> = BTreeMap::new();
        for layer in layers {
            for path in &layer.whiteouts {
                merged.remove(path);
                remove_under(&mut merged, path);
            }
            for dir in &layer.opaque {
                remove_under(&mut merged, dir);
            }
            for (path, node) in &layer.nodes {
                if !matches!(node, Node::Dir) {
                    remove_under(&mut merged, path);
                }
                merged.insert(path.clone(), node.clone());
            }
        }
        let mut files = BTreeMap::new();
        let mut needs = BTreeSet::new();
        for wanted in &self.wanted {
            match self.resolve(&merged, wanted) {
                Resolved::Found(bytes) => {
                    files.insert(wanted.clone(), bytes.to_vec());
                }
                Resolved::Absent => {}
                Resolved::Need(path) => {
                    needs.insert(path);
                }
            }
        }
        if needs.is_empty() {
            Composed::Files(files)
        } else {
            Composed::Needs(needs)
        }
    }

    /// Looks `path` up in the composed filesystem, following symlinks.
    fn resolve<'m>(&self, merged: &'m BTreeMap<String, Node>, path: &str) -> Resolved<'m> {
        let mut todo: VecDeque<String> = path.split('/').map(str::to_string).collect();
        let mut at: Vec<String> = Vec::new();
        let mut symlinks = 0;
        while let Some(part) = todo.pop_front() {
            match part.as_str() {
                "" | "." => continue,
                ".." => {
                    at.pop();
                    continue;
                }
                _ => at.push(part),
            }
            let here = at.join("/");
            if !self.tracked.contains(&here) {
                // Not noted: read again for it, and the plain names after
                // it (up to a `..`, which depends on what is found).
                let mut need = here;
                for p in todo.iter().take_while(|p| *p != "..") {
                    if !p.is_empty() && p != "." {
                        need.push('/');
                        need.push_str(p);
                    }
                }
                return Resolved::Need(need);
            }
            let last = todo.iter().all(|p| p.is_empty() || p == ".");
            match merged.get(&here) {
                None | Some(Node::Other) => return Resolved::Absent,
                Some(Node::Dir) if last => return Resolved::Absent,
                Some(Node::Dir) => {}
                Some(Node::File(data)) if !last => {
                    // Not a directory: nothing is below it.
                    let _ = data;
                    return Resolved::Absent;
                }
                Some(Node::File(Some(bytes))) => return Resolved::Found(bytes),
                Some(Node::File(None)) => return Resolved::Need(here),
                Some(Node::Hardlink(target)) => return Resolved::Need(target.clone()),
                Some(Node::Symlink(target)) => {
                    symlinks += 1;
                    if symlinks > MAX_SYMLINKS {
                        // ELOOP: the runtime cannot open it either.
                        return Resolved::Absent;
                    }
                    at.pop();
                    if target.starts_with('/') {
                        at.clear();
                    }
                    for p in target.split('/').rev() {
                        todo.push_front(p.to_string());
                    }
                }
            }
        }
        Resolved::Absent
    }
}

enum Resolved<'m> {
    Found(&'m Rc<[u8]>),
    Absent,
    Need(String),
}

/// Reads a wanted file's bytes, whole.
fn read_wanted<R: Read>(
    entry: &mut entries::Entry<'_, R>,
    path: &str,
) -> Result<Rc<[u8]>, LayerFault> {
    let size = entry.size();
    if size > WANTED_LIMIT {
        return Err(LayerFault::Unreadable(format!(
            "entry `{}` is {size} bytes, over the {WANTED_LIMIT} bytes a wanted file may have",
            shown(path)
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut bytes).map_err(LayerFault::io)?;
    if (bytes.len() as u64) < size {
        return Err(LayerFault::Unreadable(format!(
            "entry `{}` ends after {} of its {size} bytes",
            shown(path),
            bytes.len()
        )));
    }
    Ok(bytes.into())
}

/// Removes everything strictly below `dir` (`""`: the root).
fn remove_under(nodes: &mut BTreeMap<String, Node>, dir: &str) {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let below: Vec<String> = nodes
        .range(prefix.clone()..)
        .take_while(|(p, _)| p.starts_with(&prefix))
        .map(|(p, _)| p.clone())
        .collect();
    for p in below {
        nodes.remove(&p);
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// A layer path as the runtime applies it: relative to the image's root
/// (a leading `/` or `./` means the root too), `.` and empty components
/// dropped, `..` taken lexically; one that climbs out of the root is
/// refused, as the engines refuse it.
fn clean_path(raw: &[u8]) -> Result<String, &'static str> {
    let text = String::from_utf8_lossy(raw);
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("climbs out of the root");
                }
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// What was read of an image from its save stream.
#[derive(Debug, Clone)]
pub struct ImageFiles {
    /// The final contents of each wanted path the image has.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The image's config.
    pub config: serde_json::Value,
}

/// A save stream read for a reading: the image's config and, bottom first,
/// what each layer said.
#[derive(Debug)]
pub(crate) struct Saved {
    pub(crate) config: serde_json::Value,
    pub(crate) layers: Vec<Rc<LayerFiles>>,
}

/// Reads the save stream of `image` for `reading`. Layers are named by
/// their diff_id (and their file in the stream).
pub(crate) fn read_save_stream(
    image: &str,
    reading: &Reading,
    input: &mut dyn Read,
) -> Result<Saved, ReadError> {
    let mut scanned: BTreeMap<String, Result<Rc<LayerFiles>, LayerFault>> = BTreeMap::new();
    let files = save_stream::walk(input, |name, _size, layer| {
        // Blobs of an OCI layout that are not layers read as faults here:
        // only the layers manifest.json names matter.
        scanned.insert(name.to_string(), reading.scan_blob(layer).map(Rc::new));
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(|e| match e {
        WalkError::Stream(e) => ReadError::stream(image, e),
        WalkError::Layer(never) => match never {},
    })?;
    let contents = save_stream::contents(&files.small, &files.links)
        .map_err(|e| ReadError::stream(image, e))?;
    let count = contents.layers.len();
    let mut layers = Vec::with_capacity(count);
    for (i, (name, diff_id)) in contents.layers.iter().zip(&contents.diff_ids).enumerate() {
        let named = || {
            format!(
                "{diff_id} ({} of {count}, {name} in the save stream)",
                i + 1
            )
        };
        match scanned.get(name) {
            None => {
                return Err(ReadError::Stream {
                    image: image.to_string(),
                    problem: format!(
                        "is truncated: layer {name} named by manifest.json is not in it"
                    ),
                });
            }
            Some(Err(fault)) => return Err(fault.clone().named(image, &named())),
            Some(Ok(files)) => layers.push(files.clone()),
        }
    }
    Ok(Saved {
        config: contents.config,
        layers,
    })
}

/// Reads an image's wanted files: `read` gives its layers (bottom first)
/// as read for a reading, and is called again while links lead to paths
/// the reading has not followed.
pub(crate) fn read_following<T, E: From<ReadError>>(
    image: &str,
    wanted: &[&str],
    mut read: impl FnMut(&Reading) -> Result<(T, Vec<Rc<LayerFiles>>), E>,
) -> Result<(T, BTreeMap<String, Vec<u8>>), E> {
    let mut reading = Reading::new(wanted);
    loop {
        let (extra, layers) = read(&reading)?;
        match reading.compose(layers.iter().map(|l| l.as_ref())) {
            Composed::Files(files) => return Ok((extra, files)),
            Composed::Needs(paths) => reading.follow(image, paths)?,
        }
    }
}

/// The final contents of `wanted` in an image given as its layer blobs,
/// bottom first, each with its media type (as a registry serves them; the
/// compression is told by the bytes). A layer that cannot be read is an
/// error naming it by its digest.
pub(crate) fn read_layers(
    image: &str,
    layers: &[(String, Vec<u8>)],
    wanted: &[&str],
) -> Result<BTreeMap<String, Vec<u8>>, ReadError> {
    let count = layers.len();
    let ((), files) = read_following(image, wanted, |reading| {
        let mut scanned = Vec::with_capacity(count);
        for (i, (media_type, bytes)) in layers.iter().enumerate() {
            let files = reading.scan_blob(bytes.as_slice()).map_err(|fault| {
                let digest = crate::registry::Digest::sha256(bytes);
                fault.named(
                    image,
                    &format!("{digest} ({} of {count}, {media_type})", i + 1),
                )
            })?;
            scanned.push(Rc::new(files));
        }
        Ok::<_, ReadError>(((), scanned))
    })?;
    Ok(files)
}

#[cfg(test)]
mod tests;
