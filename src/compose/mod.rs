//! Composition: a union variant (today `full` = base + python + go + js)
//! made from the layers its members' builds already made, instead of
//! running every fragment again (issue 30). A variant is composable when
//! it has a parent and two or more fragments, and each fragment is the one
//! fragment of a **member**: a variant on the same parent.
//!
//! ```text
//!   full, composed           python        go            js
//!   ┌──────────────────┐
//!   │ full's own steps │ ← from full's Dockerfile (posture, healthcheck)
//!   │ state layer      │ ← dpkg status + apt extended_states, merged
//!   │ js's layer       │ ← ─────────────────────────────── js's layer
//!   │ go's layer       │ ← ────────────────── go's layer
//!   │ python's layer   │ ← python's layer
//!   │ base's layers    │   base          base          base
//!   └──────────────────┘
//! ```
//!
//! This module plans it ([`plan`]): it reads the parent's and each
//! member's image once (one `save` each), finds each member's fragment
//! layer by the history step that ran the fragment's script, sorts the
//! paths two fragment layers share ([`overlap`]: identical, a state file,
//! or a conflict that is refused naming both fragments and the path) and
//! merges the state files ([`state`]). The plan is what [`assemble`]
//! writes as a `docker load` archive; the build (`build`, by default;
//! `crate::build`) loads it, builds the variant's own steps over it and
//! normalises and checks the result like any build. [`compare`] proves a
//! composed image equal to the Dockerfile-built one, path by path.

pub(crate) mod assemble;
pub(crate) mod compare;
pub(crate) mod overlap;
pub(crate) mod state;

use crate::image::save_stream::{self, WalkError};
use crate::manifest::Manifest;
use overlap::{LayerFacts, Overlap, PathConflict, ScanError};
use state::{MergedState, StateError};
use std::collections::BTreeMap;
use std::io::Read;

/// A union variant and the members it is composed from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recipe {
    pub(crate) variant: String,
    pub(crate) parent: String,
    /// In the variant's fragment order.
    pub(crate) members: Vec<Member>,
}

/// A fragment of the union and the variant that builds it alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) fragment: String,
    pub(crate) variant: String,
}

/// Why a variant cannot be composed, or its composition was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ComposeError {
    /// The variant is not a union of members (the manifest says why).
    #[error("variant `{variant}` cannot be composed: {why}")]
    NotComposable { variant: String, why: String },
    /// Images of the recipe the engine has no build of.
    #[error(
        "cannot compose `{variant}`: the engine has no build of {} ({repository}:VARIANT); build \
         them first: `sunaba-images build {}`",
        missing.join(", "),
        missing.join(" ")
    )]
    NotBuilt {
        variant: String,
        repository: String,
        missing: Vec<String>,
    },
    /// An image of the recipe that could not be read.
    #[error("{image}: {problem}")]
    Image { image: String, problem: String },
    /// A member that was not built on the parent's image as it is now.
    #[error(
        "{member} ({image}) was not built on {parent} ({parent_image}) as it is now: its first \
         layers differ; build them again (`sunaba-images build {member}`)"
    )]
    StaleMember {
        member: String,
        image: String,
        parent: String,
        parent_image: String,
    },
    /// A member whose fragment layer could not be told.
    #[error(
        "{member} ({image}): {found} of its layers ran fragment `{fragment}`'s script, not one; \
         build it again from the rendered Dockerfile"
    )]
    FragmentLayer {
        member: String,
        image: String,
        fragment: String,
        found: usize,
    },
    #[error("cannot compose `{variant}`: {source}")]
    Conflict {
        variant: String,
        #[source]
        source: Box<PathConflict>,
    },
    #[error("cannot compose `{variant}`: {source}")]
    State {
        variant: String,
        #[source]
        source: Box<StateError>,
    },
    /// A composed image that is not what its Dockerfile builds.
    #[error(
        "{composed} is not what {built} is: {paths} path(s) differ{}; the composition must not be \
         pinned (see the list above)",
        if *state { ", and a state file's stanzas" } else { "" }
    )]
    NotEquivalent {
        composed: String,
        built: String,
        paths: usize,
        state: bool,
    },
    /// The engine did not load the assembled image as written.
    #[error("the engine's load of the assembled image {image}: {problem}")]
    Load { image: String, problem: String },
    #[error("{image}: cannot read it from {engine}")]
    Engine {
        image: String,
        engine: String,
        #[source]
        source: Box<crate::process::ProcessError>,
    },
}

