//! One variant's build: hash its inputs, reuse an image with the same inputs
//! or build it on the engine (logging every line), then check it and record
//! the pass on the image.

use super::current::Inputs;
use super::inputs;
use super::progress::{Event, Reporter, StepTracker};
use super::{CA_SECRET_ID, Family, Options, Outcome, Stage};
use crate::check::{self, CheckReport, LABEL_INPUTS};
use crate::engine::{BuildRequest, Engine, EngineError};
use crate::labels;
use crate::name::Platform;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Lines of a failed build's log repeated in the failure report.
const FAILURE_TAIL_LINES: usize = 15;

/// What every variant's build in one run shares (the scheduler makes it).
pub(super) struct Shared<'a> {
    pub(super) family: &'a Family,
    pub(super) engine: &'a dyn Engine,
    pub(super) opts: &'a Options,
    pub(super) reporter: &'a dyn Reporter,
    pub(super) platform: Platform,
    /// `platform`, when it is not the engine's own (emulated).
    pub(super) foreign: Option<Platform>,
    /// The pinned upstream (`name:tag@sha256:…`), the FROM of root variants.
    pub(super) upstream: String,
    /// `org.opencontainers.image.base.name` / `base.digest`.
    pub(super) base_labels: BTreeMap<String, String>,
    pub(super) upstream_id: Option<String>,
    pub(super) created: String,
    pub(super) forced: BTreeSet<String>,
    pub(super) builds: std::sync::atomic::AtomicUsize,
}

impl Shared<'_> {
    /// How `variant` is composed, when this run composes it.
    pub(super) fn composition(&self, variant: &str) -> Option<&crate::family::Composition> {
        self.opts
            .compose
            .then(|| self.family.variants[variant].composition.as_ref())
            .flatten()
    }
}

/// The OCI labels naming the image every variant is ultimately built on:
/// the upstream's name (with its tag) and the digest it is pinned to.
pub(super) fn base_labels(upstream: &crate::registry::Reference) -> BTreeMap<String, String> {
    let name = match (upstream.tag(), upstream.digest()) {
        (Some(tag), _) => format!("{}:{tag}", upstream.repo()),
        (None, _) => upstream.repo().to_string(),
    };
    let mut labels = BTreeMap::from([(crate::labels::OCI_BASE_NAME.to_string(), name)]);
    if let Some(d) = upstream.digest() {
        labels.insert(crate::labels::OCI_BASE_DIGEST.to_string(), d.to_string());
    }
    labels
}

/// Builds one variant whose parent (if any) is `from` = (reference, image ID).
/// `members`: a composed variant's members, (variant, image ID).
pub(super) fn build_one(
    sh: &Shared,
    variant: &str,
    from: Option<(String, String)>,
    members: &[(String, String)],
) -> Outcome {
    let reporter = sh.reporter;
    let outcome = build_stages(sh, variant, from, members).unwrap_or_else(|outcome| *outcome);
    match &outcome {
        Outcome::Built {
            build_seconds,
            check,
            ..
        } => reporter.event(
            variant,
            Event::Done(format!(
                "built in {build_seconds:.1}s{}",
                check
                    .as_ref()
                    .map(|c| format!(", check passed in {:.1}s", c.seconds))
                    .unwrap_or_default()
            )),
        ),
        Outcome::Skipped { note, .. } => reporter.event(variant, Event::Skipped(note.clone())),
        Outcome::Failed { stage, reason, .. } => {
            reporter.event(variant, Event::Failed(format!("{stage}: {reason}")))
        }
        Outcome::NotAttempted { reason } => {
            reporter.event(variant, Event::NotAttempted(reason.clone()))
        }
    }
    outcome
}

pub(super) fn failed(
    stage: Stage,
    reason: impl std::fmt::Display,
    log: Option<PathBuf>,
) -> Outcome {
    Outcome::Failed {
        stage,
        reason: reason.to_string(),
        log,
        check: None,
    }
}

/// A stage that failed ends the variant's build with this outcome.
type StageResult<T> = Result<T, Box<Outcome>>;

fn fail(stage: Stage, reason: impl std::fmt::Display, log: Option<PathBuf>) -> Box<Outcome> {
    Box::new(failed(stage, reason, log))
}

