//! Setting labels on a local image without a build: the image's config is
//! read from a save stream, given the labels (keys sorted, as the
//! normaliser writes configs) and loaded back. Nothing else changes — not
//! `created`, not the history, not a layer — so the labelled image's ID is
//! a function of the image and the labels alone. A metadata-only build
//! (`FROM image` + `LABEL`), which this replaces for the check record, gives
//! the config the build's wall-clock time and a new history entry: the same
//! record on the same image gave another ID on every run.
//!
//! Docker's `load` looks a layer up by its chain ID before it opens the
//! layer's file, so an archive with the config and `manifest.json` alone
//! loads in a second when the layers are in the engine already — and they
//! are: the image was just saved from it. Other engines read every layer
//! file of the archive, so for them the layers are copied from the save
//! stream byte for byte (the cost of a normalisation, without the rewrite).
//!
//! On Docker the save is skipped too when this process wrote the image's
//! config ([`crate::image::load_archive::written_configs`]): a build labels
//! the image it has just normalised, whose config it holds. For `full`
//! that was a 7.3 s save of 1 GB to read a config of a few kilobytes.

use super::archive::{Parts, parts};
use super::read::{read, stream_failure};
use super::{NormalizeError, load_and_verify};
use crate::engine::Engine;
use crate::image::load_archive::write_config_and_manifest;
use crate::image::save_stream::{WalkError, stream_error, walk};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// Loads `image` again with `labels` added to its config (a label of the
/// same key is replaced) and tagged `tags`; returns the new image's ID.
/// `id` is the image's ID when the caller has inspected it already. On any
/// error nothing is loaded or tagged.
pub(crate) fn relabel(
    engine: &dyn Engine,
    image: &str,
    id: Option<&str>,
    labels: &BTreeMap<String, String>,
    tags: &[String],
) -> Result<String, NormalizeError> {
    let piped = super::round_trip::piped(image);
    let save = engine.save_cmd(image);
    if engine.loads_layers_it_has_by_chain_id() {
        let parts = match written_config(engine, image, id)? {
            Some(parts) => parts,
            None => {
                let (files, links) = save
                    .read_stdout(|out| read_small_files(image, out))
                    .map_err(piped)?;
                parts(image, &files, &links)?
            }
        };
        let config = labelled(image, &parts.config, labels)?;
        load_and_verify(
            engine,
            image,
            tags,
            |out| {
                written(
                    image,
                    write_config_and_manifest(out, &config, tags, &parts.layers),
                )
            },
            String::clone,
        )
        .map(|(id, _)| id)
    } else {
        let staged = save
            .read_stdout(|out| read(image, out, &std::env::temp_dir()))
            .map_err(piped)?;
        let Parts { config, layers, .. } = parts(image, &staged.files, &staged.links)?;
        let config = labelled(image, &config, labels)?;
        let write = |out: &mut dyn Write| -> std::io::Result<String> {
            let mut files = Vec::new();
            for (i, name) in layers.iter().enumerate() {
                let layer = staged.layers.get(name).ok_or_else(|| {
                    std::io::Error::other(format!(
                        "layer {name} named by manifest.json is not in the stream"
                    ))
                })?;
                let file = format!("layers/{i:03}.tar");
                staged.copy_layer(layer, &file, out)?;
                files.push(file);
            }
            write_config_and_manifest(out, &config, tags, &files)
        };
        load_and_verify(
            engine,
            image,
            tags,
            |out| written(image, write(out)),
            String::clone,
        )
        .map(|(id, _)| id)
    }
}