/// A variant that is not a union is a usage error (it was named); a
/// refused composition is a failure of the work, its error says why.
impl crate::exit::HasStatus for ComposeError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            ComposeError::NotComposable { .. } => crate::exit::Status::Usage,
            _ => crate::exit::Status::Failure,
        }
    }
}

/// The recipe of `variant`: its members, from the manifest.
pub(crate) fn recipe(manifest: &Manifest, variant: &str) -> Result<Recipe, ComposeError> {
    let refuse = |why: String| ComposeError::NotComposable {
        variant: variant.to_string(),
        why,
    };
    let Some(v) = manifest.variants.get(variant) else {
        let known: Vec<&str> = manifest.variants.keys().map(String::as_str).collect();
        return Err(refuse(format!(
            "images.toml has no such variant (it has: {})",
            known.join(", ")
        )));
    };
    let Some(parent) = &v.parent else {
        return Err(refuse(
            "it has no parent (it is built FROM the upstream image)".to_string(),
        ));
    };
    if v.fragments.len() < 2 {
        return Err(refuse(format!(
            "it installs {} fragment(s); a composed variant is a union of two or more",
            v.fragments.len()
        )));
    }
    let mut members = Vec::new();
    for fragment in &v.fragments {
        let candidates: Vec<&crate::manifest::Variant> = manifest
            .variants
            .values()
            .filter(|m| {
                m.name != v.name
                    && m.parent.as_ref() == Some(parent)
                    && m.fragments == [fragment.clone()]
            })
            .collect();
        if let [one, two, ..] = candidates[..] {
            return Err(refuse(format!(
                "fragment `{fragment}` is built alone on `{parent}` by both `{}` and `{}`: \
                 keep one of them",
                one.name, two.name
            )));
        }
        let Some(member) = candidates.first() else {
            return Err(refuse(format!(
                "fragment `{fragment}` is built by no variant of its own on `{parent}` (add one: \
                 [variants.{fragment}] with parent = \"{parent}\" and fragments = [\"{fragment}\"])"
            )));
        };
        members.push(Member {
            fragment: fragment.clone(),
            variant: member.name.clone(),
        });
    }
    Ok(Recipe {
        variant: variant.to_string(),
        parent: parent.clone(),
        members,
    })
}

/// One image as the plan reads it: its config and each layer's diff_id
/// and facts, bottom first; with a spill directory, each layer's blob too.
#[derive(Debug, Clone)]
pub(crate) struct Saved {
    pub(crate) config: serde_json::Value,
    /// Shared: a layer several images of one save hold (the parent's) is
    /// read once and held once.
    pub(crate) layers: Vec<(String, std::sync::Arc<LayerFacts>)>,
    /// Each layer's blob as the save stream held it, by diff_id (only when
    /// read with a spill directory): what the assembler loads.
    pub(crate) blobs: BTreeMap<String, std::path::PathBuf>,
}

/// Reads the save stream of `image` (every layer's facts, once); with
/// `spill`, each layer's blob is also written there as it passes.
#[cfg(test)]
pub(crate) fn read_save(
    image: &str,
    input: impl Read,
    spill: Option<&std::path::Path>,
) -> Result<Saved, ComposeError> {
    let mut saved = read_saves(image, input, spill)?;
    match saved.len() {
        1 => Ok(saved.pop_first().expect("one image").1),
        n => Err(ComposeError::Image {
            image: image.to_string(),
            problem: format!("its save stream holds {n} images, not one"),
        }),
    }
}

