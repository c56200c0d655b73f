//! The second pass: the staged image written as a `docker load` archive
//! (the docker-archive format both engines load: `manifest.json`, the
//! config, one tar per layer).

use super::read::{Layer, Staged};
use super::{LayerReport, NormalizeError, Options, Report, config, digest, layer};
use sha2::Digest as _;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;

/// Counts and hashes what passes through.
struct Meter<'a> {
    out: &'a mut dyn Write,
    bytes: u64,
    hash: Option<sha2::Sha256>,
}

impl Write for Meter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes += n as u64;
        if let Some(h) = &mut self.hash {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The archive's own header for a file of `size` bytes (fixed fields:
/// the archive is a carrier, the engine keeps nothing of it).
fn file_header(name: &str, size: u64) -> tar::Header {
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

/// What `manifest.json` and the config of a save stream say.
pub(super) use crate::image::save_stream::Contents as Parts;

/// Reads the one image of a save stream from its small files.
pub(super) fn parts(
    image: &str,
    files: &BTreeMap<String, Vec<u8>>,
    links: &BTreeMap<String, String>,
) -> Result<Parts, NormalizeError> {
    crate::image::save_stream::contents(files, links)
        .map_err(|e| super::read::stream_failure(image, e))
}

/// The end of an archive: the config (as `<hex>.json`), `manifest.json`
/// naming it, the layer files and `tags`, and the two zero blocks. Returns
/// the config's digest: the image ID after a load.
pub(super) fn write_config_and_manifest(
    out: &mut dyn Write,
    config: &serde_json::Value,
    tags: &[String],
    layer_files: &[String],
) -> std::io::Result<String> {
    let config_bytes = serde_json::to_vec(config).expect("a JSON value serialises");
    let config_digest = digest(&config_bytes);
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

impl Staged {
    /// Writes the normalised archive to `output`.
    pub(crate) fn write(
        &self,
        output: impl Write,
        opts: &Options,
    ) -> Result<Report, NormalizeError> {
        let Parts {
            config,
            layers: layer_names,
            diff_ids,
        } = parts(&self.image, &self.files, &self.links)?;
        let layers = self.layers_in_order(&layer_names, &diff_ids)?;
        let keep = shared_with_base(&diff_ids, &opts.base_diff_ids);

        let mut output = output;
        let mut out = Meter {
            out: &mut output,
            bytes: 0,
            hash: None,
        };
        let created = crate::timestamp::rfc3339(opts.source_date_epoch);
        // The paths of the layers written so far: what a layer's mount
        // stubs are checked against (`layer::plan`).
        let mut lower: HashSet<Vec<u8>> = HashSet::new();
        let mut reports = Vec::new();
        let mut names = Vec::new();
        for (i, (name, l)) in layers.iter().enumerate() {
            let file = format!("layers/{i:03}.tar");
            let report = if i < keep {
                self.write_kept_layer(l, &file, &mut lower, &mut out)
            } else {
                self.write_rewritten_layer(l, &file, &mut lower, opts.source_date_epoch, &mut out)
            }
            .map_err(self.io_error(format!("writing layer {name} to the archive")))?;
            names.push(file);
            reports.push(report);
        }
        let new_ids: Vec<String> = reports.iter().map(|r| r.diff_id_after.clone()).collect();
        let in_order: Vec<&Layer> = layers.iter().map(|(_, l)| *l).collect();
        let config = self.with_package_record(config, &in_order, keep, opts)?;
        let config = config::rewrite(&config, &new_ids, &created);
        let config_digest = write_config_and_manifest(&mut out, &config, &opts.tags, &names)
            .map_err(self.io_error("writing the archive".into()))?;
        Ok(Report {
            layers: reports,
            config_digest,
            bytes: out.bytes,
        })
    }

    /// The layers `manifest.json` names, in the image's order, each checked
    /// to be in the stream and to hash to the config's diff_id for it.
    fn layers_in_order(
        &self,
        layer_names: &[String],
        diff_ids: &[String],
    ) -> Result<Vec<(&str, &Layer)>, NormalizeError> {
        let image = &self.image;
        let mut layers = Vec::new();
        for (name, want) in layer_names.iter().zip(diff_ids) {
            let (name, layer) =
                self.layers
                    .get_key_value(name)
                    .ok_or_else(|| NormalizeError::Truncated {
                        image: image.clone(),
                        detail: format!("layer {name} named by manifest.json is not in the stream"),
                    })?;
            if &layer.diff_id != want {
                return Err(NormalizeError::CorruptLayer {
                    image: image.clone(),
                    layer: name.clone(),
                    detail: format!(
                        "its bytes hash to {}, the config says {want}",
                        layer.diff_id
                    ),
                });
            }
            layers.push((name.as_str(), layer));
        }
        Ok(layers)
    }

    /// A layer of the FROM image, copied byte for byte as `file`.
    fn write_kept_layer(
        &self,
        l: &Layer,
        file: &str,
        lower: &mut HashSet<Vec<u8>>,
        out: &mut dyn Write,
    ) -> std::io::Result<LayerReport> {
        self.copy_layer(l, file, out)?;
        lower.extend(l.entries.iter().map(|e| e.path.clone()));
        Ok(LayerReport {
            diff_id_before: l.diff_id.clone(),
            diff_id_after: l.diff_id.clone(),
            kept: true,
            entries: l.entries.len(),
            dropped: Vec::new(),
        })
    }

    /// A layer this family built, written anew (`layer::plan`) as `file`,
    /// hashed as it is written for its new diff_id.
    fn write_rewritten_layer(
        &self,
        l: &Layer,
        file: &str,
        lower: &mut HashSet<Vec<u8>>,
        source_date_epoch: u64,
        out: &mut dyn Write,
    ) -> std::io::Result<LayerReport> {
        let (entries, dropped) = layer::plan(&l.entries, lower, source_date_epoch);
        let size = layer::layer_size(&entries);
        out.write_all(file_header(file, size).as_bytes())?;
        let mut hashed = Meter {
            out: &mut *out,
            bytes: 0,
            hash: Some(sha2::Sha256::new()),
        };
        layer::write_layer(&entries, &self.spill, &mut hashed)?;
        let written = hashed.bytes;
        let diff_id = format!(
            "sha256:{}",
            hex::encode(hashed.hash.take().expect("hashing").finalize())
        );
        debug_assert_eq!(written, size);
        pad(out, size)?;
        lower.extend(entries.iter().map(|e| e.path.clone()));
        Ok(LayerReport {
            diff_id_before: l.diff_id.clone(),
            diff_id_after: diff_id,
            kept: false,
            entries: entries.len(),
            dropped,
        })
    }

    /// `config` with the package record of `layers` (the first `keep` the
    /// FROM image's) as its label, when there is one ([`super::packages`]).
    fn with_package_record(
        &self,
        config: serde_json::Value,
        layers: &[&Layer],
        keep: usize,
        opts: &Options,
    ) -> Result<serde_json::Value, NormalizeError> {
        let mut config = config;
        let record =
            super::packages::record(&config, layers, keep, &self.spill, &opts.fragment_scripts)
                .map_err(self.io_error("reading the dpkg status of the layers".into()))?;
        if let Some(record) = record {
            let label = BTreeMap::from([(crate::labels::PACKAGES.to_string(), record.to_label())]);
            config::set_labels(&mut config, &label).map_err(|detail| NormalizeError::Corrupt {
                image: self.image.clone(),
                detail: detail.to_string(),
            })?;
        }
        Ok(config)
    }

    /// An I/O failure while writing this image's archive, with `context`.
    fn io_error(&self, context: String) -> impl Fn(std::io::Error) -> NormalizeError + '_ {
        move |source| NormalizeError::Io {
            image: self.image.clone(),
            context: context.clone(),
            source,
        }
    }
}

/// How many layers the image starts with that are its FROM image's
/// (`base`): those are copied byte for byte.
fn shared_with_base(diff_ids: &[String], base: &[String]) -> usize {
    diff_ids
        .iter()
        .zip(base)
        .take_while(|(a, b)| a == b)
        .count()
}

impl Staged {
    /// One layer of the stream, byte for byte, as the archive file `file`.
    pub(super) fn copy_layer(
        &self,
        layer: &Layer,
        file: &str,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        out.write_all(file_header(file, layer.len).as_bytes())?;
        copy_range(&self.spill, layer.spill_at, layer.len, out)
    }
}

fn pad(out: &mut dyn Write, size: u64) -> std::io::Result<()> {
    let rem = (size % 512) as usize;
    if rem == 0 {
        return Ok(());
    }
    out.write_all(&[0u8; 512][..512 - rem])
}

fn copy_range(
    spill: &std::fs::File,
    at: u64,
    len: u64,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 256 << 10];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = spill.read_at(&mut buf[..want], at + done)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the spill ended early",
            ));
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    pad(out, len)
}
