//! Which language a name selects: project marker files (`go.mod`,
//! `pyproject.toml`, `requirements*.txt`, …) and single-file extensions,
//! plus the `tsconfig.json` a TypeScript file is compiled under.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Marker file names (exact) and the language each one selects.
pub const MARKERS: &[(&str, &str)] = &[
    ("go.mod", "go"),
    ("pyproject.toml", "python"),
    ("setup.py", "python"),
    ("Pipfile", "python"),
    ("tox.ini", "python"),
    ("package.json", "js"),
    ("tsconfig.json", "ts"),
];

/// The language a marker file name selects (`requirements*.txt` included).
pub fn marker_language(file_name: &str) -> Option<&'static str> {
    if let Some((_, lang)) = MARKERS.iter().find(|(name, _)| *name == file_name) {
        return Some(lang);
    }
    if file_name.starts_with("requirements") && file_name.ends_with(".txt") {
        return Some("python");
    }
    None
}

/// The language a single file's extension selects.
pub fn extension_language(path: &Path) -> Option<&'static str> {
    match path.extension().and_then(OsStr::to_str)? {
        "py" => Some("python"),
        "go" => Some("go"),
        "js" | "jsx" => Some("js"),
        "ts" | "tsx" => Some("ts"),
        _ => None,
    }
}

/// The nearest `name` in the directories above `file`, up to the root.
pub(super) fn find_upward(file: &Path, name: &str) -> Option<PathBuf> {
    file.ancestors()
        .skip(1)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
