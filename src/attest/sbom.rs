//! SPDX 2.3 SBOMs (JSON) of an image, from what the image's files say
//! exactly (dpkg's status, read from the layers; see [`crate::image::files`])
//! — not by running the image — and from what the repository locks
//! exactly: npm lock files, hashed PyPI requirements, `downloads.lock` and
//! the pinned base image ([`super::locked`]), each with its checksum and
//! the license its lock states. Deterministic: the same image gives the same
//! bytes (packages sorted, the document's namespace and time derived from
//! the image, not from the clock or a random id).

use super::locked::{Component, Ecosystem};
use crate::image::dpkg::{Distro, Package};
use serde_json::json;

/// What an SBOM describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The image as named (`REPO@sha256:…` or the local reference).
    pub name: String,
    /// Its config digest (the local image ID), or manifest digest.
    pub digest: String,
    /// The image config's `created` (RFC 3339): the document's time.
    pub created: String,
}

impl Subject {
    /// An image known by its manifest digest: named `REPO@DIGEST`, as the
    /// SBOM a release attaches names it (however the image was read).
    pub fn by_digest(repository: &str, digest: &str, created: &str) -> Subject {
        Subject {
            name: format!("{repository}@{digest}"),
            digest: digest.to_string(),
            created: created.to_string(),
        }
    }
}

fn spdx_id(kind: &str, name: &str, n: usize) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("SPDXRef-{kind}-{n}-{clean}")
}

/// The SPDX 2.3 JSON document.
pub fn spdx(
    subject: &Subject,
    distro: &Distro,
    packages: &[Package],
    locked: &[Component],
    tool_version: &str,
) -> Vec<u8> {
    let image_id = "SPDXRef-Image".to_string();
    let hex = subject.digest.trim_start_matches("sha256:");
    let mut spdx_packages = vec![json!({
        "SPDXID": image_id,
        "name": subject.name,
        "versionInfo": subject.digest,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
        "checksums": [{"algorithm": "SHA256", "checksumValue": hex}],
        "primaryPackagePurpose": "CONTAINER",
    })];
    let mut relationships = vec![json!({
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": image_id,
    })];
    for (n, p) in packages.iter().enumerate() {
        let id = spdx_id("Package-deb", &p.name, n);
        spdx_packages.push(json!({
            "SPDXID": id,
            "name": p.name,
            "versionInfo": p.version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "supplier": "NOASSERTION",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": p.purl(distro),
            }],
        }));
        relationships.push(json!({
            "spdxElementId": image_id,
            "relationshipType": "CONTAINS",
            "relatedSpdxElement": id,
        }));
    }
    for (n, c) in locked.iter().enumerate() {
        let (kind, purpose) = match c.ecosystem {
            Ecosystem::Npm => ("npm", "LIBRARY"),
            Ecosystem::Pypi => ("pypi", "LIBRARY"),
            Ecosystem::Download => ("download", "APPLICATION"),
            Ecosystem::Image => ("image", "CONTAINER"),
        };
        let id = spdx_id(&format!("Package-{kind}"), &c.name, n);
        let mut p = json!({
            "SPDXID": id,
            "name": c.name,
            "versionInfo": c.version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": c.license.as_deref().unwrap_or("NOASSERTION"),
            "copyrightText": "NOASSERTION",
            "supplier": "NOASSERTION",
            "primaryPackagePurpose": purpose,
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": c.purl,
            }],
        });
        if let Some((alg, hex)) = &c.checksum {
            p["checksums"] = json!([{"algorithm": alg, "checksumValue": hex}]);
        }
        spdx_packages.push(p);
        relationships.push(json!({
            "spdxElementId": image_id,
            "relationshipType": if c.ecosystem == Ecosystem::Image { "DESCENDANT_OF" } else { "CONTAINS" },
            "relatedSpdxElement": id,
        }));
    }
    let doc = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": subject.name,
        "documentNamespace": format!("https://sunaba.invalid/spdx/{hex}"),
        "creationInfo": {
            "created": subject.created,
            "creators": [format!("Tool: sunaba-images-{tool_version}")],
        },
        "packages": spdx_packages,
        "relationships": relationships,
    });
    serde_json::to_vec_pretty(&doc).expect("an SBOM serialises")
}

