//! `pins verify --rebuild`: the proof that a pin is a function of its
//! inputs. The pinned aliases are built again from the current checkout,
//! `--no-cache`, every ancestor too, under a scratch local repository
//! (`<repository>-rebuild`, so the user's own tags are never touched);
//! each rebuilt image is checked as a build checks it, its release manifest
//! made as a release makes it (layers compressed by the pinned compressor,
//! the pinned version stamped: [`crate::release::publish::local_manifest`],
//! [`crate::release::stage::stamp`]), and its digest held to the pinned
//! one, per platform.
//!
//! Nothing is pushed: the digest a release would put is computed here, so
//! an auditor needs read access to the registry only (to explain a
//! difference). A rebuild that differs says where: the packages the
//! mirror moved (the `dev.sunaba.packages` record of both images), the
//! tools the check found, other labels, and the first layer whose bytes
//! differ with its history step and, entry by entry, what differs
//! ([`diff`]).

pub(crate) mod diff;

use crate::build::progress::Reporter;
use crate::build::{BuildOptions, Family, pipeline};
use crate::engine::Engine;
use crate::manifest::{Manifest, Settings};
use crate::name::Platform;
use crate::pins::Pin;
use crate::registry::{Client, Digest, Reference, Repository};
use crate::release::compress::Hashing;
use crate::release::layer_cache::LayerCache;
use anyhow::{Context as _, bail};
use serde::Serialize;
use std::collections::BTreeMap;

/// A pinned layer larger than this (compressed) is not fetched to compare
/// its entries; the verdict says so.
const PINNED_LAYER_LIMIT: usize = 2 << 30;

/// An alias to rebuild, and what it is pinned to.
pub(crate) struct Target {
    pub alias: String,
    pub variant: String,
    pub pin: Pin,
}

/// What a rebuild needs.
pub(crate) struct Rebuild<'a> {
    pub family: &'a Family,
    pub manifest: &'a Manifest,
    pub settings: &'a Settings,
    pub engine: &'a dyn Engine,
    pub native: &'a Platform,
    /// For the pinned images, read only when a rebuild differs.
    pub registry: (&'a Client, &'a tokio::runtime::Runtime),
    pub build: &'a BuildOptions,
    pub reporter: &'a dyn Fn() -> Box<dyn Reporter>,
    pub progress: &'a dyn Fn(String),
}

/// The verdict on one alias on one platform.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verdict {
    pub alias: String,
    pub variant: String,
    pub platform: Platform,
    pub pinned: String,
    pub rebuilt: String,
    pub same: bool,
    /// Packages, tools, labels and settings that differ.
    pub changes: Vec<String>,
    /// The first layer whose bytes differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<LayerDiff>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LayerDiff {
    /// 1-based, of `layers`.
    pub index: usize,
    pub layers: usize,
    /// The history step that made it.
    pub step: String,
    /// Differing entries, at most [`diff::ENTRIES_SHOWN`].
    pub entries: Vec<String>,
    /// Differing entries not listed.
    pub more: usize,
    /// Why the entries could not be compared, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Verdict {
    /// A rebuild that differs, as the gate's problem (naming the alias).
    pub(crate) fn finding(&self) -> Option<crate::pins::verify::Finding> {
        (!self.same).then(|| crate::pins::verify::Finding {
            severity: crate::pins::verify::Severity::Problem,
            alias: self.alias.clone(),
            message: self.describe(),
        })
    }

    /// The verdict without the alias: `linux/amd64: the rebuild differs …`.
    pub(crate) fn describe(&self) -> String {
        use std::fmt::Write as _;
        if self.same {
            return format!(
                "{}: the rebuild is the pinned image ({})",
                self.platform, self.pinned
            );
        }
        let mut out = format!(
            "{}: the rebuild differs\n  pinned:  {}\n  rebuilt: {}",
            self.platform, self.pinned, self.rebuilt
        );
        for c in &self.changes {
            let _ = write!(out, "\n  {c}");
        }
        if let Some(l) = &self.layer {
            let _ = write!(out, "\n  layer {} of {} ({}):", l.index, l.layers, l.step);
            for e in &l.entries {
                let _ = write!(out, "\n    {e}");
            }
            if l.more > 0 {
                let _ = write!(out, "\n    … and {} more", l.more);
            }
            if let Some(note) = &l.note {
                let _ = write!(out, "\n    {note}");
            }
        }
        out
    }
}

/// The family under the scratch repository the rebuild tags into.
pub(crate) fn scratch(family: &Family) -> Family {
    Family {
        repository: format!("{}-rebuild", family.repository),
        ..family.clone()
    }
}

