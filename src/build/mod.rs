//! The build graph: parents before children, independent variants in
//! parallel (bounded), unchanged inputs skipped without calling the engine's
//! build, every built image checked before its children start.

pub mod inputs;
pub mod progress;

use crate::check::{self, CheckError, CheckReport, Expectation, LABEL_INPUTS, LABEL_VARIANT};
use crate::engine::{BuildRequest, Engine, EngineError};
use crate::manifest::{Manifest, Settings};
use crate::process::Cmd;
use crate::render::Rendered;
use inputs::HashMeta;
use progress::{Event, Reporter, StepTracker};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The BuildKit secret id the rendered Dockerfiles mount the CA bundle from.
pub const CA_SECRET_ID: &str = "ca_bundle";
/// Lines of a failed build's log repeated in the failure report.
const FAILURE_TAIL_LINES: usize = 15;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("unknown variant `{variant}` (images.toml defines: {known})")]
    UnknownVariant { variant: String, known: String },
    #[error(
        "{path} (used by {variant}) differs from what images.toml and templates/ render; \
         run `sunaba-images render` and commit the result"
    )]
    Stale { path: PathBuf, variant: String },
    #[error("cannot read {path}, which the build of {variant} needs: {source}")]
    ReadInput {
        path: PathBuf,
        variant: String,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} cannot be read: {source}")]
    CaBundle {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the upstream image {reference} is not available locally and cannot be pulled: {source}"
    )]
    Upstream {
        reference: String,
        source: EngineError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What the build of one variant needs, from images.toml and the render.
#[derive(Debug, Clone, Default)]
pub struct VariantPlan {
    pub name: String,
    pub parent: Option<String>,
    /// Repo-relative rendered Dockerfile.
    pub dockerfile: PathBuf,
    /// Every repo-relative file the build reads from its context.
    pub context_files: Vec<PathBuf>,
    /// `BASE_IMAGE` or `PARENT_IMAGE`.
    pub from_arg: String,
    /// Fragment build arguments with their defaults.
    pub build_args: BTreeMap<String, String>,
    pub owed_tools: Vec<String>,
    pub size_budget: u64,
}

/// The image family as the build sees it.
#[derive(Debug, Clone, Default)]
pub struct Family {
    /// Directory of images.toml (fragment paths are relative to it).
    pub root: PathBuf,
    /// Local repository of the built tags (the profile's `repository`).
    pub repository: String,
    /// FROM image of variants without a parent (the profile's `upstream`).
    pub upstream: String,
    pub source: String,
    /// Parents first.
    pub order: Vec<String>,
    pub variants: BTreeMap<String, VariantPlan>,
    /// Rendered files (repo-relative path -> content).
    pub generated: BTreeMap<PathBuf, String>,
}

impl Family {
    /// The family as the build sees it: the manifest, its render and the
    /// settings of the active profile.
    pub fn new(manifest: &Manifest, rendered: &Rendered, settings: &Settings) -> Family {
        Family {
            root: manifest.root.clone(),
            repository: settings.repository.clone(),
            upstream: settings.upstream.clone(),
            source: manifest.source.clone().unwrap_or_default(),
            order: manifest.build_order(),
            variants: rendered
                .variants
                .iter()
                .map(|(name, r)| {
                    let v = &manifest.variants[name];
                    (
                        name.clone(),
                        VariantPlan {
                            name: name.clone(),
                            parent: v.parent.clone(),
                            dockerfile: r.dockerfile.clone(),
                            context_files: r.context_files.clone(),
                            from_arg: r.from_arg.to_string(),
                            build_args: r.build_args.clone(),
                            owed_tools: manifest.owed_tools(name),
                            size_budget: v.size_budget,
                        },
                    )
                })
                .collect(),
            generated: rendered.files.clone(),
        }
    }

    /// The targets and their ancestors, parents first; all variants when
    /// `targets` is empty.
    pub fn select(&self, targets: &[String]) -> Result<Vec<String>, BuildError> {
        if targets.is_empty() {
            return Ok(self.order.clone());
        }
        let mut wanted = BTreeSet::new();
        for t in targets {
            let mut cur = Some(t.clone());
            while let Some(v) = cur {
                let plan = self
                    .variants
                    .get(&v)
                    .ok_or_else(|| BuildError::UnknownVariant {
                        variant: v.clone(),
                        known: self.order.join(", "),
                    })?;
                wanted.insert(v.clone());
                cur = plan.parent.clone();
            }
        }
        Ok(self
            .order
            .iter()
            .filter(|v| wanted.contains(*v))
            .cloned()
            .collect())
    }

    /// The tag that names one exact set of inputs; children are built FROM it.
    pub fn inputs_tag(&self, variant: &str, inputs: &str) -> String {
        let hex = inputs.strip_prefix("sha256:").unwrap_or(inputs);
        format!(
            "{}:{variant}-inputs-{}",
            self.repository,
            &hex[..12.min(hex.len())]
        )
    }

    /// The convenience tag of the latest checked build of a variant.
    pub fn variant_tag(&self, variant: &str) -> String {
        format!("{}:{variant}", self.repository)
    }

    /// Records a passing check on the image (unless it already carries the
    /// same record) and moves this variant's tags — the reference checked,
    /// the variant tag and the inputs tag, where they point at the checked
    /// image — to the labelled image. Tags of other repositories that share
    /// the image stay put. Returns the labelled image's ID, or `None` when
    /// `reference` is not a local tag of this family: BuildKit cannot build
    /// FROM a bare image ID, so there is nothing to record on.
    pub fn record_pass(
        &self,
        engine: &dyn Engine,
        reference: &str,
        report: &CheckReport,
    ) -> Result<Option<String>, CheckError> {
        let info = engine
            .inspect(&report.image_id)?
            .ok_or_else(|| CheckError::NoImage {
                reference: report.image.clone(),
                variant: report.variant.clone(),
            })?;
        if check::already_recorded(&info, report) {
            return Ok(Some(info.id));
        }
        let mut tags = vec![reference.to_string(), self.variant_tag(&report.variant)];
        if let Some(inputs) = &report.inputs {
            tags.push(self.inputs_tag(&report.variant, inputs));
        }
        let mut seen = BTreeSet::new();
        tags.retain(|t| seen.insert(t.clone()) && info.repo_tags.contains(t));
        let Some(from) = tags.first() else {
            return Ok(None);
        };
        check::record(engine, report, from, &tags, &now_rfc3339()).map(Some)
    }

    pub fn expectation(&self, variant: &str) -> Option<Expectation> {
        self.variants.get(variant).map(|p| Expectation {
            variant: variant.to_string(),
            owed_tools: p.owed_tools.clone(),
            size_budget: p.size_budget,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    pub no_cache: bool,
    pub check: bool,
    pub ca_bundle: Option<PathBuf>,
    pub log_dir: PathBuf,
    pub check_timeout: Duration,
    /// `org.opencontainers.image.revision`.
    pub revision: String,
}

/// Where in one variant's pipeline a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Collecting, hashing or staging the inputs; the log; the engine's view.
    Prepare,
    /// The engine's build.
    Build,
    /// Moving a tag onto an existing image.
    Tag,
    /// The image was built but failed (or could not run) its check.
    Check,
    /// A bug: the worker panicked.
    Internal,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Prepare => "prepare",
            Stage::Build => "build",
            Stage::Tag => "tag",
            Stage::Check => "check",
            Stage::Internal => "internal",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Outcome {
    Built {
        image_id: String,
        reference: String,
        inputs: String,
        build_seconds: f64,
        check: Option<CheckReport>,
    },
    Skipped {
        image_id: String,
        reference: String,
        inputs: String,
        note: String,
        check: Option<CheckReport>,
    },
    Failed {
        stage: Stage,
        reason: String,
        log: Option<PathBuf>,
        check: Option<CheckReport>,
    },
    NotAttempted {
        reason: String,
    },
}

impl Outcome {
    fn image(&self) -> Option<(&str, &str)> {
        match self {
            Outcome::Built {
                image_id,
                reference,
                ..
            }
            | Outcome::Skipped {
                image_id,
                reference,
                ..
            } => Some((reference, image_id)),
            _ => None,
        }
    }
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed { .. } | Outcome::NotAttempted { .. })
    }
    pub fn check(&self) -> Option<&CheckReport> {
        match self {
            Outcome::Built { check, .. }
            | Outcome::Skipped { check, .. }
            | Outcome::Failed { check, .. } => check.as_ref(),
            Outcome::NotAttempted { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub variant: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub engine: String,
    pub platform: String,
    pub results: Vec<VariantResult>,
    pub wall_seconds: f64,
    /// Image builds the engine was asked to run (0 for a no-op build).
    pub engine_builds: usize,
}

impl Summary {
    /// A variant failed before or outside its check (an operational failure,
    /// not a gate finding).
    pub fn build_failed(&self) -> bool {
        self.results
            .iter()
            .any(|r| matches!(&r.outcome, Outcome::Failed { stage, .. } if *stage != Stage::Check))
    }

    /// Some variant did not end built or skipped.
    pub fn any_failed(&self) -> bool {
        self.results.iter().any(|r| r.outcome.is_failure())
    }
}

/// `org.opencontainers.image.revision`: HEAD, `-dirty` with local changes.
pub fn git_revision(root: &Path) -> String {
    let head = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "HEAD"])
        .run();
    match head {
        Ok(out) => {
            let dirty = Cmd::new("git")
                .arg("-C")
                .arg(root)
                .args(["status", "--porcelain"])
                .run()
                .map(|o| !o.stdout.trim().is_empty())
                .unwrap_or(false);
            format!("{}{}", out.stdout.trim(), if dirty { "-dirty" } else { "" })
        }
        Err(_) => "unknown".to_string(),
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Makes sure the upstream image is local (pulling it if not) and returns
/// its ID, which goes into the inputs of every root variant.
fn resolve_upstream(engine: &dyn Engine, reference: &str) -> Result<String, BuildError> {
    let err = |source| BuildError::Upstream {
        reference: reference.to_string(),
        source,
    };
    if let Some(info) = engine.inspect(reference).map_err(err)? {
        return Ok(info.id);
    }
    engine.pull(reference).map_err(err)?;
    match engine.inspect(reference).map_err(err)? {
        Some(info) => Ok(info.id),
        None => Err(err(EngineError::Parse {
            command: format!("pull {reference}"),
            detail: "the image is still missing after a successful pull".into(),
        })),
    }
}

struct Shared<'a> {
    family: &'a Family,
    engine: &'a dyn Engine,
    opts: &'a Options,
    reporter: &'a dyn Reporter,
    platform: String,
    upstream_id: Option<String>,
    created: String,
    forced: BTreeSet<String>,
    builds: std::sync::atomic::AtomicUsize,
}

/// Builds (and checks) the selected variants. Failures of single variants are
/// reported in the summary; an `Err` means nothing could be attempted.
pub fn run(
    family: &Family,
    targets: &[String],
    engine: &dyn Engine,
    opts: &Options,
    reporter: &dyn Reporter,
) -> Result<Summary, BuildError> {
    let started = Instant::now();
    let selected = family.select(targets)?;
    let platform = engine.platform()?;
    if let Some(path) = &opts.ca_bundle {
        std::fs::File::open(path).map_err(|source| BuildError::CaBundle {
            path: path.clone(),
            source,
        })?;
    }
    let needs_upstream = selected.iter().any(|v| family.variants[v].parent.is_none());
    let upstream_id = if needs_upstream {
        Some(resolve_upstream(engine, &family.upstream)?)
    } else {
        None
    };
    std::fs::create_dir_all(&opts.log_dir).map_err(|source| BuildError::Io {
        context: format!("cannot create the log directory {}", opts.log_dir.display()),
        source,
    })?;
    // --no-cache forces the named variants (all, when none are named); their
    // unchanged ancestors are still reused.
    let forced: BTreeSet<String> = if !opts.no_cache {
        BTreeSet::new()
    } else if targets.is_empty() {
        selected.iter().cloned().collect()
    } else {
        targets.iter().cloned().collect()
    };
    let shared = Shared {
        family,
        engine,
        opts,
        reporter,
        platform: platform.clone(),
        upstream_id,
        created: now_rfc3339(),
        forced,
        builds: Default::default(),
    };
    for v in &selected {
        reporter.event(v, Event::Queued);
    }

    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut running: BTreeSet<String> = BTreeSet::new();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(String, Outcome)>();
        loop {
            for v in &selected {
                if outcomes.contains_key(v) || running.contains(v) {
                    continue;
                }
                let parent = family.variants[v].parent.as_ref();
                let parent_outcome = parent.and_then(|p| outcomes.get(p));
                if let (Some(p), Some(o)) = (parent, parent_outcome)
                    && o.is_failure()
                {
                    let reason = format!("its parent {p} failed");
                    reporter.event(v, Event::NotAttempted(reason.clone()));
                    outcomes.insert(v.clone(), Outcome::NotAttempted { reason });
                    continue;
                }
                let ready = parent.is_none() || parent_outcome.is_some();
                if !ready || running.len() >= opts.jobs.max(1) {
                    continue;
                }
                let from = parent_outcome
                    .and_then(Outcome::image)
                    .map(|(r, id)| (r.to_string(), id.to_string()));
                running.insert(v.clone());
                let tx = tx.clone();
                let shared = &shared;
                let v = v.clone();
                scope.spawn(move || {
                    // A panic must still report, or the scheduler would wait
                    // for this variant forever.
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        build_one(shared, &v, from)
                    }))
                    .unwrap_or_else(|panic| {
                        let what = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        failed(
                            Stage::Internal,
                            format!("the build of {v} panicked: {what}"),
                            None,
                        )
                    });
                    let _ = tx.send((v, outcome));
                });
            }
            if running.is_empty() {
                break;
            }
            let (v, outcome) = rx.recv().expect("a worker reports before it ends");
            running.remove(&v);
            outcomes.insert(v, outcome);
        }
    });
    reporter.finish();

    Ok(Summary {
        engine: engine.describe(),
        platform,
        results: selected
            .iter()
            .map(|v| VariantResult {
                variant: v.clone(),
                outcome: outcomes
                    .remove(v)
                    .expect("every selected variant has an outcome"),
            })
            .collect(),
        wall_seconds: started.elapsed().as_secs_f64(),
        engine_builds: shared.builds.load(std::sync::atomic::Ordering::SeqCst),
    })
}

