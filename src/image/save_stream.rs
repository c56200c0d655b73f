//! Walking a save stream (`docker save`, `podman save --format
//! docker-archive`, and Docker 25's OCI layout): the one loop over its
//! files that the normaliser, the relabeller and the SBOM's reader share.
//! Layers go to the caller as they pass, every other file is kept in memory
//! up to [`SMALL_FILE_LIMIT`], symlinks between files are noted; and what
//! `manifest.json` and the config say of the stream's one image is read
//! from those ([`contents`]).

use super::entries::{self, BoundedTar, Oversized};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use tar::EntryType;

/// Files of the save stream other than layers (manifest.json, the config,
/// the legacy per-layer `json`) are read into memory up to this size.
pub(crate) const SMALL_FILE_LIMIT: u64 = 64 << 20;

/// What is wrong with a save stream.
#[derive(Debug)]
pub(crate) enum StreamError {
    /// It ends early (a file, or the stream, cut short).
    Truncated(String),
    /// It is not a save stream (a bad header, an entry of another kind).
    Corrupt(String),
    /// A header of its own over its cap (see [`entries`]).
    Oversized(Oversized),
}

/// Why a walk stopped: the stream, or the caller's layer reader.
#[derive(Debug)]
pub(crate) enum WalkError<E> {
    Stream(StreamError),
    Layer(E),
}

impl<E> From<StreamError> for WalkError<E> {
    fn from(e: StreamError) -> Self {
        WalkError::Stream(e)
    }
}

/// The files of a save stream that are not layers.
#[derive(Debug, Default)]
pub(crate) struct Files {
    /// By name.
    pub(crate) small: BTreeMap<String, Vec<u8>>,
    /// Symlinks between files of the stream, name -> target (Docker saves
    /// a layer that occurs twice once, and links the second name to it).
    pub(crate) links: BTreeMap<String, String>,
}

/// Walks the save stream `input`: `layer` is given each layer's name, size
/// and bytes as it passes (what it leaves unread is skipped).
pub(crate) fn walk<E>(
    input: impl Read,
    mut layer: impl FnMut(&str, u64, &mut dyn BufRead) -> Result<(), E>,
) -> Result<Files, WalkError<E>> {
    let mut files = Files::default();
    let mut outer = BoundedTar::new(input);
    let entries = outer
        .entries()
        .map_err(|e| StreamError::Corrupt(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(stream_error)?;
        let name = clean_outer(&entry.path_bytes());
        match entry.header().entry_type() {
            EntryType::Directory => {}
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default();
                files
                    .links
                    .insert(name.clone(), resolve_outer(&name, &target));
            }
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.size();
                let mut entry = BufReader::with_capacity(64 << 10, entry);
                if is_layer(&name, &mut entry).map_err(stream_error)? {
                    layer(&name, size, &mut entry).map_err(WalkError::Layer)?;
                } else if size > SMALL_FILE_LIMIT {
                    return Err(StreamError::Corrupt(format!(
                        "{name} ({size} bytes) is neither a layer nor a small metadata file"
                    ))
                    .into());
                } else {
                    let mut bytes = Vec::with_capacity(size as usize);
                    entry.read_to_end(&mut bytes).map_err(stream_error)?;
                    if (bytes.len() as u64) < size {
                        return Err(StreamError::Truncated(format!(
                            "{name} ends after {} of {size} bytes",
                            bytes.len()
                        ))
                        .into());
                    }
                    files.small.insert(name, bytes);
                }
            }
            other => {
                return Err(StreamError::Corrupt(format!(
                    "{name} is a {other:?}, not a file, directory or symlink"
                ))
                .into());
            }
        }
    }
    Ok(files)
}

/// A read error of the stream: an oversized header; a short read is a
/// truncation (the tar crate says so in its words when the end comes while
/// it skips an entry's data or reads a header); anything else that breaks
/// it, corruption.
pub(crate) fn stream_error(e: std::io::Error) -> StreamError {
    let message = e.to_string();
    if let Some(o) = entries::oversized(&e) {
        StreamError::Oversized(o.clone())
    } else if e.kind() == std::io::ErrorKind::UnexpectedEof
        || message.contains("entire block")
        || message.contains("unexpected EOF")
    {
        StreamError::Truncated(entries::shown(message))
    } else {
        // The crate's message may quote the stream's bytes.
        StreamError::Corrupt(entries::shown(message))
    }
}