/// What one variant's build is, before anything runs.
struct Prepared {
    /// The image ID it is built FROM.
    from_id: String,
    inputs: Inputs,
    /// The `labels::DEFINITION` label.
    definition: String,
    inputs_tag: String,
    /// The inputs tag and the variant tag.
    tags: Vec<String>,
    log_path: PathBuf,
    /// A composed variant's members, (variant, image ID), in its order.
    members: Vec<(String, String)>,
}

/// The stages of one variant's build: prepare; reuse an image with the same
/// inputs, or build (and normalise) one; then check. A stage that fails
/// ends it with its outcome.
fn build_stages(
    sh: &Shared,
    variant: &str,
    from: Option<(String, String)>,
    members: &[(String, String)],
) -> StageResult<Outcome> {
    let prepared = prepare(sh, variant, from, members)?;
    let force = sh.forced.contains(variant);
    if !force {
        match sh.engine.inspect(&prepared.inputs_tag) {
            Err(e) => return Err(fail(Stage::Prepare, e, None)),
            Ok(Some(info)) if info.labels.get(LABEL_INPUTS) == Some(&prepared.inputs.hash) => {
                let Prepared {
                    inputs,
                    inputs_tag,
                    log_path,
                    ..
                } = prepared;
                return Ok(reuse(sh, variant, info, inputs.hash, inputs_tag, &log_path));
            }
            Ok(_) => {}
        }
    }
    let (image_id, build_seconds, composed) = match sh.composition(variant) {
        Some(c) => {
            let (id, seconds, composed) = compose_build(sh, variant, c, &prepared, force)?;
            (id, seconds, Some(composed))
        }
        None => {
            let (id, seconds) = engine_build(sh, variant, &prepared, force, None)?;
            (id, seconds, None)
        }
    };
    let Prepared {
        from_id,
        inputs,
        inputs_tag,
        tags,
        log_path,
        ..
    } = prepared;
    let normalize_started = Instant::now();
    // A composed image keeps every layer it was assembled from byte for
    // byte: its own steps' layers are the ones rewritten.
    let kept_from = composed
        .as_ref()
        .map_or(from_id.as_str(), |c| c.tag.as_str());
    let normalized = if sh.opts.normalize {
        normalize(sh, variant, &image_id, kept_from, &tags, &log_path)
            .map(|id| (id, Some(normalize_started.elapsed().as_secs_f64())))
    } else {
        Ok((image_id, None))
    };
    if let Some(c) = &composed {
        // The assembled image is in the built one: its tag is only a name.
        let _ = sh.engine.remove_image(&c.tag);
    }
    let (image_id, normalize_seconds) = match normalized {
        Ok(done) => done,
        Err(e) => return Err(fail(Stage::Normalize, e, Some(log_path))),
    };
    let (image_id, check) = if sh.opts.check {
        let (id, report) = check_and_record(sh, variant, &inputs_tag, &log_path)?;
        (id, Some(report))
    } else {
        (image_id, None)
    };
    Ok(Outcome::Built {
        image_id,
        reference: inputs_tag,
        inputs: inputs.hash,
        build_seconds,
        normalize_seconds,
        check,
    })
}

/// The variant's inputs (hashed), its definition, tags and log.
fn prepare(
    sh: &Shared,
    variant: &str,
    from: Option<(String, String)>,
    members: &[(String, String)],
) -> StageResult<Prepared> {
    let family = sh.family;
    let (from_ref, from_id) = match (from, &sh.upstream_id) {
        (Some((r, id)), _) => (r, id),
        (None, Some(id)) => (sh.upstream.clone(), id.clone()),
        (None, None) => unreachable!("the upstream is resolved when a root variant is selected"),
    };
    let mut inputs = family
        .inputs(variant, &sh.platform, &from_ref, &from_id)
        .map_err(|e| fail(Stage::Prepare, e, None))?;
    if let Some(c) = sh.composition(variant) {
        inputs.hash = composed_inputs(&inputs.hash, c, members)
            .map_err(|reason| fail(Stage::Prepare, reason, None))?;
    }
    let definition =
        super::definition::of(family, variant).map_err(|e| fail(Stage::Prepare, e, None))?;
    let inputs_tag = family.inputs_tag(variant, &inputs.hash);
    let variant_tag = family.platform_tag(variant, sh.foreign.as_ref());
    Ok(Prepared {
        from_id,
        inputs,
        definition,
        tags: vec![inputs_tag.clone(), variant_tag],
        inputs_tag,
        log_path: sh.opts.log_dir.join(format!("{variant}.log")),
        members: members.to_vec(),
    })
}

