//! `pins verify --rebuild`: the proof that a pin is a function of its
//! inputs. The pinned aliases are built again from the current checkout,
//! `--no-cache`, every ancestor too, under a scratch local repository
//! (`<repository>-rebuild`, so the user's own tags are never touched);
//! each rebuilt image is checked as a build checks it, its release manifest
//! made as a release makes it (layers compressed by the pinned compressor,
//! the pinned version stamped: [`crate::image::local::local_manifest`],
//! [`crate::image::stamp::stamp`]), and its digest held to the pinned
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

use crate::build::pipeline::PipelineError;
use crate::build::progress::Reporter;
use crate::build::{BuildOptions, pipeline};
use crate::engine::Engine;
use crate::family::Family;
use crate::image::compress::Hashing;
use crate::image::layer_cache::LayerCache;
use crate::manifest::{Manifest, Settings};
use crate::name::{InvalidDigest, Platform};
use crate::pins::Pin;
use crate::process::PipeError;
use crate::registry::{self, Client, Digest, Reference, Repository};
use serde::Serialize;
use std::collections::BTreeMap;

/// Why a rebuild could not be held to its pin (a rebuild that differs is
/// a [`Verdict`], not an error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RebuildError {
    /// A variant the family does not declare.
    #[error(transparent)]
    Unknown(#[from] crate::name::Unknown),
    #[error(transparent)]
    Build(#[from] PipelineError),
    /// Some variant failed its build or check: each, on its platform.
    #[error(
        "the rebuild did not build and check cleanly ({}); see the build log lines above",
        .0.join(", ")
    )]
    NotClean(Vec<String>),
    #[error("the rebuild has no image of {variant}")]
    NoImage { variant: String },
    #[error("comparing the rebuild of {alias} with its pin")]
    Compare {
        alias: String,
        #[source]
        source: Box<RebuildError>,
    },
    #[error("{alias} is pinned for {pinned} only, not {platform}")]
    NotPinnedFor {
        alias: String,
        pinned: String,
        platform: String,
    },
    #[error("the pinned config is not JSON")]
    PinnedConfig(#[source] serde_json::Error),
    #[error("the rebuilt config is not JSON")]
    RebuiltConfig(#[source] serde_json::Error),
    #[error("the pinned manifest is not JSON")]
    PinnedManifest(#[source] serde_json::Error),
    #[error("the pinned manifest has no layer {number}")]
    NoLayer { number: usize },
    #[error("layer digest {text:?}: {source}")]
    LayerDigest { text: String, source: InvalidDigest },
    #[error("reading the pinned layer {digest}")]
    PinnedLayer {
        digest: Digest,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {local} from the engine")]
    ReadSave {
        local: String,
        #[source]
        source: PipeError<std::io::Error>,
    },
    #[error("the engine's save of {local} has no layer {diff_id}")]
    NoLayerInSave { local: String, diff_id: String },
    /// The cache of what pinned layers hold cannot be opened.
    #[error(transparent)]
    Cache(#[from] crate::image::layer_cache::CacheError),
    /// The release manifest of the rebuild could not be made.
    #[error(transparent)]
    Manifest(#[from] crate::image::local::LocalError),
    #[error(transparent)]
    Stamp(#[from] crate::image::stamp::StampError),
    #[error(transparent)]
    Registry(#[from] registry::Error),
    /// Union-variant pins made both ways: one run rebuilds one way.
    #[error(
        "{composed} composed from members' layers, {built} built from a Dockerfile: \
         a rebuild makes a union variant one way; verify them in two runs, naming the aliases \
         (`pins verify --rebuild ALIAS…`, `--from-dockerfile` for the second)",
        composed = describe(.composed, "was", "were"),
        built = describe(.built, "was", "were")
    )]
    MixedComposition {
        composed: Vec<String>,
        built: Vec<String>,
    },
}

/// `a` / `a and b` / `a, b and c`, then the verb for one or many.
fn describe(aliases: &[String], one: &str, many: &str) -> String {
    let verb = if aliases.len() == 1 { one } else { many };
    let list = match aliases {
        [] => String::new(),
        [only] => only.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    format!("{list} {verb}")
}

/// A rebuild that cannot be made or compared is an operational failure
/// (`pins verify --rebuild` exits 1), but for the errors it carries that
/// say their own.
impl crate::exit::HasStatus for RebuildError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            RebuildError::NotClean(_)
            | RebuildError::NoImage { .. }
            | RebuildError::NotPinnedFor { .. }
            | RebuildError::PinnedConfig(_)
            | RebuildError::RebuiltConfig(_)
            | RebuildError::PinnedManifest(_)
            | RebuildError::NoLayer { .. }
            | RebuildError::LayerDigest { .. }
            | RebuildError::PinnedLayer { .. }
            | RebuildError::ReadSave { .. }
            | RebuildError::NoLayerInSave { .. }
            | RebuildError::Stamp(_)
            | RebuildError::Cache(_) => Status::Failure,
            RebuildError::MixedComposition { .. } => Status::Usage,
            RebuildError::Unknown(e) => e.exit_status(),
            RebuildError::Build(e) => e.exit_status(),
            RebuildError::Compare { source, .. } => source.exit_status(),
            RebuildError::Manifest(e) => e.exit_status(),
            RebuildError::Registry(e) => e.exit_status(),
        }
    }
}

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
    /// For the pinned images: a union variant's config (how it was made),
    /// the rest only when a rebuild differs.
    pub registry: &'a Client,
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
pub(crate) async fn run(
    r: &Rebuild<'_>,
    targets: &[Target],
    platforms: Vec<Option<Platform>>,
) -> Result<Vec<Verdict>, RebuildError> {
    let variants: Vec<String> = targets.iter().map(|t| t.variant.clone()).collect();
    // A union variant is rebuilt the way its pin was made, unless told.
    let compose = if r.build.from_dockerfile {
        false
    } else {
        made_composed(r, targets).await?
    };
    let build = BuildOptions {
        from_dockerfile: !compose,
        ..r.build.clone()
    };
    // Every ancestor (and a composed variant's members) named, so each is
    // forced: none is reused from an earlier rebuild's tags.
    let selected = r.family.select_composing(&variants, compose)?;
    let request = pipeline::Request {
        variants: &selected,
        platforms,
        build: &build,
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
    )
    .await?;
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
        return Err(RebuildError::NotClean(failures));
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
                .ok_or_else(|| RebuildError::NoImage {
                    variant: target.variant.clone(),
                })?;
            (r.progress)(format!(
                "comparing {} on {}",
                target.alias, summary.platform
            ));
            let verdict = (compare(r, target, &summary.platform, local, image_id, &cache).await)
                .map_err(|source| RebuildError::Compare {
                    alias: target.alias.clone(),
                    source: Box::new(source),
                })?;
            verdicts.push(verdict);
        }
    }
    Ok(verdicts)
}

/// Whether the union variants among `targets` were composed from their
/// members' layers (their pinned configs have the state layer's step);
/// `true` when there is none (composing is the default). Pins made both
/// ways are refused: one run builds a union variant one way.
async fn made_composed(r: &Rebuild<'_>, targets: &[Target]) -> Result<bool, RebuildError> {
    let (mut composed, mut built) = (Vec::new(), Vec::new());
    for t in targets {
        if r.family
            .variants
            .get(&t.variant)
            .is_none_or(|v| v.composition.is_none())
        {
            continue;
        }
        // Every platform's image of a pin is made the same way.
        let digest = t.pin.platforms.values().next().unwrap_or(&t.pin.digest);
        let repo: Repository = t.pin.repository.parsed().clone();
        let (_, config) = pinned_image(r.registry, &repo, digest).await?;
        if diff::was_composed(&config) {
            composed.push(t.alias.clone());
        } else {
            built.push(t.alias.clone());
        }
    }
    mode(composed, built)
}

/// The one way to rebuild pins of which `composed` were composed and
/// `built` built from their Dockerfiles.
fn mode(composed: Vec<String>, built: Vec<String>) -> Result<bool, RebuildError> {
    match (composed.is_empty(), built.is_empty()) {
        (_, true) => Ok(true),
        (true, false) => Ok(false),
        (false, false) => Err(RebuildError::MixedComposition { composed, built }),
    }
}

/// The manifest and config of the image `digest` in `repo`.
async fn pinned_image(
    client: &Client,
    repo: &Repository,
    digest: &Digest,
) -> Result<(registry::Manifest, serde_json::Value), RebuildError> {
    let manifest = (client.fetch_manifest(&Reference::in_repo(repo, digest.clone()))).await?;
    let context = format!("{repo}@{}", manifest.digest);
    let (config_digest, _) = crate::registry::config_descriptor(&context, &manifest.bytes)?;
    let config = client.fetch_blob(repo, &config_digest, 16 << 20).await?;
    let config = serde_json::from_slice(&config).map_err(RebuildError::PinnedConfig)?;
    Ok((manifest, config))
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

async fn compare(
    r: &Rebuild<'_>,
    target: &Target,
    platform: &Platform,
    local: &str,
    image_id: &str,
    cache: &LayerCache,
) -> Result<Verdict, RebuildError> {
    let pinned = pinned_for(&target.pin, platform).ok_or_else(|| {
        let list: Vec<String> = target.pin.platforms.keys().map(|p| p.to_string()).collect();
        RebuildError::NotPinnedFor {
            alias: target.alias.clone(),
            pinned: list.join(", "),
            platform: platform.to_string(),
        }
    })?;
    // The engine's `save`, compressed (or the cache's word): minutes of
    // engine and CPU work on borrowed parts that the verdict waits for.
    let (manifest, config) = tokio::task::block_in_place(|| {
        crate::image::local::local_manifest(r.engine, local, image_id, cache)
    })?;
    let (stamped, stamped_config) =
        crate::image::stamp::stamp(&manifest, &config, &target.pin.version)?;
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
    let client = r.registry;
    let repo: Repository = target.pin.repository.parsed().clone();
    let (pinned_manifest, pinned_config) = pinned_image(client, &repo, &pinned).await?;
    let rebuilt_config: serde_json::Value =
        serde_json::from_slice(&stamped_config).map_err(RebuildError::RebuiltConfig)?;
    verdict.changes = diff::config_changes(&pinned_config, &rebuilt_config);
    verdict
        .changes
        .extend(diff::composition_change(&pinned_config, &rebuilt_config));
    let (was, now) = (
        crate::image::config::diff_ids(&pinned_config).unwrap_or_default(),
        crate::image::config::diff_ids(&rebuilt_config).unwrap_or_default(),
    );
    let Some(index) = (0..was.len().max(now.len())).find(|&i| was.get(i) != now.get(i)) else {
        return Ok(verdict);
    };
    let steps = crate::image::config::layer_steps(&rebuilt_config);
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
            let pinned_entries = match client.blob_size(&repo, &compressed).await? {
                Some(size) if size > PINNED_LAYER_LIMIT as u64 => {
                    layer.note = Some(format!(
                        "the pinned layer is {size} bytes compressed: too large to compare entry by entry"
                    ));
                    None
                }
                _ => {
                    let blob = (client.fetch_blob(&repo, &compressed, PINNED_LAYER_LIMIT)).await?;
                    // Gunzip and read up to 2 GiB: off the async threads.
                    let entries = tokio::task::block_in_place(|| {
                        diff::index_layer(flate2::read::GzDecoder::new(blob.as_slice()))
                    });
                    Some(entries.map_err(|source| RebuildError::PinnedLayer {
                        digest: compressed.clone(),
                        source,
                    })?)
                }
            };
            if let Some(pinned_entries) = pinned_entries {
                let rebuilt_entries = tokio::task::block_in_place(|| {
                    local_layer(r.engine, local, image_id, diff_id)
                })?;
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
fn layer_digest(manifest: &[u8], index: usize) -> Result<Digest, RebuildError> {
    let doc: serde_json::Value =
        serde_json::from_slice(manifest).map_err(RebuildError::PinnedManifest)?;
    let d = doc
        .pointer(&format!("/layers/{index}/digest"))
        .and_then(serde_json::Value::as_str)
        .ok_or(RebuildError::NoLayer { number: index + 1 })?;
    d.parse().map_err(|source| RebuildError::LayerDigest {
        text: d.to_string(),
        source,
    })
}

/// The entries of the local image's layer `diff_id`, from one `save`.
fn local_layer(
    engine: &dyn Engine,
    local: &str,
    image_id: &str,
    diff_id: &str,
) -> Result<BTreeMap<String, diff::Facts>, RebuildError> {
    let found = engine
        .save_cmd(image_id)
        .read_stdout(
            |out| -> std::io::Result<Option<BTreeMap<String, diff::Facts>>> {
                let mut outer = crate::image::entries::BoundedTar::new(out);
                for entry in outer.entries()? {
                    let entry = entry?;
                    let name = String::from_utf8_lossy(&entry.path_bytes()).to_string();
                    let mut entry = std::io::BufReader::with_capacity(256 << 10, entry);
                    if !crate::image::save_stream::is_layer_file(&name, &mut entry)? {
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
        .map_err(|source| RebuildError::ReadSave {
            local: local.to_string(),
            source,
        })?;
    found.ok_or_else(|| RebuildError::NoLayerInSave {
        local: local.to_string(),
        diff_id: diff_id.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_union_variant_is_rebuilt_the_way_its_pins_were_made_and_both_ways_are_refused() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            mode(v(&[]), v(&[])).unwrap(),
            "no union variant: the default"
        );
        assert!(mode(v(&["full"]), v(&[])).unwrap());
        assert!(!mode(v(&[]), v(&["full-1.2"])).unwrap());
        let err = mode(v(&["full", "full-2"]), v(&["full-1.2"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "full and full-2 were composed from members' layers, full-1.2 was built from a \
             Dockerfile: a rebuild makes a union variant one way; verify them in two runs, naming \
             the aliases (`pins verify --rebuild ALIAS…`, `--from-dockerfile` for the second)"
        );
        assert_eq!(
            crate::exit::HasStatus::exit_status(&err),
            crate::exit::Status::Usage
        );
    }

    #[test]
    fn each_kind_of_rebuild_error_names_what_failed_and_is_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let manifest = br#"{"layers":[{"digest":"sha256:abc"}]}"#;
        let e = layer_digest(manifest, 0).unwrap_err();
        assert!(matches!(&e, RebuildError::LayerDigest { text, .. } if text == "sha256:abc"));
        let e = layer_digest(manifest, 1).unwrap_err();
        assert!(matches!(e, RebuildError::NoLayer { number: 2 }), "{e}");
        assert_eq!(e.to_string(), "the pinned manifest has no layer 2");
        let e = layer_digest(b"[", 0).unwrap_err();
        assert!(matches!(e, RebuildError::PinnedManifest(_)), "{e}");
        let compare = RebuildError::Compare {
            alias: "python".into(),
            source: Box::new(e),
        };
        assert_eq!(
            crate::error_chain::error_chain(&compare),
            format!(
                "comparing the rebuild of python with its pin: the pinned manifest is not JSON: {}",
                serde_json::from_slice::<serde_json::Value>(b"[").unwrap_err()
            )
        );
        let not_clean = RebuildError::NotClean(vec!["go on linux/amd64".into()]);
        for e in [&compare, &not_clean] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
        let unknown = crate::name::Unknown::new("variant", "x", "images.toml", ["go"]);
        assert_eq!(RebuildError::from(unknown).exit_status(), Status::Usage);
    }

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
