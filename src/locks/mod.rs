//! The committed lock files of `docker/locks/<fragment>/` and whether they
//! still match what images.toml pins: the gate behind `render --check` (and
//! the check `build` makes before it starts), and the writing side of
//! `sunaba-images lock` ([`generate`]).
//!
//! One directory per fragment that installs anything from npm or PyPI:
//!
//! | file | holds | installed with |
//! |---|---|---|
//! | `package.json` + `package-lock.json` | the fragment's npm packages and their whole tree, every tarball's integrity | `npm ci` into a prefix |
//! | `requirements.in` + `requirements.txt` | the PyPI packages and their whole tree, every distribution's sha256 | `pip install --require-hashes --no-deps` |
//! | `downloads.lock` | npm registry tarballs the fragment fetches itself (Node, npm, ast-grep): `NAME VERSION INTEGRITY` | `fetch_verified` in `docker/lib/common.sh` |
//!
//! A problem names the fragment and the package, and says to re-lock.

pub(crate) mod downloads;
pub(crate) mod generate;
pub(crate) mod npm;
pub(crate) mod pypi;

use crate::manifest::{Fragment, Manifest, Package, Source};
use std::fmt;
use std::path::{Path, PathBuf};

/// One way a fragment's lock no longer matches images.toml.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct LockProblem {
    pub fragment: String,
    /// The package concerned (empty when it is about the whole lock).
    pub package: String,
    /// The lock file, project-relative.
    pub file: PathBuf,
    pub message: String,
}

impl fmt::Display for LockProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.fragment)?;
        if !self.package.is_empty() {
            write!(f, "{}: ", self.package)?;
        }
        write!(
            f,
            "{} ({}); run `sunaba-images lock {}`",
            self.message,
            self.file.display(),
            self.fragment
        )
    }
}

/// `render --format github`: one annotation per stale lock, at its lock file.
pub(crate) fn annotations(stale: &[LockProblem]) -> Vec<crate::github::Annotation> {
    stale
        .iter()
        .map(|p| {
            crate::github::Annotation::error(2, p.to_string())
                .at(&p.file, None)
                .title("stale lock")
        })
        .collect()
}

/// Collects the problems of one lock file.
pub(crate) struct Findings<'a> {
    fragment: &'a str,
    file: PathBuf,
    pub(crate) list: Vec<LockProblem>,
}

impl<'a> Findings<'a> {
    pub(crate) fn new(fragment: &'a str, file: PathBuf) -> Findings<'a> {
        Findings {
            fragment,
            file,
            list: Vec::new(),
        }
    }
    pub(crate) fn add(&mut self, package: &str, message: impl Into<String>) {
        self.list.push(LockProblem {
            fragment: self.fragment.to_string(),
            package: package.to_string(),
            file: self.file.clone(),
            message: message.into(),
        });
    }
}

/// The packages of `fragment` from `source`, with their pinned versions.
pub(crate) fn pinned(fragment: &Fragment, source: Source) -> impl Iterator<Item = &Package> {
    fragment.packages.iter().filter(move |p| p.source == source)
}

/// Reads a lock file; `None` (and a problem) when it is missing.
pub(crate) fn read(root: &Path, rel: &Path, findings: &mut Findings) -> Option<String> {
    match std::fs::read_to_string(root.join(rel)) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            findings.add("", "the lock file is missing");
            None
        }
        Err(e) => {
            findings.add("", format!("cannot read it: {e}"));
            None
        }
    }
}

/// Every problem of every fragment's locks, in fragment order.
pub(crate) fn check(manifest: &Manifest) -> Vec<LockProblem> {
    manifest
        .fragments
        .values()
        .flat_map(|f| check_fragment(&manifest.root, f))
        .collect()
}

/// The lock problems of the fragments the variants `selected` install: a
/// lock that no longer matches images.toml would fail deep inside a
/// fragment (or install something else than images.toml says), so a build
/// refuses them before any engine work.
pub(crate) fn stale_for(manifest: &Manifest, selected: &[String]) -> Vec<LockProblem> {
    check(manifest)
        .into_iter()
        .filter(|p| {
            selected
                .iter()
                .any(|v| manifest.variants[v].fragments.contains(&p.fragment))
        })
        .collect()
}