/// A file name of the stream, without a leading `./`.
pub(crate) fn clean_outer(path: &[u8]) -> String {
    let s = String::from_utf8_lossy(path);
    s.trim_start_matches("./").to_string()
}

/// A symlink's target, as a path of the stream (relative to the link's
/// directory, as Docker writes them: `../<id>/layer.tar`).
pub(crate) fn resolve_outer(link: &str, target: &[u8]) -> String {
    let target = String::from_utf8_lossy(target);
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Layers are `<id>/layer.tar` (Docker), `<hex>.tar` (Podman), or blobs of
/// an OCI layout (Docker 25 and later) that do not start like JSON.
pub(crate) fn is_layer(name: &str, entry: &mut impl BufRead) -> std::io::Result<bool> {
    if name.ends_with(".tar") {
        return Ok(true);
    }
    if !name.starts_with("blobs/") {
        return Ok(false);
    }
    Ok(entry.fill_buf()?.first().is_some_and(|b| *b != b'{'))
}

/// What earlier save streams said of their layers: each layer file's name
/// and the diff_id its bytes had. A save names a layer by a content
/// address (Docker: the v1 ID, a hash of the layer's chain; Podman: the
/// diff_id; an OCI layout: the blob's digest), so a layer met under the
/// same name in another image's save is the same layer, and its diff_id is
/// known before it is read: a reader that has what it needs of that layer
/// lets the stream run past it, neither spilled nor hashed. A name with no
/// 64-hex part is no content address and is never remembered. Shared by
/// the saves of one release (clones share the map).
#[derive(Clone, Debug, Default)]
pub(crate) struct LayerNames(std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>);

impl LayerNames {
    /// Remembers that the layer file `name` held the layer `diff_id`.
    pub(crate) fn learn(&self, name: &str, diff_id: &str) {
        let name = name.trim_start_matches("./");
        if content_addressed(name) {
            let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
            names.insert(name.to_string(), diff_id.to_string());
        }
    }

    /// Learns from a Docker save's `<v1 id>/json` (`name`, its bytes
    /// `json`) which of the layers of the images `images` (each one's
    /// diff_ids, bottom first; a save of several has several) the
    /// file `<v1 id>/layer.tar` beside it holds, before that file is read:
    /// Docker names a layer's directory by the digest of this JSON with the
    /// layer's chain ID in it ([`docker_v1_id`]), so the name proves which
    /// chain, hence which layer, it is. A layer on another chain (a union's
    /// member layer, on layers other than the member's) has a name no
    /// earlier save showed; this knows it all the same. A file that proves
    /// no layer of `diff_ids` (another engine's format, a corrupt stream)
    /// teaches nothing, and its layer is hashed as it is read.
    pub(crate) fn learn_from_v1_json(&self, name: &str, json: &[u8], images: &[Vec<String>]) {
        let name = name.trim_start_matches("./");
        let Some(dir) = name.strip_suffix("/json") else {
            return;
        };
        if !content_addressed(dir) || dir.contains('/') {
            return;
        }
        let layer = images
            .iter()
            .find_map(|diff_ids| docker_v1_layer(dir, json, diff_ids));
        if let Some(diff_id) = layer {
            self.learn(&format!("{dir}/layer.tar"), &diff_id);
        }
    }

    /// The diff_id of the layer file `name`, when a save showed it before.
    pub(crate) fn diff_id(&self, name: &str) -> Option<String> {
        let names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        names.get(name.trim_start_matches("./")).cloned()
    }
}

/// The layer of `diff_ids` whose Docker v1 ID is `dir`, given the v1 JSON
/// Docker saved beside it (see [`docker_v1_id`]).
fn docker_v1_layer(dir: &str, json: &[u8], diff_ids: &[String]) -> Option<String> {
    let mut doc: BTreeMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_slice(json).ok()?;
    doc.remove("id");
    // Saved as the hex alone; named with it as a digest.
    if let Some(parent) = doc.remove("parent") {
        let hex: String = serde_json::from_str(parent.get()).ok()?;
        if !hex.is_empty() {
            doc.insert("parent".into(), raw_string(&format!("sha256:{hex}"))?);
        }
    }
    // Docker sets a lower layer's `os` after naming it (the top layer's
    // is the image's, named with it): the name is of the JSON as saved,
    // or of it without `os`.
    let mut without_os = doc.clone();
    let mut variants = match without_os.remove("os") {
        Some(_) => vec![doc, without_os],
        None => vec![doc],
    };
    let mut chain: Option<String> = None;
    for diff_id in diff_ids {
        let id = match &chain {
            None => diff_id.clone(),
            Some(below) => {
                crate::name::Digest::sha256(format!("{below} {diff_id}").as_bytes()).to_string()
            }
        };
        for doc in &mut variants {
            if docker_v1_id(doc, &id)? == dir {
                return Some(diff_id.clone());
            }
        }
        chain = Some(id);
    }
    None
}

/// Docker's v1 ID of a layer (moby's `image/v1.CreateID`, what `docker
/// save` names a layer's directory by): the SHA-256 of its v1 image JSON
/// without `id`, with `layer_id` (the layer's chain ID) and `parent` (the
/// v1 ID below it, as a digest), keys sorted, values as Go wrote them.
/// `doc` is that JSON, `parent` already a digest; its `layer_id` is set to
/// `chain_id` (each candidate overwrites the last: no copy per candidate).
fn docker_v1_id(
    doc: &mut BTreeMap<String, Box<serde_json::value::RawValue>>,
    chain_id: &str,
) -> Option<String> {
    doc.insert("layer_id".into(), raw_string(chain_id)?);
    let bytes = serde_json::to_vec(doc).ok()?;
    Some(crate::name::Digest::sha256(&bytes).hex().to_string())
}

/// `s` as a raw JSON string value.
fn raw_string(s: &str) -> Option<Box<serde_json::value::RawValue>> {
    serde_json::value::RawValue::from_string(serde_json::to_string(s).ok()?).ok()
}

/// Whether a layer file's name holds a content address (64 lowercase hex
/// digits between separators).
fn content_addressed(name: &str) -> bool {
    name.split(['/', '.']).any(|part| {
        part.len() == 64 && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Whether the file `name` of a save stream, as its header gives it (a
/// leading `./` or not), is a layer: [`is_layer`] for a reader that walks
/// the stream itself (the push's compression, the rebuild's layer lookup).
pub(crate) fn is_layer_file(name: &str, entry: &mut impl BufRead) -> std::io::Result<bool> {
    is_layer(name.trim_start_matches("./"), entry)
}

/// A name of the stream, through its symlinks.
pub(crate) fn resolve(links: &BTreeMap<String, String>, name: &str) -> String {
    let mut name = name.trim_start_matches("./").to_string();
    for _ in 0..8 {
        match links.get(&name) {
            Some(t) => name = t.clone(),
            None => break,
        }
    }
    name
}

#[derive(serde::Deserialize)]
struct ManifestItem {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

/// What `manifest.json` and the config of a save stream say.
pub(crate) struct Contents {
    pub(crate) config: serde_json::Value,
    /// The layer files, in the image's order (bottom first), through their
    /// symlinks.
    pub(crate) layers: Vec<String>,
    /// The config's `rootfs.diff_ids`, one per layer file.
    pub(crate) diff_ids: Vec<String>,
}

/// Reads the one image of a save stream from its small files.
pub(crate) fn contents(
    small: &BTreeMap<String, Vec<u8>>,
    links: &BTreeMap<String, String>,
) -> Result<Contents, StreamError> {
    let items = manifest_items(small)?;
    let [item] = items.as_slice() else {
        return Err(StreamError::Corrupt(format!(
            "manifest.json describes {} images, not one",
            items.len()
        )));
    };
    item_contents(small, links, item).map(|(_, c)| c)
}

/// Reads every image of a save stream of several (`save A B …`, which
/// holds a layer they share once), by its config's digest: the image ID.
pub(crate) fn contents_by_id(
    small: &BTreeMap<String, Vec<u8>>,
    links: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Contents>, StreamError> {
    let mut out = BTreeMap::new();
    for item in &manifest_items(small)? {
        let (id, contents) = item_contents(small, links, item)?;
        out.insert(id, contents);
    }
    Ok(out)
}

fn manifest_items(small: &BTreeMap<String, Vec<u8>>) -> Result<Vec<ManifestItem>, StreamError> {
    let manifest = small.get("manifest.json").ok_or_else(|| {
        StreamError::Truncated("there is no manifest.json (a whole save stream has one)".into())
    })?;
    serde_json::from_slice(manifest)
        .map_err(|e| StreamError::Corrupt(format!("manifest.json: {e}")))
}

/// An image config's JSON and its `rootfs.diff_ids`, each checked to be a
/// digest (a diff_ID names a layer everywhere after this: printed, keyed,
/// written into a config); `shown` names the config in errors, escaped.
pub(crate) fn config_of(
    shown: &str,
    bytes: &[u8],
) -> Result<(serde_json::Value, Vec<String>), StreamError> {
    let config: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| StreamError::Corrupt(format!("the config {shown}: {e}")))?;
    let diff_ids = super::config::diff_ids(&config).ok_or_else(|| {
        StreamError::Corrupt(format!("the config {shown} has no rootfs.diff_ids"))
    })?;
    if let Some(bad) = diff_ids
        .iter()
        .find(|d| d.parse::<crate::name::Digest>().is_err())
    {
        return Err(StreamError::Corrupt(format!(
            "the config {shown}: rootfs.diff_ids holds {}, which is not a digest",
            super::entries::shown(bad)
        )));
    }
    Ok((config, diff_ids))
}

/// One image of `manifest.json`, and its config's digest.
fn item_contents(
    small: &BTreeMap<String, Vec<u8>>,
    links: &BTreeMap<String, String>,
    item: &ManifestItem,
) -> Result<(String, Contents), StreamError> {
    let config_name = resolve(links, &item.config);
    // Names and values from the stream are shown escaped.
    let shown = super::entries::shown(&config_name);
    let config_bytes = small.get(&config_name).ok_or_else(|| {
        StreamError::Truncated(format!(
            "the config {shown} named by manifest.json is missing"
        ))
    })?;
    let (config, diff_ids) = config_of(&shown, config_bytes)?;
    if diff_ids.len() != item.layers.len() {
        return Err(StreamError::Corrupt(format!(
            "manifest.json lists {} layers, the config {}",
            item.layers.len(),
            diff_ids.len()
        )));
    }
    let id = crate::name::Digest::sha256(config_bytes).to_string();
    Ok((
        id,
        Contents {
            config,
            layers: item.layers.iter().map(|l| resolve(links, l)).collect(),
            diff_ids,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_content_addressed_layer_names_are_remembered() {
        let hex = "0123456789abcdef".repeat(4);
        let names = LayerNames::default();
        for (name, kept) in [
            (format!("{hex}/layer.tar"), true),
            (format!("./{hex}.tar"), true),
            (format!("blobs/sha256/{hex}"), true),
            ("0/layer.tar".to_string(), false),
            (format!("{}/layer.tar", hex.to_uppercase()), false),
            (format!("{}/layer.tar", &hex[1..]), false),
        ] {
            names.learn(&name, "sha256:d");
            assert_eq!(names.diff_id(&name).is_some(), kept, "{name}");
        }
        assert_eq!(
            names
                .clone()
                .diff_id(&format!("./{hex}/layer.tar"))
                .as_deref(),
            Some("sha256:d"),
            "clones share what was learned; a leading ./ is the same name"
        );
    }

    /// What Docker 20.10.24 saved of the composed `full` (12 layers, the
    /// last an empty layer met before: its directory's `layer.tar` is a
    /// link): `manifest.json`, each layer directory's `json` (not its
    /// `layer.tar`), and the image's diff_ids as `docker image inspect`
    /// gave them.
    fn docker_20_10_save() -> (Vec<String>, Vec<(String, Vec<u8>)>) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/image/testdata/docker-20.10-save");
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        let diff_ids: Vec<String> = serde_json::from_slice(&read("diff_ids.json")).unwrap();
        let items: Vec<ManifestItem> = serde_json::from_slice(&read("manifest.json")).unwrap();
        let jsons = (items[0].layers.iter())
            .map(|l| {
                let json = l.replace("/layer.tar", "/json");
                let bytes = read(&json);
                (json, bytes)
            })
            .collect();
        (diff_ids, jsons)
    }

    #[test]
    fn a_docker_save_names_each_layer_by_its_chain_and_the_json_beside_it_proves_which() {
        let (diff_ids, jsons) = docker_20_10_save();
        assert_eq!(jsons.len(), 12);
        let names = LayerNames::default();
        let other = vec![format!("sha256:{}", "0".repeat(64))];
        for (name, json) in &jsons {
            names.learn_from_v1_json(name, json, &[other.clone(), diff_ids.clone()]);
        }
        // Every layer, the top one (whose JSON holds the image's config)
        // included, in the image's order.
        for (i, (name, _)) in jsons.iter().enumerate() {
            let layer = name.replace("/json", "/layer.tar");
            assert_eq!(
                names.diff_id(&layer).as_ref(),
                Some(&diff_ids[i]),
                "layer {i}"
            );
        }
    }

    #[test]
    fn a_v1_json_that_proves_no_layer_of_the_image_teaches_nothing() {
        let (diff_ids, jsons) = docker_20_10_save();
        let (name, json) = &jsons[8];
        let layer = name.replace("/json", "/layer.tar");
        let names = LayerNames::default();
        // One byte of the JSON changed; the JSON put under another name;
        // the layers of another image; not JSON at all; a name that is no
        // content address.
        let text = String::from_utf8(json.clone()).unwrap();
        let altered = text.replacen("1970-01-01T00:00:00Z", "1970-01-01T00:00:01Z", 1);
        assert_ne!(altered, text);
        let image = std::slice::from_ref(&diff_ids);
        names.learn_from_v1_json(name, altered.as_bytes(), image);
        names.learn_from_v1_json(&jsons[7].0, json, image);
        names.learn_from_v1_json(name, json, &[diff_ids[..8].to_vec()]);
        names.learn_from_v1_json(name, b"not json", image);
        names.learn_from_v1_json("x/json", json, image);
        for (n, _) in &jsons {
            assert_eq!(
                names.diff_id(&n.replace("/json", "/layer.tar")),
                None,
                "{n}"
            );
        }
        assert_eq!(names.diff_id("x/layer.tar"), None);
        names.learn_from_v1_json(&format!("./{name}"), json, image);
        assert_eq!(names.diff_id(&layer).as_ref(), Some(&diff_ids[8]));
    }

    #[test]
    fn a_diff_id_that_is_no_digest_is_refused_shown_escaped() {
        let config = br#"{"rootfs":{"type":"layers","diff_ids":["sha256:\u001b[31m\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"]}}"#;
        let manifest = br#"[{"Config":"c.json","Layers":["l/layer.tar"]}]"#;
        let small = BTreeMap::from([
            ("c.json".to_string(), config.to_vec()),
            ("manifest.json".to_string(), manifest.to_vec()),
        ]);
        let err = match contents_by_id(&small, &BTreeMap::new()) {
            Err(StreamError::Corrupt(e)) => e,
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a diff_id that is no digest was taken"),
        };
        assert!(
            err.starts_with("the config c.json: rootfs.diff_ids holds "),
            "{err}"
        );
        assert!(err.ends_with(", which is not a digest"), "{err}");
        assert!(!err.contains('\u{1b}'), "shown escaped: {err:?}");
    }
}