/// Reads a save stream of one or more images (`what` names it in errors):
/// every layer's facts once (a layer the images share is in the stream
/// once), and each image by its ID; with `spill`, each layer's blob is
/// also written there as it passes.
pub(crate) fn read_saves(
    what: &str,
    input: impl Read,
    spill: Option<&std::path::Path>,
) -> Result<BTreeMap<String, Saved>, ComposeError> {
    let problem = |problem: String| ComposeError::Image {
        image: what.to_string(),
        problem,
    };
    let mut scanned: BTreeMap<String, Result<std::sync::Arc<LayerFacts>, ScanError>> =
        BTreeMap::new();
    let mut spilled: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    let files = save_stream::walk(input, |name, _size, layer| {
        let Some(dir) = spill else {
            let facts = overlap::scan_blob(layer).map(std::sync::Arc::new);
            scanned.insert(name.to_string(), facts);
            return Ok(());
        };
        let path = dir.join(format!("layer-{:03}", spilled.len()));
        let copy = std::fs::File::create(&path).map_err(|e| (path.clone(), e))?;
        // A layer's blob is scanned and kept in one pass over the stream.
        let mut tee = crate::image::compress::Tee {
            inner: layer,
            copy: std::io::BufWriter::with_capacity(1 << 20, copy),
        };
        let facts = overlap::scan_blob(&mut tee).map(std::sync::Arc::new);
        scanned.insert(name.to_string(), facts);
        // The scan stops at the tar's end: the blob's padding is the blob's.
        std::io::copy(&mut tee, &mut std::io::sink()).map_err(|e| (path.clone(), e))?;
        let file = tee
            .copy
            .into_inner()
            .map_err(|e| (path.clone(), e.into_error()))?;
        drop(file);
        spilled.insert(name.to_string(), path);
        Ok(())
    })
    .map_err(|e| match e {
        WalkError::Stream(e) => problem(stream_problem(e)),
        WalkError::Layer((path, e)) => {
            problem(format!("cannot keep a layer in {}: {e}", path.display()))
        }
    })?;
    let images = save_stream::contents_by_id(&files.small, &files.links)
        .map_err(|e| problem(stream_problem(e)))?;
    let mut out = BTreeMap::new();
    for (id, contents) in images {
        let mut layers = Vec::with_capacity(contents.layers.len());
        let mut blobs = BTreeMap::new();
        for (name, diff_id) in contents.layers.iter().zip(contents.diff_ids) {
            // A layer named twice (through a link) is one file: the one
            // read serves both.
            match scanned.get(name) {
                None => {
                    return Err(problem(format!(
                        "layer {} is not in its save stream",
                        crate::image::entries::shown(name)
                    )));
                }
                Some(Err(e)) => {
                    return Err(problem(format!(
                        "layer {}: {e}",
                        crate::image::entries::shown(&diff_id)
                    )));
                }
                Some(Ok(facts)) => {
                    if let Some(path) = spilled.get(name) {
                        blobs.insert(diff_id.clone(), path.clone());
                    }
                    layers.push((diff_id, std::sync::Arc::clone(facts)))
                }
            }
        }
        let saved = Saved {
            config: contents.config,
            layers,
            blobs,
        };
        out.insert(id, saved);
    }
    Ok(out)
}

/// The engine's image ID of each of `images` (references), one `inspect`
/// each; an image the engine has not is an error naming it.
pub(crate) fn image_ids(
    engine: &dyn crate::engine::Engine,
    images: &[String],
) -> Result<Vec<String>, ComposeError> {
    images
        .iter()
        .map(|image| {
            let info = engine.inspect(image).map_err(|e| ComposeError::Image {
                image: image.clone(),
                problem: e.to_string(),
            })?;
            info.map(|i| i.id).ok_or_else(|| ComposeError::Image {
                image: image.clone(),
                problem: "the engine has no such image".into(),
            })
        })
        .collect()
}

