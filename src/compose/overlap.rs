//! What member fragments' layers both write. Each member's fragment layer
//! is read once into the facts of each path it leaves (type, mode, owner,
//! size, content hash, link target: what the runtime would give a reader;
//! times are not compared, the normaliser clamps them), and the paths two
//! layers share are sorted into three: identical (fine: either layer gives
//! the same file), a state file ([`super::state`], merged), or a
//! **conflict** — the composed image would depend on the order of the
//! layers, so it is refused, naming both fragments and the path.

use crate::image::entries::{BoundedTar, NotATar, ZSTD_REFUSED, shown};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use tar::EntryType;

/// A state file's bytes are kept up to this size (dpkg's status of a big
/// image is ~2 MB); a larger one is refused.
const STATE_FILE_LIMIT: u64 = 64 << 20;
/// Paths one layer may hold (the real family's largest has 11,454): the
/// facts of a layer are kept in memory until the plan is made.
const MAX_PATHS: usize = 1_000_000;
/// A whiteout's name prefix, and the opaque-directory marker (OCI
/// image-spec, "Whiteouts").
const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// What a reader of one path of a layer gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) kind: &'static str,
    pub(crate) mode: u32,
    pub(crate) uid: u64,
    pub(crate) gid: u64,
    pub(crate) size: u64,
    /// A file's sha256, a link's target, a device's numbers.
    pub(crate) content: String,
}

impl Facts {
    /// What differs between two facts of one path, for an error.
    fn differences(&self, other: &Facts) -> String {
        let mut out = Vec::new();
        if self.kind != other.kind {
            out.push(format!("type {} / {}", self.kind, other.kind));
        }
        if self.mode != other.mode {
            out.push(format!("mode {:04o} / {:04o}", self.mode, other.mode));
        }
        if (self.uid, self.gid) != (other.uid, other.gid) {
            out.push(format!(
                "owner {}:{} / {}:{}",
                self.uid, self.gid, other.uid, other.gid
            ));
        }
        if self.size != other.size {
            out.push(format!("size {} / {}", self.size, other.size));
        }
        if self.kind == other.kind && self.content != other.content {
            out.push(match self.kind {
                "symlink" | "hardlink" => {
                    format!(
                        "target {} / {}",
                        shown(&self.content),
                        shown(&other.content)
                    )
                }
                _ => "content".to_string(),
            });
        }
        out.join(", ")
    }
}

/// The paths one layer leaves, and the bytes of the state files it writes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LayerFacts {
    /// By path, relative to the root, without `./` or a trailing `/`
    /// (a whiteout under the path it deletes, kind `whiteout`; an opaque
    /// directory's marker under its own `.wh..wh..opq` name).
    pub(crate) paths: BTreeMap<String, Facts>,
    /// The state files ([`super::state::STATE_FILES`]) it writes.
    pub(crate) state: BTreeMap<String, Vec<u8>>,
}

/// A layer that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ScanError(pub(crate) String);

