//! The pin in force, read leniently from images.toml (a tag-only upstream
//! is what `update-base` exists to pin): where it is kept, the tag it
//! follows, the platforms the family builds, and the text of a new pin.

use crate::manifest::edit::Editor;
use crate::registry::{self, Digest, Platform, Reference};

#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetError {
    #[error("the profile takes its upstream from ${var}, which is not set")]
    EnvUnset { var: String },
    #[error("images.toml has no `upstream`")]
    NoUpstream,
    #[error("the upstream `{text}` names no tag to follow")]
    NoTag { text: String },
    #[error(transparent)]
    Reference(#[from] registry::Error),
}

/// Where the pin in force is kept.
#[derive(Debug)]
pub(crate) enum Slot {
    /// A string in images.toml at this key path.
    File(Vec<String>),
    /// An environment variable (a profile's `upstream_env`): not ours to write.
    Env(String),
}

/// The pin in force, read leniently from images.toml (a tag-only upstream
/// is what this command exists to pin).
#[derive(Debug)]
pub(crate) struct Target {
    pub slot: Slot,
    /// The text of the pin as written (`debian:trixie-slim@sha256:…`).
    pub text: String,
    /// The tag followed (a reference without digest).
    pub tracked: Reference,
    pub pinned: Option<Digest>,
}

impl Target {
    /// Where the pin is, for messages.
    pub(crate) fn origin(&self) -> String {
        match &self.slot {
            Slot::File(path) => format!("images.toml `{}`", path.join(".")),
            Slot::Env(var) => format!("${var}"),
        }
    }
}

/// The pin in force for `profile`: its `upstream_env`, its `upstream`, or
/// the top-level `upstream`.
pub(crate) fn find(editor: &Editor, profile: Option<&str>) -> Result<Target, TargetError> {
    let in_profile = |key: &str| profile.and_then(|p| editor.string(&["profiles", p, key]));
    let (slot, text, tracks) = match (in_profile("upstream_env"), in_profile("upstream")) {
        (Some(var), tracks) => {
            let value = std::env::var(&var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| TargetError::EnvUnset { var: var.clone() })?;
            (Slot::Env(var), value, tracks)
        }
        (None, Some(text)) => (
            Slot::File(vec![
                "profiles".into(),
                profile.unwrap_or_default().into(),
                "upstream".into(),
            ]),
            text,
            None,
        ),
        (None, None) => {
            let text = editor
                .string(&["upstream"])
                .ok_or(TargetError::NoUpstream)?;
            (Slot::File(vec!["upstream".into()]), text, None)
        }
    };
    let reference: Reference = text.parse().map_err(registry::Error::from)?;
    let tracked: Reference = match tracks {
        Some(t) => t.parse().map_err(registry::Error::from)?,
        None => match reference.tag() {
            Some(tag) => {
                Reference::with_tag(reference.repo(), tag).map_err(registry::Error::from)?
            }
            None => return Err(TargetError::NoTag { text }),
        },
    };
    Ok(Target {
        slot,
        pinned: reference.digest().cloned(),
        text,
        tracked,
    })
}

/// The new text of the pin: the name as written, the new digest.
pub(crate) fn pinned_text(text: &str, digest: &Digest) -> String {
    let name = text.split_once('@').map_or(text, |(name, _)| name);
    format!("{name}@{digest}")
}

/// `update-base --json`: the pin in force, the decision and what was done.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report<'a> {
    pub origin: String,
    pub tag: &'a str,
    pub reference: &'a str,
    pub new_reference: &'a str,
    pub pinned: &'a Option<super::Snapshot>,
    pub current: &'a super::Snapshot,
    pub platforms: &'a [super::PlatformChange],
    pub changed: bool,
    pub written: bool,
}

impl<'a> Report<'a> {
    pub(crate) fn new(
        target: &'a Target,
        plan: &'a super::Plan,
        new_reference: &'a str,
        written: bool,
    ) -> Report<'a> {
        Report {
            origin: target.origin(),
            tag: &plan.tag,
            reference: &target.text,
            new_reference,
            pinned: &plan.pinned,
            current: &plan.current,
            platforms: &plan.platforms,
            changed: plan.changed,
            written,
        }
    }
}