/// Rebuilds `targets` on `platforms` (`None`: the engine's own) and holds
/// each to its pin.
pub(crate) fn run(
    r: &Rebuild,
    targets: &[Target],
    platforms: Vec<Option<Platform>>,
) -> anyhow::Result<Vec<Verdict>> {
    let variants: Vec<String> = targets.iter().map(|t| t.variant.clone()).collect();
    // Every ancestor named, so each is forced: none is reused from an
    // earlier rebuild's tags.
    let selected = r.family.select(&variants)?;
    let request = pipeline::Request {
        variants: &selected,
        platforms,
        build: r.build,
        no_cache: true,
        check: true,
        push_to: None,
    };
    let services = pipeline::Services {
        registry: Some(r.registry),
        reporter: r.reporter,
        progress: r.progress,
    };
    let outcome = pipeline::run(
        r.family, r.manifest, r.settings, r.engine, r.native, &request, &services,
    )?;
    if outcome.failed() {
        let failures: Vec<String> = outcome
            .summaries
            .iter()
            .flat_map(|s| {
                s.results
                    .iter()
                    .filter(|v| v.outcome.is_failure())
                    .map(move |v| format!("{} on {}", v.variant, s.platform))
            })
            .collect();
        bail!(
            "the rebuild did not build and check cleanly ({}); see the build log lines above",
            failures.join(", ")
        );
    }
    let cache = LayerCache::for_user()?;
    let mut verdicts = Vec::new();
    for summary in &outcome.summaries {
        for target in targets {
            let (local, image_id) = summary
                .results
                .iter()
                .find(|v| v.variant == target.variant)
                .and_then(|v| v.outcome.image())
                .with_context(|| format!("the rebuild has no image of {}", target.variant))?;
            (r.progress)(format!(
                "comparing {} on {}",
                target.alias, summary.platform
            ));
            let verdict = compare(r, target, &summary.platform, local, image_id, &cache)
                .with_context(|| {
                    format!("comparing the rebuild of {} with its pin", target.alias)
                })?;
            verdicts.push(verdict);
        }
    }
    Ok(verdicts)
}

/// The pin's digest for `platform`: its platform image's, or a single
/// image's own.
fn pinned_for(pin: &Pin, platform: &Platform) -> Option<Digest> {
    match pin.platforms.get(platform) {
        Some(d) => Some(d.clone()),
        None if pin.platforms.is_empty() => Some(pin.digest.clone()),
        None => None,
    }
}

fn compare(
    r: &Rebuild,
    target: &Target,
    platform: &Platform,
    local: &str,
    image_id: &str,
    cache: &LayerCache,
) -> anyhow::Result<Verdict> {
    let pinned = pinned_for(&target.pin, platform).with_context(|| {
        let list: Vec<String> = target.pin.platforms.keys().map(|p| p.to_string()).collect();
        format!(
            "{} is pinned for {} only, not {platform}",
            target.alias,
            list.join(", ")
        )
    })?;
    let (manifest, config) =
        crate::release::publish::local_manifest(r.engine, local, image_id, cache)?;
    let (stamped, stamped_config) =
        crate::release::stage::stamp(&manifest, &config, &target.pin.version)?;
    let mut verdict = Verdict {
        alias: target.alias.clone(),
        variant: target.variant.clone(),
        platform: platform.clone(),
        pinned: pinned.to_string(),
        rebuilt: stamped.digest.to_string(),
        same: stamped.digest == pinned,
        changes: Vec::new(),
        layer: None,
    };
    if verdict.same {
        return Ok(verdict);
    }
    let (client, rt) = r.registry;
    let repo: Repository = target.pin.repository.parsed().clone();
    let pinned_manifest = rt.block_on(client.fetch_manifest(&Reference::in_repo(&repo, pinned)))?;
    let context = format!("{repo}@{}", pinned_manifest.digest);
    let (config_digest, _) = crate::registry::config_descriptor(&context, &pinned_manifest.bytes)?;
    let pinned_config = rt.block_on(client.fetch_blob(&repo, &config_digest, 16 << 20))?;
    let pinned_config: serde_json::Value =
        serde_json::from_slice(&pinned_config).context("the pinned config is not JSON")?;
    let rebuilt_config: serde_json::Value = serde_json::from_slice(&stamped_config)?;
    verdict.changes = diff::config_changes(&pinned_config, &rebuilt_config);
    let (was, now) = (
        diff::diff_ids(&pinned_config),
        diff::diff_ids(&rebuilt_config),
    );
    let Some(index) = (0..was.len().max(now.len())).find(|&i| was.get(i) != now.get(i)) else {
        return Ok(verdict);
    };
    let steps = crate::normalize::layer_steps(&rebuilt_config);
    let mut layer = LayerDiff {
        index: index + 1,
        layers: now.len(),
        step: steps.get(index).map(|s| short_step(s)).unwrap_or_default(),
        entries: Vec::new(),
        more: 0,
        note: None,
    };
    match (was.get(index), now.get(index)) {
        (Some(_), Some(diff_id)) => {
            let compressed = layer_digest(&pinned_manifest.bytes, index)?;
            let pinned_entries = match rt.block_on(client.blob_size(&repo, &compressed))? {
                Some(size) if size > PINNED_LAYER_LIMIT as u64 => {
                    layer.note = Some(format!(
                        "the pinned layer is {size} bytes compressed: too large to compare entry by entry"
                    ));
                    None
                }
                _ => {
                    let blob =
                        rt.block_on(client.fetch_blob(&repo, &compressed, PINNED_LAYER_LIMIT))?;
                    Some(
                        diff::index_layer(flate2::read::GzDecoder::new(blob.as_slice()))
                            .with_context(|| format!("reading the pinned layer {compressed}"))?,
                    )
                }
            };
            if let Some(pinned_entries) = pinned_entries {
                let rebuilt_entries = local_layer(r.engine, local, image_id, diff_id)?;
                let all = diff::entry_changes(&pinned_entries, &rebuilt_entries);
                layer.more = all.len().saturating_sub(diff::ENTRIES_SHOWN);
                layer.entries = all.into_iter().take(diff::ENTRIES_SHOWN).collect();
            }
        }
        _ => {
            layer.note = Some(format!(
                "the pinned image has {} layers, the rebuild {}",
                was.len(),
                now.len()
            ));
        }
    }
    verdict.layer = Some(layer);
    Ok(verdict)
}