/// The parts of `image` when this process wrote its config (the image a
/// build just normalised): no save stream needed. The layer files are
/// named, not sent — Docker finds each by its chain ID.
fn written_config(
    engine: &dyn Engine,
    image: &str,
    id: Option<&str>,
) -> Result<Option<Parts>, NormalizeError> {
    let id = match id {
        Some(id) => id.to_string(),
        None => match engine
            .inspect(image)
            .map_err(super::round_trip::engine_error(image))?
        {
            Some(info) => info.id,
            None => return Ok(None),
        },
    };
    let Some(bytes) = crate::image::load_archive::written_configs::get(&id) else {
        return Ok(None);
    };
    let (config, diff_ids) = crate::image::save_stream::config_of("this process wrote", &bytes)
        .map_err(|e| stream_failure(image, e))?;
    let layers = (0..diff_ids.len())
        .map(|i| format!("layers/{i:03}.tar"))
        .collect();
    Ok(Some(Parts {
        config,
        layers,
        diff_ids,
    }))
}

/// The written archive's image ID, or why it could not be written.
fn written(image: &str, r: std::io::Result<String>) -> Result<String, NormalizeError> {
    r.map_err(|source| NormalizeError::Io {
        image: image.to_string(),
        context: "writing the archive to load".into(),
        source,
    })
}

/// The config with `labels` set in `config.Labels`, every object's keys
/// sorted.
fn labelled(
    image: &str,
    config: &Value,
    labels: &BTreeMap<String, String>,
) -> Result<Value, NormalizeError> {
    let mut config = config.clone();
    crate::image::config::set_labels(&mut config, labels).map_err(|detail| {
        NormalizeError::Corrupt {
            image: image.to_string(),
            detail: detail.to_string(),
        }
    })?;
    Ok(super::config::sorted(config))
}

/// Small files of a save stream by name, and its symlinks (name -> target).
type SmallFiles = BTreeMap<String, Vec<u8>>;
type Links = BTreeMap<String, String>;

