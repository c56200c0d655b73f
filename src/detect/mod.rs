//! Language detection and tool resolution: which toolchains verify would run
//! for a path, where each one runs, and whether each tool comes from the
//! project (`node_modules/.bin`) or from the image.
//!
//! Rules, in order (the server's `edit_verify.detect_languages`):
//! 1. an explicit language skips detection;
//! 2. a single file is classified by extension (`.ts`/`.tsx` also report the
//!    nearest `tsconfig.json` found scanning upward to the filesystem root,
//!    as `tsc` itself does);
//! 3. a directory is walked for project markers (each language's `markers`);
//! 4. every language found is returned, scoped to the directory holding its
//!    marker; nested markers of the same language fold into the outermost
//!    scope (a workspace root covers its packages) and are listed as evidence;
//! 5. nothing found is an error ([`DetectError::Unknown`]), never a guess.
//!
//! The walk (the `ignore` crate) honours `.gitignore` files even outside a
//! git repository (but not the user's global excludes, so results do not
//! depend on the machine), skips hidden entries (`.git`, `.venv`, `.tox`:
//! tool state, never a project root), skips [`SKIPPED_DIRS`], does not follow
//! symbolic links to directories (they can leave the tree or loop), and is
//! bounded by [`Limits`]; hitting a bound is reported as a [`Warning`].
//!
//! Markers and extensions are data: images.toml `[languages]` (see
//! [`crate::manifest::Language`]); nothing here names a language but `ts`
//! (its files report their `tsconfig.json`) and the Node languages
//! ([`NODE_LANGUAGES`], whose tools resolve local-first).
//!
//! By job: `classify` (what a marker or extension selects), `walk` (the
//! bounded marker walk), `tools` (local or image tool resolution); this
//! module holds the result types and [`detect`] itself.

mod classify;
mod tools;
mod walk;

pub(crate) use classify::extension_language;
#[cfg(test)]
use tools::Resolution;
pub(crate) use tools::{NODE_LANGUAGES, ResolvedTool, local_tool};
pub(crate) use walk::{Limits, WalkStats, Warning};

use crate::manifest::Language;
use classify::{all_extensions, all_markers, find_upward};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use walk::{fold_nested, walk_markers};

/// What to detect and where verify would run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// Skip detection and use this language (rule 1).
    pub language: Option<String>,
    /// The verify working directory: scopes are reported relative to it and a
    /// single file's local tools are looked up in it. Default: the target if
    /// it is a directory, else the file's directory.
    pub workdir: Option<PathBuf>,
    pub limits: Limits,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Detection {
    /// The target, canonicalised.
    #[serde(serialize_with = "lossy")]
    pub target: PathBuf,
    /// The verify working directory, canonicalised.
    #[serde(serialize_with = "lossy")]
    pub workdir: PathBuf,
    /// Sorted by language, then scope.
    pub languages: Vec<DetectedLanguage>,
    /// Present when a directory was walked.
    pub walk: Option<WalkStats>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DetectedLanguage {
    pub language: String,
    /// Where verify runs for this language, relative to the workdir (`.` is
    /// the workdir itself; absolute when outside it). A file for file targets.
    #[serde(serialize_with = "lossy")]
    pub scope: PathBuf,
    pub evidence: Evidence,
    /// In `images.toml` `[languages]` order.
    pub tools: Vec<ResolvedTool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub(crate) enum Evidence {
    /// Named explicitly.
    Override,
    /// A single file's extension.
    Extension { extension: String },
    /// A `.ts`/`.tsx` file and the `tsconfig.json` found scanning upward
    /// (workdir-relative like scopes), or none.
    TypescriptFile {
        extension: String,
        #[serde(serialize_with = "lossy_opt")]
        tsconfig: Option<PathBuf>,
    },
    /// Marker files (workdir-relative), the scope's own first.
    Marker {
        #[serde(serialize_with = "lossy_vec")]
        markers: Vec<PathBuf>,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DetectError {
    #[error("cannot read {path}: {source}", path = path.display())]
    Path {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("verify working directory {path} is not a directory", path = path.display())]
    WorkdirNotDir { path: PathBuf },
    #[error(
        "language `{language}` is not in images.toml [languages] (known: {known}); \
         name one of those, or add it to images.toml",
        known = known.join(", ")
    )]
    UnknownLanguage {
        language: String,
        known: Vec<String>,
    },
    #[error(
        "no language detected for {target}: {what}; name the language with --language \
         (one of: {known})",
        target = target.display(),
        known = known.join(", ")
    )]
    Unknown {
        target: PathBuf,
        /// What was looked for.
        what: String,
        known: Vec<String>,
        /// Why the answer may be incomplete (unreadable parts, bounds).
        warnings: Vec<Warning>,
    },
}

