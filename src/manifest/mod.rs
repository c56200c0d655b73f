//! `images.toml`: the image family as data — the validated types, loading,
//! and the queries every command asks (owed tools, build order, aliases).
//!
//! Loading is two steps: serde parses the file into the `raw` types with
//! `deny_unknown_fields` (a typo is an error naming the line and key), then
//! validation checks every cross-reference and collects *all* problems, each
//! naming the line, the key path and what to do, so one run shows everything
//! that is wrong. Profiles are in `profile`, the coverage gate in
//! [`coverage`].

pub mod coverage;
pub mod edit;
mod env;
mod languages;
mod packages;
mod problems;
mod profile;
mod raw;
pub mod smoke;
mod upstream;
mod validate;

pub use languages::{Language, glob_match};
pub use packages::{LOCK_DIR, Package, Source, lock_dir};
pub use problems::Problem;
pub use profile::{Profile, Settings};
pub use smoke::{SmokeCommand, SmokeExpect, SmokeSuite};
pub use upstream::{Upstream, UpstreamError, parse_pinned};

use bytesize::ByteSize;
use problems::{LineIndex, ProblemList};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The only manifest schema this build understands.
pub const SCHEMA: u32 = 1;
/// Fragment scripts must live below this directory of the project root.
pub const FRAGMENT_DIR: &str = "docker";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {count} problem(s):\n{list}", count = problems.len(), list = ProblemList(problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error(
        "{path}: unknown profile `{name}` (declared profiles: {known}); add [profiles.{name}] or pick one of those"
    )]
    UnknownProfile {
        path: PathBuf,
        name: String,
        known: String,
    },
}

/// A tool contract: what an image that owes the tool must answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    /// argv, run without a shell.
    pub probe: Vec<String>,
    /// POSIX ERE whose first capture group is the version; `None` for
    /// presence-only tools.
    pub version: Option<String>,
    pub min: Option<String>,
    /// The version series the tool must stay in (`3.13`: 3.13.x only).
    pub series: Option<String>,
}

impl Tool {
    pub fn presence_only(&self) -> bool {
        self.version.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub name: String,
    /// Project-relative path, always below `docker/`.
    pub script: PathBuf,
    pub provides: Vec<String>,
    /// Build arguments and their defaults, sorted by name: the fragment's
    /// own plus the shared ones it lists in `shared_args`.
    pub args: BTreeMap<String, String>,
    /// Runtime environment the fragment's tools need in the image (`ENV`).
    pub env: BTreeMap<String, String>,
    /// What it installs from package registries (and so what it locks).
    pub packages: Vec<Package>,
    /// npm packages of its lock whose install scripts may run.
    pub allow_scripts: Vec<String>,
}

impl Fragment {
    /// Its lock directory (`docker/locks/<name>`), when it installs anything
    /// that is locked.
    pub fn lock_dir(&self) -> Option<PathBuf> {
        self.packages
            .iter()
            .any(|p| p.source.lock_file().is_some())
            .then(|| lock_dir(&self.name))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    /// Parent variant; `None` means built FROM the upstream image.
    pub parent: Option<String>,
    pub fragments: Vec<String>,
    pub aliases: Vec<String>,
    pub serves: Vec<String>,
    /// Size budget in bytes.
    pub size_budget: u64,
    /// The platforms it is built for, when it narrows the family's
    /// `platforms` (empty: the family's).
    pub platforms: Vec<crate::registry::Platform>,
}

#[derive(Debug, Clone)]
pub struct Manifest {
    /// The manifest file as given.
    pub path: PathBuf,
    /// Directory holding the manifest: the project root and build context.
    pub root: PathBuf,
    pub repository: String,
    /// The upstream as written: `name:tag@sha256:…`.
    pub upstream: String,
    /// The platforms the family is built for; empty: the engine's own.
    pub platforms: Vec<crate::registry::Platform>,
    pub default: String,
    pub source: Option<String>,
    /// SPDX expression recorded as `org.opencontainers.image.licenses`.
    pub licenses: Option<String>,
    /// `[languages]`: tools, markers and extensions of each.
    pub languages: BTreeMap<String, Language>,
    pub tools: BTreeMap<String, Tool>,
    pub fragments: BTreeMap<String, Fragment>,
    pub variants: BTreeMap<String, Variant>,
    pub profiles: BTreeMap<String, Profile>,
    /// Smoke suites by name (`[smoke.NAME]`).
    pub smoke: BTreeMap<String, SmokeSuite>,
}

/// The platforms `variant` is built for: its own `platforms`, else its
/// nearest ancestor's (a child is built FROM its parent), else `family`
/// (empty: the engine's own). An unknown parent or a parent cycle (both
/// reported by validation) ends the walk.
pub(crate) fn inherited_platforms<'a>(
    variants: &'a BTreeMap<String, Variant>,
    family: &'a [crate::registry::Platform],
    variant: &str,
) -> &'a [crate::registry::Platform] {
    let mut at = variants.get(variant);
    for _ in 0..=variants.len() {
        let Some(v) = at else { break };
        if !v.platforms.is_empty() {
            return &v.platforms;
        }
        at = v.parent.as_ref().and_then(|p| variants.get(p));
    }
    family
}

