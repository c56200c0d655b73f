//! Tests of the code's shape, run on the source as go-containerregistry's
//! depcheck does: the layers and who may import whom ([`dependency_rule`]),
//! the length of a function ([`function_length`]), the one async boundary
//! ([`async_boundary`]), and the command line against docs/cli.md
//! ([`cli_rules`]).

mod async_boundary;
mod cli_rules;
mod dependency_rule;
mod function_length;

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `#[cfg(test)]` or `#[test]`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

/// Where the module `mod name;` declared in `file` lives: `name.rs`, or
/// the folder `name/` (its `mod.rs` and every module below it).
fn module_places(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => file.parent().unwrap().to_path_buf(),
        Some(stem) => file.parent().unwrap().join(stem),
        None => file.parent().unwrap().to_path_buf(),
    };
    [dir.join(format!("{name}.rs")), dir.join(name)]
}

/// The files and folders of the `#[cfg(test)] mod name;` items of `ast`
/// (the file `file`): test code, however its own items are marked.
fn test_modules(file: &Path, ast: &syn::File) -> Vec<PathBuf> {
    ast.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) if m.content.is_none() && test_only(&m.attrs) => {
                Some(module_places(file, &m.ident.to_string()))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// Whether `path` is in one of the test-only `places` (a file, or a folder).
fn in_test_code(path: &Path, places: &[PathBuf]) -> bool {
    places.iter().any(|p| path.starts_with(p))
}