/// A layer path as the runtime applies it: relative to the root, its
/// empty and `.` parts dropped; `..` is refused (no runtime applies it).
fn clean(path: &[u8]) -> Result<String, ScanError> {
    let text = String::from_utf8_lossy(path);
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(ScanError(format!(
                    "{}: a path out of the layer's root",
                    shown(path)
                )));
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// Reads one layer as a save stream or a registry holds it: a tar, or a
/// gzip-compressed one, told by its first bytes; zstd is refused.
pub(crate) fn scan_blob(input: impl Read) -> Result<LayerFacts, ScanError> {
    match crate::image::entries::layer_tar(input) {
        Ok(tar) => scan(tar),
        Err(NotATar::Io(e)) => Err(ScanError(shown(e.to_string()))),
        Err(NotATar::Zstd) => Err(ScanError(ZSTD_REFUSED.into())),
    }
}

/// Reads one uncompressed layer tar into its facts; within the layer the
/// last entry of a path wins, as the runtime applies it.
pub(crate) fn scan(input: impl Read) -> Result<LayerFacts, ScanError> {
    let mut out = LayerFacts::default();
    let mut buf = vec![0u8; 64 << 10];
    let mut tar = BoundedTar::new(input);
    let entries = tar
        .entries()
        .map_err(|e| ScanError(format!("not a tar: {}", shown(e.to_string()))))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| ScanError(shown(e.to_string())))?;
        let mut path = clean(&entry.path_bytes())?;
        if path.is_empty() {
            continue;
        }
        if out.paths.len() >= MAX_PATHS {
            return Err(ScanError(format!("it holds over {MAX_PATHS} paths")));
        }
        // A whiteout is a write of what it deletes: `DIR/.wh.NAME` deletes
        // `DIR/NAME`, `DIR/.wh..wh..opq` everything the lower layers have
        // in DIR (kept under its own name, checked against other layers'
        // paths below DIR by `overlap`).
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
        let whiteout = if name == OPAQUE {
            Some("opaque")
        } else if let Some(target) = name.strip_prefix(WHITEOUT) {
            path = if dir.is_empty() {
                target.to_string()
            } else {
                format!("{dir}/{target}")
            };
            Some("whiteout")
        } else {
            None
        };
        // A state file is merged only as a regular file of its own; its
        // bytes are the last entry's.
        let state = super::state::is_state_file(&path);
        let header = entry.header();
        let mode = header.mode().unwrap_or(0) & 0o7777;
        let uid = header.uid().unwrap_or(0);
        let gid = header.gid().unwrap_or(0);
        let link = || entry_link(header);
        let (kind, size, content) = match (whiteout, header.entry_type()) {
            (Some(whiteout), _) => (whiteout, 0, String::new()),
            (None, EntryType::Directory) => ("dir", 0, String::new()),
            (None, EntryType::Symlink) => ("symlink", 0, link()),
            (None, EntryType::Link) => ("hardlink", 0, clean(link().as_bytes())?),
            (None, EntryType::Char | EntryType::Block | EntryType::Fifo) => {
                let numbers = format!(
                    "{}:{}",
                    header.device_major().ok().flatten().unwrap_or(0),
                    header.device_minor().ok().flatten().unwrap_or(0)
                );
                ("device", 0, numbers)
            }
            (None, EntryType::Regular | EntryType::Continuous) => {
                let size = entry.size();
                if state && size > STATE_FILE_LIMIT {
                    return Err(ScanError(format!(
                        "{path} is {size} bytes, over the {STATE_FILE_LIMIT} bytes a state file \
                         may have"
                    )));
                }
                let mut hash = Sha256::new();
                let mut kept = Vec::new();
                loop {
                    let n = entry.read(&mut buf).map_err(|e| {
                        ScanError(format!("{}: {}", shown(&path), shown(e.to_string())))
                    })?;
                    if n == 0 {
                        break;
                    }
                    hash.update(&buf[..n]);
                    if state {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                if state {
                    out.state.insert(path.clone(), kept);
                }
                ("file", size, hex::encode(hash.finalize()))
            }
            (None, other) => {
                return Err(ScanError(format!(
                    "{}: an entry of type {other:?} no layer holds",
                    shown(&path)
                )));
            }
        };
        if state && kind != "file" {
            return Err(ScanError(format!(
                "{path} is a {kind} here: a state file is merged only as a regular file"
            )));
        }
        out.paths.insert(
            path,
            Facts {
                kind,
                mode,
                uid,
                gid,
                size,
                content,
            },
        );
    }
    Ok(out)
}

fn entry_link(header: &tar::Header) -> String {
    header
        .link_name_bytes()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .unwrap_or_default()
}

/// Two member fragments' layers write one path differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}: fragments `{first}` and `{second}` both write it, differently ({differs}); a composed \
     image would depend on their order: have one fragment write it (or both the same), or write \
     it in the parent",
    shown(.path)
)]
pub(crate) struct PathConflict {
    pub(crate) path: String,
    pub(crate) first: String,
    pub(crate) second: String,
    pub(crate) differs: String,
}

/// The paths of `paths` below `dir` (a prefix ending in `/`; empty: all),
/// `dir` itself excluded.
pub(super) fn under<'a>(
    paths: &'a BTreeMap<String, Facts>,
    dir: &'a str,
) -> impl Iterator<Item = (&'a String, &'a Facts)> {
    paths
        .range::<str, _>((std::ops::Bound::Included(dir), std::ops::Bound::Unbounded))
        .take_while(move |(p, _)| p.starts_with(dir))
        .filter(move |(p, _)| p.len() > dir.len())
}

