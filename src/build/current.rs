//! What a variant's current inputs are, and the local image that has them:
//! the hash a build computes before it decides to build, and, without
//! building anything, the exact image of the current manifest (which `lock`
//! runs its package managers in; a variant's plain tag may be another
//! checkout's build).

use super::inputs::{self, HashMeta, StagedFile};
use super::{BuildError, Family};
use crate::engine::Engine;
use crate::labels::INPUTS as LABEL_INPUTS;
use crate::name::Platform;
use std::collections::BTreeMap;

/// A variant's inputs, hashed.
pub(crate) struct Inputs {
    pub files: Vec<StagedFile>,
    /// Every build argument, the FROM argument included.
    pub build_args: BTreeMap<String, String>,
    pub static_labels: BTreeMap<String, String>,
    /// `sha256:<hex>`.
    pub hash: String,
}

impl Family {
    /// Hashes `variant`'s inputs when built FROM `from_ref` (image ID `from_id`).
    pub(crate) fn inputs(
        &self,
        variant: &str,
        platform: &Platform,
        from_ref: &str,
        from_id: &str,
    ) -> Result<Inputs, BuildError> {
        let plan = &self.variants[variant];
        let files = inputs::collect(&self.root, plan, &self.generated)?;
        let mut build_args = plan.build_args.clone();
        // A parent is hashed by what it is (its image ID, `from-image`), not
        // by its local name, which carries the local repository: the same
        // family built under another one (a release's, the scratch
        // `<repository>-rebuild` of `pins verify --rebuild`) has the same
        // inputs, so the same label and the same digest. An upstream is
        // hashed by its pinned reference as well.
        if plan.parent.is_none() {
            build_args.insert(plan.from_arg.clone(), from_ref.to_string());
        }
        let static_labels = self.static_labels(variant);
        let platform = platform.to_string();
        let hash = inputs::inputs_hash(
            &HashMeta {
                platform: &platform,
                dockerfile: &plan.dockerfile,
                build_args: &build_args,
                from_image_id: from_id,
                static_labels: &static_labels,
            },
            &files,
        );
        build_args.insert(plan.from_arg.clone(), from_ref.to_string());
        Ok(Inputs {
            files,
            build_args,
            static_labels,
            hash,
        })
    }

    /// The local image (inputs tag, image ID) built from exactly the current
    /// inputs of `variant` and its ancestors; `None` when it is not built.
    pub(crate) fn current_image(
        &self,
        engine: &dyn Engine,
        variant: &str,
    ) -> Result<Option<(String, String)>, BuildError> {
        let platform = engine.platform()?;
        let (from_ref, from_id) = match &self.variants[variant].parent {
            Some(parent) => match self.current_image(engine, parent)? {
                Some(found) => found,
                None => return Ok(None),
            },
            None => {
                let pinned = self.upstream.pinned()?;
                let digest = pinned.digest().cloned().expect("pinned by digest");
                match engine.inspect(&pinned.by_digest(digest).to_string())? {
                    Some(info) => (pinned.to_string(), info.id),
                    None => return Ok(None),
                }
            }
        };
        let inputs = self.inputs(variant, &platform, &from_ref, &from_id)?;
        let tag = self.inputs_tag(variant, &inputs.hash);
        Ok(engine
            .inspect(&tag)?
            .filter(|info| info.labels.get(LABEL_INPUTS) == Some(&inputs.hash))
            .map(|info| (tag, info.id)))
    }
}

#[cfg(test)]
mod tests {
    use crate::build::definition::tests::family;
    use crate::name::Platform;

    #[test]
    fn a_child_is_hashed_by_its_parent_s_image_not_by_the_parent_s_local_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = family(dir.path());
        let platform: Platform = "linux/amd64".parse().unwrap();
        let kid = |from_ref: &str, from_id: &str| {
            (f.inputs("kid", &platform, from_ref, from_id)).unwrap()
        };
        let here = kid("r/s:base-inputs-0123", "sha256:aa");
        assert_eq!(
            kid("elsewhere/s-rebuild:base-inputs-0123", "sha256:aa").hash,
            here.hash,
            "the same parent image under another repository"
        );
        assert_ne!(
            kid("r/s:base-inputs-0123", "sha256:bb").hash,
            here.hash,
            "another parent image"
        );
        let from_arg = &f.variants["kid"].from_arg;
        assert_eq!(
            kid("elsewhere/s:base-inputs-0123", "sha256:aa").build_args[from_arg],
            "elsewhere/s:base-inputs-0123",
            "the build is FROM the local name"
        );
        let base = |from_ref: &str| (f.inputs("base", &platform, from_ref, "sha256:aa")).unwrap();
        assert_ne!(
            base("debian:trixie-slim@sha256:00").hash,
            base("debian:forky-slim@sha256:00").hash,
            "an upstream is hashed by its pinned reference too"
        );
    }
}
