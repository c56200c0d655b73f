//! The Debian package set each fragment installed, read from the layers'
//! dpkg status while the image is normalised and recorded on it as the
//! `dev.sunaba.packages` label ([`PackageRecord`]).
//!
//! Debian's mirror keeps only current versions, so apt is the one build
//! input that can move under a commit. With the set recorded on the pinned
//! image, a rebuild that differs can say `core: bash:amd64 5.2.37-2 →
//! 5.2.37-2+deb13u1` instead of "layer 3 differs" (`pins verify --rebuild`).
//!
//! A layer's packages are those its `var/lib/dpkg/status` lists installed
//! that the status below it did not list at that version. The layer is
//! attributed to the fragment whose script its history step ran
//! (`/run/sunaba/<script>`, the rendered Dockerfiles' bind mount), else to
//! `layer N`. Only the layers this image built are added; the parent's are
//! in the label it inherits.

use super::read::Layer;
use crate::image::layer_tar::{Entry, Kind};
use crate::labels::PackageRecord;
use std::collections::BTreeMap;

const STATUS: &[u8] = b"var/lib/dpkg/status";
/// A status file larger than this is not read (Debian's full archive
/// installed would be ~60 MiB; an image of this family has ~1 MiB).
const STATUS_LIMIT: u64 = 64 << 20;

/// The record of an image whose layers are `layers` (in order), of which
/// the first `keep` are its FROM image's, with `config` its config and
/// `scripts` the fragments' script file names → fragment names. `None`
/// when no layer of its own changed a package and it inherited no record.
pub(super) fn record(
    config: &serde_json::Value,
    layers: &[&Layer],
    keep: usize,
    spill: &std::fs::File,
    scripts: &BTreeMap<String, String>,
) -> std::io::Result<Option<PackageRecord>> {
    let mut record = config
        .get("config")
        .and_then(|c| c.get("Labels"))
        .and_then(|l| l.get(crate::labels::PACKAGES))
        .and_then(serde_json::Value::as_str)
        .and_then(PackageRecord::parse)
        .unwrap_or(PackageRecord {
            schema: PackageRecord::SCHEMA,
            fragments: BTreeMap::new(),
        });
    let steps = crate::image::config::layer_steps(config);
    let mut below: BTreeMap<String, String> = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        let Some(status) = status_of(layer, spill)? else {
            continue;
        };
        let now: BTreeMap<String, String> = crate::image::dpkg::installed(&status)
            .into_iter()
            .map(|p| (format!("{}:{}", p.name, p.architecture), p.version))
            .collect();
        if i >= keep {
            let added: BTreeMap<String, String> = now
                .iter()
                .filter(|(p, v)| below.get(*p) != Some(*v))
                .map(|(p, v)| (p.clone(), v.clone()))
                .collect();
            if !added.is_empty() {
                let who = steps
                    .get(i)
                    .and_then(|step| crate::image::config::fragment_of_step(step, scripts))
                    .unwrap_or_else(|| format!("layer {}", i + 1));
                record.fragments.entry(who).or_default().extend(added);
            }
        }
        below = now;
    }
    Ok((!record.fragments.is_empty()).then_some(record))
}

/// The dpkg status a layer writes (its last entry for the path: what
/// unpacking leaves), read from the spill.
fn status_of(layer: &Layer, spill: &std::fs::File) -> std::io::Result<Option<String>> {
    let Some(entry) = layer
        .entries
        .iter()
        .rev()
        .find(|e: &&Entry| e.path == STATUS && e.kind == Kind::File)
    else {
        return Ok(None);
    };
    if entry.size > STATUS_LIMIT {
        return Ok(None);
    }
    let mut bytes = vec![0u8; entry.size as usize];
    std::os::unix::fs::FileExt::read_exact_at(spill, &mut bytes, entry.data_at)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}