/// Reads `images` (variant, image reference), whose image IDs are `ids`,
/// from `engine` with one `save` of them all (a layer they share, the
/// parent's, is saved and read once), in their order; with `spill`, a
/// directory made for the layer blobs.
pub(crate) fn read_images(
    engine: &dyn crate::engine::Engine,
    images: &[(String, String)],
    ids: &[String],
    spill: Option<&std::path::Path>,
) -> Result<Vec<(String, Saved)>, ComposeError> {
    if let Some(dir) = spill {
        std::fs::create_dir_all(dir).map_err(|e| ComposeError::Image {
            image: dir.display().to_string(),
            problem: format!("cannot make the directory: {e}"),
        })?;
    }
    let what = images
        .iter()
        .map(|(_, i)| i.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let saved = engine
        .save_images_cmd(ids)
        .read_stdout(|out| read_saves(&what, out, spill))
        .map_err(|e| match e {
            crate::process::PipeError::Process(source) => ComposeError::Engine {
                image: what.clone(),
                engine: engine.describe(),
                source: Box::new(source),
            },
            crate::process::PipeError::Stream(e) => e,
        })?;
    let mut out = Vec::new();
    for ((variant, image), id) in images.iter().zip(ids) {
        let one = saved.get(id).cloned().ok_or_else(|| ComposeError::Image {
            image: image.clone(),
            problem: format!("the engine's save of {what} does not hold it ({id})"),
        })?;
        out.push((shown_image(variant, image, id), one));
    }
    Ok(out)
}

/// `images` (variant, image reference) with the image IDs `ids`, read
/// from what this process wrote instead of from the engine: each config
/// from [`crate::image::load_archive::written_configs`], each layer from
/// [`crate::image::layer_store`] (the normaliser kept the layers of a
/// composition's parent and members it rewrote in this run). `None` when
/// anything is not there — an image built by an earlier run — and the
/// caller reads the engine's save ([`read_images`]). A layer of the parent
/// the store lacks (the upstream's, kept byte for byte, never rewritten) is
/// not needed when a layer above it holds every state file: the parent's
/// state files are all the composition reads of the parent's layers.
pub(crate) fn read_written(
    images: &[(String, String)],
    ids: &[String],
) -> Option<Vec<(String, Saved)>> {
    let mut scanned: BTreeMap<String, std::sync::Arc<LayerFacts>> = BTreeMap::new();
    let mut scan = |diff_id: &str| -> Option<(std::sync::Arc<LayerFacts>, std::path::PathBuf)> {
        let path = crate::image::layer_store::get(diff_id)?;
        if let Some(facts) = scanned.get(diff_id) {
            return Some((facts.clone(), path));
        }
        let file = std::fs::File::open(&path).ok()?;
        let facts = std::sync::Arc::new(
            overlap::scan_blob(std::io::BufReader::with_capacity(1 << 20, file)).ok()?,
        );
        scanned.insert(diff_id.to_string(), facts.clone());
        Some((facts, path))
    };
    let mut out: Vec<(String, Saved)> = Vec::new();
    let mut parent: Vec<(String, std::sync::Arc<LayerFacts>)> = Vec::new();
    for (i, ((variant, image), id)) in images.iter().zip(ids).enumerate() {
        let bytes = crate::image::load_archive::written_configs::get(id)?;
        let (config, diff_ids) = save_stream::config_of("this process wrote", &bytes).ok()?;
        let mut layers = vec![None; diff_ids.len()];
        let mut blobs = BTreeMap::new();
        // Top down: the parent's state files are its topmost copies.
        let mut unfound: Vec<&str> = state::STATE_FILES.iter().map(|(p, _)| *p).collect();
        for (at, diff_id) in diff_ids.iter().enumerate().rev() {
            let facts = if let Some((facts, path)) = scan(diff_id) {
                blobs.insert(diff_id.clone(), path);
                facts
            } else if i > 0 && parent.get(at).is_some_and(|(d, _)| d == diff_id) {
                // A member's layer of the parent: the parent's facts.
                parent[at].1.clone()
            } else if i == 0 && unfound.is_empty() {
                std::sync::Arc::new(LayerFacts::default())
            } else {
                return None;
            };
            unfound.retain(|p| !facts.state.contains_key(*p));
            layers[at] = Some((diff_id.clone(), facts));
        }
        let layers: Vec<(String, std::sync::Arc<LayerFacts>)> =
            layers.into_iter().collect::<Option<_>>()?;
        if i == 0 {
            parent = layers.clone();
        }
        out.push((
            shown_image(variant, image, id),
            Saved {
                config,
                layers,
                blobs,
            },
        ));
    }
    Some(out)
}

/// An image as the composer's messages name it: a reference as given, an
/// image ID as its variant and short ID.
fn shown_image(variant: &str, image: &str, id: &str) -> String {
    if image.starts_with("sha256:") {
        let hex = id.trim_start_matches("sha256:");
        format!("{variant} ({})", &hex[..hex.len().min(12)])
    } else {
        image.to_string()
    }
}

/// What is wrong with a save stream, in words.
fn stream_problem(e: save_stream::StreamError) -> String {
    match e {
        save_stream::StreamError::Truncated(d) => format!("the save stream is truncated: {d}"),
        save_stream::StreamError::Corrupt(d) => format!("the save stream is corrupt: {d}"),
        save_stream::StreamError::Oversized(o) => format!("the save stream: {o}"),
    }
}

/// A member's fragment layer, as the plan takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberLayer {
    pub(crate) member: Member,
    pub(crate) diff_id: String,
    pub(crate) paths: usize,
    /// The member's history step that made the layer (its `created_by`
    /// names the fragment's script: what the package record and the SBOM
    /// attribute the layer by).
    pub(crate) step: serde_json::Value,
    /// The member's record of the Debian packages each fragment installed
    /// (`dev.sunaba.packages`), as its label holds it.
    pub(crate) packages: Option<String>,
}

