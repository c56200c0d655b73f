//! What to tell a maintainer whose smoke case wrote into the workspace: the
//! usual cause is a tool's build or cache directory (or a lock file) in the
//! project, and each well-known one has an environment variable or an
//! option that moves it under HOME, where the run contract lets it write.

/// Well-known things tools write into a project (a top-level name of the
/// copy), and what moves or stops them.
const KNOWN: &[(&str, &str)] = &[
    (
        "target",
        "`target` is cargo's build directory: set CARGO_TARGET_DIR = \"${XDG_CACHE_HOME}/cargo-target\"",
    ),
    (
        "Cargo.lock",
        "cargo writes Cargo.lock when the project has none: commit one in the sample project",
    ),
    (
        ".ruff_cache",
        "`.ruff_cache` is ruff's cache: set RUFF_CACHE_DIR = \"${XDG_CACHE_HOME}/ruff\"",
    ),
    (
        ".pytest_cache",
        "`.pytest_cache` is pytest's cache: set PYTEST_ADDOPTS = \"-o cache_dir=${XDG_CACHE_HOME}/pytest\"",
    ),
    (
        "__pycache__",
        "`__pycache__` is Python's bytecode: set PYTHONDONTWRITEBYTECODE = \"1\"",
    ),
    (
        ".mypy_cache",
        "`.mypy_cache` is mypy's cache: set MYPY_CACHE_DIR = \"${XDG_CACHE_HOME}/mypy\"",
    ),
    (
        ".eslintcache",
        "`.eslintcache` is eslint's --cache file: drop --cache, or give --cache-location under HOME",
    ),
    (
        "node_modules",
        "`node_modules` was written (an install, or a tool's cache in node_modules/.cache): \
         install in the image, or move the cache under HOME",
    ),
    (
        ".gradle",
        "`.gradle` is Gradle's project cache: pass --project-cache-dir under HOME",
    ),
    (
        ".zig-cache",
        "`.zig-cache` is zig's cache: set ZIG_LOCAL_CACHE_DIR = \"${XDG_CACHE_HOME}/zig\"",
    ),
];

/// The hint for a read-only case whose copy changed by `changed` (`added
/// X`, `modified X`, `removed X`): the known causes among the top-level
/// names it touched, else the general one.
pub(super) fn workspace_hint(changed: &[String]) -> String {
    let mut known: Vec<&str> = Vec::new();
    for change in changed {
        let path = change.split_once(' ').map_or(change.as_str(), |(_, p)| p);
        let top = path.split('/').next().unwrap_or(path);
        if let Some((_, hint)) = KNOWN.iter().find(|(name, _)| *name == top)
            && !known.contains(hint)
        {
            known.push(hint);
        }
    }
    let place = "environment variables go in the fragment's [fragments.NAME.env] in \
                 images.toml: HOME is writable at run time, the workspace is not";
    if known.is_empty() {
        format!(
            "the usual cause is a tool's cache or build directory in the project: point it \
             under ${{HOME}} or ${{XDG_CACHE_HOME}} with the tool's environment variable ({place}); \
             if writing is the command's job, mark it `writes = true`"
        )
    } else {
        format!("{} ({place})", known.join("; "))
    }
}

/// `changed` without the entries below an added directory that is itself
/// listed (`added target` stands for `added target/debug/…`).
pub(super) fn collapsed(changed: &[String]) -> Vec<&str> {
    let added: Vec<&str> = changed
        .iter()
        .filter_map(|c| c.strip_prefix("added "))
        .collect();
    changed
        .iter()
        .filter(|c| {
            let Some(path) = c.strip_prefix("added ") else {
                return true;
            };
            !added.iter().any(|dir| {
                path.len() > dir.len()
                    && path.starts_with(dir)
                    && path[dir.len()..].starts_with('/')
            })
        })
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_known_directory_names_its_tool_and_variable() {
        let hint = workspace_hint(&strings(&[
            "added target",
            "added target/debug",
            "added Cargo.lock",
        ]));
        assert_eq!(
            hint,
            "`target` is cargo's build directory: set CARGO_TARGET_DIR = \
             \"${XDG_CACHE_HOME}/cargo-target\"; cargo writes Cargo.lock when the project has \
             none: commit one in the sample project (environment variables go in the \
             fragment's [fragments.NAME.env] in images.toml: HOME is writable at run time, the \
             workspace is not)"
        );
        let other = workspace_hint(&strings(&["added .cache/x", "modified src/a.py"]));
        assert!(
            other.starts_with("the usual cause is a tool's cache or build directory"),
            "{other}"
        );
        assert!(other.contains("`writes = true`"), "{other}");
    }

    #[test]
    fn entries_below_an_added_directory_fold_into_it() {
        let changed = strings(&[
            "added target",
            "added target/debug",
            "added target/debug/x",
            "added targets.txt",
            "modified target2/a",
        ]);
        assert_eq!(
            collapsed(&changed),
            ["added target", "added targets.txt", "modified target2/a"]
        );
    }
}
