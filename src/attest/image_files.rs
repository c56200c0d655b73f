//! Reading a few files of an image's final filesystem from a `save`
//! stream, without running it and without unpacking it: each layer is read
//! as it passes, the wanted paths (and whiteouts of them) noted per layer,
//! and the image's layer order (manifest.json) decides which layer's copy
//! is the one the image shows. Memory holds the wanted files only.

use super::AttestError;
use std::collections::BTreeMap;
use std::io::Read;

/// What one layer said about one wanted path.
#[derive(Debug, Clone)]
enum Seen {
    File(Vec<u8>),
    Deleted,
}

/// The largest wanted file kept (dpkg's status of a big image is ~2 MB).
const WANTED_LIMIT: u64 = 64 << 20;

/// What was read of an image.
#[derive(Debug, Clone)]
pub struct ImageFiles {
    /// The final contents of each wanted path the image has.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The image's config.
    pub config: serde_json::Value,
}

/// The final contents of `wanted` (paths without a leading `/`) in the
/// image whose save stream is `input`, and its config; a path no layer has,
/// or whose last word is a whiteout, is absent from the answer.
pub fn read_files(
    image: &str,
    input: &mut dyn Read,
    wanted: &[&str],
) -> Result<ImageFiles, AttestError> {
    let bad = |detail: String| AttestError::Malformed {
        what: format!("the save stream of {image}"),
        detail,
    };
    let mut by_layer: BTreeMap<String, BTreeMap<String, Seen>> = BTreeMap::new();
    let mut links: BTreeMap<String, String> = BTreeMap::new();
    let mut manifest: Option<Vec<u8>> = None;
    let mut jsons: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut outer = tar::Archive::new(input);
    for entry in outer.entries().map_err(|e| bad(e.to_string()))? {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = crate::normalize::clean_outer(&entry.path_bytes());
        match entry.header().entry_type() {
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default();
                let resolved = crate::normalize::resolve_outer(&name, &target);
                links.insert(name, resolved);
            }
            tar::EntryType::Regular if name == "manifest.json" => {
                let mut bytes = Vec::new();
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|e| bad(e.to_string()))?;
                manifest = Some(bytes);
            }
            tar::EntryType::Regular if name.ends_with(".json") && entry.size() <= WANTED_LIMIT => {
                let mut bytes = Vec::new();
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|e| bad(e.to_string()))?;
                jsons.insert(name, bytes);
            }
            tar::EntryType::Regular if name.ends_with(".tar") || name.starts_with("blobs/") => {
                let seen = scan_layer(&mut entry, wanted, &bad)?;
                std::io::copy(&mut entry, &mut std::io::sink()).map_err(|e| bad(e.to_string()))?;
                by_layer.insert(name, seen);
            }
            _ => {}
        }
    }
    #[derive(serde::Deserialize)]
    struct Item {
        #[serde(rename = "Config")]
        config: String,
        #[serde(rename = "Layers")]
        layers: Vec<String>,
    }
    let manifest = manifest.ok_or_else(|| bad("there is no manifest.json".into()))?;
    let items: Vec<Item> =
        serde_json::from_slice(&manifest).map_err(|e| bad(format!("manifest.json: {e}")))?;
    let [item] = items.as_slice() else {
        return Err(bad(format!(
            "manifest.json describes {} images, not one",
            items.len()
        )));
    };
    let config = jsons
        .get(item.config.trim_start_matches("./"))
        .ok_or_else(|| bad(format!("the config {} is not in the stream", item.config)))?;
    let config: serde_json::Value =
        serde_json::from_slice(config).map_err(|e| bad(format!("the config: {e}")))?;
    let mut files = BTreeMap::new();
    for layer in &item.layers {
        let mut name = layer.trim_start_matches("./").to_string();
        for _ in 0..8 {
            match links.get(&name) {
                Some(t) => name = t.clone(),
                None => break,
            }
        }
        let seen = by_layer.get(&name).ok_or_else(|| {
            bad(format!(
                "layer {name} named by manifest.json is not in the stream"
            ))
        })?;
        apply(&mut files, seen);
    }
    Ok(ImageFiles { files, config })
}