impl Manifest {
    /// The platforms `variant` is built for (see [`inherited_platforms`]).
    pub fn platforms_of(&self, variant: &str) -> &[crate::registry::Platform] {
        inherited_platforms(&self.variants, &self.platforms, variant)
    }

    /// Reads, parses and validates `path`.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_str_at(&text, path)
    }

    /// Parses and validates manifest text as if read from `path` (the path
    /// decides the project root that fragment scripts are checked under).
    pub fn from_str_at(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        let raw: raw::RawManifest = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let root = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let lines = LineIndex::new(text);
        let (manifest, problems) = validate::validate(raw, path, &root, &lines);
        if problems.is_empty() {
            Ok(manifest)
        } else {
            Err(ManifestError::Invalid {
                path: path.to_path_buf(),
                problems,
            })
        }
    }

    pub fn variant(&self, name: &str) -> Result<&Variant, crate::name::Unknown> {
        self.variants.get(name).ok_or_else(|| {
            crate::name::Unknown::new(
                "variant",
                name,
                self.path.display().to_string(),
                self.variants.keys(),
            )
        })
    }

    /// The variant's ancestors, nearest first (parent, grandparent, ...).
    pub fn ancestors(&self, variant: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = self.variants.get(variant).and_then(|v| v.parent.clone());
        while let Some(name) = cur {
            if out.contains(&name) {
                break; // cycles are rejected by validation; never loop
            }
            cur = self.variants.get(&name).and_then(|v| v.parent.clone());
            out.push(name);
        }
        out
    }

    /// Every tool the variant owes: its ancestors' fragments' tools first
    /// (root-most first), then its own, in declaration order, without repeats.
    pub fn owed_tools(&self, variant: &str) -> Vec<String> {
        let mut chain = self.ancestors(variant);
        chain.reverse();
        chain.push(variant.to_string());
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for v in chain {
            let Some(v) = self.variants.get(&v) else {
                continue;
            };
            for f in &v.fragments {
                let Some(f) = self.fragments.get(f) else {
                    continue;
                };
                for t in &f.provides {
                    if seen.insert(t.clone()) {
                        out.push(t.clone());
                    }
                }
            }
        }
        out
    }

    /// All variants, parents before children; siblings in name order.
    pub fn build_order(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut placed = BTreeSet::new();
        // Depth in the parent chain gives a stable topological order.
        let mut by_depth: Vec<(usize, &String)> = self
            .variants
            .keys()
            .map(|n| (self.ancestors(n).len(), n))
            .collect();
        by_depth.sort();
        for (_, name) in by_depth {
            if placed.insert(name.clone()) {
                out.push(name.clone());
            }
        }
        out
    }

    /// Direct children of a variant, in name order.
    pub fn children(&self, variant: &str) -> Vec<String> {
        self.variants
            .values()
            .filter(|v| v.parent.as_deref() == Some(variant))
            .map(|v| v.name.clone())
            .collect()
    }

    /// The variant an alias points at.
    pub fn variant_for_alias(&self, alias: &str) -> Option<&Variant> {
        self.variants
            .values()
            .find(|v| v.aliases.iter().any(|a| a == alias))
    }

    /// Every alias with its variant, sorted by alias.
    pub fn aliases(&self) -> BTreeMap<String, String> {
        self.variants
            .values()
            .flat_map(|v| v.aliases.iter().map(move |a| (a.clone(), v.name.clone())))
            .collect()
    }
}

