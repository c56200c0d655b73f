//! The parallel graph run: parents before children, independent variants in
//! parallel up to `--jobs`, a failed parent's children not attempted, and a
//! worker's panic reported as that variant's failure.

use super::progress::{Event, Reporter};
use super::variant::{Shared, build_one, failed};
use super::{BuildError, Family, Options, Outcome, Stage, Summary, VariantResult};
use crate::engine::{Engine, EngineError};
use crate::name::Platform;
use crate::registry::Reference;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::time::Instant;

/// Makes sure the pinned upstream is local, by its digest (a local image
/// under the same tag is never used: it may be stale, or another build's),
/// pulling it by digest if not, and returns its ID, which goes into the
/// inputs of every root variant. From an index, the image for `platform`
/// (the engine's own when `None`): the engine keeps one image per
/// reference, so one that is there for another platform is pulled again.
pub(crate) fn resolve_upstream(
    engine: &dyn Engine,
    pinned: &Reference,
    platform: Option<&Platform>,
) -> Result<String, BuildError> {
    let by_digest = match pinned.digest() {
        Some(d) => pinned.by_digest(d.clone()).to_string(),
        None => unreachable!("an upstream is always pinned by digest"),
    };
    let err = |source| BuildError::Upstream {
        reference: pinned.to_string(),
        source,
    };
    let want = match platform {
        Some(p) => p.clone(),
        None => engine.platform().map_err(err)?,
    };
    let fits = |info: &crate::engine::ImageInfo| info.platform.as_ref().is_none_or(|p| *p == want);
    let there = engine.inspect(&by_digest).map_err(err)?;
    if let Some(info) = &there
        && fits(info)
    {
        return Ok(info.id.clone());
    }
    engine
        .pull(&by_digest, platform)
        .map_err(|e| match (&there, e) {
            // Docker keeps one image per digest reference and will not move it.
            (Some(info), EngineError::Process(p))
                if p.to_string().contains("Cannot overwrite digest") =>
            {
                err(EngineError::Parse {
                    command: format!("pull {by_digest}"),
                    detail: format!(
                        "the engine holds {by_digest} as its {} image and keeps one image per \
                     reference; `docker rmi {by_digest}` drops that reference",
                        platform_or_unknown(info)
                    ),
                })
            }
            (_, e) => err(e),
        })?;
    match engine.inspect(&by_digest).map_err(err)? {
        Some(info) if fits(&info) => Ok(info.id),
        Some(info) => Err(err(EngineError::Parse {
            command: format!("pull {by_digest}"),
            detail: format!(
                "the engine pulled it for {}, not {want}",
                platform_or_unknown(&info)
            ),
        })),
        None => Err(err(EngineError::Parse {
            command: format!("pull {by_digest}"),
            detail: "the image is still missing after a successful pull".into(),
        })),
    }
}

/// An image's platform for a message (the engine may not say).
fn platform_or_unknown(info: &crate::engine::ImageInfo) -> String {
    info.platform
        .as_ref()
        .map_or_else(|| "unknown".to_string(), ToString::to_string)
}