/// The CycloneDX 1.6 JSON document of the same facts: the image as the
/// metadata's `container` component, each package a `library` with its
/// purl, the image depending on every one; the serial number is derived
/// from the image digest (a UUID-shaped name, not a random one).
pub fn cyclonedx(
    subject: &Subject,
    distro: &Distro,
    packages: &[Package],
    locked: &[Component],
    tool_version: &str,
) -> Vec<u8> {
    use sha2::Digest as _;
    let h = hex::encode(sha2::Sha256::digest(subject.digest.as_bytes()));
    let serial = format!(
        "urn:uuid:{}-{}-5{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    );
    let mut components: Vec<serde_json::Value> = packages
        .iter()
        .enumerate()
        .map(|(n, p)| {
            json!({
                "type": "library",
                "bom-ref": format!("pkg-{n}-{}", p.name),
                "name": p.name,
                "version": p.version,
                "purl": p.purl(distro),
            })
        })
        .collect();
    for (n, c) in locked.iter().enumerate() {
        let kind = match c.ecosystem {
            Ecosystem::Npm | Ecosystem::Pypi => "library",
            Ecosystem::Download => "application",
            Ecosystem::Image => "container",
        };
        let mut component = json!({
            "type": kind,
            "bom-ref": format!("locked-{n}-{}", c.name),
            "name": c.name,
            "version": c.version,
            "purl": c.purl,
        });
        if let Some((alg, hex)) = &c.checksum {
            let alg = if *alg == "SHA512" {
                "SHA-512"
            } else {
                "SHA-256"
            };
            component["hashes"] = json!([{"alg": alg, "content": hex}]);
        }
        if let Some(l) = &c.license {
            component["licenses"] = json!([{"expression": l}]);
        }
        components.push(component);
    }
    let refs: Vec<&serde_json::Value> = components.iter().map(|c| &c["bom-ref"]).collect();
    let doc = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": serial,
        "version": 1,
        "metadata": {
            "timestamp": subject.created,
            "tools": {"components": [{
                "type": "application",
                "name": "sunaba-images",
                "version": tool_version,
            }]},
            "component": {
                "type": "container",
                "bom-ref": "image",
                "name": subject.name,
                "version": subject.digest,
            },
        },
        "components": components,
        "dependencies": [{"ref": "image", "dependsOn": refs}],
    });
    serde_json::to_vec_pretty(&doc).expect("an SBOM serialises")
}

/// An SBOM format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// SPDX 2.3, JSON.
    SpdxJson,
    /// CycloneDX 1.6, JSON.
    CyclonedxJson,
}