/// The platforms images.toml's `platforms` names; the host's without any.
pub(crate) fn platforms(editor: &Editor) -> Result<Vec<Platform>, registry::Error> {
    let declared = editor.strings(&["platforms"]);
    if declared.is_empty() {
        Ok(vec![Platform::host()])
    } else {
        declared
            .iter()
            .map(|p| p.parse().map_err(registry::Error::from))
            .collect()
    }
}

/// `update-base --format github` when the pin should move and was not
/// written: an `::error` titled `update-base: upstream`, at the pin's key in
/// images.toml (`manifest`: its path and text; a pin kept in an environment
/// variable has no line to point at).
pub(crate) fn annotation(
    target: &Target,
    plan: &crate::base_update::Plan,
    manifest: (&std::path::Path, &str),
) -> crate::github::Annotation {
    let changed: Vec<&str> = (plan.platforms.iter())
        .filter(|p| p.changed)
        .map(|p| p.platform.as_str())
        .collect();
    let what = match (changed.is_empty(), &plan.pinned) {
        (false, _) => format!("the images for {} changed", changed.join(", ")),
        (true, None) => "the upstream is not pinned by digest".to_string(),
        (true, Some(_)) => "the pin is to move (forced)".to_string(),
    };
    let pinned = (plan.pinned.as_ref()).map_or("-".to_string(), |p| p.digest.to_string());
    let todo = match &target.slot {
        Slot::File(_) => "run `sunaba-images update-base --write`".to_string(),
        Slot::Env(var) => format!("the pin is ${var}, set outside images.toml"),
    };
    let a = crate::github::Annotation::error(
        0,
        format!(
            "{what}: {} is now {}, the pin is {pinned}; {todo}",
            plan.tag, plan.current.digest
        ),
    )
    .title("update-base: upstream");
    match &target.slot {
        Slot::File(key) => {
            let key: Vec<&str> = key.iter().map(String::as_str).collect();
            a.at(manifest.0, crate::github::toml_key_line(manifest.1, &key))
        }
        Slot::Env(_) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_in_force_is_the_profiles_else_the_top_level_one() {
        let editor = Editor::parse(
            "upstream = \"debian:trixie-slim\"\nplatforms = [\"linux/amd64\"]\n\n\
             [profiles.dev]\nupstream = \"reg.test/debian:trixie-slim\"\n",
        )
        .unwrap();
        let top = find(&editor, None).unwrap();
        assert_eq!(top.origin(), "images.toml `upstream`");
        assert_eq!(
            top.tracked.to_string(),
            "docker.io/library/debian:trixie-slim"
        );
        assert_eq!(top.pinned, None);
        let dev = find(&editor, Some("dev")).unwrap();
        assert_eq!(dev.origin(), "images.toml `profiles.dev.upstream`");
        assert_eq!(dev.text, "reg.test/debian:trixie-slim");
        let platforms = platforms(&editor).unwrap();
        assert_eq!(platforms, ["linux/amd64".parse::<Platform>().unwrap()]);

        let untagged =
            Editor::parse(&format!("upstream = \"debian@{}\"\n", Digest::sha256(b"x"))).unwrap();
        let err = find(&untagged, None).unwrap_err();
        assert!(matches!(err, TargetError::NoTag { .. }), "{err}");
        let none = Editor::parse("").unwrap();
        assert_eq!(
            find(&none, None).unwrap_err().to_string(),
            "images.toml has no `upstream`"
        );
    }

    #[test]
    fn the_name_is_kept_as_written() {
        let d = Digest::sha256(b"x");
        assert_eq!(
            pinned_text("debian:trixie-slim@sha256:00", &d),
            format!("debian:trixie-slim@{d}")
        );
        assert_eq!(
            pinned_text("debian:trixie-slim", &d),
            format!("debian:trixie-slim@{d}")
        );
    }
}