/// Builds (and checks) the selected variants. Failures of single variants are
/// reported in the summary; an `Err` means nothing could be attempted.
pub(crate) fn run(
    family: &Family,
    targets: &[String],
    engine: &dyn Engine,
    opts: &Options,
    reporter: &dyn Reporter,
) -> Result<Summary, BuildError> {
    let started = Instant::now();
    let (selected, shared) = prepare(family, targets, engine, opts, reporter)?;
    for v in &selected {
        reporter.event(v, Event::Queued);
    }
    let mut outcomes = schedule(&shared, &selected);
    reporter.finish();

    Ok(Summary {
        engine: engine.describe(),
        platform: shared.platform.clone(),
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

/// Everything checked and resolved before the first build starts: the
/// variants selected (those built for the platform), and what their builds
/// share.
fn prepare<'a>(
    family: &'a Family,
    targets: &[String],
    engine: &'a dyn Engine,
    opts: &'a Options,
    reporter: &'a dyn Reporter,
) -> Result<(Vec<String>, Shared<'a>), BuildError> {
    // A composed variant's members are built (or reused) first, named or not.
    let mut selected = family.select_composing(targets, opts.compose)?;
    let (native, platform) = target_platform(family, engine, opts)?;
    // A variant that narrows its platforms is not built for the others (nor
    // are its children, which inherit them).
    selected.retain(|v| {
        let ps = &family.variants[v].platforms;
        ps.is_empty() || ps.contains(&platform)
    });
    // Another platform than the engine's own: built and checked under
    // emulation, which must work before anything starts.
    let foreign = (platform != native).then(|| platform.clone());
    if let Some(path) = &opts.ca_bundle {
        if path
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
        {
            return Err(BuildError::CaBundlePath { path: path.clone() });
        }
        std::fs::File::open(path).map_err(|source| BuildError::CaBundle {
            path: path.clone(),
            source,
        })?;
    }
    // The upstream is always the pinned digest; its name and digest label
    // every image (children inherit them from the root).
    let pinned = family.upstream.pinned()?;
    let needs_upstream = selected.iter().any(|v| family.variants[v].parent.is_none());
    let (upstream, upstream_id) = root_upstream(
        engine,
        opts,
        &pinned,
        &native,
        foreign.as_ref(),
        needs_upstream,
    )?;
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
        platform,
        foreign,
        upstream: upstream.to_string(),
        base_labels: super::variant::base_labels(&pinned),
        upstream_id,
        created: crate::timestamp::rfc3339(opts.source_date_epoch),
        forced,
        builds: Default::default(),
    };
    Ok((selected, shared))
}

/// The engine's own platform and the one the build is for (`--platform`,
/// else the engine's), which must be one of the family's.
fn target_platform(
    family: &Family,
    engine: &dyn Engine,
    opts: &Options,
) -> Result<(Platform, Platform), BuildError> {
    let native = engine.platform()?;
    let platform = opts.platform.clone().unwrap_or_else(|| native.clone());
    if !family.platforms.is_empty() && !family.platforms.contains(&platform) {
        let declared = family
            .platforms
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let platform = platform.to_string();
        return Err(match &opts.platform {
            Some(_) => BuildError::UnknownPlatform { platform, declared },
            None => BuildError::Platform {
                engine: platform,
                declared,
            },
        });
    }
    Ok((native, platform))
}

/// What root variants are built FROM, and its image ID when one is built
/// (or the platform is `foreign`): the pinned reference, or for another
/// platform its image there (see `Options::upstream_for_platform`), which
/// the engine must be able to run.
fn root_upstream(
    engine: &dyn Engine,
    opts: &Options,
    pinned: &Reference,
    native: &Platform,
    foreign: Option<&Platform>,
    needs_upstream: bool,
) -> Result<(Reference, Option<String>), BuildError> {
    let upstream = match (foreign, &opts.upstream_for_platform) {
        (None, _) => pinned.clone(),
        (Some(_), Some(child)) => child.clone(),
        (Some(p), None) => {
            return Err(BuildError::NoPlatformUpstream {
                platform: p.to_string(),
            });
        }
    };
    let upstream_id = if needs_upstream || foreign.is_some() {
        Some(resolve_upstream(engine, &upstream, foreign)?)
    } else {
        None
    };
    if let Some(p) = foreign {
        // `upstream` is the platform's image by its digest here.
        engine
            .runs_on(&upstream.to_string(), p)
            .map_err(|detail| BuildError::Emulation {
                platform: p.to_string(),
                native: native.to_string(),
                detail,
            })?;
    }
    Ok((upstream, upstream_id))
}

/// Runs the builds of `selected`, each on its own thread: parents before
/// children, at most `--jobs` at once, a failed parent's children not
/// attempted. Returns every variant's outcome.
fn schedule(shared: &Shared, selected: &[String]) -> BTreeMap<String, Outcome> {
    let (family, reporter) = (shared.family, shared.reporter);
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut running: BTreeSet<String> = BTreeSet::new();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(String, Outcome)>();
        loop {
            for v in selected {
                if outcomes.contains_key(v) || running.contains(v) {
                    continue;
                }
                let parent = family.variants[v].parent.as_ref();
                let members: Vec<&String> = shared
                    .composition(v)
                    .map(|c| c.recipe.members.iter().map(|m| &m.variant).collect())
                    .unwrap_or_default();
                let failed_need = parent
                    .map(|p| (p, "parent"))
                    .into_iter()
                    .chain(members.iter().map(|m| (*m, "member")))
                    .find(|(n, _)| outcomes.get(*n).is_some_and(Outcome::is_failure));
                if let Some((n, what)) = failed_need {
                    let reason = format!("its {what} {n} failed");
                    reporter.event(v, Event::NotAttempted(reason.clone()));
                    outcomes.insert(v.clone(), Outcome::NotAttempted { reason });
                    continue;
                }
                let parent_outcome = parent.and_then(|p| outcomes.get(p));
                let ready = (parent.is_none() || parent_outcome.is_some())
                    && members.iter().all(|m| outcomes.contains_key(*m));
                if !ready || running.len() >= shared.opts.jobs.max(1) {
                    continue;
                }
                let from = parent_outcome
                    .and_then(Outcome::image)
                    .map(|(r, id)| (r.to_string(), id.to_string()));
                let members: Vec<(String, String)> = members
                    .iter()
                    .filter_map(|m| {
                        let (_, id) = outcomes.get(*m)?.image()?;
                        Some((m.to_string(), id.to_string()))
                    })
                    .collect();
                running.insert(v.clone());
                let tx = tx.clone();
                let v = v.clone();
                scope.spawn(move || {
                    let outcome = build_reporting_panics(shared, &v, from, &members);
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
    outcomes
}

/// [`build_one`], with a panic as the variant's failure: a worker must
/// still report, or the scheduler would wait for it forever.
fn build_reporting_panics(
    shared: &Shared,
    v: &str,
    from: Option<(String, String)>,
    members: &[(String, String)],
) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        build_one(shared, v, from, members)
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
    })
}

#[cfg(test)]
mod tests_support {
    pub(super) use super::tests::{Quiet, fake_family, options, results, upstream_engine};
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake::FakeEngine;
    use crate::family::VariantPlan;
    use crate::labels::INPUTS as LABEL_INPUTS;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    pub(super) struct Quiet;
    impl Reporter for Quiet {
        fn event(&self, _: &str, _: Event) {}
    }

    /// base -> (a, b, c), and solo; every variant's Dockerfile on disk.
    pub(super) fn fake_family(root: &Path) -> Family {
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
            order: ["base", "solo", "a", "b", "c"].map(String::from).to_vec(),
            variants,
            ..Default::default()
        }
    }

    pub(super) fn options(root: &Path, jobs: usize) -> Options {
        Options {
            jobs,
            no_cache: false,
            check: false,
            ca_bundle: None,
            log_dir: root.join("logs"),
            check_timeout: Duration::from_secs(5),
            revision: "test".into(),
            source_date_epoch: 1_700_000_000,
            platform: None,
            upstream_for_platform: None,
            normalize: false,
            compose: false,
        }
    }

    pub(super) fn upstream_engine(fail: &[&str]) -> FakeEngine {
        let engine = FakeEngine {
            fail: fail.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let pinned = format!("docker.io/library/up@sha256:{}", "0".repeat(64));
        engine.images.lock().unwrap().insert(
            pinned.clone(),
            crate::engine::ImageInfo {
                id: "sha256:up".into(),
                size: 1,
                labels: BTreeMap::new(),
                healthcheck: None,
                user: String::new(),
                env: Vec::new(),
                layers: vec![],
                repo_tags: vec!["up:latest".into()],
                repo_digests: vec![pinned],
                platform: Some("linux/amd64".parse().unwrap()),
            },
        );
        engine
    }

    pub(super) fn results(s: &Summary) -> BTreeMap<&str, &'static str> {
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
        // The two roots (base, solo) are held in the engine until both run:
        // two at once is what the scheduler did, not how long builds took.
        engine.gate.close();
        let (summary, held) = std::thread::scope(|scope| {
            let build = scope.spawn(|| run(&family, &[], &engine, &options(dir.path(), 2), &Quiet));
            let held = engine.gate.wait_until_held(2, Duration::from_secs(30));
            engine.gate.open();
            (build.join().unwrap().unwrap(), held)
        });
        assert_eq!(held, 2, "--jobs 2 runs the two roots at once");
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
        // Every image names the pinned upstream and its digest; `created`
        // is SOURCE_DATE_EPOCH, not the clock.
        let zeros = "0".repeat(64);
        assert_eq!(
            a.labels[crate::labels::OCI_BASE_NAME],
            "docker.io/library/up:latest"
        );
        assert_eq!(
            a.labels[crate::labels::OCI_BASE_DIGEST],
            format!("sha256:{zeros}")
        );
        assert_eq!(
            a.labels["org.opencontainers.image.created"],
            "2023-11-14T22:13:20Z"
        );

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

    /// The bundle's path is the `src` of a `--secret=id=…,src=…` list: a
    /// comma in it would start another field (`,src=/root/.docker/config.json`
    /// makes that the secret for Docker), so such a path is refused before
    /// anything is built.
    #[test]
    fn a_ca_bundle_path_that_would_split_the_secret_value_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let family = fake_family(dir.path());
        let engine = upstream_engine(&[]);
        for name in ["ca,src=x.pem", "ca\".pem", "ca\n.pem"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "").unwrap();
            let mut opts = options(dir.path(), 1);
            opts.ca_bundle = Some(path.clone());
            let err = run(&family, &[], &engine, &opts, &Quiet).unwrap_err();
            assert!(
                matches!(&err, BuildError::CaBundlePath { path: p } if *p == path),
                "{err}"
            );
        }
        assert!(engine.built.lock().unwrap().is_empty());
    }

    #[test]
    fn a_stale_local_tag_of_the_upstream_is_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let family = fake_family(dir.path());
        // Only the tag is local, pointing at some other image; the pinned
        // digest is not, and cannot be pulled (the fake engine has no registry).
        let engine = FakeEngine::default();
        let stale = upstream_engine(&[])
            .images
            .lock()
            .unwrap()
            .values()
            .next()
            .cloned();
        engine
            .images
            .lock()
            .unwrap()
            .insert("up:latest".into(), stale.unwrap());
        let err = run(&family, &[], &engine, &options(dir.path(), 1), &Quiet).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("up:latest@sha256:0000") && msg.contains("cannot be pulled by its digest"),
            "{msg}"
        );
        assert!(engine.built.lock().unwrap().is_empty());
    }

    #[test]
    fn another_platform_builds_under_its_own_tags_and_inputs_and_an_undeclared_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut family = fake_family(dir.path());
        family.platforms = vec![
            "linux/amd64".parse().unwrap(),
            "linux/arm64".parse().unwrap(),
        ];
        let engine = upstream_engine(&[]);
        // An upstream the engine does not say the platform of fits any.
        for info in engine.images.lock().unwrap().values_mut() {
            info.platform = None;
        }
        let mut arm = options(dir.path(), 2);
        // As `--platform linux/arm64/v8` reads: normalised there.
        arm.platform = Some(Platform::parse_normalized("linux/arm64/v8").unwrap());
        let err = run(&family, &[], &engine, &arm, &Quiet).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("a build for linux/arm64 needs the upstream's image"),
            "{err}"
        );
        arm.upstream_for_platform = Some(family.upstream.pinned().unwrap());
        let summary = run(&family, &[], &engine, &arm, &Quiet).unwrap();
        assert_eq!(summary.platform.to_string(), "linux/arm64");
        assert!(results(&summary).values().all(|r| *r == "built"));
        {
            let images = engine.images.lock().unwrap();
            assert_eq!(
                images["fake/sandbox:a-arm64"].platform,
                Some(summary.platform.clone())
            );
            assert!(
                !images.contains_key("fake/sandbox:a"),
                "the host's tag is not taken"
            );
        }
        // The host's build: other inputs (the platform is hashed), so built
        // again, under the plain tags; the arm64 images stay.
        let host = run(&family, &[], &engine, &options(dir.path(), 2), &Quiet).unwrap();
        assert!(results(&host).values().all(|r| *r == "built"));
        let images = engine.images.lock().unwrap();
        assert_eq!(
            images["fake/sandbox:a"].platform,
            Some("linux/amd64".parse().unwrap())
        );
        assert_ne!(
            images["fake/sandbox:a"].labels[LABEL_INPUTS],
            images["fake/sandbox:a-arm64"].labels[LABEL_INPUTS]
        );
        drop(images);

        // A variant narrowed to amd64 (and so its children) is not built for arm64.
        let mut narrowed = family.clone();
        narrowed.variants.get_mut("a").unwrap().platforms = vec!["linux/amd64".parse().unwrap()];
        let arm_only = run(&narrowed, &[], &engine, &arm, &Quiet).unwrap();
        assert!(
            !results(&arm_only).contains_key("a"),
            "{:?}",
            results(&arm_only)
        );
        assert!(results(&arm_only).contains_key("b"));

        let mut other = options(dir.path(), 2);
        other.platform = Some("linux/s390x".parse().unwrap());
        let err = run(&family, &[], &engine, &other, &Quiet).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--platform linux/s390x is not one of the family's platforms (linux/amd64, \
             linux/arm64); add it to `platforms` in images.toml"
        );
    }

    #[test]
    fn an_engine_platform_outside_the_family_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut family = fake_family(dir.path());
        family.platforms = vec!["linux/arm64".parse().unwrap()];
        let engine = upstream_engine(&[]);
        let err = run(&family, &[], &engine, &options(dir.path(), 1), &Quiet).unwrap_err();
        assert!(
            err.to_string().contains(
                "builds for linux/amd64, which is not one of the family's platforms (linux/arm64)"
            ),
            "{err}"
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
}