/// Builds one variant whose parent (if any) is `from` = (reference, image ID).
fn build_one(sh: &Shared, variant: &str, from: Option<(String, String)>) -> Outcome {
    let reporter = sh.reporter;
    let outcome = build_one_inner(sh, variant, from);
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

fn failed(stage: Stage, reason: impl std::fmt::Display, log: Option<PathBuf>) -> Outcome {
    Outcome::Failed {
        stage,
        reason: reason.to_string(),
        log,
        check: None,
    }
}

fn build_one_inner(sh: &Shared, variant: &str, from: Option<(String, String)>) -> Outcome {
    let family = sh.family;
    let plan = &family.variants[variant];
    let files = match inputs::collect(&family.root, plan, &family.generated) {
        Ok(f) => f,
        Err(e) => return failed(Stage::Prepare, e, None),
    };
    let (from_ref, from_id) = match (&from, &sh.upstream_id) {
        (Some((r, id)), _) => (r.clone(), id.clone()),
        (None, Some(id)) => (family.upstream.clone(), id.clone()),
        (None, None) => unreachable!("the upstream is resolved when a root variant is selected"),
    };
    let mut build_args = plan.build_args.clone();
    build_args.insert(plan.from_arg.clone(), from_ref);
    let static_labels = BTreeMap::from([
        (
            "org.opencontainers.image.title".to_string(),
            format!("sunaba-{variant}"),
        ),
        (
            "org.opencontainers.image.source".to_string(),
            family.source.clone(),
        ),
        (LABEL_VARIANT.to_string(), variant.to_string()),
    ]);
    let inputs = inputs::inputs_hash(
        &HashMeta {
            platform: &sh.platform,
            dockerfile: &plan.dockerfile,
            build_args: &build_args,
            from_image_id: &from_id,
            static_labels: &static_labels,
        },
        &files,
    );
    let inputs_tag = family.inputs_tag(variant, &inputs);
    let variant_tag = family.variant_tag(variant);
    let tags = vec![inputs_tag.clone(), variant_tag.clone()];
    let log_path = sh.opts.log_dir.join(format!("{variant}.log"));

    let force = sh.forced.contains(variant);
    if !force {
        match sh.engine.inspect(&inputs_tag) {
            Err(e) => return failed(Stage::Prepare, e, None),
            Ok(Some(info)) if info.labels.get(LABEL_INPUTS) == Some(&inputs) => {
                return reuse(sh, variant, info, inputs, inputs_tag, &log_path);
            }
            Ok(_) => {}
        }
    }

    // Build.
    let mut log = match std::fs::File::create(&log_path) {
        // Line by line, so `tail -f` of a running build shows its progress.
        Ok(f) => std::io::LineWriter::new(f),
        Err(e) => {
            return failed(
                Stage::Prepare,
                format!("cannot create the log file {}: {e}", log_path.display()),
                None,
            );
        }
    };
    let work = match tempfile::Builder::new().prefix("sunaba-build-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            return failed(
                Stage::Prepare,
                format!("cannot create a staging directory: {e}"),
                None,
            );
        }
    };
    let context = work.path().join("context");
    if let Err(e) = inputs::stage(&context, &files) {
        return failed(
            Stage::Prepare,
            format!("cannot stage the build context: {e}"),
            None,
        );
    }
    let mut labels = static_labels;
    labels.insert(LABEL_INPUTS.to_string(), inputs.clone());
    labels.insert(
        "org.opencontainers.image.revision".to_string(),
        sh.opts.revision.clone(),
    );
    labels.insert(
        "org.opencontainers.image.created".to_string(),
        sh.created.clone(),
    );
    let req = BuildRequest {
        context: context.clone(),
        dockerfile: context.join(&plan.dockerfile),
        tags: tags.clone(),
        build_args,
        labels,
        secrets: sh
            .opts
            .ca_bundle
            .iter()
            .map(|p| (CA_SECRET_ID.to_string(), p.clone()))
            .collect(),
        no_cache: force,
        iidfile: work.path().join("iid"),
    };
    let _ = writeln!(log, "# {}", sh.engine.build_cmd(&req).display());
    let _ = writeln!(log, "# inputs {inputs}");
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
    let image_id = match result {
        Ok(id) => id,
        Err(EngineError::BuildFailed { .. }) => {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            return failed(
                Stage::Build,
                format!(
                    "{}\n--- last lines of {}:\n{}",
                    tracker.failure(),
                    log_path.display(),
                    crate::process::tail_lines(&text, FAILURE_TAIL_LINES)
                ),
                Some(log_path),
            );
        }
        Err(e) => return failed(Stage::Build, e, Some(log_path)),
    };

    if !sh.opts.check {
        return Outcome::Built {
            image_id,
            reference: inputs_tag,
            inputs,
            build_seconds,
            check: None,
        };
    }
    match check_and_record(sh, variant, &inputs_tag, &log_path) {
        Ok((id, report)) => Outcome::Built {
            image_id: id,
            reference: inputs_tag,
            inputs,
            build_seconds,
            check: Some(report),
        },
        Err(outcome) => *outcome,
    }
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
    let variant_tag = sh.family.variant_tag(variant);
    if !info.repo_tags.contains(&variant_tag)
        && let Err(e) = sh.engine.tag(&inputs_tag, &variant_tag)
    {
        return failed(Stage::Tag, e, None);
    }
    let checked = check::passing_record(&info).is_some();
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
            note: "inputs unchanged, checked now".into(),
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
    let expect = sh.family.expectation(variant).expect("a known variant");
    let mut report = check::check_image(sh.engine, reference, &expect, sh.opts.check_timeout)
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
    let id = match sh.family.record_pass(sh.engine, reference, &report) {
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

    fn family() -> Family {
        let plan = |name: &str, parent: Option<&str>| VariantPlan {
            name: name.into(),
            parent: parent.map(String::from),
            ..Default::default()
        };
        Family {
            repository: "127.0.0.1:5000/sunaba/sandbox".into(),
            order: ["base", "python", "go", "minimal"]
                .map(String::from)
                .to_vec(),
            variants: BTreeMap::from([
                ("base".into(), plan("base", None)),
                ("python".into(), plan("python", Some("base"))),
                ("go".into(), plan("go", Some("base"))),
                ("minimal".into(), plan("minimal", None)),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn selection_adds_ancestors_in_build_order() {
        let f = family();
        assert_eq!(f.select(&[]).unwrap(), f.order);
        assert_eq!(f.select(&["go".into()]).unwrap(), ["base", "go"]);
        assert_eq!(
            f.select(&["minimal".into(), "python".into()]).unwrap(),
            ["base", "python", "minimal"]
        );
        let err = f.select(&["rust".into()]).unwrap_err().to_string();
        assert!(
            err.contains("`rust`") && err.contains("base, python"),
            "{err}"
        );
    }

    /// An engine that builds nothing: it records calls, enforces nothing,
    /// and remembers "images" by tag.
    #[derive(Default)]
    struct FakeEngine {
        images: std::sync::Mutex<BTreeMap<String, crate::engine::ImageInfo>>,
        running: std::sync::atomic::AtomicUsize,
        max_running: std::sync::atomic::AtomicUsize,
        built: std::sync::Mutex<Vec<String>>,
        fail: BTreeSet<String>,
    }

    impl Engine for FakeEngine {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn program(&self) -> &Path {
            Path::new("/bin/false")
        }
        fn log_format(&self) -> crate::engine::LogFormat {
            crate::engine::LogFormat::BuildKit
        }
        fn platform(&self) -> Result<String, EngineError> {
            Ok("linux/amd64".into())
        }
        fn resources(&self) -> Result<crate::engine::Resources, EngineError> {
            Ok(crate::engine::Resources {
                memory_bytes: 8 << 30,
                cpus: 2,
                gpus: false,
            })
        }
        fn build_cmd(&self, _req: &BuildRequest) -> Cmd {
            Cmd::new("true")
        }
        fn build(
            &self,
            req: &BuildRequest,
            on_line: &mut dyn FnMut(&str),
        ) -> Result<String, EngineError> {
            use std::sync::atomic::Ordering::SeqCst;
            let variant = req.labels[LABEL_VARIANT].clone();
            let now = self.running.fetch_add(1, SeqCst) + 1;
            self.max_running.fetch_max(now, SeqCst);
            on_line("#5 [1/2] FROM x");
            std::thread::sleep(Duration::from_millis(60));
            self.running.fetch_sub(1, SeqCst);
            if self.fail.contains(&variant) {
                on_line("#6 [2/2] RUN sh /run/sunaba/install.sh");
                on_line("#6 ERROR: process did not complete successfully: exit code: 3");
                return Err(EngineError::BuildFailed {
                    command: "fake build".into(),
                    status: "exit status: 1".into(),
                });
            }
            let mut built = self.built.lock().unwrap();
            built.push(variant);
            let id = format!("sha256:{:064}", built.len());
            let info = crate::engine::ImageInfo {
                id: id.clone(),
                size: 1,
                labels: req.labels.clone(),
                healthcheck: None,
                layers: vec![],
                repo_tags: req.tags.clone(),
                repo_digests: vec![],
            };
            let mut images = self.images.lock().unwrap();
            for t in &req.tags {
                images.insert(t.clone(), info.clone());
            }
            Ok(id)
        }
        fn inspect(
            &self,
            reference: &str,
        ) -> Result<Option<crate::engine::ImageInfo>, EngineError> {
            Ok(self.images.lock().unwrap().get(reference).cloned())
        }
        fn tag(&self, source: &str, target: &str) -> Result<(), EngineError> {
            let mut images = self.images.lock().unwrap();
            let info = images[source].clone();
            images.insert(target.to_string(), info);
            Ok(())
        }
    }

    struct Quiet;
    impl Reporter for Quiet {
        fn event(&self, _: &str, _: Event) {}
    }

    /// base -> (a, b, c), and solo; every variant's Dockerfile on disk.
    fn fake_family(root: &Path) -> Family {
        let mut variants = BTreeMap::new();
        for (name, parent) in [
            ("base", None),
            ("a", Some("base")),
            ("b", Some("base")),
            ("c", Some("base")),
            ("solo", None),
        ] {
            let dockerfile = PathBuf::from(format!("docker/Dockerfile.{name}"));
            std::fs::create_dir_all(root.join("docker")).unwrap();
            std::fs::write(root.join(&dockerfile), format!("FROM x\n# {name}\n")).unwrap();
            variants.insert(
                name.to_string(),
                VariantPlan {
                    name: name.into(),
                    parent: parent.map(String::from),
                    dockerfile,
                    from_arg: if parent.is_some() {
                        "PARENT_IMAGE"
                    } else {
                        "BASE_IMAGE"
                    }
                    .into(),
                    ..Default::default()
                },
            );
        }
        Family {
            root: root.to_path_buf(),
            repository: "fake/sandbox".into(),
            upstream: "up:latest".into(),
            order: ["base", "solo", "a", "b", "c"].map(String::from).to_vec(),
            variants,
            ..Default::default()
        }
    }

    fn options(root: &Path, jobs: usize) -> Options {
        Options {
            jobs,
            no_cache: false,
            check: false,
            ca_bundle: None,
            log_dir: root.join("logs"),
            check_timeout: Duration::from_secs(5),
            revision: "test".into(),
        }
    }

    fn upstream_engine(fail: &[&str]) -> FakeEngine {
        let engine = FakeEngine {
            fail: fail.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        engine.images.lock().unwrap().insert(
            "up:latest".into(),
            crate::engine::ImageInfo {
                id: "sha256:up".into(),
                size: 1,
                labels: BTreeMap::new(),
                healthcheck: None,
                layers: vec![],
                repo_tags: vec!["up:latest".into()],
                repo_digests: vec![],
            },
        );
        engine
    }

    fn results(s: &Summary) -> BTreeMap<&str, &'static str> {
        s.results
            .iter()
            .map(|r| {
                let kind = match r.outcome {
                    Outcome::Built { .. } => "built",
                    Outcome::Skipped { .. } => "skipped",
                    Outcome::Failed { .. } => "failed",
                    Outcome::NotAttempted { .. } => "not-attempted",
                };
                (r.variant.as_str(), kind)
            })
            .collect()
    }

    #[test]
    fn jobs_bound_parents_first_then_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let family = fake_family(dir.path());
        let engine = upstream_engine(&[]);
        let summary = run(&family, &[], &engine, &options(dir.path(), 2), &Quiet).unwrap();
        assert!(results(&summary).values().all(|r| *r == "built"));
        assert_eq!(summary.engine_builds, 5);
        let max = engine.max_running.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(max, 2, "at most --jobs builds at once, and that many");
        let built = engine.built.lock().unwrap().clone();
        let pos = |v: &str| built.iter().position(|b| b == v).unwrap();
        for kid in ["a", "b", "c"] {
            assert!(pos("base") < pos(kid), "{built:?}");
        }
        // Children name the parent's inputs tag as their FROM.
        let a = engine.images.lock().unwrap()["fake/sandbox:a"].clone();
        assert!(a.labels[LABEL_INPUTS].starts_with("sha256:"));

        let again = run(&family, &[], &engine, &options(dir.path(), 2), &Quiet).unwrap();
        assert!(results(&again).values().all(|r| *r == "skipped"));
        assert_eq!(again.engine_builds, 0);

        // --no-cache of a named child rebuilds it alone.
        let mut forced = options(dir.path(), 2);
        forced.no_cache = true;
        let fourth = run(&family, &["c".into()], &engine, &forced, &Quiet).unwrap();
        assert_eq!(
            results(&fourth),
            BTreeMap::from([("base", "skipped"), ("c", "built")])
        );

        // A changed child rebuilds alone; its parent stays.
        std::fs::write(dir.path().join("docker/Dockerfile.b"), "FROM x\n# b2\n").unwrap();
        let third = run(
            &family,
            &["b".into()],
            &engine,
            &options(dir.path(), 2),
            &Quiet,
        )
        .unwrap();
        assert_eq!(
            results(&third),
            BTreeMap::from([("base", "skipped"), ("b", "built")])
        );
    }

    #[test]
    fn a_failed_parent_stops_its_children_only() {
        let dir = tempfile::tempdir().unwrap();
        let family = fake_family(dir.path());
        let engine = upstream_engine(&["base"]);
        let summary = run(&family, &[], &engine, &options(dir.path(), 4), &Quiet).unwrap();
        assert_eq!(
            results(&summary),
            BTreeMap::from([
                ("base", "failed"),
                ("solo", "built"),
                ("a", "not-attempted"),
                ("b", "not-attempted"),
                ("c", "not-attempted"),
            ])
        );
        let Outcome::Failed { reason, log, .. } = &summary.results[0].outcome else {
            panic!("base did not fail");
        };
        assert!(
            reason.starts_with("step [2/2] RUN sh /run/sunaba/install.sh failed"),
            "{reason}"
        );
        assert!(log.as_ref().unwrap().ends_with("logs/base.log"));
    }

    #[test]
    fn tags() {
        let f = family();
        assert_eq!(
            f.inputs_tag("go", "sha256:0123456789abcdef0123"),
            "127.0.0.1:5000/sunaba/sandbox:go-inputs-0123456789ab"
        );
        assert_eq!(f.variant_tag("go"), "127.0.0.1:5000/sunaba/sandbox:go");
    }
}