/// The small files (manifest.json, the config) and the symlinks of a save
/// stream; every layer's bytes are read past, not kept.
fn read_small_files(
    image: &str,
    input: &mut dyn Read,
) -> Result<(SmallFiles, Links), NormalizeError> {
    let files = walk(input, |_, _, layer| {
        std::io::copy(layer, &mut std::io::sink()).map(drop)
    })
    .map_err(|e| match e {
        WalkError::Stream(e) => stream_failure(image, e),
        WalkError::Layer(e) => stream_failure(image, stream_error(e)),
    })?;
    Ok((files.small, files.links))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::fixtures::{dir, file, layer, save_stream};
    use crate::normalize::round_trip::tests::scripted;

    /// A loaded archive's files, by name.
    fn archive(path: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
        let mut a = tar::Archive::new(std::fs::File::open(path).unwrap());
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut bytes = Vec::new();
                e.read_to_end(&mut bytes).unwrap();
                (e.path().unwrap().display().to_string(), bytes)
            })
            .collect()
    }

    fn config_of(files: &BTreeMap<String, Vec<u8>>) -> (String, Value) {
        let manifest: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        let name = manifest[0]["Config"].as_str().unwrap().to_string();
        (name.clone(), serde_json::from_slice(&files[&name]).unwrap())
    }

    fn check(chain_id_loads: bool) -> (BTreeMap<String, Vec<u8>>, Vec<Vec<u8>>, String) {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        let layers = vec![
            layer(&[dir("a"), file("a/b", "x\n")]),
            layer(&[file("a/c", "y\n")]),
        ];
        std::fs::write(
            tmp.path().join("save.tar"),
            save_stream(&layers, "2026-12-01T19:00:00Z"),
        )
        .unwrap();
        let mut engine = scripted(
            tmp.path(),
            &format!("cat {d}/save.tar"),
            &format!("cat > {d}/loaded.tar; echo 'Loaded image: r:t'"),
        );
        engine.chain_id_loads = chain_id_loads;
        let labels = BTreeMap::from([("dev.sunaba.check".to_string(), "{}".to_string())]);
        let id = relabel(&engine, "r:t", None, &labels, &["r:t".into()]).unwrap();
        let files = archive(&tmp.path().join("loaded.tar"));
        // Twice: the same ID (the label's value is all that was added).
        let again = relabel(&engine, "r:t", None, &labels, &["r:t".into()]).unwrap();
        assert_eq!(id, again);
        (files, layers, id)
    }

    #[test]
    fn a_config_this_process_wrote_is_relabelled_without_a_save() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        // What a normalisation just loaded: its config, written here.
        let config = serde_json::json!({
            "architecture": "amd64",
            "config": {"Labels": {"keep": "me"}},
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [
                format!("sha256:{}", "1".repeat(64)),
                format!("sha256:{}", "2".repeat(64)),
            ]},
            "n": "relabel-without-a-save",
        });
        let mut written = Vec::new();
        write_config_and_manifest(&mut written, &config, &["r:t".into()], &[]).unwrap();
        std::fs::write(tmp.path().join("loaded.tar"), &written).unwrap();
        // A save would fail the relabel: it must not be needed.
        let mut engine = scripted(
            tmp.path(),
            "echo 'no save expected' >&2; exit 9",
            &format!("cat > {d}/loaded.tar; echo 'Loaded image: r:t'"),
        );
        engine.chain_id_loads = true;
        let labels = BTreeMap::from([("dev.sunaba.check".to_string(), "{}".to_string())]);
        let id = relabel(&engine, "r:t", None, &labels, &["r:t".into()]).unwrap();
        let files = archive(&tmp.path().join("loaded.tar"));
        let (name, labelled) = config_of(&files);
        assert_eq!(format!("sha256:{}", name.trim_end_matches(".json")), id);
        assert_eq!(labelled["config"]["Labels"]["keep"], "me");
        assert_eq!(labelled["config"]["Labels"]["dev.sunaba.check"], "{}");
        assert_eq!(labelled["rootfs"], config["rootfs"]);
        // The layers are named for the engine to find, not sent.
        let manifest: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(manifest[0]["Layers"].as_array().unwrap().len(), 2);
        assert_eq!(files.len(), 2, "{:?}", files.keys());
        // An engine that reads every layer file still gets a save.
        engine.chain_id_loads = false;
        let err = relabel(&engine, "r:t", None, &labels, &["r:t".into()]).unwrap_err();
        assert!(err.to_string().contains("no save expected"), "{err}");
    }

    #[test]
    fn only_the_label_changes_and_the_id_is_the_configs_digest() {
        for chain_id_loads in [true, false] {
            let (files, _, id) = check(chain_id_loads);
            let (name, config) = config_of(&files);
            assert_eq!(
                id,
                crate::image::fixtures::digest(&files[&name]),
                "{chain_id_loads}"
            );
            assert_eq!(format!("{}.json", &id[7..]), name);
            assert_eq!(
                config["config"]["Labels"],
                serde_json::json!({"dev.sunaba.check": "{}", "dev.sunaba.variant": "t"})
            );
            // Times, history and the rest as they were: no build happened.
            assert_eq!(config["created"], "2026-12-01T19:00:00Z");
            assert_eq!(config["history"].as_array().unwrap().len(), 2);
            assert_eq!(config["docker_version"], "20.10.24");
        }
    }

    #[test]
    fn docker_gets_the_config_alone_and_other_engines_the_layers_byte_for_byte() {
        let (files, _, _) = check(true);
        assert_eq!(files.len(), 2, "{:?}", files.keys());
        let manifest: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        // The layers are named as the save stream named them: Docker finds
        // them by chain ID and never opens the files.
        assert_eq!(manifest[0]["Layers"].as_array().unwrap().len(), 2);
        assert_eq!(manifest[0]["RepoTags"], serde_json::json!(["r:t"]));

        let (files, layers, _) = check(false);
        assert_eq!(files["layers/000.tar"], layers[0]);
        assert_eq!(files["layers/001.tar"], layers[1]);
        assert_eq!(files.len(), 4, "{:?}", files.keys());
    }
}