#[cfg(test)]
mod compose_tests {
    use super::tests_support::*;
    use super::*;

    /// `c` as the union of `a` and `b` (each on `base`).
    fn composed_family(root: &std::path::Path) -> Family {
        let mut family = fake_family(root);
        let member = |m: &str| crate::compose::Member {
            fragment: m.into(),
            variant: m.into(),
        };
        family.variants.get_mut("c").unwrap().composition = Some(crate::family::Composition {
            recipe: crate::compose::Recipe {
                variant: "c".into(),
                parent: "base".into(),
                members: vec![member("a"), member("b")],
            },
            dockerfile: "FROM x\n".into(),
        });
        family
    }

    #[test]
    fn a_composed_variant_brings_its_members_and_waits_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let family = composed_family(dir.path());
        let engine = upstream_engine(&["a"]);
        let mut opts = options(dir.path(), 4);
        let only_c = ["c".to_string()];
        // Built from its Dockerfile, `c` needs its parent only.
        let summary = run(&family, &only_c, &engine, &opts, &Quiet).unwrap();
        assert_eq!(
            results(&summary),
            BTreeMap::from([("base", "built"), ("c", "built")])
        );
        opts.compose = true;
        let summary = run(&family, &only_c, &engine, &opts, &Quiet).unwrap();
        assert_eq!(
            results(&summary),
            BTreeMap::from([
                ("base", "skipped"),
                ("a", "failed"),
                ("b", "built"),
                ("c", "not-attempted"),
            ])
        );
        let c = summary.results.iter().find(|r| r.variant == "c").unwrap();
        let Outcome::NotAttempted { reason } = &c.outcome else {
            panic!("{:?}", c.outcome);
        };
        assert_eq!(reason, "its member a failed");
    }
}
