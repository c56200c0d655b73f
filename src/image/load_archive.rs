//! The `docker load` archive (the docker-archive format both engines
//! load: one tar per layer, the config as `<hex>.json`, `manifest.json`
//! naming them and the tags), written as a stream: each file's header
//! first, its size known, so nothing is staged on disk twice. The
//! normaliser writes its rewritten image this way and the relabeller its
//! labelled config; whoever else loads an image it assembled writes the
//! same archive.

use sha2::Digest as _;
use std::io::Write;

/// The archive's own header for a file of `size` bytes (fixed fields:
/// the archive is a carrier, the engine keeps nothing of it).
pub(crate) fn file_header(name: &str, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    // Our names are short ASCII: the ustar name field holds them.
    let _ = h.set_path(name);
    h.set_mode(0o644);
    h.set_size(size);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    h
}

/// The end of an archive: the config (as `<hex>.json`), `manifest.json`
/// naming it, the layer files and `tags`, and the two zero blocks. Returns
/// the config's digest: the image ID after a load.
pub(crate) fn write_config_and_manifest(
    out: &mut dyn Write,
    config: &serde_json::Value,
    tags: &[String],
    layer_files: &[String],
) -> std::io::Result<String> {
    let config_bytes = serde_json::to_vec(config).expect("a JSON value serialises");
    let config_digest = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(&config_bytes))
    );
    let config_file = format!("{}.json", &config_digest["sha256:".len()..]);
    written_configs::remember(&config_digest, &config_bytes);
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_file,
        "RepoTags": tags,
        "Layers": layer_files,
    }]))
    .expect("a JSON value serialises");
    for (name, bytes) in [
        (&config_file, &config_bytes),
        (&"manifest.json".to_string(), &manifest),
    ] {
        out.write_all(file_header(name, bytes.len() as u64).as_bytes())?;
        out.write_all(bytes)?;
        pad(out, bytes.len() as u64)?;
    }
    out.write_all(&[0u8; 1024])?;
    out.flush()?;
    Ok(config_digest)
}

/// Zeros up to the next 512-byte block after a file of `size` bytes.
pub(crate) fn pad(out: &mut dyn Write, size: u64) -> std::io::Result<()> {
    let rem = (size % 512) as usize;
    if rem == 0 {
        return Ok(());
    }
    out.write_all(&[0u8; 512][..512 - rem])
}

/// The configs this process wrote into a load archive, by digest: the ID
/// of the image such an archive loads. A digest names its bytes, so a hit
/// is the image's config whatever became of the archive — nothing here can
/// go stale. The relabeller, which labels the image a build just
/// normalised, takes its config from here instead of saving the whole image
/// again to read it (7.3 s for `full`'s 1 GB on the dev engine).
pub(crate) mod written_configs {
    use sha2::Digest as _;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// A family's run writes one or two per variant and platform; the
    /// oldest go first (a miss only costs a save).
    const KEPT: usize = 64;

    static CONFIGS: Mutex<VecDeque<(String, Arc<[u8]>)>> = Mutex::new(VecDeque::new());

    pub(crate) fn remember(digest: &str, bytes: &[u8]) {
        let mut configs = CONFIGS.lock().unwrap_or_else(|e| e.into_inner());
        if configs.iter().any(|(d, _)| d == digest) {
            return;
        }
        if configs.len() == KEPT {
            configs.pop_front();
        }
        configs.push_back((digest.to_string(), Arc::from(bytes)));
    }

    /// The config whose digest is `digest` (an image ID), if this process
    /// wrote it. Checked again on the way out: a digest is only trusted
    /// when the bytes hash to it.
    pub(crate) fn get(digest: &str) -> Option<Arc<[u8]>> {
        let configs = CONFIGS.lock().unwrap_or_else(|e| e.into_inner());
        let (_, bytes) = configs.iter().find(|(d, _)| d == digest)?;
        let hashed = format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)));
        (hashed == digest).then(|| bytes.clone())
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_written_config_is_found_by_its_digest_and_only_by_it() {
            let mut out = Vec::new();
            let config =
                serde_json::json!({"rootfs": {"diff_ids": []}, "n": "written-configs-test"});
            let digest =
                super::super::write_config_and_manifest(&mut out, &config, &[], &[]).unwrap();
            let bytes = super::get(&digest).expect("remembered");
            assert_eq!(&*bytes, serde_json::to_vec(&config).unwrap().as_slice());
            assert!(super::get("sha256:0000").is_none());
            // Bytes that do not hash to the name they were filed under are
            // never handed out.
            super::remember("sha256:forged", b"{}");
            assert!(super::get("sha256:forged").is_none());
        }
    }
}
