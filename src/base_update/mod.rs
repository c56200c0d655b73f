//! What `update-base` decides: the images an upstream's pin and its tag
//! point at, for the platforms the family builds, and whether the pin moves.
//!
//! The pin moves only when the image for one of those platforms changed. An
//! index that only gained an attestation, another architecture or a new
//! annotation has a new digest but builds the same images: that is no
//! change. A single-manifest upstream (a base `docker import`ed and pushed,
//! as the dev environment makes) is its own one child. Where the pin is
//! kept in images.toml is [`target`].

pub(crate) mod target;

use crate::registry::{self, Client, Digest, ErrorKind, Platform, Reference, ResolveOptions};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpdateError {
    #[error(
        "the pinned upstream {pinned} is gone from the registry (the tag now points at {current}); \
         builds on a machine without a copy cannot pull it. `update-base --write --force` pins \
         the tag's current image"
    )]
    PinnedGone { pinned: String, current: String },
    #[error(
        "{reference} offers no image for any platform the family builds ({wanted}; it has: {available})"
    )]
    NoPlatform {
        reference: String,
        wanted: String,
        available: String,
    },
    #[error(
        "the tag {tag} no longer offers an image for {platform}, which the pinned one had and the \
         family builds; keeping the pin (drop the platform from `platforms`, or `--force`)"
    )]
    PlatformDropped { tag: String, platform: String },
    #[error(transparent)]
    Registry(#[from] registry::Error),
}

/// What one reference resolves to, for the family's platforms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Snapshot {
    /// The top-level digest: the index, or the one manifest.
    pub digest: Digest,
    pub index: bool,
    /// Family platform -> the manifest digest built for it (platforms the
    /// reference does not offer are absent).
    pub children: BTreeMap<String, Digest>,
}

/// How one platform's image moved. A platform neither the pin nor the tag
/// offers (the dev environment's one-platform base) has neither digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PlatformChange {
    pub platform: String,
    pub old: Option<Digest>,
    pub new: Option<Digest>,
    pub changed: bool,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Plan {
    /// The tag followed, `name:tag`.
    pub tag: String,
    pub pinned: Option<Snapshot>,
    pub current: Snapshot,
    pub platforms: Vec<PlatformChange>,
    /// The pin should move (to `current.digest`): a platform's image
    /// changed, or there was no pin.
    pub changed: bool,
}

/// Resolves `reference` (a tag or a digest) and picks, for every platform,
/// the image that builds there.
pub(crate) async fn snapshot(
    client: &Client,
    reference: &Reference,
    platforms: &[Platform],
) -> Result<Snapshot, UpdateError> {
    let options = ResolveOptions {
        platform: None,
        list_platforms: true,
    };
    let resolved = client.resolve_with(reference, &options).await?;
    let candidates: Vec<Option<Platform>> = resolved
        .platforms
        .iter()
        .map(|(p, _)| Some(p.clone()))
        .collect();
    let mut children = BTreeMap::new();
    for wanted in platforms {
        if let Some(i) = registry::best_match(wanted, &candidates) {
            children.insert(wanted.to_string(), resolved.platforms[i].1.clone());
        }
    }
    if children.is_empty() {
        let list = |items: Vec<String>| items.join(", ");
        return Err(UpdateError::NoPlatform {
            reference: reference.to_string(),
            wanted: list(platforms.iter().map(|p| p.to_string()).collect()),
            available: list(
                resolved
                    .platforms
                    .iter()
                    .map(|(p, _)| p.to_string())
                    .collect(),
            ),
        });
    }
    Ok(Snapshot {
        index: resolved.index_digest.is_some(),
        digest: resolved.digest,
        children,
    })
}

