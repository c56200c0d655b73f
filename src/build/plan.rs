//! The whole of `plan` as a library function: from what the pinned images'
//! labels say (read from the registry by `pins::next::published`, no
//! engine) and the upstream a build uses now, and what needs building and why ([`needs`](super::needs)),
//! with its table and step summary.

use super::Family;
use super::needs::{self, BuildPlan, Published};
use crate::labels;
use crate::manifest::UpstreamError;
use crate::table::{Column, Table};
use std::collections::BTreeMap;

/// What needs building, from each variant's `definitions` hash and what
/// its pinned image says (`published`, [`crate::pins::next::published`]),
/// one leg per platform.
pub(crate) fn plan(
    family: &Family,
    definitions: &BTreeMap<String, String>,
    published: &BTreeMap<String, Published>,
) -> Result<BuildPlan, UpstreamError> {
    // The upstream is only looked up when a pinned image says what it was
    // built on.
    let roots_know_their_base = family.order.iter().any(|v| {
        family.variants[v].parent.is_none()
            && published
                .get(v)
                .is_some_and(|p| p.labels.contains_key(labels::OCI_BASE_DIGEST))
    });
    let base_now = if roots_know_their_base {
        // Pinned by digest: what a build uses now, without asking the registry.
        let upstream = family.upstream.pinned()?;
        upstream.digest().map(|d| d.to_string())
    } else {
        None
    };
    let variants: Vec<needs::Variant> = family
        .order
        .iter()
        .map(|v| needs::Variant {
            name: v,
            parent: family.variants[v].parent.as_deref(),
            definition: &definitions[v],
            published: published.get(v),
            members: family.variants[v]
                .composition
                .iter()
                .flat_map(|c| c.recipe.members.iter().map(|m| m.variant.as_str()))
                .collect(),
        })
        .collect();
    // One leg per platform; without `platforms`, the one a runner has.
    let platforms = if family.platforms.is_empty() {
        vec![crate::registry::Platform::host().normalized()]
    } else {
        family.platforms.clone()
    };
    Ok(BuildPlan::new(
        needs::needs(&variants, base_now.as_deref()),
        &platforms,
    ))
}

/// The plan for people: a row per variant, whether it builds and why.
pub(crate) fn table(plan: &BuildPlan) -> String {
    let mut table = Table::new([Column::left(); 3]);
    table.row(["VARIANT", "BUILD", "WHY"]);
    for n in &plan.variants {
        let why = match (&n.pinned, n.reasons.is_empty()) {
            (Some(tag), true) => format!("as published ({tag})"),
            _ => n
                .reasons
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        };
        table.row([n.variant.as_str(), if n.build { "yes" } else { "no" }, &why]);
    }
    table.render()
}

/// The plan as a step summary section.
pub(crate) fn summary(plan: &BuildPlan) -> String {
    let mut out =
        String::from("### What needs building\n\n| variant | build | why |\n| --- | --- | --- |\n");
    for n in &plan.variants {
        let why: Vec<String> = n.reasons.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            n.variant,
            if n.build { "yes" } else { "no" },
            if why.is_empty() {
                "as published".to_string()
            } else {
                why.join("; ")
            }
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::VariantPlan;

    fn family() -> Family {
        let plan = |name: &str, parent: Option<&str>| VariantPlan {
            name: name.into(),
            parent: parent.map(String::from),
            ..Default::default()
        };
        Family {
            order: ["base", "go"].map(String::from).to_vec(),
            variants: BTreeMap::from([
                ("base".into(), plan("base", None)),
                ("go".into(), plan("go", Some("base"))),
            ]),
            platforms: vec![
                "linux/amd64".parse().unwrap(),
                "linux/arm64".parse().unwrap(),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn nothing_published_builds_every_variant_on_every_platform() {
        let definitions = BTreeMap::from([
            ("base".to_string(), "d1".to_string()),
            ("go".to_string(), "d2".to_string()),
        ]);
        let plan = plan(&family(), &definitions, &BTreeMap::new()).unwrap();
        assert!(plan.has_work);
        assert!(plan.variants.iter().all(|n| n.build && n.pinned.is_none()));
        let legs: Vec<String> = plan
            .legs
            .include
            .iter()
            .map(|l| l.platform.to_string())
            .collect();
        assert_eq!(legs, ["linux/amd64", "linux/arm64"]);
        let summary = summary(&plan);
        assert!(
            summary.starts_with("### What needs building\n"),
            "{summary}"
        );
        assert_eq!(summary.matches("| yes |").count(), 2, "{summary}");
        assert!(table(&plan).starts_with("VARIANT"), "{}", table(&plan));
    }
}
