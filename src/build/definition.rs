//! A variant's definition: the hash of what images.toml, the render and the
//! fragment scripts say its image is — its files, build arguments and
//! static labels, and its parent's definition (or the upstream reference)
//! — without the engine's platform or any image ID. Recorded on every
//! image as `dev.sunaba.definition`, it lets `plan` tell what needs
//! building by comparing with the published image's label, before any
//! engine is involved. (`dev.sunaba.inputs` cannot serve: it hashes the
//! image IDs the engine produced.)

use super::inputs::{self, HashMeta};
use super::{BuildError, Family};
use std::collections::BTreeMap;

/// The definition of `variant` (`sha256:<hex>`).
pub(crate) fn of(family: &Family, variant: &str) -> Result<String, BuildError> {
    let plan = family
        .variants
        .get(variant)
        .ok_or_else(|| family.unknown_variant(variant))?;
    let from = match &plan.parent {
        Some(parent) => of(family, parent)?,
        // The pinned reference: a new digest is a new definition.
        None => family.upstream.pinned()?.to_string(),
    };
    let files = inputs::collect(&family.root, plan, &family.generated)?;
    let labels = family.static_labels(variant);
    Ok(inputs::inputs_hash(
        &HashMeta {
            // Not a platform: a definition is the same on every one.
            platform: "definition",
            dockerfile: &plan.dockerfile,
            build_args: &plan.build_args,
            from_image_id: &from,
            static_labels: &labels,
        },
        &files,
    ))
}

/// Every variant's definition, by name.
pub(crate) fn all(family: &Family) -> Result<BTreeMap<String, String>, BuildError> {
    family
        .order
        .iter()
        .map(|v| Ok((v.clone(), of(family, v)?)))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::family::VariantPlan;
    use std::path::PathBuf;

    fn upstream(tag: &str) -> crate::manifest::Upstream {
        crate::manifest::Upstream::Pinned {
            key: "upstream".into(),
            reference: format!("{tag}@sha256:{}", "0".repeat(64)).parse().unwrap(),
        }
    }

    /// A family of `base`, its child `kid` and `solo`, each with a script,
    /// written under `root`.
    pub(crate) fn family(root: &std::path::Path) -> Family {
        let plan = |name: &str, parent: Option<&str>| {
            let script = PathBuf::from(format!("docker/install-{name}.sh"));
            std::fs::create_dir_all(root.join("docker")).unwrap();
            std::fs::write(root.join(&script), format!("echo {name}\n")).unwrap();
            let dockerfile = PathBuf::from(format!("docker/Dockerfile.{name}"));
            std::fs::write(root.join(&dockerfile), format!("FROM x\n# {name}\n")).unwrap();
            VariantPlan {
                name: name.into(),
                parent: parent.map(String::from),
                dockerfile,
                context_files: vec![script],
                ..Default::default()
            }
        };
        Family {
            root: root.to_path_buf(),
            repository: "r/s".into(),
            upstream: upstream("debian:trixie-slim"),
            order: ["base", "kid", "solo"].map(String::from).to_vec(),
            variants: BTreeMap::from([
                ("base".into(), plan("base", None)),
                ("kid".into(), plan("kid", Some("base"))),
                ("solo".into(), plan("solo", None)),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn a_change_reaches_the_variant_and_its_children_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = family(dir.path());
        let before = all(&f).unwrap();
        assert_eq!(all(&f).unwrap(), before, "stable");
        assert!(before.values().all(|d| d.starts_with("sha256:")));

        std::fs::write(dir.path().join("docker/install-base.sh"), "echo changed\n").unwrap();
        let after = all(&f).unwrap();
        assert_ne!(after["base"], before["base"]);
        assert_ne!(after["kid"], before["kid"], "children follow their parent");
        assert_eq!(after["solo"], before["solo"]);

        f.upstream = upstream("debian:forky-slim");
        let rebased = all(&f).unwrap();
        assert!(
            f.order.iter().all(|v| rebased[v] != after[v]),
            "the upstream reaches all"
        );
        f.repository = "elsewhere/s".into();
        assert_eq!(
            all(&f).unwrap(),
            rebased,
            "where it is published is not its definition"
        );
    }
}