/// Resolves the tag `tracked` follows and the digest it is pinned to
/// (`pinned`, if any) and decides. `force` moves the pin to the tag's
/// current image even when it is unchanged or the pinned one is gone.
pub(crate) async fn plan(
    client: &Client,
    tracked: &Reference,
    pinned: Option<&Digest>,
    platforms: &[Platform],
    force: bool,
) -> Result<Plan, UpdateError> {
    let tag_ref = Reference::with_tag(tracked.repo(), tracked.tag().unwrap_or("latest"))
        .map_err(registry::Error::from)?;
    let current = snapshot(client, &tag_ref, platforms).await?;
    let old = match pinned {
        None => None,
        Some(d) => match snapshot(client, &tracked.by_digest(d.clone()), platforms).await {
            Ok(s) => Some(s),
            Err(UpdateError::Registry(e)) if matches!(e.kind(), ErrorKind::NotFound { .. }) => {
                if !force {
                    return Err(UpdateError::PinnedGone {
                        pinned: tracked.with_digest(d.clone()).to_string(),
                        current: current.digest.to_string(),
                    });
                }
                None
            }
            Err(e) => return Err(e),
        },
    };
    decide(&tag_ref, platforms, old, current, force)
}

/// The pure part of [`plan`]: compare the children platform by platform.
pub(crate) fn decide(
    tag: &Reference,
    platforms: &[Platform],
    old: Option<Snapshot>,
    current: Snapshot,
    force: bool,
) -> Result<Plan, UpdateError> {
    let mut changes = Vec::new();
    for platform in platforms.iter().map(Platform::to_string) {
        let old_child = old
            .as_ref()
            .and_then(|o| o.children.get(&platform))
            .cloned();
        let new_child = current.children.get(&platform).cloned();
        if old_child.is_some() && new_child.is_none() && !force {
            return Err(UpdateError::PlatformDropped {
                tag: tag.to_string(),
                platform,
            });
        }
        changes.push(PlatformChange {
            changed: old_child != new_child,
            platform,
            old: old_child,
            new: new_child,
        });
    }
    let moved = old.as_ref().is_none_or(|o| o.digest != current.digest);
    let changed = old.is_none() || changes.iter().any(|p| p.changed) || (force && moved);
    Ok(Plan {
        tag: tag.to_string(),
        pinned: old,
        current,
        platforms: changes,
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> Digest {
        Digest::sha256(&[n])
    }

    fn snap(top: u8, children: &[(&str, u8)]) -> Snapshot {
        Snapshot {
            digest: d(top),
            index: true,
            children: children
                .iter()
                .map(|(p, n)| (p.to_string(), d(*n)))
                .collect(),
        }
    }

    #[test]
    fn only_a_changed_child_moves_the_pin() {
        let tag: Reference = "debian:trixie-slim".parse().unwrap();
        let platforms: Vec<Platform> = ["linux/amd64", "linux/arm64"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect();
        let decide = |old: Option<Snapshot>, new: Snapshot, force: bool| {
            super::decide(&tag, &platforms, old, new, force)
        };
        let both = [("linux/amd64", 1), ("linux/arm64", 2)];
        // Same index: nothing to do.
        let p = decide(Some(snap(9, &both)), snap(9, &both), false).unwrap();
        assert!(!p.changed && p.platforms.iter().all(|c| !c.changed));
        // The index moved (an attestation), the children did not.
        let p = decide(Some(snap(9, &both)), snap(8, &both), false).unwrap();
        assert!(!p.changed, "{p:?}");
        assert!(
            decide(Some(snap(9, &both)), snap(8, &both), true)
                .unwrap()
                .changed
        );
        // arm64's image changed.
        let new = snap(8, &[("linux/amd64", 1), ("linux/arm64", 3)]);
        let p = decide(Some(snap(9, &both)), new, false).unwrap();
        assert!(p.changed);
        let moved: Vec<_> = p.platforms.iter().filter(|c| c.changed).collect();
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].platform, "linux/arm64");
        assert_eq!(moved[0].old, Some(d(2)));
        // No pin yet: the first pin.
        assert!(decide(None, snap(8, &both), false).unwrap().changed);
        // A one-platform upstream: arm64 absent on both sides is no change.
        let one = |top| snap(top, &[("linux/amd64", 1)]);
        assert!(!decide(Some(one(1)), one(1), false).unwrap().changed);
        // The tag dropping a platform the pin had is refused.
        let err = decide(Some(snap(9, &both)), one(7), false).unwrap_err();
        assert!(
            err.to_string()
                .contains("no longer offers an image for linux/arm64"),
            "{err}"
        );
    }
}
