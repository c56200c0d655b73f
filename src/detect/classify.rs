//! Which language a name selects, by images.toml `[languages]`: project
//! marker files (`go.mod`, `requirements*.txt`, …) and single-file
//! extensions, plus the `tsconfig.json` a TypeScript file is compiled under.

use crate::manifest::Language;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The language a marker file name selects (validation keeps each marker to
/// one language).
pub(crate) fn marker_language<'a>(
    languages: &'a BTreeMap<String, Language>,
    file_name: &str,
) -> Option<&'a str> {
    languages
        .values()
        .find(|l| l.has_marker(file_name))
        .map(|l| l.name.as_str())
}

/// The language a single file's extension selects.
pub(crate) fn extension_language<'a>(
    languages: &'a BTreeMap<String, Language>,
    path: &Path,
) -> Option<&'a str> {
    let extension = path.extension().and_then(OsStr::to_str)?;
    languages
        .values()
        .find(|l| l.has_extension(extension))
        .map(|l| l.name.as_str())
}

/// Every marker, by language then as listed (for "looked for" messages).
pub(super) fn all_markers(languages: &BTreeMap<String, Language>) -> Vec<&str> {
    languages
        .values()
        .flat_map(|l| l.markers.iter().map(String::as_str))
        .collect()
}

/// Every extension, dotted, by language then as listed.
pub(super) fn all_extensions(languages: &BTreeMap<String, Language>) -> Vec<String> {
    languages
        .values()
        .flat_map(|l| l.extensions.iter().map(|e| format!(".{e}")))
        .collect()
}

/// The nearest `name` in the directories above `file`, up to the root.
pub(super) fn find_upward(file: &Path, name: &str) -> Option<PathBuf> {
    file.ancestors()
        .skip(1)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
