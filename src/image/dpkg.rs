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

/// One stanza of a deb822 file (dpkg's status, apt's extended_states):
/// its lines as written, where it starts, and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stanza {
    /// Its first line's number (1-based).
    pub(crate) line: usize,
    /// Its lines, each with its newline, without the blank lines around.
    pub(crate) text: String,
    /// Field names lowercased (deb822 names are case-insensitive), values
    /// trimmed; a continuation line belongs to its field's text only.
    pub(crate) fields: BTreeMap<String, String>,
}

impl Stanza {
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A line of a deb822 file that is neither a field nor a continuation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed {
    pub(crate) line: usize,
    pub(crate) problem: String,
}

/// The stanzas of a deb822 file, in order, separated by blank lines; the
/// first malformed line is the error.
pub(crate) fn stanzas(text: &str) -> Result<Vec<Stanza>, Malformed> {
    read_stanzas(text, true)
}

/// [`stanzas`], or when `strict` is false, with malformed lines left out
/// (they belong to no field).
fn read_stanzas(text: &str, strict: bool) -> Result<Vec<Stanza>, Malformed> {
    let mut out = Vec::new();
    let mut current: Option<Stanza> = None;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let number = i + 1;
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.trim().is_empty() {
            out.extend(current.take());
            continue;
        }
        let stanza = current.get_or_insert_with(|| Stanza {
            line: number,
            text: String::new(),
            fields: BTreeMap::new(),
        });
        if bare.starts_with([' ', '\t']) {
            if stanza.text.is_empty() {
                if !strict {
                    current = None;
                    continue;
                }
                return Err(Malformed {
                    line: number,
                    problem: "a continuation line starts a stanza".into(),
                });
            }
        } else {
            let Some((name, value)) = bare.split_once(':') else {
                if !strict {
                    continue;
                }
                return Err(Malformed {
                    line: number,
                    problem: format!(
                        "`{}` is neither `Field: value` nor a continuation",
                        super::entries::shown(bare)
                    ),
                });
            };
            stanza
                .fields
                .insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        stanza.text.push_str(bare);
        stanza.text.push('\n');
    }
    out.extend(current);
    Ok(out)
}

/// The installed packages of a dpkg status file (`Status: … installed`),
/// sorted by name and architecture. Lines that are not fields are
/// passed over: an inventory lists every package it can read.
pub(crate) fn installed(status: &str) -> Vec<Package> {
    let mut out = Vec::new();
    for stanza in read_stanzas(status, false).unwrap_or_default() {
        let (Some(name), Some(version)) = (stanza.field("package"), stanza.field("version")) else {
            continue;
        };
        if !stanza
            .field("status")
            .is_some_and(|s| s.ends_with(" installed"))
        {
            continue;
        }
        // `Source: bash (5.2.37-2)` gives `bash@5.2.37-2`; `Source: glibc`
        // gives `glibc` (dpkg writes the field only when it says more than
        // the package's own name and version).
        let source = stanza.field("source").and_then(|s| {
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
            architecture: stanza.field("architecture").unwrap_or("all").to_string(),
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

    #[test]
    fn stanzas_keep_their_lines_and_a_malformed_line_is_an_error_or_passed_over() {
        let read = stanzas(STATUS).unwrap();
        assert_eq!(read.len(), 4);
        assert_eq!(read[0].line, 1);
        assert_eq!(read[0].field("source"), Some("glibc"));
        assert!(
            read[0]
                .text
                .ends_with("Description: GNU C Library\n more text: not a field\n")
        );
        assert_eq!(read[1].line, 9);
        let junk = "Package: a\nStatus: install ok installed\nno colon\nVersion: 1\n";
        assert_eq!(
            stanzas(junk).unwrap_err(),
            Malformed {
                line: 3,
                problem: "`no colon` is neither `Field: value` nor a continuation".into()
            }
        );
        let names: Vec<String> = installed(junk).into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(stanzas(" starts\n").unwrap_err().line, 1);
    }
}
