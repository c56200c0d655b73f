//! Release notes: Markdown "what changed" per variant — tools added,
//! removed or changed (old -> new), the bump and why — fit for the body of
//! a GitHub release.

use super::journal::Journal;
use super::plan::Plan;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `|` would end a table cell; backticks would end code.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('`', "'")
}

/// The notes of `plan`; `staged` gives the digests once they are known.
pub(crate) fn markdown(plan: &Plan, staged: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Sandbox images, release {}\n", plan.id);
    if plan.is_noop() {
        let _ = writeln!(out, "Nothing to release: every image is as pinned.\n");
    }
    for v in &plan.variants {
        let _ = writeln!(out, "## {} {}\n", v.variant, v.version);
        let kind = match &v.previous {
            Some(p) => format!("{} release (was {p})", v.bump),
            None => "first release".to_string(),
        };
        if v.previous.is_some() {
            let _ = writeln!(out, "{kind}: {}\n", v.why);
        } else {
            let _ = writeln!(out, "{kind}\n");
        }
        let image = format!("{}:{}", plan.repository, v.immutable);
        match staged.get(&v.variant) {
            Some(d) => {
                let _ = writeln!(out, "- image: `{image}` (`{d}`)");
            }
            None => {
                let _ = writeln!(out, "- image: `{image}` (digest known once staged)");
            }
        }
        if !v.moving.is_empty() {
            let tags: Vec<String> = v.moving.iter().map(|t| format!("`{t}`")).collect();
            let _ = writeln!(out, "- moves: {}", tags.join(", "));
        }
        let aliases: Vec<String> = v.aliases.iter().map(|a| format!("`{a}`")).collect();
        let _ = writeln!(out, "- aliases: {}\n", aliases.join(", "));
        if v.changes.is_empty() {
            let _ = writeln!(out, "No tool changed.\n");
            continue;
        }
        let _ = writeln!(
            out,
            "| tool | old | new | change |\n| --- | --- | --- | --- |"
        );
        for c in &v.changes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}: {} |",
                cell(&c.tool),
                cell(c.old.as_deref().unwrap_or("—")),
                cell(c.new.as_deref().unwrap_or("—")),
                c.bump,
                cell(&c.reason)
            );
        }
        out.push('\n');
    }
    if !plan.unchanged.is_empty() {
        let _ = writeln!(out, "## Unchanged\n");
        for u in &plan.unchanged {
            let version = u
                .version
                .as_ref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            let _ = writeln!(out, "- {}{version}: {}", u.variant, u.reason);
        }
        out.push('\n');
    }
    out
}

/// The notes of a journaled release.
pub(crate) fn of_journal(journal: &Journal) -> String {
    let staged = journal
        .staged
        .iter()
        .map(|(v, s)| (v.clone(), s.digest.to_string()))
        .collect();
    markdown(&journal.plan, &staged)
}

#[cfg(test)]
mod tests {
    use super::super::journal::tests::planned;
    use super::super::plan::Unchanged;
    use super::*;
    use crate::semver_rules::{Bump, ToolChange};
    use semver::Version;

    #[test]
    fn notes_name_versions_tools_and_why() {
        let mut ruff = planned("python", &["python-1.1", "python-1", "python"]);
        ruff.version = Version::new(1, 1, 0);
        ruff.previous = Some(Version::new(1, 0, 0));
        ruff.bump = Bump::Minor;
        ruff.why = "ruff 0.13.2 -> 0.13.3: 0.x patch version raised".into();
        ruff.immutable = "python-1.1.0".into();
        ruff.changes = vec![ToolChange {
            tool: "ruff".into(),
            old: Some("0.13.2".into()),
            new: Some("0.13.3".into()),
            bump: Bump::Minor,
            reason: "0.x patch version raised".into(),
        }];
        let plan = Plan {
            id: "r1".into(),
            repository: "reg/sandbox".into(),
            variants: vec![ruff],
            unchanged: vec![Unchanged {
                variant: "go".into(),
                version: Some(Version::new(1, 0, 0)),
                reason: "same inputs as the pinned image".into(),
            }],
        };
        let staged = BTreeMap::from([("python".to_string(), "sha256:abc".to_string())]);
        assert_eq!(
            markdown(&plan, &staged),
            "# Sandbox images, release r1\n\n\
             ## python 1.1.0\n\n\
             minor release (was 1.0.0): ruff 0.13.2 -> 0.13.3: 0.x patch version raised\n\n\
             - image: `reg/sandbox:python-1.1.0` (`sha256:abc`)\n\
             - moves: `python-1.1`, `python-1`, `python`\n\
             - aliases: `python`\n\n\
             | tool | old | new | change |\n| --- | --- | --- | --- |\n\
             | ruff | 0.13.2 | 0.13.3 | minor: 0.x patch version raised |\n\n\
             ## Unchanged\n\n\
             - go 1.0.0: same inputs as the pinned image\n\n"
        );
    }
}
