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
