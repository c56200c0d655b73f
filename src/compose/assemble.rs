//! Assembling a composed image from its [`Plan`]: the parent's layers, each
//! member's fragment layer (its blob as the member's save held it, byte for
//! byte: the same diff_id, so the same compressed blob in the registry),
//! and one generated **state layer** holding the merged state files; the
//! config is the parent's with those layers and their history steps added.
//! It is written as a `docker load` archive ([`crate::image::load_archive`]).
//!
//! That image is not the variant yet: the variant's own steps (its posture,
//! healthcheck, user, labels; `RenderedVariant::composed_dockerfile`) are
//! built over it by the engine, from the same data as its Dockerfile, and
//! the result is normalised like any build.

use super::Plan;
use crate::image::layer_tar::{self, Entry, Kind};
use crate::image::load_archive::{file_header, pad, write_config_and_manifest};
use crate::labels::PackageRecord;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;

/// The `created_by` of the state layer's history step.
pub(crate) const STATE_STEP: &str = "sunaba-images compose: the state layer (the members' dpkg \
                                     status and apt extended_states, merged)";

/// The state layer: each merged state file, mode and owner as its topmost
/// member wrote it, its time `source_date_epoch` (what fragments clamp
/// their files' times to). Its directories are the layers' below.
pub(crate) fn state_layer(plan: &Plan, source_date_epoch: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for file in &plan.state {
        let entry = Entry {
            path: file.path.as_bytes().to_vec(),
            kind: Kind::File,
            link: Vec::new(),
            mode: file.mode & 0o7777,
            uid: file.uid,
            gid: file.gid,
            mtime: source_date_epoch,
            dev: (0, 0),
            pax: BTreeMap::new(),
            size: file.bytes.len() as u64,
            data_at: 0,
        };
        out.extend_from_slice(&layer_tar::header_bytes(&entry));
        out.extend_from_slice(&file.bytes);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// The union of the members' package records (each names the fragments it
/// installed, the parent's included): the composed image's record, as the
/// normaliser would have written it had it built each fragment alone.
pub(crate) fn package_record(plan: &Plan) -> Option<String> {
    let mut union: Option<PackageRecord> = None;
    for layer in &plan.fragment_layers {
        let Some(record) = layer.packages.as_deref().and_then(PackageRecord::parse) else {
            continue;
        };
        let into = union.get_or_insert_with(|| PackageRecord {
            schema: PackageRecord::SCHEMA,
            fragments: BTreeMap::new(),
        });
        for (fragment, packages) in record.fragments {
            into.fragments.entry(fragment).or_default().extend(packages);
        }
    }
    union.map(|r| r.to_label())
}

/// The composed image's config: the parent's, its layers and history
/// extended by the fragment layers (each with its member's step) and the
/// state layer, and the members' package records joined.
pub(crate) fn config(plan: &Plan, state_diff_id: &str, created: &str) -> Value {
    let mut config = plan.parent_config.clone();
    let mut diff_ids = plan.parent_layers.clone();
    diff_ids.extend(plan.fragment_layers.iter().map(|l| l.diff_id.clone()));
    diff_ids.push(state_diff_id.to_string());
    let mut history: Vec<Value> = config
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    history.extend(plan.fragment_layers.iter().map(|l| l.step.clone()));
    history.push(json!({
        "created": created,
        "created_by": STATE_STEP,
        "comment": "sunaba-images compose",
    }));
    if let Some(object) = config.as_object_mut() {
        object.insert(
            "rootfs".into(),
            json!({"type": "layers", "diff_ids": diff_ids}),
        );
        object.insert("history".into(), Value::Array(history));
        object.insert("created".into(), json!(created));
    }
    if let Some(record) = package_record(plan) {
        let label = BTreeMap::from([(crate::labels::PACKAGES.to_string(), record)]);
        // The parent's config is an engine's (read and checked): its
        // labels are an object or absent.
        let _ = crate::image::config::set_labels(&mut config, &label);
    }
    config
}

/// What [`write_archive`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assembled {
    /// The config's digest: the loaded image's ID.
    pub(crate) id: String,
    pub(crate) diff_ids: Vec<String>,
    pub(crate) state_diff_id: String,
}

/// Writes the composed image as a `docker load` archive tagged `tags`: the
/// layer blobs from the plan's spill, then the state layer, config and
/// manifest. With `parent_loaded` (an engine that looks a layer up by its
/// chain ID before it opens the file, and has the parent), the parent's
/// layers are named but not sent.
pub(crate) fn write_archive(
    plan: &Plan,
    source_date_epoch: u64,
    tags: &[String],
    parent_loaded: bool,
    out: &mut dyn Write,
) -> std::io::Result<Assembled> {
    let state = state_layer(plan, source_date_epoch);
    let state_diff_id = crate::name::Digest::sha256(&state).to_string();
    let created = crate::timestamp::rfc3339(source_date_epoch);
    let config = config(plan, &state_diff_id, &created);
    let mut names = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let layers = plan
        .parent_layers
        .iter()
        .chain(plan.fragment_layers.iter().map(|l| &l.diff_id));
    for (i, diff_id) in layers.enumerate() {
        let name = format!("layers/{i:03}.tar");
        if parent_loaded && i < plan.parent_layers.len() {
            names.push(name);
            continue;
        }
        let path = plan.blobs.get(diff_id).ok_or_else(|| {
            std::io::Error::other(format!(
                "layer {diff_id} was not kept when the members were read"
            ))
        })?;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        out.write_all(file_header(&name, len).as_bytes())?;
        layer_tar::copy_range(&file, 0, len, &mut buf, out)?;
        pad(out, len)?;
        names.push(name);
    }
    let name = format!("layers/{:03}.tar", names.len());
    out.write_all(file_header(&name, state.len() as u64).as_bytes())?;
    out.write_all(&state)?;
    pad(out, state.len() as u64)?;
    names.push(name);
    let id = write_config_and_manifest(out, &config, tags, &names)?;
    Ok(Assembled {
        id,
        diff_ids: crate::image::config::diff_ids(&config).unwrap_or_default(),
        state_diff_id,
    })
}

/// Writes the composed image into `engine`'s load, tagged `tag`, and checks
/// that `tag` names the image written.
pub(crate) fn load(
    engine: &dyn crate::engine::Engine,
    plan: &Plan,
    source_date_epoch: u64,
    tag: &str,
) -> Result<Assembled, super::ComposeError> {
    let failed = |problem: String| super::ComposeError::Load {
        image: tag.to_string(),
        problem,
    };
    let loaded = engine.load_cmd().write_stdin(|stdin| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdin);
        let tags = [tag.to_string()];
        let parent_loaded = engine.loads_layers_it_has_by_chain_id();
        let assembled = write_archive(plan, source_date_epoch, &tags, parent_loaded, &mut out)?;
        out.flush()?;
        Ok::<_, std::io::Error>(assembled)
    });
    let assembled = match loaded {
        Ok((assembled, _)) => assembled,
        Err(crate::process::PipeError::Process(e)) => {
            return Err(failed(crate::error_chain::error_chain(&e)));
        }
        Err(crate::process::PipeError::Stream(e)) => {
            return Err(failed(format!("writing the archive: {e}")));
        }
    };
    match engine.inspect(tag) {
        Ok(Some(info)) if info.id == assembled.id => Ok(assembled),
        Ok(Some(info)) => Err(failed(format!(
            "it wrote {}, but {tag} is {}",
            assembled.id, info.id
        ))),
        Ok(None) => Err(failed(format!("it wrote {}, but no {tag}", assembled.id))),
        Err(e) => Err(failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::state::MergedState;
    use crate::compose::{Member, MemberLayer, Recipe};
    use crate::image::fixtures::{file, layer};

    fn plan(dir: &std::path::Path) -> Plan {
        let base = layer(&[file("etc/os-release", "debian\n")]);
        let py = layer(&[file("usr/bin/python3", "py\n")]);
        let mut blobs = BTreeMap::new();
        for (name, bytes) in [("base", &base), ("py", &py)] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            blobs.insert(crate::image::fixtures::digest(bytes), path);
        }
        let record = |f: &str, p: &str| {
            json!({"fragments": {"core": {"bash:amd64": "5"}, f: {p: "1"}}, "schema": 1})
                .to_string()
        };
        let member = |fragment: &str, diff_id: String, packages: String| MemberLayer {
            member: Member {
                fragment: fragment.into(),
                variant: fragment.into(),
            },
            diff_id,
            paths: 1,
            step: json!({"created_by": format!("RUN sh /run/sunaba/install-{fragment}.sh")}),
            packages: Some(packages),
        };
        Plan {
            recipe: Recipe {
                variant: "full".into(),
                parent: "base".into(),
                members: vec![],
            },
            parent_layers: vec![crate::image::fixtures::digest(&base)],
            parent_config: json!({
                "architecture": "amd64", "os": "linux",
                "config": {"User": "1000:1000", "Labels": {"a": "b"}},
                "rootfs": {"type": "layers", "diff_ids": [crate::image::fixtures::digest(&base)]},
                "history": [{"created_by": "core"}],
            }),
            blobs,
            fragment_layers: vec![
                member(
                    "python",
                    crate::image::fixtures::digest(&py),
                    record("python", "python3:amd64"),
                ),
                // A layer both members made would be one blob: here a
                // second member whose blob was not kept.
                member("go", "sha256:gone".into(), record("go", "golang:amd64")),
            ],
            overlap: Default::default(),
            state: vec![MergedState {
                path: "var/lib/dpkg/status".into(),
                stanzas: 1,
                bytes: b"Package: a\nStatus: install ok installed\n".to_vec(),
                mode: 0o100644,
                uid: 0,
                gid: 0,
            }],
        }
    }

    #[test]
    fn the_state_layer_is_one_tar_of_the_merged_files_at_the_fixed_time() {
        let dir = tempfile::tempdir().unwrap();
        let layer = state_layer(&plan(dir.path()), 1_700_000_000);
        let mut tar = tar::Archive::new(layer.as_slice());
        let entries: Vec<(String, u32, u64, String)> = tar
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut text = String::new();
                std::io::Read::read_to_string(&mut e, &mut text).unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                    text,
                )
            })
            .collect();
        assert_eq!(
            entries,
            [(
                "var/lib/dpkg/status".to_string(),
                0o644,
                1_700_000_000,
                "Package: a\nStatus: install ok installed\n".to_string()
            )]
        );
        // The same plan, the same bytes.
        assert_eq!(layer, state_layer(&plan(dir.path()), 1_700_000_000));
    }

    #[test]
    fn the_config_is_the_parents_with_the_layers_steps_and_records_added() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(dir.path());
        let c = config(&plan, "sha256:state", "2026-01-01T00:00:00Z");
        let ids = crate::image::config::diff_ids(&c).unwrap();
        assert_eq!(ids.len(), 4);
        assert_eq!(ids[3], "sha256:state");
        assert_eq!(ids[1], plan.fragment_layers[0].diff_id);
        let steps = crate::image::config::layer_steps(&c);
        assert_eq!(
            steps,
            [
                "core",
                "RUN sh /run/sunaba/install-python.sh",
                "RUN sh /run/sunaba/install-go.sh",
                STATE_STEP
            ]
        );
        assert_eq!(c["config"]["User"], "1000:1000");
        assert_eq!(c["config"]["Labels"]["a"], "b");
        let record = PackageRecord::parse(
            c["config"]["Labels"][crate::labels::PACKAGES]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let fragments: Vec<&str> = record.fragments.keys().map(String::as_str).collect();
        assert_eq!(fragments, ["core", "go", "python"]);
        assert_eq!(record.fragments["go"]["golang:amd64"], "1");
    }

    #[test]
    fn an_archive_needs_every_layers_blob_and_names_the_one_missing() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_archive(&plan(dir.path()), 0, &[], false, &mut Vec::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "layer sha256:gone was not kept when the members were read"
        );
        let mut complete = plan(dir.path());
        complete.fragment_layers.pop();
        let mut out = Vec::new();
        let assembled = write_archive(&complete, 0, &["r:t".into()], false, &mut out).unwrap();
        let mut tar = tar::Archive::new(out.as_slice());
        let names: Vec<String> = tar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "layers/000.tar".to_string(),
                "layers/001.tar".into(),
                "layers/002.tar".into(),
                format!("{}.json", &assembled.id["sha256:".len()..]),
                "manifest.json".into()
            ]
        );
        assert_eq!(assembled.diff_ids.len(), 3);
        assert_eq!(assembled.diff_ids[2], assembled.state_diff_id);
        // An engine that has the parent is sent its layers' names only:
        // the same image, without base's file.
        let mut lean = Vec::new();
        let same = write_archive(&complete, 0, &["r:t".into()], true, &mut lean).unwrap();
        assert_eq!(same, assembled);
        let mut tar = tar::Archive::new(lean.as_slice());
        let files: Vec<String> = tar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(files[..2], ["layers/001.tar", "layers/002.tar"]);
        let manifest: serde_json::Value = {
            let mut tar = tar::Archive::new(lean.as_slice());
            let entry = tar
                .entries()
                .unwrap()
                .map(|e| e.unwrap())
                .find(|e| e.path().unwrap().ends_with("manifest.json"))
                .unwrap();
            serde_json::from_reader(entry).unwrap()
        };
        assert_eq!(manifest[0]["Layers"][0], "layers/000.tar");
    }
}