/// A composed variant's inputs: its own (the Dockerfile it would be built
/// from and its fragments' files) and the images of its members, whose
/// layers it is made of. A member rebuilt with other layers is another
/// composition; the hash says it was composed, so a composed image and a
/// Dockerfile-built one of the same inputs are never taken for each other.
fn composed_inputs(
    own: &str,
    composition: &crate::family::Composition,
    members: &[(String, String)],
) -> Result<String, String> {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    hash.update(format!("composed\n{own}\n"));
    for m in &composition.recipe.members {
        let Some((_, id)) = members.iter().find(|(v, _)| *v == m.variant) else {
            return Err(format!(
                "its member {} has no image in this run (build it first)",
                m.variant
            ));
        };
        hash.update(format!("{}={id}\n", m.variant));
    }
    Ok(format!("sha256:{}", hex::encode(hash.finalize())))
}

/// Stages the build context and builds it on the engine, every line into
/// the variant's log. Returns the image ID and the build's seconds.
fn engine_build(
    sh: &Shared,
    variant: &str,
    prepared: &Prepared,
    force: bool,
    over: Option<&Over>,
) -> StageResult<(String, f64)> {
    let log_path = &prepared.log_path;
    let mut log = match std::fs::File::create(log_path) {
        // Line by line, so `tail -f` of a running build shows its progress.
        Ok(f) => std::io::LineWriter::new(f),
        Err(e) => {
            let reason = format!("cannot create the log file {}: {e}", log_path.display());
            return Err(fail(Stage::Prepare, reason, None));
        }
    };
    for line in over.iter().flat_map(|o| &o.log) {
        let _ = writeln!(log, "{line}");
    }
    let work = crate::scratch::tempdir("sunaba-build-").map_err(|e| {
        let reason = format!("cannot create a staging directory: {e}");
        fail(Stage::Prepare, reason, None)
    })?;
    let context = work.path().join("context");
    inputs::stage(&context, &prepared.inputs.files, sh.opts.source_date_epoch).map_err(|e| {
        let reason = format!("cannot stage the build context: {e}");
        fail(Stage::Prepare, reason, None)
    })?;
    let mut req = build_request(sh, variant, prepared, &context, work.path(), force);
    if let Some(over) = over {
        // The variant's own steps, FROM the assembled image.
        let dockerfile = work.path().join("Dockerfile.composed");
        std::fs::write(&dockerfile, &over.dockerfile).map_err(|e| {
            let reason = format!("cannot write {}: {e}", dockerfile.display());
            fail(Stage::Prepare, reason, None)
        })?;
        req.dockerfile = dockerfile;
        req.build_args.insert(
            sh.family.variants[variant].from_arg.clone(),
            over.parent.clone(),
        );
    }
    let _ = writeln!(log, "# {}", sh.engine.build_cmd(&req).display());
    let _ = writeln!(log, "# inputs {}", prepared.inputs.hash);
    sh.reporter.event(variant, Event::Building(None));
    sh.builds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut tracker = StepTracker::new(sh.engine.log_format());
    let started = Instant::now();
    let result = sh.engine.build(&req, &mut |line| {
        let _ = writeln!(log, "{line}");
        if let Some(step) = tracker.line(line) {
            sh.reporter.event(variant, Event::Building(Some(step)));
        }
    });
    let build_seconds = started.elapsed().as_secs_f64();
    let _ = log.flush();
    drop(log);
    match result {
        Ok(id) => Ok((id, build_seconds)),
        Err(EngineError::BuildFailed { .. }) => {
            let text = std::fs::read_to_string(log_path).unwrap_or_default();
            let reason = format!(
                "{}\n--- last lines of {}:\n{}",
                tracker.failure(),
                log_path.display(),
                crate::process::tail_lines(&text, FAILURE_TAIL_LINES)
            );
            Err(fail(Stage::Build, reason, Some(log_path.clone())))
        }
        Err(e) => Err(fail(Stage::Build, e, Some(log_path.clone()))),
    }
}