/// Detects the languages of `target` by the markers and extensions of
/// `languages` (images.toml `[languages]`) and resolves each one's tools.
pub(crate) fn detect(
    target: &Path,
    options: &Options,
    languages: &BTreeMap<String, Language>,
) -> Result<Detection, DetectError> {
    let target = canonical(target)?;
    let is_dir = target.is_dir();
    let workdir = workdir(&target, is_dir, options.workdir.as_deref())?;
    let (found, walk, warnings) = if let Some(language) = &options.language {
        if !languages.contains_key(language) {
            return Err(DetectError::UnknownLanguage {
                language: language.clone(),
                known: known(languages),
            });
        }
        let found = (language.clone(), target.clone(), Evidence::Override);
        (vec![found], None, Vec::new())
    } else if !is_dir {
        (
            vec![by_extension(&target, &workdir, languages)?],
            None,
            Vec::new(),
        )
    } else {
        let (found, stats, warnings) = by_markers(&target, &workdir, options.limits, languages)?;
        (found, Some(stats), warnings)
    };
    Ok(Detection {
        languages: resolve_tools(found, &workdir, languages)?,
        target,
        workdir,
        walk,
        warnings,
    })
}

/// A language found before its tools are resolved: its name, its scope (a
/// directory, or the file) and the evidence.
type Found = (String, PathBuf, Evidence);

fn canonical(path: &Path) -> Result<PathBuf, DetectError> {
    path.canonicalize().map_err(|source| DetectError::Path {
        path: path.to_path_buf(),
        source,
    })
}

fn known(languages: &BTreeMap<String, Language>) -> Vec<String> {
    languages.keys().cloned().collect()
}

/// Where verify runs: `asked` (a directory), else the target directory or
/// the target file's directory.
fn workdir(target: &Path, is_dir: bool, asked: Option<&Path>) -> Result<PathBuf, DetectError> {
    match asked {
        Some(dir) => {
            let dir = canonical(dir)?;
            if !dir.is_dir() {
                return Err(DetectError::WorkdirNotDir { path: dir });
            }
            Ok(dir)
        }
        None if is_dir => Ok(target.to_path_buf()),
        None => Ok(target
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))),
    }
}

/// A single file, by its extension (rule 2).
fn by_extension(
    target: &Path,
    workdir: &Path,
    languages: &BTreeMap<String, Language>,
) -> Result<Found, DetectError> {
    let extension = target
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(language) = extension_language(languages, target) else {
        return Err(DetectError::Unknown {
            target: target.to_path_buf(),
            what: format!(
                "the extension {} is not one of {}",
                if extension.is_empty() {
                    "(none)".to_string()
                } else {
                    format!(".{extension}")
                },
                or_none(all_extensions(languages).join(", "))
            ),
            known: known(languages),
            warnings: Vec::new(),
        });
    };
    let evidence = if language == "ts" {
        Evidence::TypescriptFile {
            extension,
            tsconfig: find_upward(target, "tsconfig.json").map(|p| relative_to(&p, workdir)),
        }
    } else {
        Evidence::Extension { extension }
    };
    Ok((language.to_string(), target.to_path_buf(), evidence))
}

