//! The bounded directory walk that finds project markers: `.gitignore`
//! honoured, hidden and vendored directories skipped, links to directories
//! not followed, and every bound reached or entry unreadable reported as a
//! [`Warning`].

use super::classify::marker_language;
use crate::manifest::Language;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Directories never descended into: installed or vendored third-party code,
/// whose own manifests describe dependencies, not the project.
pub(crate) const SKIPPED_DIRS: &[&str] = &[
    "node_modules",
    "vendor",
    "third_party",
    "bower_components",
    "__pycache__",
    "site-packages",
];

/// Bounds on the directory walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Deepest entry examined; the target's children are depth 1.
    pub max_depth: usize,
    /// Entries (files and directories) examined before the walk stops.
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 32,
            max_entries: 250_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct WalkStats {
    /// Entries examined.
    pub entries: usize,
    /// The walk stopped at a bound, so languages may be missing.
    pub truncated: bool,
}

/// Something that did not stop detection but may make it incomplete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Warning {
    /// A directory or entry could not be read; what is below it is unknown.
    Unreadable {
        path: Option<PathBuf>,
        error: String,
    },
    /// Entries deeper than the limit exist and were not examined.
    DepthLimit {
        limit: usize,
        first: PathBuf,
        skipped: usize,
    },
    /// The walk stopped after this many entries.
    EntryLimit { limit: usize },
    /// A marker that is a symbolic link to nothing; it selects no language.
    DanglingMarker { path: PathBuf },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Unreadable {
                path: Some(path),
                error,
            } => write!(
                f,
                "could not read {}: {error}; languages below it are not reported",
                path.display()
            ),
            Warning::Unreadable { path: None, error } => {
                write!(f, "walk error: {error}")
            }
            Warning::DepthLimit {
                limit,
                first,
                skipped,
            } => write!(
                f,
                "depth limit {limit} reached: {skipped} deeper entries not examined \
                 (first: {}); raise --max-depth or name the language",
                first.display()
            ),
            Warning::EntryLimit { limit } => write!(
                f,
                "entry limit {limit} reached: the walk stopped early and languages in the \
                 rest of the tree are not reported; raise --max-entries, point at a \
                 subdirectory or name the language"
            ),
            Warning::DanglingMarker { path } => write!(
                f,
                "marker {} is a symbolic link to nothing; ignored",
                path.display()
            ),
        }
    }
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

pub(super) struct WalkOutcome {
    /// language -> marker directory -> marker files in it.
    pub(super) markers: BTreeMap<String, BTreeMap<PathBuf, Vec<PathBuf>>>,
    pub(super) stats: WalkStats,
    pub(super) warnings: Vec<Warning>,
}

pub(super) fn walk_markers(
    root: &Path,
    limits: Limits,
    languages: &BTreeMap<String, Language>,
) -> WalkOutcome {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(true)
        .parents(true)
        .ignore(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        // One level past the bound, so reaching it can be reported.
        .max_depth(Some(limits.max_depth.saturating_add(1)))
        // Sorted so a truncated walk is the same walk every time.
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| {
            let skipped = entry.depth() > 0
                && entry.file_type().is_some_and(|t| t.is_dir())
                && entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| SKIPPED_DIRS.contains(&name));
            !skipped
        });

    let mut markers: BTreeMap<String, BTreeMap<PathBuf, Vec<PathBuf>>> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut entries = 0usize;
    let mut truncated = false;
    let mut too_deep: Option<(PathBuf, usize)> = None;

    for result in builder.build() {
        let entry = match result {
            Ok(entry) => entry,
            Err(err) => {
                warnings.push(walk_warning(&err));
                continue;
            }
        };
        if let Some(err) = entry.error() {
            warnings.push(walk_warning(err));
        }
        if entry.depth() == 0 {
            continue;
        }
        if entry.depth() > limits.max_depth {
            let (_, skipped) = too_deep.get_or_insert_with(|| (entry.path().to_path_buf(), 0));
            *skipped += 1;
            continue;
        }
        entries += 1;
        if entries > limits.max_entries {
            entries -= 1;
            truncated = true;
            warnings.push(Warning::EntryLimit {
                limit: limits.max_entries,
            });
            break;
        }
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let Some(language) = entry
            .file_name()
            .to_str()
            .and_then(|name| marker_language(languages, name))
        else {
            continue;
        };
        let path = entry.path();
        if entry.path_is_symlink() && !path.exists() {
            warnings.push(Warning::DanglingMarker {
                path: path.to_path_buf(),
            });
            continue;
        }
        let dir = path.parent().unwrap_or(root).to_path_buf();
        markers
            .entry(language.to_string())
            .or_default()
            .entry(dir)
            .or_default()
            .push(path.to_path_buf());
    }
    if let Some((first, skipped)) = too_deep {
        truncated = true;
        warnings.push(Warning::DepthLimit {
            limit: limits.max_depth,
            first,
            skipped,
        });
    }
    WalkOutcome {
        markers,
        stats: WalkStats { entries, truncated },
        warnings,
    }
}

fn walk_warning(err: &ignore::Error) -> Warning {
    fn path_of(err: &ignore::Error) -> Option<PathBuf> {
        match err {
            ignore::Error::WithPath { path, .. } => Some(path.clone()),
            ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
                path_of(err)
            }
            ignore::Error::Loop { child, .. } => Some(child.clone()),
            _ => None,
        }
    }
    fn innermost(err: &ignore::Error) -> String {
        match err {
            ignore::Error::WithPath { err, .. } | ignore::Error::WithDepth { err, .. } => {
                innermost(err)
            }
            other => other.to_string(),
        }
    }
    Warning::Unreadable {
        path: path_of(err),
        error: innermost(err),
    }
}

/// Folds marker directories of one language into outermost scopes: each
/// scope with every marker at or below it (its own first, then by path).
pub(super) fn fold_nested(dirs: BTreeMap<PathBuf, Vec<PathBuf>>) -> Vec<(PathBuf, Vec<PathBuf>)> {
    // BTreeMap order puts a directory before everything below it.
    let mut scopes: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    for (dir, files) in dirs {
        match scopes.last_mut() {
            Some((scope, markers)) if dir.starts_with(&*scope) => markers.extend(files),
            _ => scopes.push((dir, files)),
        }
    }
    scopes
}