/// What a composed variant's own steps are built over: the assembled
/// image (`parent`, a tag) and the Dockerfile of those steps; `log`: what
/// the assembly did, for the variant's log.
struct Over {
    parent: String,
    dockerfile: String,
    log: Vec<String>,
}

/// The assembled image of a composed build (under `tag` until the build
/// is normalised).
struct Composed {
    tag: String,
}

/// Composes `variant`: reads its parent and members (one `save` each, at
/// once), assembles their layers and the merged state layer into one image
/// loaded under a tag of its own, then builds the variant's own steps over
/// it. Returns the built image's ID and the seconds the whole took.
fn compose_build(
    sh: &Shared,
    variant: &str,
    composition: &crate::family::Composition,
    prepared: &Prepared,
    force: bool,
) -> StageResult<(String, f64, Composed)> {
    let started = Instant::now();
    sh.reporter.event(variant, Event::Building(None));
    let recipe = &composition.recipe;
    let failure =
        |e: &dyn std::error::Error| fail(Stage::Compose, crate::error_chain::error_chain(e), None);
    let work = crate::scratch::tempdir("sunaba-compose-").map_err(|e| failure(&e))?;
    let tag = format!(
        "{}:{variant}-composing-{}",
        sh.family.repository,
        crate::family::short_hex(&prepared.inputs.hash)
    );
    let mut images = vec![(recipe.parent.clone(), prepared.from_id.clone())];
    images.extend(prepared.members.iter().cloned());
    // The scheduler gives image IDs: nothing to look up.
    let ids: Vec<String> = images.iter().map(|(_, id)| id.clone()).collect();
    // What this run built and normalised is read from what it wrote; an
    // image of an earlier run from the engine's save. (An engine that reads
    // every layer file of a load needs the upstream's layers too, which no
    // run writes: the save.)
    let (read, source) = match (sh.engine.loads_layers_it_has_by_chain_id())
        .then(|| crate::compose::read_written(&images, &ids))
        .flatten()
    {
        Some(read) => (Ok(read), "the layers this run wrote"),
        None => (
            crate::compose::read_images(sh.engine, &images, &ids, Some(work.path())),
            "the engine's save",
        ),
    };
    let plan = read
        .and_then(|read| crate::compose::plan(recipe, &sh.family.fragment_scripts, read))
        .map_err(|e| failure(&e))?;
    let planned = started.elapsed().as_secs_f64();
    let sde = sh.opts.source_date_epoch;
    let assembled =
        crate::compose::assemble::load(sh.engine, &plan, sde, &tag).map_err(|e| failure(&e))?;
    drop(work);
    let fragments: Vec<String> = plan
        .fragment_layers
        .iter()
        .map(|l| {
            format!(
                "{} ({})",
                l.member.fragment,
                crate::family::short_hex(&l.diff_id)
            )
        })
        .collect();
    let state: Vec<String> = plan
        .state
        .iter()
        .map(|f| format!("{} ({} stanzas)", f.path, f.stanzas))
        .collect();
    let log = vec![
        format!(
            "# composed {variant} as {} in {:.1}s (read from {source} in {:.1}s): {} layer(s) \
             of {}, fragment layers {}, state layer {} ({}); {} path(s) shared alike",
            assembled.id,
            started.elapsed().as_secs_f64(),
            planned,
            plan.parent_layers.len(),
            recipe.parent,
            fragments.join(", "),
            crate::family::short_hex(&assembled.state_diff_id),
            state.join(", "),
            plan.overlap.identical.len(),
        ),
        "# its own steps, FROM the assembled image:".to_string(),
    ];
    let over = Over {
        parent: tag.clone(),
        dockerfile: composition.dockerfile.clone(),
        log,
    };
    let (id, _) = engine_build(sh, variant, prepared, force, Some(&over)).inspect_err(|_| {
        // Nothing is left under the assembly's tag when the build fails.
        let _ = sh.engine.remove_image(&tag);
    })?;
    Ok((id, started.elapsed().as_secs_f64(), Composed { tag }))
}

