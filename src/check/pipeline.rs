//! The whole of `check` as a library function: which images are checked
//! (`--image`, or the variants' tags of a platform), each image's check
//! with the smoke suites asked for, and the pass recorded on it. Commands
//! parse, call [`run`], and print the reports it returns.

use super::{CheckError, CheckReport, Healthcheck, check_image};
use crate::engine::{Engine, EngineError};
use crate::family::Family;
use crate::labels;
use crate::manifest::Manifest;
use crate::name::Unknown;
use std::time::Duration;

/// Why `check` could not check what it was asked to. An image that fails
/// its check is a report, not one of these.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    #[error("reaching the container engine")]
    Reach(#[source] EngineError),
    #[error("pulling {reference}")]
    Pull {
        reference: String,
        #[source]
        source: EngineError,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(
        "{reference} has no {} label: name the variant it should be checked as \
         (`check VARIANT --image {reference}`)",
        labels::VARIANT
    )]
    NoVariantLabel { reference: String },
    /// Names from the command line are known by now; this one came from
    /// the image's label (not a usage error: the image is wrong).
    #[error(
        "{reference} is labelled as variant `{variant}`, which images.toml does not \
         declare (declares: {declared}); name the variant to check it as"
    )]
    UnknownLabel {
        reference: String,
        variant: String,
        declared: String,
    },
    #[error("rendering the healthcheck of {variant} to check {reference} with")]
    Render {
        variant: String,
        reference: String,
        #[source]
        source: crate::render::RenderError,
    },
    #[error("recording the pass on {reference}")]
    Record {
        reference: String,
        #[source]
        source: Box<CheckError>,
    },
}

/// What `check` is asked for.
pub(crate) struct Request<'a> {
    /// Variants named on the command line (all when empty).
    pub variants: &'a [String],
    /// Check this image instead of the variants' own.
    pub image: Option<&'a str>,
    /// Check the variants' images of this platform.
    pub platform: Option<&'a crate::name::Platform>,
    /// Run only these smoke suites (a partial smoke is never recorded).
    pub suites: &'a [String],
    pub timeout: Duration,
    /// Record a pass on the image.
    pub record: bool,
}

/// The suites and variants `request` names, each one images.toml declares.
pub(crate) fn validate(manifest: &Manifest, request: &Request) -> Result<(), Unknown> {
    for suite in request.suites {
        Unknown::check(
            "smoke suite",
            suite,
            "images.toml [smoke]",
            manifest.smoke.keys().map(String::as_str),
        )?;
    }
    for variant in request.variants {
        manifest.variant(variant)?;
    }
    Ok(())
}