/// What composing a variant takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) recipe: Recipe,
    /// The parent's layers (diff_ids), bottom first.
    pub(crate) parent_layers: Vec<String>,
    /// The parent's config: what the composed image's starts from.
    pub(crate) parent_config: serde_json::Value,
    /// The blobs of the parent's layers and the fragment layers, by
    /// diff_id, when the members were read with a spill directory.
    pub(crate) blobs: BTreeMap<String, std::path::PathBuf>,
    /// Each member's fragment layer, in the variant's fragment order.
    pub(crate) fragment_layers: Vec<MemberLayer>,
    pub(crate) overlap: Overlap,
    /// The state layer's files.
    pub(crate) state: Vec<MergedState>,
}

/// Plans `recipe` from its images as read ([`read_images`]): the
/// parent's, then each member's, in the recipe's order, each with the name
/// errors give it; `scripts` maps each fragment's script file name to the
/// fragment, as the build's history names them.
pub(crate) fn plan(
    recipe: &Recipe,
    scripts: &BTreeMap<String, String>,
    images: Vec<(String, Saved)>,
) -> Result<Plan, ComposeError> {
    assert_eq!(
        images.len(),
        recipe.members.len() + 1,
        "the parent and each member are read"
    );
    let mut images = images.into_iter();
    let (parent_image, parent) = images.next().expect("the parent was read");
    let parent_ids: Vec<String> = parent.layers.iter().map(|(d, _)| d.clone()).collect();
    let mut fragment_layers = Vec::new();
    let mut facts: Vec<(String, std::sync::Arc<LayerFacts>)> = Vec::new();
    let mut blobs = BTreeMap::new();
    for member in &recipe.members {
        let (image, mut saved) = images.next().expect("each member was read");
        let ids: Vec<&String> = saved.layers.iter().map(|(d, _)| d).collect();
        if ids.len() < parent_ids.len()
            || ids[..parent_ids.len()] != parent_ids.iter().collect::<Vec<_>>()[..]
        {
            return Err(ComposeError::StaleMember {
                member: member.variant.clone(),
                image,
                parent: recipe.parent.clone(),
                parent_image,
            });
        }
        let steps = crate::image::config::layer_steps(&saved.config);
        let own: Vec<usize> = (parent_ids.len()..saved.layers.len())
            .filter(|i| {
                steps
                    .get(*i)
                    .and_then(|s| crate::image::config::fragment_of_step(s, scripts))
                    .as_deref()
                    == Some(member.fragment.as_str())
            })
            .collect();
        let [at] = own[..] else {
            return Err(ComposeError::FragmentLayer {
                member: member.variant.clone(),
                image,
                fragment: member.fragment.clone(),
                found: own.len(),
            });
        };
        for id in parent_ids
            .iter()
            .chain(std::iter::once(&saved.layers[at].0))
        {
            if let (false, Some(path)) = (blobs.contains_key(id), saved.blobs.remove(id)) {
                blobs.insert(id.clone(), path);
            }
        }
        let step = crate::image::config::layer_history(&saved.config)
            .into_iter()
            .nth(at)
            .unwrap_or_default();
        let packages = saved
            .config
            .pointer("/config/Labels")
            .and_then(|l| l.get(crate::labels::PACKAGES))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let (diff_id, layer) = saved.layers.into_iter().nth(at).expect("index in range");
        fragment_layers.push(MemberLayer {
            member: member.clone(),
            diff_id,
            paths: layer.paths.len(),
            step,
            packages,
        });
        facts.push((member.fragment.clone(), layer));
    }
    let members: Vec<(&str, &LayerFacts)> = facts.iter().map(|(f, l)| (f.as_str(), &**l)).collect();
    let overlap = overlap::overlap(&members).map_err(|source| ComposeError::Conflict {
        variant: recipe.variant.clone(),
        source: Box::new(source),
    })?;
    let mut state = merge_state(&recipe.variant, &parent, &facts)?;
    for file in &mut state {
        if let Some(f) = facts
            .iter()
            .rev()
            .find_map(|(_, l)| l.paths.get(&file.path))
        {
            (file.mode, file.uid, file.gid) = (f.mode, f.uid, f.gid);
        }
    }
    Ok(Plan {
        recipe: recipe.clone(),
        parent_layers: parent_ids,
        parent_config: parent.config.clone(),
        blobs,
        fragment_layers,
        overlap,
        state,
    })
}