/// A history step, short: the fragment script it ran, else its first 100
/// characters.
fn short_step(step: &str) -> String {
    if let Some(script) = step
        .split_whitespace()
        .find_map(|w| w.strip_prefix("/run/sunaba/"))
        .filter(|s| s.ends_with(".sh"))
    {
        return format!("RUN {script}");
    }
    let step = step.trim();
    match step.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &step[..i]),
        None => step.to_string(),
    }
}

/// The compressed digest of layer `index` of an image manifest.
fn layer_digest(manifest: &[u8], index: usize) -> anyhow::Result<Digest> {
    let doc: serde_json::Value = serde_json::from_slice(manifest)?;
    let d = doc
        .pointer(&format!("/layers/{index}/digest"))
        .and_then(serde_json::Value::as_str)
        .with_context(|| format!("the pinned manifest has no layer {}", index + 1))?;
    d.parse()
        .map_err(|e| anyhow::anyhow!("layer digest {d:?}: {e}"))
}

/// The entries of the local image's layer `diff_id`, from one `save`.
fn local_layer(
    engine: &dyn Engine,
    local: &str,
    image_id: &str,
    diff_id: &str,
) -> anyhow::Result<BTreeMap<String, diff::Facts>> {
    let found = engine
        .save_cmd(image_id)
        .read_stdout(
            |out| -> anyhow::Result<Option<BTreeMap<String, diff::Facts>>> {
                let mut outer = crate::image::entries::BoundedTar::new(out);
                for entry in outer.entries()? {
                    let entry = entry?;
                    let name = String::from_utf8_lossy(&entry.path_bytes()).to_string();
                    let mut entry = std::io::BufReader::with_capacity(256 << 10, entry);
                    if !crate::normalize::is_layer_file(&name, &mut entry)? {
                        continue;
                    }
                    let mut hashed = Hashing::new(entry);
                    let index = diff::index_layer(&mut hashed)?;
                    std::io::copy(&mut hashed, &mut std::io::sink())?;
                    if hashed.finish().0 == diff_id {
                        return Ok(Some(index));
                    }
                }
                Ok(None)
            },
        )
        .map_err(crate::process::PipeError::into_anyhow)
        .with_context(|| format!("reading {local} from the engine"))?;
    found.with_context(|| format!("the engine's save of {local} has no layer {diff_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_shown_by_the_script_it_ran() {
        assert_eq!(
            short_step("RUN |2 A=1 B=2 /bin/sh -c sh /run/sunaba/install-go.sh # buildkit"),
            "RUN install-go.sh"
        );
        let long = format!("RUN {}", "x".repeat(200));
        assert_eq!(short_step(&long).chars().count(), 101);
    }
}
