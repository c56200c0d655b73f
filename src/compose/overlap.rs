//! What member fragments' layers both write. Each member's fragment layer
//! is read once into the facts of each path it leaves (type, mode, owner,
//! size, content hash, link target: what the runtime would give a reader;
//! times are not compared, the normaliser clamps them), and the paths two
//! layers share are sorted into three: identical (fine: either layer gives
//! the same file), a state file ([`super::state`], merged), or a
//! **conflict** — the composed image would depend on the order of the
//! layers, so it is refused, naming both fragments and the path.

use crate::image::entries::{BoundedTar, shown};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use tar::EntryType;

/// A state file's bytes are kept up to this size (dpkg's status of a big
/// image is ~2 MB).
const STATE_FILE_LIMIT: u64 = 64 << 20;

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
    /// (whiteouts under their own `.wh.` names).
    pub(crate) paths: BTreeMap<String, Facts>,
    /// The state files ([`super::state::STATE_FILES`]) it writes.
    pub(crate) state: BTreeMap<String, Vec<u8>>,
}

/// A layer that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ScanError(pub(crate) String);

fn clean(path: &[u8]) -> String {
    let text = String::from_utf8_lossy(path);
    let mut s: &str = &text;
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    s.trim_start_matches('/').trim_end_matches('/').to_string()
}

/// Reads one layer as a save stream or a registry holds it: a tar, or a
/// gzip-compressed one, told by its first bytes; zstd is refused.
pub(crate) fn scan_blob(input: impl Read) -> Result<LayerFacts, ScanError> {
    let mut input = std::io::BufReader::with_capacity(64 << 10, input);
    let head =
        std::io::BufRead::fill_buf(&mut input).map_err(|e| ScanError(shown(e.to_string())))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        scan(flate2::bufread::MultiGzDecoder::new(input))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Err(ScanError(
            "it is zstd-compressed, and zstd layers are not read".into(),
        ))
    } else {
        scan(input)
    }
}

/// Reads one uncompressed layer tar into its facts; within the layer the
/// last entry of a path wins, as the runtime applies it.
pub(crate) fn scan(input: impl Read) -> Result<LayerFacts, ScanError> {
    let mut out = LayerFacts::default();
    let mut tar = BoundedTar::new(input);
    let entries = tar
        .entries()
        .map_err(|e| ScanError(format!("not a tar: {}", shown(e.to_string()))))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| ScanError(shown(e.to_string())))?;
        let path = clean(&entry.path_bytes());
        if path.is_empty() {
            continue;
        }
        let header = entry.header();
        let mode = header.mode().unwrap_or(0) & 0o7777;
        let uid = header.uid().unwrap_or(0);
        let gid = header.gid().unwrap_or(0);
        let link = || entry_link(header);
        let (kind, size, content) = match header.entry_type() {
            EntryType::Directory => ("dir", 0, String::new()),
            EntryType::Symlink => ("symlink", 0, link()),
            EntryType::Link => ("hardlink", 0, clean(link().as_bytes())),
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let numbers = format!(
                    "{}:{}",
                    header.device_major().ok().flatten().unwrap_or(0),
                    header.device_minor().ok().flatten().unwrap_or(0)
                );
                ("device", 0, numbers)
            }
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.size();
                let keep = super::state::is_state_file(&path) && size <= STATE_FILE_LIMIT;
                let mut hash = Sha256::new();
                let mut kept = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = entry.read(&mut buf).map_err(|e| {
                        ScanError(format!("{}: {}", shown(&path), shown(e.to_string())))
                    })?;
                    if n == 0 {
                        break;
                    }
                    hash.update(&buf[..n]);
                    if keep {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                if keep {
                    out.state.insert(path.clone(), kept);
                }
                ("file", size, hex::encode(hash.finalize()))
            }
            other => {
                return Err(ScanError(format!(
                    "{}: an entry of type {other:?} no layer holds",
                    shown(&path)
                )));
            }
        };
        if kind != "file" {
            out.state.remove(&path);
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
    "{path}: fragments `{first}` and `{second}` both write it, differently ({differs}); a composed \
     image would depend on their order: have one fragment write it (or both the same), or write \
     it in the parent"
)]
pub(crate) struct PathConflict {
    pub(crate) path: String,
    pub(crate) first: String,
    pub(crate) second: String,
    pub(crate) differs: String,
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
}