/// The engine's build of the staged `context` (`work`: the staging
/// directory): the build arguments, labels, tags and secret.
fn build_request(
    sh: &Shared,
    variant: &str,
    prepared: &Prepared,
    context: &Path,
    work: &Path,
    force: bool,
) -> BuildRequest {
    let mut labels = prepared.inputs.static_labels.clone();
    labels.insert(LABEL_INPUTS.to_string(), prepared.inputs.hash.clone());
    // Derived from the inputs (equal inputs, equal definition): not hashed.
    labels.insert(labels::DEFINITION.to_string(), prepared.definition.clone());
    labels.insert(labels::OCI_REVISION.to_string(), sh.opts.revision.clone());
    labels.insert(labels::OCI_CREATED.to_string(), sh.created.clone());
    labels.extend(sh.base_labels.clone());
    // SOURCE_DATE_EPOCH reaches the build (fragments clamp file times to
    // it) but not the inputs hash: a new commit alone changes no image.
    let mut build_args = prepared.inputs.build_args.clone();
    build_args.insert(
        super::SOURCE_DATE_EPOCH.to_string(),
        sh.opts.source_date_epoch.to_string(),
    );
    BuildRequest {
        context: context.to_path_buf(),
        dockerfile: context.join(&sh.family.variants[variant].dockerfile),
        // Normalised, the engine's image stays untagged: only the rewritten
        // one gets the tags, so a normalisation that fails leaves nothing
        // a later run would reuse.
        tags: if sh.opts.normalize {
            Vec::new()
        } else {
            prepared.tags.clone()
        },
        build_args,
        labels,
        secrets: sh
            .opts
            .ca_bundle
            .iter()
            .map(|p| (CA_SECRET_ID.to_string(), p.clone()))
            .collect(),
        no_cache: force,
        iidfile: work.join("iid"),
        platform: sh.foreign.clone(),
    }
}

