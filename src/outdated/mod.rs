//! `outdated`: for every version images.toml pins, the newest release in its
//! registry (npm, PyPI, Debian's candidate for apt-installed toolchains, the
//! upstream tag's digest), the release a maintainer may take (the newest on
//! the package's `track`), and the kind of bump that is.
//!
//! The comparison is pure ([`assess`]); [`gather`] asks the registries
//! ([`crate::package_indexes`]) and `debian` the archive, through a throw-away
//! container of the upstream image (the same sources the build uses).

pub(crate) mod debian;
pub(crate) mod github;

use crate::manifest::{Manifest, Package, Source};
use crate::package_indexes::PackageIndexes;
use crate::semver_rules::{Bump, version_step};
use crate::versions::lenient_version;
use semver::Version;
use serde::Serialize;

/// Where a row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Status {
    /// The pin is the newest release on its track.
    Current,
    /// A newer release on its track exists.
    Behind,
    /// Nothing is pinned (a Debian package the archive decides): for information.
    Info,
    /// The registry could not be asked.
    Error,
}

/// One pinned thing and what its registry offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Row {
    pub fragment: String,
    pub package: String,
    /// npm, pypi, debian, oci.
    pub registry: String,
    /// The build argument that pins it (`upstream` for the base).
    pub arg: Option<String>,
    pub pinned: Option<String>,
    /// The newest release on the package's track: what to bump to.
    pub wanted: Option<String>,
    /// The newest stable release of any line.
    pub latest: Option<String>,
    /// From `pinned` to `wanted`; `digest` for the base.
    pub bump: String,
    pub status: Status,
    pub note: String,
}

/// A version outdated compares: stable releases only.
fn stable(text: &str) -> Option<Version> {
    lenient_version(text).filter(|v| v.pre.is_empty())
}

/// Whether `v` is on the release line `track` (`5` = 5.x, `5.9` = 5.9.x).
pub(crate) fn on_track(v: &Version, track: &str) -> bool {
    let parts: Vec<u64> = track.split('.').filter_map(|p| p.parse().ok()).collect();
    let have = [v.major, v.minor, v.patch];
    parts.iter().zip(have).all(|(a, b)| *a == b)
}

/// What the registry's `versions` mean for a package pinned at `pinned`.
pub(crate) fn assess(
    pinned: &str,
    versions: &[String],
    track: Option<&str>,
) -> (Option<String>, Option<String>, Bump, Status) {
    let mut all: Vec<(Version, &String)> = versions
        .iter()
        .filter_map(|v| Some((stable(v)?, v)))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let latest = all.last().map(|(_, s)| (*s).clone());
    let wanted = all
        .iter()
        .rev()
        .find(|(v, _)| track.is_none_or(|t| on_track(v, t)))
        .map(|(v, s)| (v.clone(), (*s).clone()));
    let Some(pin) = lenient_version(pinned) else {
        return (wanted.map(|w| w.1), latest, Bump::None, Status::Error);
    };
    match wanted {
        Some((w, text)) if w > pin => (Some(text), latest, version_step(&pin, &w), Status::Behind),
        Some((_, text)) => (Some(text), latest, Bump::None, Status::Current),
        None => (None, latest, Bump::None, Status::Error),
    }
}

impl Row {
    /// A row for `p` with nothing found yet (an error until filled in).
    pub(crate) fn blank(fragment: &str, p: &Package, registry: &str) -> Row {
        Row {
            fragment: fragment.to_string(),
            package: p.key.clone(),
            registry: registry.to_string(),
            arg: p.arg.clone(),
            pinned: p.pinned.clone(),
            wanted: None,
            latest: None,
            bump: "none".into(),
            status: Status::Error,
            note: String::new(),
        }
    }
}

