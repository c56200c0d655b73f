//! `sunaba-images render [--check] [--json]`: writes (or, with `--check`,
//! only compares) every generated file. Everything is rendered in memory
//! first; an error anywhere writes nothing.

use super::context::{Context, OutputOptions};
use crate::exit;
use crate::github;
use crate::locks::{self, LockProblem};
use crate::manifest::coverage;
use crate::render::{self, Plan};
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images render\n  sunaba-images render --check --format github"
)]
pub(crate) struct Args {
    /// Render in memory and exit non-zero with a diff when committed files
    /// differ or stray generated files remain. Writes nothing (the CI gate).
    #[arg(long)]
    pub check: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    // The default image must carry every toolchain verify can dispatch to:
    // a gap is a gate failure here, never a user's first verify.
    let gaps = coverage::coverage_problems(manifest);
    let github = args.output.github();
    if github && !gaps.is_empty() {
        super::annotate(render::github::coverage(manifest, &gaps), args.json)?;
    }
    if !gaps.is_empty() {
        for gap in &gaps {
            eprintln!("coverage: {gap}");
        }
        eprintln!(
            "render{}: {} coverage problem(s) in {}; nothing was written",
            if args.check { " --check" } else { "" },
            gaps.len(),
            manifest.path.display()
        );
        return Err(exit::Reported::Findings.into());
    }
    let rendered = ctx.rendered()?;
    let plan =
        render::plan(rendered, &manifest.root).context("comparing with the committed files")?;

    // A lock that no longer matches the versions images.toml pins is drift
    // too: the build would install something else than the manifest says.
    let stale = locks::check(manifest);

    if args.check {
        if github {
            let mut notes = render::github::drift(&plan);
            notes.extend(locks::annotations(&stale));
            super::annotate(github::ordered(notes), args.json)?;
            github::summary(&render::github::summary(&plan)).context("writing the step summary")?;
        }
        report_check(&plan, &stale, args.json)?;
        return if plan.is_clean() && stale.is_empty() {
            Ok(())
        } else {
            Err(exit::Reported::Findings.into())
        };
    }

    // Only files carrying our marker are removed: a hand-made file that
    // happens to match the naming pattern is reported, never deleted.
    let applied = render::apply(&plan, rendered, &manifest.root)?;
    report_applied(&plan, &applied, &stale, args.json)?;
    if stale.is_empty() {
        Ok(())
    } else {
        eprintln!("{}", locks_summary(&stale));
        Err(exit::Reported::Findings.into())
    }
}

/// What `render` wrote and removed, and the stale locks, as JSON or lines.
fn report_applied(
    plan: &Plan,
    applied: &render::Applied,
    stale: &[LockProblem],
    json: bool,
) -> exit::Result {
    let (removable, foreign) = (&applied.removed, &applied.foreign);
    if json {
        super::write_json(&render::AppliedReport::new(plan, applied, stale))?;
    } else {
        report_locks(stale)?;
        for p in &plan.missing {
            outln!("created   {}", p.display())?;
        }
        for (p, _, _) in &plan.drifted {
            outln!("updated   {}", p.display())?;
        }
        for p in removable {
            outln!(
                "removed   {} (no variant produces it any more)",
                p.display()
            )?;
        }
        for p in foreign {
            outln!(
                "kept      {} (looks generated but has no sunaba-images header; remove it by hand)",
                p.display()
            )?;
        }
        outln!(
            "render: {} file(s) written, {} removed, {} unchanged",
            plan.missing.len() + plan.drifted.len(),
            removable.len(),
            plan.unchanged.len()
        )?;
    }
    Ok(())
}

/// `lock: …` lines, one per problem.
fn report_locks(stale: &[LockProblem]) -> exit::Result {
    for p in stale {
        outln!("lock: {p}")?;
    }
    Ok(())
}

fn locks_summary(stale: &[LockProblem]) -> String {
    let mut fragments: Vec<&str> = stale.iter().map(|p| p.fragment.as_str()).collect();
    fragments.dedup();
    format!(
        "render: {} lock problem(s); run `sunaba-images lock {}` and commit the result",
        stale.len(),
        fragments.join(" ")
    )
}

fn report_check(plan: &Plan, stale: &[LockProblem], json: bool) -> exit::Result {
    if json {
        return super::write_json(&render::CheckReport::new(plan, stale));
    }
    for (path, committed, rendered) in &plan.drifted {
        out!("{}", render::unified_diff(path, committed, rendered))?;
    }
    for p in &plan.missing {
        outln!("missing: {} is generated but not in the tree", p.display())?;
    }
    for p in &plan.stray {
        outln!(
            "stray: {} is not produced by any variant in the manifest; delete it (or run `sunaba-images render`)",
            p.display()
        )?;
    }
    report_locks(stale)?;
    if !stale.is_empty() {
        eprintln!(
            "{}",
            locks_summary(stale).replacen("render:", "render --check:", 1)
        );
    }
    if plan.is_clean() {
        if stale.is_empty() {
            outln!(
                "render --check: {} generated file(s) up to date",
                plan.unchanged.len()
            )?;
        }
    } else {
        eprintln!(
            "render --check: {} drifted, {} missing, {} stray; run `sunaba-images render` and commit the result",
            plan.drifted.len(),
            plan.missing.len(),
            plan.stray.len()
        );
    }
    Ok(())
}