/// What one layer (an uncompressed tar) says about each wanted path. A
/// stream that is not a tar (an OCI layout's config, a synthetic layer)
/// reads as an error here, and holds nothing wanted.
fn scan_layer(
    input: &mut dyn Read,
    wanted: &[&str],
    bad: &dyn Fn(String) -> AttestError,
) -> Result<BTreeMap<String, Seen>, AttestError> {
    let mut inner = tar::Archive::new(input);
    let mut seen = BTreeMap::new();
    if let Ok(entries) = inner.entries() {
        for e in entries {
            let Ok(mut e) = e else { break };
            let path = String::from_utf8_lossy(&e.path_bytes())
                .trim_start_matches("./")
                .trim_start_matches('/')
                .to_string();
            let (dir, base) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if let Some(deleted) = base.strip_prefix(".wh.") {
                let full = if dir.is_empty() {
                    deleted.to_string()
                } else {
                    format!("{dir}/{deleted}")
                };
                if wanted.contains(&full.as_str()) {
                    seen.insert(full, Seen::Deleted);
                }
            } else if wanted.contains(&path.as_str())
                && e.header().entry_type().is_file()
                && e.size() <= WANTED_LIMIT
            {
                let mut bytes = Vec::new();
                e.read_to_end(&mut bytes)
                    .map_err(|err| bad(err.to_string()))?;
                seen.insert(path, Seen::File(bytes));
            }
        }
    }
    Ok(seen)
}

fn apply(files: &mut BTreeMap<String, Vec<u8>>, seen: &BTreeMap<String, Seen>) {
    for (path, s) in seen {
        match s {
            Seen::File(bytes) => {
                files.insert(path.clone(), bytes.clone());
            }
            Seen::Deleted => {
                files.remove(path);
            }
        }
    }
}

/// What one layer blob says about the wanted paths: read once, kept (it
/// is small: the wanted files only) and composed with the image's other
/// layers by [`compose`]. A family's images share their base layers, so a
/// release reads each distinct blob once.
#[derive(Debug, Clone, Default)]
pub struct LayerFiles(BTreeMap<String, Seen>);

/// Reads one layer blob as a stream (`…tar`, or `…tar+gzip` /
/// `…tar.gzip` decompressed as it is read), keeping only the wanted paths
/// and whiteouts of them. A layer that does not read as a (compressed) tar
/// holds nothing wanted; zstd layers are refused.
pub fn scan_blob(
    image: &str,
    media_type: &str,
    input: &mut dyn Read,
    wanted: &[&str],
) -> Result<LayerFiles, AttestError> {
    let bad = |detail: String| AttestError::Malformed {
        what: format!("the layers of {image}"),
        detail,
    };
    let seen = if media_type.ends_with("gzip") {
        let mut gz = flate2::read::GzDecoder::new(input);
        scan_layer(&mut gz, wanted, &bad).unwrap_or_default()
    } else if media_type.ends_with("zstd") {
        return Err(bad(format!("{media_type}: zstd layers are not read")));
    } else {
        scan_layer(input, wanted, &bad).unwrap_or_default()
    };
    Ok(LayerFiles(seen))
}

/// The final contents of the wanted paths of an image whose layers,
/// bottom first, said `layers`.
pub fn compose<'a>(layers: impl IntoIterator<Item = &'a LayerFiles>) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for layer in layers {
        apply(&mut files, &layer.0);
    }
    files
}

/// The final contents of `wanted` in an image given as its layer blobs,
/// bottom first, each with its media type (as a registry serves them:
/// `…tar`, `…tar+gzip` / `…tar.gzip`). A layer that does not read as a
/// (compressed) tar holds nothing wanted.
pub fn read_layers(
    image: &str,
    layers: &[(String, Vec<u8>)],
    wanted: &[&str],
) -> Result<BTreeMap<String, Vec<u8>>, AttestError> {
    let scanned = layers
        .iter()
        .map(|(media_type, bytes)| scan_blob(image, media_type, &mut bytes.as_slice(), wanted))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(compose(&scanned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::tests::{file, layer, save_stream};

    #[test]
    fn the_last_layer_to_write_a_path_wins_and_a_whiteout_removes_it() {
        let stream = save_stream(
            &[
                layer(&[
                    file("var/lib/dpkg/status", "one\n"),
                    file("etc/os-release", "ID=debian\n"),
                ]),
                layer(&[
                    file("var/lib/dpkg/status", "two\n"),
                    file("etc/.wh.os-release", ""),
                ]),
            ],
            "2026-12-01T19:00:00Z",
        );
        let files = read_files(
            "i",
            &mut stream.as_slice(),
            &[
                "var/lib/dpkg/status",
                "etc/os-release",
                "usr/lib/os-release",
            ],
        )
        .unwrap();
        assert_eq!(files.config["created"], "2026-12-01T19:00:00Z");
        let files = files.files;
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files["var/lib/dpkg/status"], b"two\n");
    }
}
