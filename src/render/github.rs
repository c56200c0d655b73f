//! `render --format github`: an `::error` annotation per coverage gap, at
//! its table of images.toml (the most important: a server's verify would
//! fail on it), per drifted or missing generated file, at its first
//! differing line, and a warning per stray one; the step summary of
//! `render --check`. Stale locks are annotated by `locks::annotations`.

use super::Plan;
use crate::github::{self, Annotation};
use crate::manifest::{Manifest, coverage};

/// A coverage gap at the variant it is about: the most important finding,
/// since a server's verify would fail on it.
pub(crate) fn coverage(manifest: &Manifest, gaps: &[coverage::CoverageProblem]) -> Vec<Annotation> {
    let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
    github::ordered(
        gaps.iter()
            .map(|gap| {
                // A smoke gap is about the language's suite, not a variant.
                let (table, key) = match gap.variant() {
                    Some(variant) => (
                        format!("variants.{variant}"),
                        match gap {
                            coverage::CoverageProblem::ServesWithoutTools { .. } => Some("serves"),
                            _ => Some("fragments"),
                        },
                    ),
                    None => (format!("smoke.{}", gap.language()), None),
                };
                Annotation::error(0, gap.to_string())
                    .at(&manifest.path, github::toml_line(&text, &table, key))
                    .title(format!("coverage: {}", gap.language()))
            })
            .collect(),
    )
}

/// Drifted and missing generated files are errors at their first differing
/// line; stray ones are warnings.
pub(crate) fn drift(plan: &Plan) -> Vec<Annotation> {
    let mut out = Vec::new();
    for (path, committed, rendered) in &plan.drifted {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(rendered.lines().count()))
            + 1;
        out.push(
            Annotation::error(
                1,
                format!(
                    "{} differs from what images.toml and templates/ render (from line {line}); \
                     run `sunaba-images render` and commit the result",
                    path.display()
                ),
            )
            .at(path, Some(line))
            .title("render drift"),
        );
    }
    for path in &plan.missing {
        out.push(
            Annotation::error(
                1,
                format!(
                    "{} is generated but not in the tree; run `sunaba-images render`",
                    path.display()
                ),
            )
            .at(path, None)
            .title("render: missing file"),
        );
    }
    for path in &plan.stray {
        out.push(
            Annotation::warning(
                2,
                format!(
                    "{} is not produced by any variant; delete it",
                    path.display()
                ),
            )
            .at(path, Some(1))
            .title("render: stray file"),
        );
    }
    out
}

/// The step summary of `render --check`.
pub(crate) fn summary(plan: &Plan) -> String {
    if plan.is_clean() {
        return format!(
            "### render --check\n\n{} generated file(s) up to date.\n\n",
            plan.unchanged.len()
        );
    }
    let mut out = String::from("### render --check\n\n");
    for (p, _, _) in &plan.drifted {
        out.push_str(&format!("- drifted: `{}`\n", p.display()));
    }
    for p in &plan.missing {
        out.push_str(&format!("- missing: `{}`\n", p.display()));
    }
    for p in &plan.stray {
        out.push_str(&format!("- stray: `{}`\n", p.display()));
    }
    out.push_str("\nRun `sunaba-images render` and commit the result.\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn drift_is_at_the_first_differing_line_and_strays_are_warnings() {
        let plan = Plan {
            drifted: vec![
                (PathBuf::from("a"), "x\ny\nz\n".into(), "x\nY\nz\n".into()),
                // Equal up to where the shorter ends: the line after it.
                (PathBuf::from("b"), "x\n".into(), "x\ny\n".into()),
            ],
            missing: vec![PathBuf::from("c")],
            stray: vec![PathBuf::from("d")],
            unchanged: vec![],
        };
        let found = drift(&plan);
        let at: Vec<_> = found
            .iter()
            .map(|a| (a.level, a.file.as_deref(), a.line))
            .collect();
        assert_eq!(
            at,
            [
                (github::Level::Error, Some("a"), Some(2)),
                (github::Level::Error, Some("b"), Some(2)),
                (github::Level::Error, Some("c"), None),
                (github::Level::Warning, Some("d"), Some(1)),
            ]
        );
    }

    #[test]
    fn a_clean_plan_summarises_what_is_up_to_date() {
        let plan = Plan {
            unchanged: vec![PathBuf::from("a"), PathBuf::from("b")],
            ..Plan::default()
        };
        assert_eq!(
            summary(&plan),
            "### render --check\n\n2 generated file(s) up to date.\n\n"
        );
    }
}
