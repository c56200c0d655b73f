//! The proof of a composition: a composed image's final filesystem against
//! the one its Dockerfile builds, path by path (type, mode, owner, size,
//! content hash, link target). The two may differ only in the state files
//! the composer merges ([`super::state::STATE_FILES`]), and there only in
//! the order of their stanzas: the same stanzas, byte for byte, is the
//! same database (what `dpkg-query -W` and apt read).

use super::overlap::{Facts, LayerFacts};
use std::collections::{BTreeMap, BTreeSet};

/// An image's final filesystem: each path's facts as the runtime leaves
/// them once every layer is applied bottom first, and the bytes of the
/// state files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Filesystem {
    pub(crate) paths: BTreeMap<String, Facts>,
    pub(crate) state: BTreeMap<String, Vec<u8>>,
}

impl Filesystem {
    /// Removes what is below `dir` (`""`: the root), and `dir` itself
    /// unless `keep_dir`.
    fn remove_below(&mut self, dir: &str, keep_dir: bool) {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let gone: Vec<String> = super::overlap::under(&self.paths, &prefix)
            .map(|(p, _)| p.clone())
            .chain((!keep_dir).then(|| dir.to_string()))
            .collect();
        for p in gone {
            self.paths.remove(&p);
            self.state.remove(&p);
        }
    }
}

/// Applies `layers` bottom first (OCI image-spec, "Applying Changesets"):
/// a layer's whiteouts and opaque directories remove what the layers below
/// have, then its entries are written; an entry that is not a directory
/// replaces a directory below with everything in it; a hardlink is the
/// file at its target.
pub(crate) fn filesystem<'a>(layers: impl IntoIterator<Item = &'a LayerFacts>) -> Filesystem {
    let mut fs = Filesystem::default();
    for layer in layers {
        for (path, facts) in &layer.paths {
            match facts.kind {
                "opaque" => {
                    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                    fs.remove_below(dir, true);
                }
                "whiteout" => fs.remove_below(path, false),
                _ => {}
            }
        }
        for (path, facts) in &layer.paths {
            if matches!(facts.kind, "opaque" | "whiteout") {
                continue;
            }
            if facts.kind != "dir" {
                fs.remove_below(path, true);
            }
            let facts = match facts.kind {
                "hardlink" => layer
                    .paths
                    .get(&facts.content)
                    .or_else(|| fs.paths.get(&facts.content))
                    .cloned()
                    .unwrap_or_else(|| facts.clone()),
                _ => facts.clone(),
            };
            fs.paths.insert(path.clone(), facts);
            fs.state.remove(path);
        }
        for (path, bytes) in &layer.state {
            fs.state.insert(path.clone(), bytes.clone());
        }
    }
    fs
}

/// One path whose facts differ; `None`: the image has no such path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Difference {
    pub(crate) path: String,
    pub(crate) composed: Option<Facts>,
    pub(crate) built: Option<Facts>,
}

/// A state file the two images hold: whether they hold the same stanzas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateFile {
    pub(crate) path: String,
    pub(crate) same_stanzas: bool,
    pub(crate) same_bytes: bool,
}

/// What the comparison found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// Paths either image has.
    pub(crate) paths: usize,
    /// Differences outside the state files.
    pub(crate) differences: Vec<Difference>,
    pub(crate) state_files: Vec<StateFile>,
}

impl Comparison {
    /// The composition is what the Dockerfile builds: no path differs but
    /// a state file's order.
    pub(crate) fn equivalent(&self) -> bool {
        self.differences.is_empty() && self.state_files.iter().all(|s| s.same_stanzas)
    }
}

/// A deb822 file's stanzas, as a set: each one's text without the blank
/// lines between.
fn stanza_set(bytes: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(bytes)
        .split("\n\n")
        .map(|s| s.trim_matches('\n').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Compares the composed image's filesystem with the Dockerfile-built one.
pub(crate) fn compare(composed: &Filesystem, built: &Filesystem) -> Comparison {
    let all: BTreeSet<&String> = composed.paths.keys().chain(built.paths.keys()).collect();
    let mut differences = Vec::new();
    let mut state_files = Vec::new();
    for path in &all {
        let (a, b) = (composed.paths.get(*path), built.paths.get(*path));
        if super::state::is_state_file(path)
            && let (Some(x), Some(y)) = (composed.state.get(*path), built.state.get(*path))
        {
            state_files.push(StateFile {
                path: path.to_string(),
                same_stanzas: stanza_set(x) == stanza_set(y),
                same_bytes: x == y,
            });
            // Mode and owner still count.
            let meta = |f: Option<&Facts>| f.map(|f| (f.kind, f.mode, f.uid, f.gid));
            if meta(a) == meta(b) {
                continue;
            }
        }
        if a != b {
            differences.push(Difference {
                path: path.to_string(),
                composed: a.cloned(),
                built: b.cloned(),
            });
        }
    }
    Comparison {
        paths: all.len(),
        differences,
        state_files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::overlap::scan;
    use crate::image::fixtures::{dir, file, layer, link};

    fn fs(layers: &[Vec<u8>]) -> Filesystem {
        let facts: Vec<LayerFacts> = layers.iter().map(|l| scan(l.as_slice()).unwrap()).collect();
        filesystem(&facts)
    }

    #[test]
    fn layers_apply_bottom_first_with_whiteouts_opaque_dirs_and_replacements() {
        let lower = layer(&[
            dir("etc"),
            file("etc/a", "a"),
            file("etc/b", "b"),
            dir("opt/x"),
            file("opt/x/1", "1"),
            dir("srv/d"),
            file("srv/d/old", "o"),
        ]);
        let upper = layer(&[
            file("etc/.wh.a", ""),
            file("opt/x", "now a file"),
            file("srv/d/.wh..wh..opq", ""),
            file("srv/d/new", "n"),
            link("etc/c", tar::EntryType::Link, "etc/b"),
        ]);
        let applied = fs(&[lower, upper]);
        // (Parents the tars do not list stay unlisted.)
        let paths: Vec<&str> = applied.paths.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            ["etc", "etc/b", "etc/c", "opt/x", "srv/d", "srv/d/new"]
        );
        assert_eq!(applied.paths["opt/x"].kind, "file");
        // The hardlink is the file it links to.
        assert_eq!(applied.paths["etc/c"], applied.paths["etc/b"]);
    }

    #[test]
    fn only_the_state_files_order_may_differ() {
        let status = "var/lib/dpkg/status";
        let ab = "Package: a\nVersion: 1\n\nPackage: b\nVersion: 1\n";
        let ba = "Package: b\nVersion: 1\n\nPackage: a\nVersion: 1\n";
        let base = layer(&[file("usr/bin/tool", "t"), file(status, ab)]);
        let same = compare(
            &fs(std::slice::from_ref(&base)),
            &fs(&[layer(&[file("usr/bin/tool", "t"), file(status, ba)])]),
        );
        assert!(same.equivalent(), "{same:?}");
        assert_eq!(same.paths, 2);
        assert_eq!(
            same.state_files,
            [StateFile {
                path: status.into(),
                same_stanzas: true,
                same_bytes: false
            }]
        );
        let other = compare(
            &fs(std::slice::from_ref(&base)),
            &fs(&[layer(&[
                file("usr/bin/tool", "T"),
                file(status, "Package: a\nVersion: 2\n"),
                file("extra", ""),
            ])]),
        );
        assert!(!other.equivalent());
        let paths: Vec<&str> = other.differences.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["extra", "usr/bin/tool"]);
        assert!(other.differences[0].composed.is_none());
        assert!(!other.state_files[0].same_stanzas);
    }
}