/// A directory, by the markers its walk finds (rules 3 and 4), with the
/// walk's statistics and warnings.
fn by_markers(
    target: &Path,
    workdir: &Path,
    limits: Limits,
    languages: &BTreeMap<String, Language>,
) -> Result<(Vec<Found>, WalkStats, Vec<Warning>), DetectError> {
    let outcome = walk_markers(target, limits, languages);
    let mut found = Vec::new();
    for (language, dirs) in outcome.markers {
        for (scope, markers) in fold_nested(dirs) {
            let markers = markers.iter().map(|m| relative_to(m, workdir)).collect();
            found.push((language.clone(), scope, Evidence::Marker { markers }));
        }
    }
    if found.is_empty() {
        return Err(DetectError::Unknown {
            target: target.to_path_buf(),
            what: format!(
                "no project marker found ({})",
                or_none(all_markers(languages).join(", "))
            ),
            known: known(languages),
            warnings: outcome.warnings,
        });
    }
    Ok((found, outcome.stats, outcome.warnings))
}

/// Each language found with its tools resolved where verify runs it (the
/// scope directory; a single file's in the workdir), sorted.
fn resolve_tools(
    found: Vec<Found>,
    workdir: &Path,
    languages: &BTreeMap<String, Language>,
) -> Result<Vec<DetectedLanguage>, DetectError> {
    let rel = |p: &Path| relative_to(p, workdir);
    let mut detected = Vec::with_capacity(found.len());
    for (language, scope, evidence) in found {
        let Some(tools) = languages.get(&language).map(|l| &l.tools) else {
            return Err(DetectError::UnknownLanguage {
                language,
                known: known(languages),
            });
        };
        let run_dir = if scope.is_dir() {
            scope.clone()
        } else {
            workdir.to_path_buf()
        };
        let tools = tools::resolve(&language, tools, &run_dir, rel);
        detected.push(DetectedLanguage {
            language,
            scope: rel(&scope),
            evidence,
            tools,
        });
    }
    detected.sort_by(|a, b| (&a.language, &a.scope).cmp(&(&b.language, &b.scope)));
    Ok(detected)
}

/// A list for a message, or what it means when images.toml declares none.
fn or_none(list: String) -> String {
    if list.is_empty() {
        "images.toml [languages] declares none".to_string()
    } else {
        list
    }
}

fn relative_to(path: &Path, base: &Path) -> PathBuf {
    match path.strip_prefix(base) {
        Ok(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
        Ok(rel) => rel.to_path_buf(),
        Err(_) => path.to_path_buf(),
    }
}

fn lossy<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

fn lossy_opt<S: Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => lossy(p, s),
        None => s.serialize_none(),
    }
}