fn fill(mut r: Row, versions: &[String], p: &Package) -> Row {
    let pinned = p.pinned.clone().unwrap_or_default();
    let (wanted, latest, bump, status) = assess(&pinned, versions, p.track.as_deref());
    r.note = match (&p.track, &latest, &wanted) {
        (Some(t), Some(l), Some(w)) if l != w => format!(
            "held on {t}.x{}",
            p.reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        _ if status == Status::Error && !versions.is_empty() => {
            format!("`{pinned}` is not a release the registry lists")
        }
        _ => String::new(),
    };
    if status == Status::Behind && !versions.contains(&pinned) {
        r.note = "the pinned version is not (or no longer) published".into();
    }
    r.wanted = wanted;
    r.latest = latest;
    r.bump = bump.to_string();
    r.status = status;
    r
}

/// The npm and PyPI rows (one per package; per-platform tarballs count the
/// releases every platform's package has).
pub(crate) async fn registry_rows(manifest: &Manifest, indexes: &PackageIndexes) -> Vec<Row> {
    let mut rows = Vec::new();
    for fragment in manifest.fragments.values() {
        for p in &fragment.packages {
            let registry = p.source.registry();
            let base = Row::blank(&fragment.name, p, registry);
            let versions = match p.source {
                Source::Debian => continue,
                Source::Pypi => indexes
                    .pypi_releases(&p.name)
                    .await
                    .map_err(|e| e.to_string()),
                Source::Npm | Source::NpmTarball => npm_versions(indexes, p).await,
            };
            rows.push(match versions {
                Ok(v) => fill(base, &v, p),
                Err(e) => Row { note: e, ..base },
            });
        }
    }
    rows
}

/// Releases every registry name of the package has (not deprecated).
async fn npm_versions(indexes: &PackageIndexes, p: &Package) -> Result<Vec<String>, String> {
    let mut common: Option<Vec<String>> = None;
    for name in p.registry_names() {
        let live = indexes
            .npm_packument(&name)
            .await
            .map_err(|e| e.to_string())?
            .live_versions();
        common = Some(match common {
            None => live,
            Some(prev) => prev.into_iter().filter(|v| live.contains(v)).collect(),
        });
    }
    Ok(common.unwrap_or_default())
}

/// The upstream's row from `update-base`'s decision.
pub(crate) fn base_row(pinned: &str, result: Result<crate::base_update::Plan, String>) -> Row {
    let mut r = Row {
        fragment: "-".into(),
        package: "upstream".into(),
        registry: "oci".into(),
        arg: Some("upstream".into()),
        pinned: Some(pinned.to_string()),
        wanted: None,
        latest: None,
        bump: "none".into(),
        status: Status::Error,
        note: String::new(),
    };
    match result {
        Ok(plan) => {
            r.wanted = Some(plan.current.digest.to_string());
            r.latest = r.wanted.clone();
            if plan.changed {
                r.bump = "digest".into();
                r.status = Status::Behind;
                r.note = "the tag's images changed: `sunaba-images update-base --write`".into();
            } else {
                r.status = Status::Current;
            }
        }
        Err(e) => r.note = e,
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tracks_bumps_and_prereleases() {
        let ts = v(&["5.9.2", "5.9.3", "6.0.3", "7.0.2", "7.1.0-beta"]);
        assert_eq!(
            assess("5.9.2", &ts, Some("5")),
            (
                Some("5.9.3".into()),
                Some("7.0.2".into()),
                Bump::Patch,
                Status::Behind
            )
        );
        assert_eq!(
            assess("5.9.3", &ts, Some("5")),
            (
                Some("5.9.3".into()),
                Some("7.0.2".into()),
                Bump::None,
                Status::Current
            )
        );
        assert_eq!(assess("5.9.3", &ts, None).2, Bump::Major);
        // 0.x: a minor step is breaking (cargo's reading).
        assert_eq!(
            assess("0.13.2", &v(&["0.13.2", "0.17.6"]), None).2,
            Bump::Major
        );
        assert_eq!(
            assess("1.1.406", &v(&["1.1.406", "1.1.414"]), None).2,
            Bump::Patch
        );
        assert_eq!(
            assess("8.4.2", &v(&["8.4.2", "9.2.0", "26.4"]), Some("9")).0,
            Some("9.2.0".into())
        );
        // PyPI-style versions with two parts compare as x.y.0.
        assert_eq!(
            assess("26.4", &v(&["25.0", "26.4"]), None).3,
            Status::Current
        );
        assert!(on_track(&Version::new(26, 12, 1), "26"));
        assert!(!on_track(&Version::new(24, 12, 1), "26"));
        assert!(on_track(&Version::new(5, 9, 3), "5.9"));
    }
}
