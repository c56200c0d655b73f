//! `build --format github`: the check findings of every image built, as
//! `check --format github` writes them but titled `build: …` (`build
//! linux/arm64: …` for another platform than the engine's own), an
//! `::error` per variant that failed before or outside its check and per
//! variant whose tools answered differently on two platforms (at its
//! `[variants.NAME]` in images.toml), and a `::warning` per variant not
//! attempted (a parent failed).

use super::{Outcome, pipeline};
use crate::github::{Annotation, toml_line};
use crate::manifest::Manifest;

/// The annotations of a build run.
pub(crate) fn annotations(outcome: &pipeline::Outcome, manifest: &Manifest) -> Vec<Annotation> {
    let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
    let at = |a: Annotation, variant: &str| {
        let line = toml_line(&text, &format!("variants.{variant}"), None);
        a.at(&manifest.path, line)
    };
    let mut out = Vec::new();
    let several = outcome.summaries.len() > 1;
    for s in &outcome.summaries {
        let verb = match several || s.platform != outcome.native {
            true => format!("build {}", s.platform),
            false => "build".to_string(),
        };
        let checks: Vec<_> = (s.results.iter())
            .filter_map(|r| r.outcome.check().cloned())
            .collect();
        let found =
            crate::check::github::annotations(&checks, (&manifest.path, &text), &manifest.default);
        out.extend(found.into_iter().map(|mut a| {
            a.title = a.title.map(|t| format!("{verb}: {t}"));
            a
        }));
        for r in &s.results {
            let v = &r.variant;
            let a = match &r.outcome {
                Outcome::Failed {
                    stage, reason, log, ..
                } if r.outcome.check().is_none() => {
                    let reason = reason.lines().next().unwrap_or("");
                    let log = log
                        .as_ref()
                        .map(|l| format!("; full log: {}", l.display()))
                        .unwrap_or_default();
                    Annotation::error(0, format!("{v} failed ({stage}): {reason}{log}"))
                        .title(format!("{verb}: {v} {stage} failed"))
                }
                Outcome::NotAttempted { reason } => {
                    Annotation::warning(0, format!("{v} not attempted: {reason}"))
                        .title(format!("{verb}: {v} not attempted"))
                }
                _ => continue,
            };
            out.push(at(a, v));
        }
    }
    for (v, found) in &outcome.mismatches {
        let found = found.join("; ");
        let a = Annotation::error(
            0,
            format!("{v}: its tool versions differ between platforms: {found}"),
        );
        out.push(at(
            a.title(format!("build: {v} differs between platforms")),
            v,
        ));
    }
    out
}
