//! The second pass: the staged image written as a `docker load` archive
//! (the docker-archive format both engines load, written with
//! [`crate::image::load_archive`]: `manifest.json`, the config, one tar per
//! layer).

use super::read::{Layer, Staged};
use super::{LayerReport, NormalizeError, Options, Report, config, layer};
use crate::image::layer_tar;
use crate::image::load_archive::{file_header, pad, write_config_and_manifest};
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
                self.write_kept_layer(l, &file, opts.kept_by_name, &mut lower, &mut out)
            } else {
                self.write_rewritten_layer(l, &file, &mut lower, opts, &mut out)
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

    /// A layer of the FROM image, copied byte for byte as `file` — or,
    /// `by_name`, only named by `manifest.json` (the engine has it).
    fn write_kept_layer(
        &self,
        l: &Layer,
        file: &str,
        by_name: bool,
        lower: &mut HashSet<Vec<u8>>,
        out: &mut dyn Write,
    ) -> std::io::Result<LayerReport> {
        if !by_name {
            self.copy_layer(l, file, out)?;
        }
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
    /// hashed as it is written for its new diff_id; with
    /// `opts.keep_layers`, a copy kept in the process's layer store.
    fn write_rewritten_layer(
        &self,
        l: &Layer,
        file: &str,
        lower: &mut HashSet<Vec<u8>>,
        opts: &Options,
        out: &mut dyn Write,
    ) -> std::io::Result<LayerReport> {
        let (entries, dropped) = layer::plan(&l.entries, lower, opts.source_date_epoch);
        let size = layer_tar::layer_size(&entries);
        out.write_all(file_header(file, size).as_bytes())?;
        let hashed = |out: &mut dyn Write| -> std::io::Result<(u64, String)> {
            let mut hashed = Meter {
                out,
                bytes: 0,
                hash: Some(sha2::Sha256::new()),
            };
            layer_tar::write_layer(&entries, &self.spill, &mut hashed)?;
            let digest = hex::encode(hashed.hash.take().expect("hashing").finalize());
            Ok((hashed.bytes, format!("sha256:{digest}")))
        };
        let (written, diff_id) = if opts.keep_layers {
            let mut copy = crate::image::layer_store::LayerCopy::start();
            let mut both = copy.writer(&mut *out);
            let (written, diff_id) = hashed(&mut both)?;
            let whole = both.finish();
            copy.keep(&diff_id, whole);
            (written, diff_id)
        } else {
            hashed(&mut *out)?
        };
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
            crate::image::config::set_labels(&mut config, &label).map_err(|detail| {
                NormalizeError::Corrupt {
                    image: self.image.clone(),
                    detail: detail.to_string(),
                }
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

/// A range of the spill, padded to the archive's block.
fn copy_range(
    spill: &std::fs::File,
    at: u64,
    len: u64,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    layer_tar::copy_range(spill, at, len, &mut buf, out)?;
    pad(out, len)
}
