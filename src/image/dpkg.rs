//! Debian packages as dpkg records them (`var/lib/dpkg/status`), and the
//! distribution (`etc/os-release`), read from an image's files.

use std::collections::BTreeMap;

/// One installed package.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// The source package as dpkg's `Source:` names it, with its version
    /// when the field gives one (`glibc` for libc6; `bash@5.2.37-2` for a
    /// binNMU `5.2.37-2+b10`): Syft's `upstream` qualifier.
    pub source: Option<String>,
}

impl Package {
    /// The package URL, byte for byte as Syft writes Debian's:
    /// `pkg:deb/debian/bash@5.2.37-2%2Bb10?arch=amd64&distro=debian-13&upstream=bash%405.2.37-2`
    /// (values percent-encoded, `+` and `@` included, an epoch's `:` not;
    /// qualifiers sorted by key).
    pub fn purl(&self, distro: &Distro) -> String {
        let enc = |s: &str| -> String {
            s.bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b'~' | b':' => {
                        (b as char).to_string()
                    }
                    other => format!("%{other:02X}"),
                })
                .collect()
        };
        let mut purl = format!(
            "pkg:deb/{}/{}@{}?arch={}&distro={}-{}",
            distro.id,
            enc(&self.name),
            enc(&self.version),
            enc(&self.architecture),
            distro.id,
            distro.version_id
        );
        if let Some(source) = &self.source {
            purl.push_str(&format!("&upstream={}", enc(source)));
        }
        purl
    }
}

/// The distribution of an image (`ID`, `VERSION_ID` of os-release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distro {
    pub id: String,
    pub version_id: String,
}

impl Distro {
    pub fn parse(os_release: &str) -> Option<Distro> {
        let mut fields = BTreeMap::new();
        for line in os_release.lines() {
            if let Some((k, v)) = line.split_once('=') {
                fields.insert(k.trim(), v.trim().trim_matches('"').to_string());
            }
        }
        Some(Distro {
            id: fields.get("ID")?.clone(),
            version_id: fields.get("VERSION_ID").cloned().unwrap_or_default(),
        })
    }
}

/// The installed packages of a dpkg status file (`Status: … installed`),
/// sorted by name and architecture.
pub(crate) fn installed(status: &str) -> Vec<Package> {
    let mut out = Vec::new();
    for stanza in status.split("\n\n") {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for line in stanza.lines() {
            if line.starts_with(' ') || line.starts_with('\t') {
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                fields.insert(k, v.trim());
            }
        }
        let (Some(name), Some(version)) = (fields.get("Package"), fields.get("Version")) else {
            continue;
        };
        if !fields
            .get("Status")
            .is_some_and(|s| s.ends_with(" installed"))
        {
            continue;
        }
        // `Source: bash (5.2.37-2)` gives `bash@5.2.37-2`; `Source: glibc`
        // gives `glibc` (dpkg writes the field only when it says more than
        // the package's own name and version).
        let source = fields.get("Source").and_then(|s| {
            let mut words = s.split_whitespace();
            let source = words.next().filter(|w| !w.is_empty())?;
            let version = words
                .next()
                .map(|v| v.trim_start_matches('(').trim_end_matches(')'))
                .filter(|v| !v.is_empty());
            Some(match version {
                Some(v) => format!("{source}@{v}"),
                None => source.to_string(),
            })
        });
        out.push(Package {
            name: name.to_string(),
            version: version.to_string(),
            architecture: fields.get("Architecture").unwrap_or(&"all").to_string(),
            source,
        });
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\n\
Source: glibc\nVersion: 2.41-6\nDescription: GNU C Library\n more text: not a field\n\n\
Package: bash\nEssential: yes\nStatus: install ok installed\nArchitecture: amd64\nSource: bash (5.2.37-2)\nVersion: 5.2.37-2+b10\n\n\
Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1.0\n\n\
Package: tzdata\nStatus: install ok installed\nArchitecture: all\nVersion: 1:2025b-4\n";

    #[test]
    fn installed_packages_with_syfts_purls() {
        let distro = Distro::parse(
            "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nVERSION_ID=\"13\"\n",
        )
        .unwrap();
        let pkgs = installed(STATUS);
        let purls: Vec<String> = pkgs.iter().map(|p| p.purl(&distro)).collect();
        assert_eq!(
            purls,
            [
                "pkg:deb/debian/bash@5.2.37-2%2Bb10?arch=amd64&distro=debian-13&upstream=bash%405.2.37-2",
                "pkg:deb/debian/libc6@2.41-6?arch=amd64&distro=debian-13&upstream=glibc",
                "pkg:deb/debian/tzdata@1:2025b-4?arch=all&distro=debian-13",
            ]
        );
    }
}
