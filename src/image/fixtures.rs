//! Images built in tests, as an engine would write them: a layer tar of
//! entries (GNU headers, PAX for xattrs, any bytes as a name) and a
//! `docker save` stream of layers with its config and manifest.json. Every
//! test that reads or writes layers — the normaliser's, the SBOM's
//! reading, the push's compression — starts from these, so they sit with
//! the image model rather than with one stage's tests.

use serde_json::json;

/// The mtime of every entry these make unless a test sets another (later
/// than the normaliser's test `SOURCE_DATE_EPOCH`, so clamping shows).
pub(crate) const LATE: u64 = 1_800_000_000;

/// `sha256:<hex>` of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// One entry of a test layer.
#[derive(Clone)]
pub(crate) struct E {
    pub(crate) path: &'static str,
    pub(crate) kind: tar::EntryType,
    pub(crate) mode: u32,
    pub(crate) uid: u64,
    pub(crate) mtime: u64,
    pub(crate) link: &'static str,
    pub(crate) data: Vec<u8>,
    pub(crate) xattrs: Vec<(&'static str, &'static [u8])>,
    pub(crate) uname: &'static str,
}

pub(crate) fn file(path: &'static str, data: &str) -> E {
    E {
        path,
        kind: tar::EntryType::Regular,
        mode: 0o644,
        uid: 0,
        mtime: LATE,
        link: "",
        data: data.as_bytes().to_vec(),
        xattrs: vec![],
        uname: "root",
    }
}

pub(crate) fn dir(path: &'static str) -> E {
    E {
        kind: tar::EntryType::Directory,
        mode: 0o755,
        ..file(path, "")
    }
}

pub(crate) fn link(path: &'static str, kind: tar::EntryType, target: &'static str) -> E {
    E {
        kind,
        mode: 0o777,
        link: target,
        ..file(path, "")
    }
}

/// A layer tar as an engine would write one (GNU headers, PAX for xattrs).
pub(crate) fn layer(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        if !e.xattrs.is_empty() {
            let recs: Vec<(String, &[u8])> = e
                .xattrs
                .iter()
                .map(|(k, v)| (format!("SCHILY.xattr.{k}"), *v))
                .collect();
            b.append_pax_extensions(recs.iter().map(|(k, v)| (k.as_str(), *v)))
                .unwrap();
        }
        let mut h = tar::Header::new_gnu();
        raw_name(&mut h, e.path.as_bytes());
        h.set_entry_type(e.kind);
        h.set_mode(e.mode);
        h.set_uid(e.uid);
        h.set_gid(e.uid);
        h.set_mtime(e.mtime);
        h.set_size(e.data.len() as u64);
        h.set_username(e.uname).unwrap();
        if !e.link.is_empty() {
            h.set_link_name_literal(e.link).unwrap();
        }
        if e.kind == tar::EntryType::Char {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        h.set_cksum();
        b.append(&h, e.data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// Any bytes as the name, absolute and `..` ones too.
pub(crate) fn raw_name(h: &mut tar::Header, name: &[u8]) {
    let field = &mut h.as_old_mut().name;
    field.fill(0);
    field[..name.len()].copy_from_slice(name);
}

/// A `docker save` stream of one image with these layers: `<id>/layer.tar`
/// names in an order that is not the image's, the config, manifest.json.
pub(crate) fn save_stream(layers: &[Vec<u8>], created: &str) -> Vec<u8> {
    let labels = json!({"dev.sunaba.variant": "t"});
    save_stream_of_steps(layers, created, &vec!["RUN x"; layers.len()], labels)
}

/// [`save_stream`] with each layer's history step (`created_by`) and the
/// config's labels.
pub(crate) fn save_stream_of_steps(
    layers: &[Vec<u8>],
    created: &str,
    steps: &[&str],
    labels: serde_json::Value,
) -> Vec<u8> {
    let diff_ids: Vec<String> = layers.iter().map(|l| digest(l)).collect();
    let config = json!({
        "architecture": "amd64", "os": "linux", "created": created,
        "container": "c0ffee", "docker_version": "20.10.24",
        "container_config": {"Hostname": "c0ffee"},
        "config": {"Labels": labels, "Hostname": "c0ffee"},
        "history": steps.iter().map(|s| json!({"created": created, "created_by": s})).collect::<Vec<_>>(),
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = serde_json::to_vec(&config).unwrap();
    let config_name = format!("{}.json", &digest(&config)[7..]);
    // Layer directories named as Docker names them, by a hash of the
    // layer's chain (the same layer on the same layers has the same name in
    // every image's save), so their order is not the image's.
    let ids: Vec<String> = (0..layers.len())
        .map(|i| digest(format!("v1 id {}", diff_ids[..=i].join(",")).as_bytes())[7..].to_string())
        .collect();
    let manifest = serde_json::to_vec(&json!([{
        "Config": config_name, "RepoTags": null,
        "Layers": ids.iter().map(|id| format!("{id}/layer.tar")).collect::<Vec<_>>(),
    }]))
    .unwrap();
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (config_name, config),
        ("manifest.json".into(), manifest),
        ("repositories".into(), b"{}".to_vec()),
    ];
    for (id, l) in ids.iter().zip(layers) {
        files.push((format!("{id}/VERSION"), b"1.0".to_vec()));
        files.push((format!("{id}/json"), b"{}".to_vec()));
        files.push((format!("{id}/layer.tar"), l.clone()));
    }
    files.sort();
    tar_of(files)
}

/// One save stream of the images whose streams (of [`save_stream_of_steps`])
/// are `streams`, as `save A B …` gives it: every file once (a layer on the
/// same chain has the same name and bytes in each), `manifest.json`
/// listing each image.
pub(crate) fn merged_save_stream(streams: &[&[u8]]) -> Vec<u8> {
    let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let mut manifest: Vec<serde_json::Value> = Vec::new();
    for stream in streams {
        let mut archive = tar::Archive::new(*stream);
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            if name == "manifest.json" {
                let items: Vec<serde_json::Value> = serde_json::from_slice(&bytes).unwrap();
                manifest.extend(items);
            } else {
                files.insert(name, bytes);
            }
        }
    }
    files.insert(
        "manifest.json".into(),
        serde_json::to_vec(&manifest).unwrap(),
    );
    tar_of(files)
}

/// The layer files of a save stream, in the stream's order.
pub(crate) fn layer_names(stream: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(stream);
    (archive.entries().unwrap())
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().to_string())
        .filter(|n| n.ends_with("/layer.tar"))
        .collect()
}

/// A tar of these files (regular, 0644), in this order.
pub(crate) fn tar_of(files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, bytes) in files {
        let mut h = tar::Header::new_ustar();
        h.set_path(&name).unwrap();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, bytes.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}