/// An RFC 3339 time as SPDX 2.3 writes it: `YYYY-MM-DDThh:mm:ssZ`, UTC,
/// whole seconds (an engine's `created` has nanoseconds); 1970 when the
/// config has none.
fn spdx_time(rfc3339: &str) -> String {
    humantime::parse_rfc3339_weak(rfc3339)
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// The paths an SBOM is made from: dpkg's status and os-release.
pub const WANTED: [&str; 3] = [STATUS, OS_RELEASE[0], OS_RELEASE[1]];

/// The wanted files and the config of a local image of `engine` (an
/// image ID or a reference), read through its `save` stream (again, when
/// a wanted path's links lead where the first reading did not look).
pub fn local_files(
    engine: &dyn crate::engine::Engine,
    image: &str,
) -> Result<crate::image::files::ImageFiles, super::AttestError> {
    use super::AttestError;
    use crate::image::files::{ImageFiles, read_following, read_save_stream};
    let (config, files) = read_following(image, &WANTED, |reading| {
        let saved = engine
            .save_cmd(image)
            .read_stdout(|out| read_save_stream(image, reading, out).map_err(AttestError::Read))
            .map_err(|e| AttestError::ReadLocal {
                image: image.to_string(),
                engine: engine.describe(),
                source: Box::new(e.into_error()),
            })?;
        Ok::<_, AttestError>((saved.config, saved.layers))
    })?;
    Ok(ImageFiles { files, config })
}

const STATUS: &str = "var/lib/dpkg/status";
const OS_RELEASE: [&str; 2] = ["etc/os-release", "usr/lib/os-release"];

fn distro_of(files: &std::collections::BTreeMap<String, Vec<u8>>) -> Option<Distro> {
    OS_RELEASE
        .iter()
        .find_map(|p| files.get(*p))
        .and_then(|t| Distro::parse(&String::from_utf8_lossy(t)))
}

/// The document of an image from its wanted files (see [`WANTED`]): the
/// one function every reading ends in — `sbom` from the engine or from a
/// registry, and the SBOM `release` attaches — so that one image gives
/// one document, byte for byte. `subject.created` is the config's
/// `created` as recorded (written as SPDX writes times). An image without
/// an os-release (a synthetic one) is described with no distribution.
pub fn of_files(
    subject: &Subject,
    files: &std::collections::BTreeMap<String, Vec<u8>>,
    locked: &[Component],
    format: Format,
    tool_version: &str,
) -> (Vec<u8>, usize) {
    let distro = distro_of(files).unwrap_or(Distro {
        id: "unknown".into(),
        version_id: String::new(),
    });
    let subject = Subject {
        created: spdx_time(&subject.created),
        ..subject.clone()
    };
    let status = files
        .get(STATUS)
        .map(|b| String::from_utf8_lossy(b).to_string())
        .unwrap_or_default();
    let packages = crate::image::dpkg::installed(&status);
    let doc = match format {
        Format::SpdxJson => spdx(&subject, &distro, &packages, locked, tool_version),
        Format::CyclonedxJson => cyclonedx(&subject, &distro, &packages, locked, tool_version),
    };
    (doc, packages.len() + locked.len())
}

/// The SPDX SBOM of an image read from its layer blobs (as a registry
/// serves them, bottom first). See [`of_files`].
pub fn of_layers(
    subject: &Subject,
    layers: &[(String, Vec<u8>)],
    locked: &[Component],
    tool_version: &str,
) -> Result<(Vec<u8>, usize), crate::image::files::ReadError> {
    let files = crate::image::files::read_layers(&subject.name, layers, &WANTED)?;
    Ok(of_files(
        subject,
        &files,
        locked,
        Format::SpdxJson,
        tool_version,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_whole_utc_seconds() {
        assert_eq!(
            spdx_time("2026-12-01T19:51:38.438140424Z"),
            "2026-12-01T19:51:38Z"
        );
        assert_eq!(spdx_time("2023-11-14T22:13:20Z"), "2023-11-14T22:13:20Z");
        assert_eq!(spdx_time(""), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn the_document_describes_the_image_which_contains_each_package() {
        let subject = Subject {
            name: "r/sandbox@sha256:ab".into(),
            digest: "sha256:ab".into(),
            created: "2026-12-01T00:00:00Z".into(),
        };
        let distro = Distro {
            id: "debian".into(),
            version_id: "13".into(),
        };
        let pkgs = crate::image::dpkg::installed(
            "Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2.37-2\n",
        );
        let bytes = spdx(&subject, &distro, &pkgs, &[], "0.1.0");
        assert_eq!(
            spdx(&subject, &distro, &pkgs, &[], "0.1.0"),
            bytes,
            "deterministic"
        );
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(doc["packages"].as_array().unwrap().len(), 2);
        assert_eq!(
            doc["packages"][1]["externalRefs"][0]["referenceLocator"],
            "pkg:deb/debian/bash@5.2.37-2?arch=amd64&distro=debian-13"
        );
        assert_eq!(doc["relationships"][1]["relationshipType"], "CONTAINS");
        assert_eq!(
            doc["relationships"][0]["relatedSpdxElement"],
            "SPDXRef-Image"
        );
    }
}