/// The state layer's files: the parent's state files (as its topmost layer
/// writing each leaves it) merged with each member fragment layer's.
fn merge_state(
    variant: &str,
    parent: &Saved,
    facts: &[(String, std::sync::Arc<LayerFacts>)],
) -> Result<Vec<MergedState>, ComposeError> {
    let parent_state = |path: &str| -> Option<&Vec<u8>> {
        parent
            .layers
            .iter()
            .rev()
            .find_map(|(_, l)| l.state.get(path))
    };
    // The merge keeps the stanzas byte for byte: a state file that is not
    // UTF-8 (dpkg and apt write UTF-8) is refused rather than rewritten.
    let text = |whose: &str, path: &str, bytes: &[u8]| -> Result<String, ComposeError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| ComposeError::State {
            variant: variant.to_string(),
            source: Box::new(state::StateError::Malformed {
                file: path.to_string(),
                whose: whose.to_string(),
                line: 1 + bytes
                    .split(|b| *b == b'\n')
                    .take_while(|l| std::str::from_utf8(l).is_ok())
                    .count(),
                problem: "it is not UTF-8".to_string(),
            }),
        })
    };
    let mut below = BTreeMap::new();
    for (path, _) in state::STATE_FILES {
        if let Some(bytes) = parent_state(path) {
            below.insert(path.to_string(), text("the parent", path, bytes)?);
        }
    }
    let mut theirs: Vec<(&str, BTreeMap<String, String>)> = Vec::new();
    for (fragment, layer) in facts {
        let whose = format!("fragment `{fragment}`");
        let mut files = BTreeMap::new();
        for (path, bytes) in &layer.state {
            files.insert(path.clone(), text(&whose, path, bytes)?);
        }
        theirs.push((fragment.as_str(), files));
    }
    state::merge_all(&below, &theirs).map_err(|source| ComposeError::State {
        variant: variant.to_string(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests;