fn lossy_vec<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| p.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// A fixture of the design note's rules (S1), as images.toml would
    /// declare them; these tests are about detection, not the shipped data.
    fn languages() -> BTreeMap<String, Language> {
        let list = |items: &[&str]| items.iter().map(|t| t.to_string()).collect();
        let mut map = BTreeMap::new();
        for (name, tools, markers, extensions) in [
            (
                "python",
                &["ruff", "pyright", "pytest"][..],
                &[
                    "pyproject.toml",
                    "setup.py",
                    "requirements*.txt",
                    "Pipfile",
                    "tox.ini",
                ][..],
                &["py"][..],
            ),
            ("go", &["go", "gofmt"][..], &["go.mod"][..], &["go"][..]),
            (
                "js",
                &["eslint", "jest"][..],
                &["package.json"][..],
                &["js", "jsx"][..],
            ),
            (
                "ts",
                &["tsc", "eslint", "jest"][..],
                &["tsconfig.json"][..],
                &["ts", "tsx"][..],
            ),
        ] {
            map.insert(
                name.to_string(),
                Language {
                    name: name.to_string(),
                    tools: list(tools),
                    markers: list(markers),
                    extensions: list(extensions),
                },
            );
        }
        map
    }

    /// Creates files (parents included) under `root`.
    fn tree(root: &Path, files: &[&str]) {
        for file in files {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, "").unwrap();
        }
    }

    fn run(target: &Path) -> Result<Detection, DetectError> {
        detect(target, &Options::default(), &languages())
    }

    /// (language, scope) pairs.
    fn found(d: &Detection) -> Vec<(String, String)> {
        d.languages
            .iter()
            .map(|l| (l.language.clone(), l.scope.display().to_string()))
            .collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn tool<'a>(d: &'a Detection, language: &str, name: &str) -> &'a ResolvedTool {
        d.languages
            .iter()
            .find(|l| l.language == language)
            .and_then(|l| l.tools.iter().find(|t| t.tool == name))
            .unwrap_or_else(|| panic!("no {language}/{name} in {d:?}"))
    }

    #[test]
    fn single_files_are_classified_by_extension() {
        let dir = tempfile::tempdir().unwrap();
        for (file, language) in [
            ("a.py", "python"),
            ("a.go", "go"),
            ("a.js", "js"),
            ("a.jsx", "js"),
            ("a.ts", "ts"),
            ("a.tsx", "ts"),
        ] {
            tree(dir.path(), &[file]);
            let d = run(&dir.path().join(file)).unwrap();
            assert_eq!(found(&d), pairs(&[(language, file)]), "{file}");
            let tools: Vec<&str> = d.languages[0]
                .tools
                .iter()
                .map(|t| t.tool.as_str())
                .collect();
            assert_eq!(tools, languages()[language].tools, "{file}");
            assert_eq!(d.walk, None);
        }
    }

    #[test]
    fn a_file_with_another_extension_is_unknown_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["Makefile", "notes.md", "go.mod"]);
        for file in ["Makefile", "notes.md", "go.mod"] {
            match run(&dir.path().join(file)) {
                Err(DetectError::Unknown { what, known, .. }) => {
                    assert!(what.contains("extension"), "{what}");
                    assert_eq!(known, ["go", "js", "python", "ts"]);
                }
                other => panic!("{file}: expected Unknown, got {other:?}"),
            }
        }
    }

    #[test]
    fn typescript_files_report_the_nearest_tsconfig_upward() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "tsconfig.json",
                "pkg/tsconfig.json",
                "pkg/src/deep/x.ts",
                "other/src/y.tsx",
            ],
        );
        let tsconfig = |file: &str, workdir: &Path| {
            let options = Options {
                workdir: Some(workdir.to_path_buf()),
                ..Options::default()
            };
            match detect(&dir.path().join(file), &options, &languages())
                .unwrap()
                .languages[0]
                .evidence
                .clone()
            {
                Evidence::TypescriptFile { tsconfig, .. } => tsconfig,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            tsconfig("pkg/src/deep/x.ts", dir.path()),
            Some(PathBuf::from("pkg/tsconfig.json"))
        );
        assert_eq!(
            tsconfig("other/src/y.tsx", dir.path()),
            Some(PathBuf::from("tsconfig.json"))
        );
        let lone = tempfile::tempdir().unwrap();
        tree(lone.path(), &["src/z.ts"]);
        let d = run(&lone.path().join("src/z.ts")).unwrap();
        assert_eq!(
            d.languages[0].evidence,
            Evidence::TypescriptFile {
                extension: "ts".into(),
                tsconfig: None
            }
        );
    }

    #[test]
    fn each_marker_selects_its_language_at_the_root() {
        for (marker, language) in [
            ("go.mod", "go"),
            ("pyproject.toml", "python"),
            ("setup.py", "python"),
            ("requirements.txt", "python"),
            ("requirements-dev.txt", "python"),
            ("Pipfile", "python"),
            ("tox.ini", "python"),
            ("package.json", "js"),
            ("tsconfig.json", "ts"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            tree(dir.path(), &[marker, "README.md", "requirements.md"]);
            let d = run(dir.path()).unwrap();
            assert_eq!(found(&d), pairs(&[(language, ".")]), "{marker}");
            assert_eq!(
                d.languages[0].evidence,
                Evidence::Marker {
                    markers: vec![PathBuf::from(marker)]
                }
            );
            assert!(!d.walk.unwrap().truncated);
        }
    }

    #[test]
    fn polyglot_languages_are_scoped_to_their_subtrees() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "backend/go.mod",
                "backend/cmd/main.go",
                "web/package.json",
                "web/tsconfig.json",
                "web/src/app.ts",
                "ml/train/requirements.txt",
                "docs/index.md",
            ],
        );
        let d = run(dir.path()).unwrap();
        assert_eq!(
            found(&d),
            pairs(&[
                ("go", "backend"),
                ("js", "web"),
                ("python", "ml/train"),
                ("ts", "web")
            ])
        );
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }

    #[test]
    fn nested_markers_fold_into_the_outermost_scope_of_their_language() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "package.json",
                "packages/a/package.json",
                "packages/b/package.json",
                "svc/go.mod",
                "svc/tools/go.mod",
                "svc-extra/go.mod",
            ],
        );
        let d = run(dir.path()).unwrap();
        assert_eq!(
            found(&d),
            pairs(&[("go", "svc"), ("go", "svc-extra"), ("js", ".")])
        );
        let js = d.languages.iter().find(|l| l.language == "js").unwrap();
        assert_eq!(
            js.evidence,
            Evidence::Marker {
                markers: [
                    "package.json",
                    "packages/a/package.json",
                    "packages/b/package.json"
                ]
                .iter()
                .map(PathBuf::from)
                .collect()
            }
        );
    }

    #[test]
    fn vendored_hidden_and_gitignored_directories_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "app/go.mod",
                "node_modules/left-pad/package.json",
                "app/vendor/github.com/x/go.mod",
                "third_party/lib/setup.py",
                ".venv/lib/pyproject.toml",
                "build/gen/setup.py",
                "app/scratch/tsconfig.json",
                "app/keep/tox.ini",
                "generated.json",
            ],
        );
        // No git repository here: .gitignore is honoured anyway, at any level.
        fs::write(dir.path().join(".gitignore"), "build/\n").unwrap();
        fs::write(dir.path().join("app/.gitignore"), "scratch/\n").unwrap();
        let d = run(dir.path()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "app"), ("python", "app/keep")]));

        // The same tree without the .gitignore files finds the ignored ones,
        // but still nothing inside a repository's .git.
        fs::remove_file(dir.path().join(".gitignore")).unwrap();
        fs::remove_file(dir.path().join("app/.gitignore")).unwrap();
        tree(dir.path(), &[".git/hooks/package.json"]);
        let d = run(dir.path()).unwrap();
        assert_eq!(
            found(&d),
            pairs(&[
                ("go", "app"),
                ("python", "app/keep"),
                ("python", "build/gen"),
                ("ts", "app/scratch")
            ])
        );
    }

    #[test]
    fn symlink_loops_and_links_out_of_the_tree_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        tree(dir.path(), &["a/go.mod", "a/b/main.go"]);
        tree(outside.path(), &["package.json"]);
        symlink("..", dir.path().join("a/b/loop")).unwrap();
        symlink(dir.path(), dir.path().join("a/self")).unwrap();
        symlink(outside.path(), dir.path().join("elsewhere")).unwrap();
        let d = run(dir.path()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "a")]));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert!(!d.walk.unwrap().truncated);
    }

    #[test]
    fn a_dangling_marker_link_selects_nothing_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        symlink("missing/go.mod", dir.path().join("go.mod")).unwrap();
        match run(dir.path()) {
            Err(DetectError::Unknown { warnings, .. }) => assert_eq!(
                warnings,
                vec![Warning::DanglingMarker {
                    path: dir.path().canonicalize().unwrap().join("go.mod")
                }]
            ),
            other => panic!("expected Unknown, got {other:?}"),
        }
    }

    #[test]
    fn an_empty_directory_is_unknown_and_asks_for_a_language() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("--language"), "{message}");
        assert!(message.contains("go.mod"), "{message}");
        match err {
            DetectError::Unknown { warnings, .. } => assert!(warnings.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_target_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        match run(&missing) {
            Err(DetectError::Path { path, .. }) => assert_eq!(path, missing),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn markers_beyond_the_depth_limit_are_not_examined_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        // go.mod at depth 8.
        tree(dir.path(), &["1/2/3/4/5/6/7/go.mod"]);
        let limits = |max_depth| Options {
            limits: Limits {
                max_depth,
                max_entries: 1000,
            },
            ..Options::default()
        };
        let d = detect(dir.path(), &limits(8), &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "1/2/3/4/5/6/7")]));
        assert!(d.warnings.is_empty());
        match detect(dir.path(), &limits(5), &languages()) {
            Err(DetectError::Unknown { warnings, .. }) => match &warnings[..] {
                [
                    Warning::DepthLimit {
                        limit: 5,
                        first,
                        skipped: 1,
                    },
                ] => {
                    assert!(first.ends_with("1/2/3/4/5/6"), "{first:?}")
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_huge_tree_stops_at_the_entry_limit_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        // Sorted walk: aa/ first, then 500 files in bulk/, then zz/.
        let mut files = vec!["aa/go.mod".to_string(), "zz/package.json".to_string()];
        files.extend((0..500).map(|i| format!("bulk/f{i:03}.txt")));
        tree(
            dir.path(),
            &files.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let options = |max_entries| Options {
            limits: Limits {
                max_depth: 32,
                max_entries,
            },
            ..Options::default()
        };
        let d = detect(dir.path(), &options(100), &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "aa")]));
        assert_eq!(
            d.walk,
            Some(WalkStats {
                entries: 100,
                truncated: true
            })
        );
        assert_eq!(d.warnings, vec![Warning::EntryLimit { limit: 100 }]);

        let d = detect(dir.path(), &options(10_000), &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "aa"), ("js", "zz")]));
        // 3 directories + 502 files.
        assert_eq!(
            d.walk,
            Some(WalkStats {
                entries: 505,
                truncated: false
            })
        );
    }

    #[test]
    fn node_tools_resolve_local_executables_before_global_ones() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &["web/package.json", "web/tsconfig.json", "api/go.mod"],
        );
        let bin = dir.path().join("web/node_modules/.bin");
        fs::create_dir_all(&bin).unwrap();
        let write = |name: &str, mode: u32| {
            let path = bin.join(name);
            fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        };
        write("eslint", 0o755);
        // Not executable: the image's jest runs.
        write("jest", 0o644);
        // npm's usual layout: a symlink to the package's executable script.
        let real = dir.path().join("web/node_modules/typescript/bin/tsc");
        fs::create_dir_all(real.parent().unwrap()).unwrap();
        fs::write(&real, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        symlink("../typescript/bin/tsc", bin.join("tsc")).unwrap();
        // Only JS/TS tools resolve locally.
        write("go", 0o755);
        fs::create_dir_all(dir.path().join("api/node_modules/.bin")).unwrap();
        fs::copy(bin.join("go"), dir.path().join("api/node_modules/.bin/go")).unwrap();

        let d = run(dir.path()).unwrap();
        let local = |p: &str| Resolution::Local {
            path: PathBuf::from(p),
        };
        assert_eq!(
            tool(&d, "js", "eslint").resolution,
            local("web/node_modules/.bin/eslint")
        );
        assert_eq!(tool(&d, "js", "jest").resolution, Resolution::Global);
        assert_eq!(
            tool(&d, "ts", "tsc").resolution,
            local("web/node_modules/.bin/tsc")
        );
        assert_eq!(tool(&d, "ts", "jest").resolution, Resolution::Global);
        assert_eq!(tool(&d, "go", "go").resolution, Resolution::Global);
        assert_eq!(tool(&d, "js", "eslint").to_string(), "eslint (local)");
        assert_eq!(tool(&d, "js", "jest").to_string(), "jest (global)");

        // A directory named like a tool is not a tool.
        fs::remove_file(bin.join("eslint")).unwrap();
        fs::create_dir(bin.join("eslint")).unwrap();
        let d = run(dir.path()).unwrap();
        assert_eq!(tool(&d, "js", "eslint").resolution, Resolution::Global);
    }

    #[test]
    fn a_single_file_resolves_local_tools_in_the_workdir() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["src/app.js"]);
        let bin = dir.path().join("node_modules/.bin");
        fs::create_dir_all(&bin).unwrap();
        fs::write(bin.join("eslint"), "").unwrap();
        fs::set_permissions(bin.join("eslint"), fs::Permissions::from_mode(0o700)).unwrap();
        let file = dir.path().join("src/app.js");

        let d = run(&file).unwrap();
        assert_eq!(found(&d), pairs(&[("js", "app.js")]));
        assert_eq!(tool(&d, "js", "eslint").resolution, Resolution::Global);

        let options = Options {
            workdir: Some(dir.path().to_path_buf()),
            ..Options::default()
        };
        let d = detect(&file, &options, &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("js", "src/app.js")]));
        assert_eq!(
            tool(&d, "js", "eslint").resolution,
            Resolution::Local {
                path: PathBuf::from("node_modules/.bin/eslint")
            }
        );
    }

    #[test]
    fn an_explicit_language_skips_detection() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["go.mod", "notes.txt"]);
        let options = |language: &str| Options {
            language: Some(language.to_string()),
            ..Options::default()
        };
        let d = detect(dir.path(), &options("python"), &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("python", ".")]));
        assert_eq!(d.languages[0].evidence, Evidence::Override);
        assert_eq!(d.walk, None);
        let d = detect(&dir.path().join("notes.txt"), &options("go"), &languages()).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "notes.txt")]));

        match detect(dir.path(), &options("cobol"), &languages()) {
            Err(DetectError::UnknownLanguage { language, known }) => {
                assert_eq!(language, "cobol");
                assert_eq!(known, ["go", "js", "python", "ts"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_language_without_markers_is_found_only_when_named() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["tsconfig.json", "a.ts"]);
        let mut map = languages();
        let ts = map.get_mut("ts").unwrap();
        ts.markers.clear();
        ts.extensions.clear();
        match detect(dir.path(), &Options::default(), &map) {
            Err(DetectError::Unknown { what, .. }) => assert_eq!(
                what,
                "no project marker found (go.mod, package.json, pyproject.toml, setup.py, \
                 requirements*.txt, Pipfile, tox.ini)"
            ),
            other => panic!("{other:?}"),
        }
        match detect(&dir.path().join("a.ts"), &Options::default(), &map) {
            Err(DetectError::Unknown { what, .. }) => {
                assert_eq!(what, "the extension .ts is not one of .go, .js, .jsx, .py")
            }
            other => panic!("{other:?}"),
        }
        let named = Options {
            language: Some("ts".into()),
            ..Options::default()
        };
        let d = detect(dir.path(), &named, &map).unwrap();
        assert_eq!(found(&d), pairs(&[("ts", ".")]));
    }

    #[test]
    fn a_language_declared_as_data_is_detected_with_no_code_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &["crates/app/Cargo.toml", "crates/app/src/main.rs", "go.mod"],
        );
        let mut map = languages();
        map.insert(
            "rust".into(),
            Language {
                name: "rust".into(),
                tools: vec!["cargo".into()],
                markers: vec!["Cargo.toml".into()],
                extensions: vec!["rs".into()],
            },
        );
        let d = detect(dir.path(), &Options::default(), &map).unwrap();
        assert_eq!(found(&d), pairs(&[("go", "."), ("rust", "crates/app")]));
        let file = dir.path().join("crates/app/src/main.rs");
        let d = detect(&file, &Options::default(), &map).unwrap();
        assert_eq!(found(&d), pairs(&[("rust", "main.rs")]));
        assert_eq!(
            d.languages[0].evidence,
            Evidence::Extension {
                extension: "rs".into()
            }
        );
    }
}