/// Rewrites the engine's image `built` (FROM `from_id`) and loads the
/// result under `tags`; the engine's own image is removed. Returns the
/// normalised image's ID. What it did goes to the variant's log.
fn normalize(
    sh: &Shared,
    variant: &str,
    built: &str,
    from_id: &str,
    tags: &[String],
    log_path: &Path,
) -> Result<String, crate::normalize::NormalizeError> {
    let started = Instant::now();
    // The layers of the image it was built FROM are kept byte for byte.
    let base_diff_ids = sh
        .engine
        .inspect(from_id)
        .ok()
        .flatten()
        .map(|i| i.layers)
        .unwrap_or_default();
    let opts = crate::normalize::Options {
        source_date_epoch: sh.opts.source_date_epoch,
        base_diff_ids,
        tags: tags.to_vec(),
        fragment_scripts: sh.family.fragment_scripts.clone(),
        keep_layers: sh.opts.compose && feeds_a_composition(sh.family, variant),
        ..Default::default()
    };
    let (id, report) = crate::normalize::normalize_image(sh.engine, built, &opts)?;
    if id != built {
        // Untagged, and no longer what any tag names: only disk.
        let _ = sh.engine.remove_image(built);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(log_path) {
        let _ = writeln!(
            f,
            "# normalised {} -> {id} in {:.1}s ({} bytes)",
            built,
            started.elapsed().as_secs_f64(),
            report.bytes
        );
        for (i, l) in report.layers.iter().enumerate() {
            let _ = writeln!(
                f,
                "#   layer {i}: {} -> {}{} ({} entries)",
                l.diff_id_before,
                l.diff_id_after,
                if l.kept { " kept" } else { "" },
                l.entries
            );
            for (path, why) in &l.dropped {
                let _ = writeln!(f, "#     dropped {path}: {why}");
            }
        }
    }
    Ok(id)
}

/// Whether a union variant is composed from `variant`'s layers (it is the
/// composition's parent or one of its members): its normalisation keeps
/// them for the composer.
fn feeds_a_composition(family: &crate::family::Family, variant: &str) -> bool {
    family.variants.values().any(|v| {
        v.composition.as_ref().is_some_and(|c| {
            c.recipe.parent == variant || c.recipe.members.iter().any(|m| m.variant == variant)
        })
    })
}

/// An image with these inputs exists: no engine build. It still has to have
/// passed its check (unless checks are off).
fn reuse(
    sh: &Shared,
    variant: &str,
    info: crate::engine::ImageInfo,
    inputs: String,
    inputs_tag: String,
    log_path: &Path,
) -> Outcome {
    // The variant tag names the latest build: it moves here first, so a
    // check recorded below moves it along with the inputs tag.
    let variant_tag = sh.family.platform_tag(variant, sh.foreign.as_ref());
    if !info.repo_tags.contains(&variant_tag)
        && let Err(e) = sh.engine.tag(&inputs_tag, &variant_tag)
    {
        return failed(Stage::Tag, e, None);
    }
    let record = check::passing_record(&info);
    let expect = check::Expectation::of(sh.family, variant).expect("a known variant");
    let checked = record
        .as_ref()
        .is_some_and(|r| check::smoke_is_current(r, &expect));
    if checked || !sh.opts.check {
        return Outcome::Skipped {
            image_id: info.id,
            reference: inputs_tag,
            inputs,
            note: if checked {
                "inputs unchanged, check passed before".into()
            } else {
                "inputs unchanged".into()
            },
            check: None,
        };
    }
    match check_and_record(sh, variant, &inputs_tag, log_path) {
        Ok((id, report)) => Outcome::Skipped {
            image_id: id,
            reference: inputs_tag,
            inputs,
            note: if record.is_some() {
                "inputs unchanged, smoke changed: checked now".into()
            } else {
                "inputs unchanged, checked now".into()
            },
            check: Some(report),
        },
        Err(outcome) => *outcome,
    }
}

/// Runs the check; on a pass records it on the image and returns the
/// labelled image's ID; on a failure returns the failed outcome.
fn check_and_record(
    sh: &Shared,
    variant: &str,
    reference: &str,
    log_path: &Path,
) -> Result<(String, CheckReport), Box<Outcome>> {
    sh.reporter.event(variant, Event::Checking);
    let expect = check::Expectation::of(sh.family, variant).expect("a known variant");
    let mut report = check::check_image(
        sh.engine,
        reference,
        &expect,
        sh.opts.check_timeout,
        check::Healthcheck::Image,
    )
    .map_err(|e| Box::new(failed(Stage::Check, e, Some(log_path.to_path_buf()))))?;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
    {
        let _ = writeln!(
            f,
            "# check\n{}",
            check::table(std::slice::from_ref(&report))
        );
    }
    if !report.passed {
        return Err(Box::new(Outcome::Failed {
            stage: Stage::Check,
            reason: report.reason(),
            log: Some(log_path.to_path_buf()),
            check: Some(report),
        }));
    }
    let id = match check::record_pass(sh.family, sh.engine, reference, &report) {
        Ok(Some(id)) => id,
        Ok(None) => {
            return Err(Box::new(failed(
                Stage::Check,
                format!("{reference} is not a local tag of this family: cannot record the pass"),
                Some(log_path.to_path_buf()),
            )));
        }
        Err(e) => {
            return Err(Box::new(failed(
                Stage::Check,
                e,
                Some(log_path.to_path_buf()),
            )));
        }
    };
    report.recorded_id = Some(id.clone());
    Ok((id, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composed_hash_is_its_own_inputs_and_its_members_images() {
        let member = |m: &str| crate::compose::Member {
            fragment: m.into(),
            variant: m.into(),
        };
        let c = crate::family::Composition {
            recipe: crate::compose::Recipe {
                variant: "ab".into(),
                parent: "root".into(),
                members: vec![member("a"), member("b")],
            },
            dockerfile: String::new(),
        };
        let ids = |a: &str, b: &str| vec![("b".to_string(), b.to_string()), ("a".into(), a.into())];
        let hash = composed_inputs("sha256:own", &c, &ids("sha256:1", "sha256:2")).unwrap();
        assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
        assert_ne!(
            hash, "sha256:own",
            "a composed image is never the Dockerfile-built one"
        );
        // The members are taken in the recipe's order, not the run's.
        let mut swapped = ids("sha256:1", "sha256:2");
        swapped.reverse();
        assert_eq!(composed_inputs("sha256:own", &c, &swapped).unwrap(), hash);
        for other in [
            composed_inputs("sha256:other", &c, &ids("sha256:1", "sha256:2")),
            composed_inputs("sha256:own", &c, &ids("sha256:1", "sha256:3")),
        ] {
            assert_ne!(other.unwrap(), hash);
        }
        assert_eq!(
            composed_inputs("sha256:own", &c, &ids("sha256:1", "sha256:2")[..1]).unwrap_err(),
            "its member a has no image in this run (build it first)"
        );
    }
}