/// Checks each image `request` asks for, in build order; `note` hears of a
/// pass that could not be recorded. An image that cannot be checked is a
/// failed report, not an error.
pub(crate) fn run(
    manifest: &Manifest,
    family: &Family,
    engine: &dyn Engine,
    request: &Request,
    note: &mut dyn FnMut(String),
) -> Result<Vec<CheckReport>, PipelineError> {
    let targets = targets(manifest, family, engine, request)?;
    let mut reports = Vec::new();
    for (variant, reference) in &targets {
        let mut expect =
            super::Expectation::of(family, variant).ok_or_else(|| PipelineError::UnknownLabel {
                reference: reference.clone(),
                variant: variant.clone(),
                declared: family.order.join(", "),
            })?;
        if !request.suites.is_empty() {
            expect.smoke = expect.smoke.only(request.suites);
        }
        let info = engine.inspect(reference)?;
        let script = match (request.image, &info) {
            (Some(_), Some(info)) if !of_variant(info, variant) => {
                Some(rendered_healthcheck(manifest, variant, reference)?)
            }
            _ => None,
        };
        let healthcheck = script
            .as_deref()
            .map_or(Healthcheck::Image, Healthcheck::Rendered);
        // An image that cannot be checked (absent, no healthcheck, timed out)
        // is a failed check of that image, reported with the others.
        let mut report = match check_image(engine, reference, &expect, request.timeout, healthcheck)
        {
            Ok(r) => r,
            Err(e) => {
                let r =
                    CheckReport::unchecked(variant, reference, expect.size_budget, e.to_string());
                match &info {
                    Some(info) => r.of_image(info),
                    None => r,
                }
            }
        };
        if !request.suites.is_empty() {
            report.notes.push(format!(
                "only the smoke suite(s) {} ran: a partial smoke is not recorded",
                request.suites.join(", ")
            ));
        }
        if report.custom && request.record {
            report.notes.push(format!(
                "checked as a custom image: it would serve as {variant}{}; no pass is recorded \
                 on it (a check record is the family's, bound to its build inputs)",
                if report.passed {
                    ""
                } else {
                    " once its problems are fixed"
                }
            ));
        } else if report.passed && request.record && request.suites.is_empty() {
            report.recorded_id =
                super::record_pass(family, engine, reference, &report).map_err(|source| {
                    PipelineError::Record {
                        reference: reference.clone(),
                        source: Box::new(source),
                    }
                })?;
            if report.recorded_id.is_none() {
                note(format!(
                    "note: {reference} is not a local tag of this family, so the pass is not recorded on it"
                ));
            }
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Whether `info` is an image of this family's `variant` (labelled so, with
/// the HEALTHCHECK its render bakes in): checked as the family's, its own
/// HEALTHCHECK run and its budget held. Anything else given by `--image` is
/// a custom image.
fn of_variant(info: &crate::engine::ImageInfo, variant: &str) -> bool {
    let labelled = info.labels.get(labels::VARIANT).map(String::as_str) == Some(variant);
    let healthcheck = info
        .healthcheck
        .as_deref()
        .is_some_and(|t| !t.is_empty() && t[0] != "NONE");
    labelled && healthcheck
}

/// The healthcheck script the project renders for `variant` (in memory:
/// what images.toml says now, whatever is on disk).
fn rendered_healthcheck(
    manifest: &Manifest,
    variant: &str,
    reference: &str,
) -> Result<String, PipelineError> {
    let error = |source| PipelineError::Render {
        variant: variant.to_string(),
        reference: reference.to_string(),
        source,
    };
    let mut rendered = crate::render::render(manifest).map_err(error)?;
    let path = crate::render::healthcheck_path(variant);
    Ok(rendered
        .files
        .remove(&path)
        .expect("every declared variant renders a healthcheck"))
}

/// Each image to check, with the variant it is checked as: `--image` (its
/// variant named or from its label; pulled when absent), else the
/// variants' tags for the platform asked for.
fn targets(
    manifest: &Manifest,
    family: &Family,
    engine: &dyn Engine,
    request: &Request,
) -> Result<Vec<(String, String)>, PipelineError> {
    let native = engine.platform().map_err(PipelineError::Reach)?;
    Ok(match request.image {
        Some(reference) => {
            if engine.inspect(reference)?.is_none() {
                engine
                    .pull(reference, None)
                    .map_err(|source| PipelineError::Pull {
                        reference: reference.to_string(),
                        source,
                    })?;
            }
            let variant = match request.variants {
                [v] => v.clone(),
                _ => engine
                    .inspect(reference)?
                    .and_then(|i| i.labels.get(labels::VARIANT).cloned())
                    .ok_or_else(|| PipelineError::NoVariantLabel {
                        reference: reference.to_string(),
                    })?,
            };
            vec![(variant, reference.to_string())]
        }
        None => {
            let names = if request.variants.is_empty() {
                manifest.build_order()
            } else {
                request.variants.to_vec()
            };
            let foreign = request.platform.filter(|p| **p != native);
            names
                .into_iter()
                .map(|v| {
                    let r = family.platform_tag(&v, foreign);
                    (v, r)
                })
                .collect()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(variants: &'a [String], suites: &'a [String]) -> Request<'a> {
        Request {
            variants,
            image: None,
            platform: None,
            suites,
            timeout: Duration::from_secs(1),
            record: false,
        }
    }

    #[test]
    fn named_suites_and_variants_must_be_declared() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let manifest = Manifest::load(&root.join("images.toml")).unwrap();
        let (go, rust) = (vec!["go".to_string()], vec!["rust".to_string()]);
        assert!(validate(&manifest, &request(&go, &go)).is_ok());
        let suite = validate(&manifest, &request(&[], &rust)).unwrap_err();
        assert!(suite.to_string().contains("smoke suite"), "{suite}");
        let variant = validate(&manifest, &request(&rust, &[])).unwrap_err();
        assert!(variant.to_string().contains("variant"), "{variant}");
    }

    #[test]
    fn an_image_is_checked_as_its_labelled_variant_or_the_one_named() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let manifest = Manifest::load(&root.join("images.toml")).unwrap();
        let engine = crate::engine::fake::FakeEngine::default();
        let info = |labels: &[(&str, &str)]| crate::engine::ImageInfo {
            id: "sha256:1".into(),
            size: 1,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            healthcheck: None,
            user: String::new(),
            env: Vec::new(),
            layers: vec![],
            repo_tags: vec![],
            repo_digests: vec![],
            platform: Some("linux/amd64".parse().unwrap()),
        };
        let mut images = engine.images.lock().unwrap();
        images.insert("mine:1".into(), info(&[(labels::VARIANT, "go")]));
        images.insert("bare:1".into(), info(&[]));
        drop(images);
        let family = Family::default();
        let at = |image, variants: &[String]| {
            let request = Request {
                image: Some(image),
                ..request(variants, &[])
            };
            targets(&manifest, &family, &engine, &request)
        };
        let labelled = at("mine:1", &[]).unwrap();
        assert_eq!(labelled, [("go".to_string(), "mine:1".to_string())]);
        let named = at("bare:1", &["python".to_string()]).unwrap();
        assert_eq!(named, [("python".to_string(), "bare:1".to_string())]);
        let err = at("bare:1", &[]).unwrap_err().to_string();
        assert!(
            err.starts_with("bare:1 has no dev.sunaba.variant label"),
            "{err}"
        );
    }

    #[test]
    fn an_image_is_the_family_s_only_when_labelled_as_the_variant_with_a_healthcheck() {
        let info = |variant: Option<&str>, healthcheck: Option<&[&str]>| crate::engine::ImageInfo {
            id: "sha256:1".into(),
            size: 1,
            labels: variant
                .map(|v| (labels::VARIANT.to_string(), v.to_string()))
                .into_iter()
                .collect(),
            healthcheck: healthcheck.map(|t| t.iter().map(|s| s.to_string()).collect()),
            user: String::new(),
            env: Vec::new(),
            layers: vec![],
            repo_tags: vec![],
            repo_digests: vec![],
            platform: None,
        };
        let ours: &[&str] = &["CMD", "/bin/sh", "/usr/local/libexec/sunaba/healthcheck"];
        assert!(of_variant(&info(Some("python"), Some(ours)), "python"));
        // `full` checked as python, an unlabelled image, one without a
        // HEALTHCHECK or with it disabled: custom images.
        assert!(!of_variant(&info(Some("full"), Some(ours)), "python"));
        assert!(!of_variant(&info(None, Some(ours)), "python"));
        assert!(!of_variant(&info(Some("python"), None), "python"));
        assert!(!of_variant(
            &info(Some("python"), Some(&["NONE"])),
            "python"
        ));
    }
}