/// The problems of one fragment's locks.
pub(crate) fn check_fragment(root: &Path, fragment: &Fragment) -> Vec<LockProblem> {
    let Some(dir) = fragment.lock_dir() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if pinned(fragment, Source::Npm).next().is_some() {
        out.extend(npm::check(root, &dir, fragment));
    }
    if pinned(fragment, Source::Pypi).next().is_some() {
        out.extend(pypi::check(root, &dir, fragment));
    }
    if pinned(fragment, Source::NpmTarball).next().is_some() {
        out.extend(downloads::check(root, &dir, fragment));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Package;
    use std::collections::BTreeMap;

    fn package(key: &str, source: Source, version: &str) -> Package {
        Package {
            key: key.into(),
            source,
            arg: Some("X_VERSION".into()),
            pinned: Some(version.into()),
            name: key.into(),
            name_template: key.into(),
            platforms: BTreeMap::new(),
            suite: None,
            track: None,
            reason: None,
        }
    }

    fn fragment(packages: Vec<Package>, allow: &[&str]) -> Fragment {
        Fragment {
            name: "js".into(),
            script: "docker/install-js.sh".into(),
            provides: vec![],
            args: BTreeMap::new(),
            env: BTreeMap::new(),
            packages,
            allow_scripts: allow.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn messages(root: &Path, f: &Fragment) -> Vec<String> {
        check_fragment(root, f)
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn npm_locks_need_integrity_for_every_package_and_approved_scripts() {
        let dir = tempfile::tempdir().unwrap();
        let lock_dir = dir.path().join("docker/locks/js");
        std::fs::create_dir_all(&lock_dir).unwrap();
        let f = fragment(
            vec![package("eslint", Source::Npm, "10.15.0")],
            &["@parcel/watcher"],
        );
        let lock = serde_json::json!({
            "lockfileVersion": 3,
            "packages": {
                "": {"dependencies": {"eslint": "10.15.0"}},
                "node_modules/eslint": {"version": "10.15.0", "integrity": "sha512-x"},
                "node_modules/debug": {"version": "4.4.3"},
                "node_modules/@parcel/watcher": {"version": "2.6.0", "integrity": "sha512-y", "hasInstallScript": true},
            }
        });
        std::fs::write(lock_dir.join(npm::PACKAGE_LOCK), lock.to_string()).unwrap();
        std::fs::write(lock_dir.join(npm::PACKAGE_JSON), npm::package_json(&f, &[])).unwrap();
        let m = messages(dir.path(), &f);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("js: debug: has no sha512 integrity in the lock"),
            "{m:?}"
        );
        assert!(m[1].contains("@parcel/watcher: images.toml allows its install scripts, package.json's allowScripts lacks @parcel/watcher@2.6.0"), "{m:?}");
        assert_eq!(npm::install_scripts(&lock), ["@parcel/watcher@2.6.0"]);
        std::fs::write(
            lock_dir.join(npm::PACKAGE_JSON),
            npm::package_json(&f, &["@parcel/watcher@2.6.0".into()]),
        )
        .unwrap();
        assert_eq!(messages(dir.path(), &f).len(), 1);
        // An approval images.toml does not make is refused too.
        let strict = fragment(f.packages.clone(), &[]);
        let m = messages(dir.path(), &strict);
        assert!(
            m.iter().any(|m| m.contains(
                "package.json allows its install scripts; images.toml's allow_scripts does not"
            )),
            "{m:?}"
        );
    }

    #[test]
    fn requirements_need_a_hash_on_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let lock_dir = dir.path().join("docker/locks/js");
        std::fs::create_dir_all(&lock_dir).unwrap();
        let f = fragment(vec![package("pytest", Source::Pypi, "9.2.0")], &[]);
        std::fs::write(
            lock_dir.join(pypi::REQUIREMENTS_IN),
            pypi::requirements_in(&f),
        )
        .unwrap();
        std::fs::write(
            lock_dir.join(pypi::REQUIREMENTS_TXT),
            "pytest==9.2.0 \\\n    --hash=sha256:aa\npluggy==1.7.0\n",
        )
        .unwrap();
        let m = messages(dir.path(), &f);
        assert_eq!(
            m,
            [
                "js: pluggy: has no --hash: pip --require-hashes would refuse the file (docker/locks/js/requirements.txt); run `sunaba-images lock js`"
            ]
        );
    }
}