/// Parses a size such as `900MiB`, `1.5GiB`, `500MB` or `1048576` into bytes
/// (bytesize's reading: `KB` is 1000, `KiB` 1024, units in any case). A size
/// of zero is no budget at all, so it is refused.
pub fn parse_size(text: &str) -> Option<u64> {
    let bytes = text.trim().parse::<ByteSize>().ok()?.as_u64();
    (bytes > 0).then_some(bytes)
}

/// Formats bytes for people with two decimals (`1.23 GiB`).
pub fn format_size(bytes: u64) -> String {
    format!("{:.2}", ByteSize(bytes).display().iec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small, valid family on disk (fragment scripts must exist).
    pub(super) fn project(manifest: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docker")).unwrap();
        for f in ["a", "b"] {
            std::fs::write(
                dir.path().join(format!("docker/install-{f}.sh")),
                "#!/bin/sh\n",
            )
            .unwrap();
        }
        let path = dir.path().join("images.toml");
        std::fs::write(&path, manifest).unwrap();
        (dir, path)
    }

    pub(super) const GOOD: &str = r#"
schema = 1
repository = "example.org/fam"
upstream = "debian:trixie-slim@sha256:d4ed136e474e8fc338b3e4d2b27a1a3acdfcb8924481e511b02984a6617e084f"
default = "top"

[languages]
py = ["t2"]

[tools.t1]
probe = ["t1", "--version"]
version = 't1 ([0-9.]+)'
min = "1.2"

[tools.t2]
probe = ["t2"]
presence_only = true

[fragments.a]
script = "docker/install-a.sh"
provides = ["t1"]
[fragments.a.args]
A_VERSION = "1.0"

[fragments.b]
script = "docker/install-b.sh"
provides = ["t2"]

[variants.root]
fragments = ["a"]
aliases = ["neutral"]
size_budget = "10MiB"

[variants.top]
parent = "root"
fragments = ["b"]
aliases = ["top"]
serves = ["py"]
size_budget = "1.5GiB"

[profiles.local]
repository = "127.0.0.1:5000/fam"
"#;

    #[test]
    fn loads_a_valid_family() {
        let (_dir, path) = project(GOOD);
        let m = Manifest::load(&path).unwrap();
        assert_eq!(m.owed_tools("top"), vec!["t1", "t2"]);
        assert_eq!(m.owed_tools("root"), vec!["t1"]);
        assert_eq!(m.build_order(), vec!["root", "top"]);
        assert_eq!(m.children("root"), vec!["top"]);
        assert_eq!(m.ancestors("top"), vec!["root"]);
        assert_eq!(m.variants["top"].size_budget, 1610612736);
        assert!(m.tools["t2"].presence_only());
        assert_eq!(m.variant_for_alias("neutral").unwrap().name, "root");
        let s = m.resolve_profile(Some("local")).unwrap();
        assert_eq!(s.repository, "127.0.0.1:5000/fam");
        assert_eq!(
            s.upstream.pinned().unwrap().to_string(),
            "docker.io/library/debian:trixie-slim@sha256:d4ed136e474e8fc338b3e4d2b27a1a3acdfcb8924481e511b02984a6617e084f"
        );
        assert!(matches!(
            m.resolve_profile(Some("nope")),
            Err(ManifestError::UnknownProfile { .. })
        ));
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let (_dir, path) =
            project(&GOOD.replace("presence_only = true", "presence_only = true\nprobes = []"));
        let err = Manifest::load(&path).unwrap_err().to_string();
        assert!(err.contains("unknown field `probes`"), "{err}");
        assert!(err.contains("line 18"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("900MiB"), Some(900 * 1024 * 1024));
        assert_eq!(parse_size("1.5GiB"), Some(1610612736));
        assert_eq!(parse_size("500MB"), Some(500_000_000));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("0"), None);
        assert_eq!(format_size(1610612736), "1.50 GiB");
    }
}