/// What `layer` writes below `dir` (a prefix ending in `/`; empty: all).
fn subtree<'a>(layer: &'a LayerFacts, dir: &'a str) -> BTreeMap<&'a str, &'a Facts> {
    under(&layer.paths, dir)
        .map(|(p, f)| (p.as_str(), f))
        .collect()
}

/// The paths member layers share.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Overlap {
    /// Written by two or more members, the same.
    pub(crate) identical: Vec<String>,
    /// State files written by two or more members (merged).
    pub(crate) merged: Vec<String>,
}

/// Sorts the paths `members` (fragment, its layer) both write; the first
/// conflict in path order is the error.
pub(crate) fn overlap(members: &[(&str, &LayerFacts)]) -> Result<Overlap, PathConflict> {
    let mut first: BTreeMap<&str, (&str, &Facts)> = BTreeMap::new();
    let mut shared: BTreeMap<&str, bool> = BTreeMap::new();
    let mut conflicts = Vec::new();
    for (fragment, layer) in members {
        for (path, facts) in &layer.paths {
            match first.get(path.as_str()) {
                None => {
                    first.insert(path, (fragment, facts));
                }
                Some((earlier, theirs)) => {
                    let state = super::state::is_state_file(path);
                    if !state && *theirs != facts {
                        conflicts.push(PathConflict {
                            path: path.clone(),
                            first: earlier.to_string(),
                            second: fragment.to_string(),
                            differs: theirs.differences(facts),
                        });
                    }
                    shared.insert(path, state);
                }
            }
        }
    }
    // What a whiteout deletes below its path (a directory's contents), and
    // what an opaque marker hides in its directory, another member writing
    // there changes with the order of the layers too — unless, for an
    // opaque directory, both write the very same things in it (two installs
    // of one package each make its new directories opaque).
    for (fragment, layer) in members {
        for (path, facts) in &layer.paths {
            let (below, what) = match facts.kind {
                "whiteout" => (
                    format!("{path}/"),
                    format!("deletes {} and everything below it", shown(path)),
                ),
                "opaque" => {
                    let dir = path.strip_suffix(OPAQUE).unwrap_or(path).to_string();
                    let what = format!("hides what lower layers have in {}", shown(&dir));
                    (dir, what)
                }
                _ => continue,
            };
            let ours = subtree(layer, &below);
            for (other, theirs) in members {
                if other == fragment {
                    continue;
                }
                let theirs = subtree(theirs, &below);
                if theirs.is_empty() || (facts.kind == "opaque" && theirs == ours) {
                    continue;
                }
                let differing = theirs
                    .iter()
                    .find(|(p, f)| ours.get(*p) != Some(*f))
                    .or_else(|| ours.iter().find(|(p, _)| !theirs.contains_key(*p)))
                    .map_or(below.clone(), |(p, _)| p.to_string());
                conflicts.push(PathConflict {
                    path: differing,
                    first: fragment.to_string(),
                    second: other.to_string(),
                    differs: format!("`{fragment}` {what}, `{other}` writes there otherwise"),
                });
            }
        }
    }
    conflicts.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(conflict) = conflicts.into_iter().next() {
        return Err(conflict);
    }
    let (merged, identical): (Vec<_>, Vec<_>) = shared.into_iter().partition(|(_, s)| *s);
    Ok(Overlap {
        identical: identical.into_iter().map(|(p, _)| p.to_string()).collect(),
        merged: merged.into_iter().map(|(p, _)| p.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer tar of (path, type, mode, uid, content or link target).
    fn layer(entries: &[(&str, EntryType, u32, u64, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, mode, uid, data) in entries {
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            h.set_uid(*uid);
            h.set_gid(*uid);
            h.set_mtime(1);
            match kind {
                EntryType::Symlink | EntryType::Link => {
                    h.set_size(0);
                    b.append_link(&mut h, path, data).unwrap();
                }
                _ => {
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, path, data.as_bytes()).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    use EntryType::{Directory as D, Regular as F, Symlink as L};

    #[test]
    fn a_layer_reads_as_facts_by_clean_path_with_state_files_kept_and_the_last_entry_winning() {
        let facts = scan(
            layer(&[
                ("./usr/", D, 0o755, 0, ""),
                ("./usr/bin/python3", F, 0o755, 0, "old"),
                ("./usr/bin/python3", F, 0o755, 0, "elf"),
                ("./usr/bin/python", L, 0o777, 0, "python3"),
                ("./var/lib/dpkg/status", F, 0o644, 0, "Package: a\n"),
            ])
            .as_slice(),
        )
        .unwrap();
        assert_eq!(
            facts.paths.keys().collect::<Vec<_>>(),
            [
                "usr",
                "usr/bin/python",
                "usr/bin/python3",
                "var/lib/dpkg/status"
            ]
        );
        let python3 = &facts.paths["usr/bin/python3"];
        assert_eq!(
            (python3.kind, python3.mode, python3.size),
            ("file", 0o755, 3)
        );
        assert_eq!(python3.content, hex::encode(Sha256::digest(b"elf")));
        assert_eq!(facts.paths["usr/bin/python"].content, "python3");
        assert_eq!(
            facts.state,
            BTreeMap::from([("var/lib/dpkg/status".to_string(), b"Package: a\n".to_vec())])
        );
        assert!(scan(&b"not a tar at all, and longer than one block? no"[..]).is_err());
    }

    #[test]
    fn identical_paths_pass_state_files_are_merged_and_other_shared_paths_are_conflicts() {
        let python = scan(
            layer(&[
                ("usr/", D, 0o755, 0, ""),
                ("etc/gitconfig", F, 0o644, 0, "[safe]\n"),
                ("var/lib/dpkg/status", F, 0o644, 0, "Package: python3\n"),
                ("usr/bin/python3", F, 0o755, 0, "elf"),
            ])
            .as_slice(),
        )
        .unwrap();
        let go = scan(
            layer(&[
                ("usr/", D, 0o755, 0, ""),
                ("etc/gitconfig", F, 0o644, 0, "[safe]\n"),
                ("var/lib/dpkg/status", F, 0o644, 0, "Package: golang\n"),
                ("usr/bin/go", F, 0o755, 0, "elf"),
            ])
            .as_slice(),
        )
        .unwrap();
        let overlap = overlap(&[("python", &python), ("go", &go)]).unwrap();
        assert_eq!(overlap.identical, ["etc/gitconfig", "usr"]);
        assert_eq!(overlap.merged, ["var/lib/dpkg/status"]);

        let js = scan(
            layer(&[
                ("etc/gitconfig", F, 0o600, 1000, "[user]\n"),
                ("usr/bin/go", L, 0o777, 0, "/opt/node/bin/go"),
            ])
            .as_slice(),
        )
        .unwrap();
        let err = super::overlap(&[("python", &python), ("go", &go), ("js", &js)]).unwrap_err();
        assert_eq!(err.path, "etc/gitconfig");
        assert_eq!((err.first.as_str(), err.second.as_str()), ("python", "js"));
        assert_eq!(
            err.to_string(),
            "etc/gitconfig: fragments `python` and `js` both write it, differently (mode 0644 / \
             0600, owner 0:0 / 1000:1000, content); a composed image would depend on their \
             order: have one fragment write it (or both the same), or write it in the parent"
        );
        let only_go_and_js = super::overlap(&[("go", &go), ("js", &js)]).unwrap_err();
        assert_eq!(only_go_and_js.path, "etc/gitconfig");
        let link = super::overlap(&[
            ("go", &go),
            (
                "js",
                &scan(layer(&[("usr/bin/go", L, 0o777, 0, "/x")]).as_slice()).unwrap(),
            ),
        ])
        .unwrap_err();
        assert_eq!(
            link.differs,
            "type file / symlink, mode 0755 / 0777, size 3 / 0"
        );
    }

    /// A layer of regular files named byte for byte as given.
    fn raw_layer(files: &[(&[u8], &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut h = tar::Header::new_ustar();
            crate::image::fixtures::raw_name(&mut h, name);
            h.set_entry_type(EntryType::Regular);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, data.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn paths_are_cleaned_as_the_runtime_applies_them_and_one_out_of_the_root_is_refused() {
        let facts =
            scan(raw_layer(&[(b"./etc/./gitconfig", "x"), (b"a//b/", "y")]).as_slice()).unwrap();
        assert_eq!(
            facts.paths.keys().collect::<Vec<_>>(),
            ["a/b", "etc/gitconfig"]
        );
        let err = scan(raw_layer(&[(b"usr/../../etc/passwd", "x")]).as_slice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "usr/../../etc/passwd: a path out of the layer's root"
        );
    }

    #[test]
    fn a_state_file_is_merged_only_as_a_regular_file_within_its_cap() {
        let status = "var/lib/dpkg/status";
        let err = scan(layer(&[(status, L, 0o777, 0, "status-old")]).as_slice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "var/lib/dpkg/status is a symlink here: a state file is merged only as a regular file"
        );
        // The last entry's bytes: an earlier one is not kept.
        let facts = scan(
            layer(&[
                (status, F, 0o644, 0, "Package: old\n"),
                (status, F, 0o644, 0, "Package: new\n"),
            ])
            .as_slice(),
        )
        .unwrap();
        assert_eq!(facts.state[status], b"Package: new\n");
        // A whiteout of it is a write of another kind.
        let err = scan(raw_layer(&[(b"var/lib/dpkg/.wh.status", "")]).as_slice()).unwrap_err();
        assert!(err.to_string().contains("is a whiteout here"), "{err}");
    }

    #[test]
    fn a_whiteout_or_an_opaque_directory_against_a_write_there_is_a_conflict() {
        let writes = scan(layer(&[("opt/tool/bin/x", F, 0o755, 0, "elf")]).as_slice()).unwrap();
        let deletes = scan(raw_layer(&[(b"opt/.wh.tool", "")]).as_slice()).unwrap();
        assert_eq!(deletes.paths["opt/tool"].kind, "whiteout");
        let err = overlap(&[("a", &deletes), ("b", &writes)]).unwrap_err();
        assert_eq!(err.path, "opt/tool/bin/x");
        assert_eq!(
            err.differs,
            "`a` deletes opt/tool and everything below it, `b` writes there otherwise"
        );
        let hides = scan(raw_layer(&[(b"opt/tool/.wh..wh..opq", "")]).as_slice()).unwrap();
        let err = overlap(&[("b", &writes), ("a", &hides)]).unwrap_err();
        assert_eq!(
            err.differs,
            "`a` hides what lower layers have in opt/tool/, `b` writes there otherwise"
        );
        // Two installs of one package: each makes its new directory opaque
        // and writes the same files in it.
        let one = scan(
            raw_layer(&[
                (b"usr/share/doc/lib/.wh..wh..opq", ""),
                (b"usr/share/doc/lib/copyright", "c"),
            ])
            .as_slice(),
        )
        .unwrap();
        assert!(overlap(&[("a", &one), ("b", &one)]).is_ok());
        let more = scan(
            raw_layer(&[
                (b"usr/share/doc/lib/.wh..wh..opq", ""),
                (b"usr/share/doc/lib/copyright", "c"),
                (b"usr/share/doc/lib/NEWS", "n"),
            ])
            .as_slice(),
        )
        .unwrap();
        let err = overlap(&[("a", &one), ("b", &more)]).unwrap_err();
        assert_eq!(err.path, "usr/share/doc/lib/NEWS");
        // The same whiteout in both, with nothing written below it, is fine;
        // a whiteout against a file at its path differs in kind.
        let plain = scan(layer(&[("opt/tool", F, 0o644, 0, "x")]).as_slice()).unwrap();
        assert!(overlap(&[("a", &deletes), ("b", &deletes)]).is_ok());
        let err = overlap(&[("a", &deletes), ("b", &plain)]).unwrap_err();
        assert!(
            err.differs.starts_with("type whiteout / file"),
            "{}",
            err.differs
        );
    }

    #[test]
    fn a_path_from_the_image_is_shown_escaped() {
        let a = scan(raw_layer(&[(b"etc/\x1b[31mred", "a")]).as_slice()).unwrap();
        let b = scan(raw_layer(&[(b"etc/\x1b[31mred", "b")]).as_slice()).unwrap();
        let shown = overlap(&[("a", &a), ("b", &b)]).unwrap_err().to_string();
        assert!(
            shown.starts_with("etc/\\u{1b}[31mred: fragments"),
            "{shown}"
        );
    }
}
