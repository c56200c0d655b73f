//! After staging: read every staged image back and gate it (verify), look at
//! every release tag before any moves (an immutable tag at another digest
//! stops the release with zero tag writes), point the tags at the staged
//! manifests by PUT of their exact bytes (no layer is sent again; a tag
//! already there costs its HEAD only), and `--rollback`.

use super::journal::{Journal, TagKind};
use crate::labels::{self, CheckRecord};
use crate::registry::{Client, Digest, Reference, Repository};
use anyhow::Context as _;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;

/// A staged manifest as read back: what the tags get.
pub struct Image {
    pub digest: Digest,
    pub media_type: String,
    pub bytes: Bytes,
}

/// An immutable tag that already names another image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub tag: String,
    pub found: String,
    pub planned: String,
}

/// Every conflict at once; nothing was written to a release tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Conflicts(pub Vec<Conflict>);

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|c| {
                format!(
                    "immutable tag {} already points at {}, not the planned {}",
                    c.tag, c.found, c.planned
                )
            })
            .collect();
        write!(
            f,
            "{}; no release tag was written (an immutable tag never moves: pin the published \
             version with `sunaba-images pin ALIAS --to X.Y.Z --write`, then release again)",
            each.join("; ")
        )
    }
}

/// The digest `tag` points at, `None` when it does not exist (one HEAD).
pub async fn tag_digest(
    client: &Client,
    repo: &Repository,
    tag: &str,
) -> anyhow::Result<Option<Digest>> {
    Ok(client
        .manifest_digest(&Reference::with_tag(repo, tag)?)
        .await?)
}

/// Reads each staged image back by digest (bytes verified) and gates its
/// config: the version stamped, a passing check record of the inputs and
/// the tools planned. Then looks at every tag not yet written: the first
/// run records where each pointed. Returns the images by variant and where
/// each unwritten tag points now.
pub async fn verify(
    client: &Client,
    repo: &Repository,
    journal: &mut Journal,
) -> anyhow::Result<(BTreeMap<String, Image>, BTreeMap<String, Option<Digest>>)> {
    let mut images = BTreeMap::new();
    for planned in &journal.plan.variants {
        let digest = journal.staged[&planned.variant].digest.clone();
        let reference = Reference::with_tag(repo, &planned.staging)?.by_digest(digest.clone());
        let manifest = client
            .fetch_manifest(&reference)
            .await
            .with_context(|| format!("{}: the staged image is not there", planned.variant))?;
        let config = client.config_of(&reference, &manifest).await?;
        let fail =
            |why: String| anyhow::anyhow!("{}: staged image {reference}: {why}", planned.variant);
        if config.labels.get(labels::VERSION) != Some(&planned.version.to_string()) {
            return Err(fail(format!(
                "its {} label is {:?}, not {}",
                labels::VERSION,
                config.labels.get(labels::VERSION),
                planned.version
            )));
        }
        match CheckRecord::passing_for(&config.labels) {
            Some(r) if r.tools == planned.tools => {}
            Some(_) => {
                return Err(fail(
                    "its check record lists other tools than planned".into(),
                ));
            }
            None => {
                return Err(fail(
                    "it carries no passing check record of its inputs".into(),
                ));
            }
        }
        images.insert(
            planned.variant.clone(),
            Image {
                digest,
                media_type: manifest.media_type.clone(),
                bytes: Bytes::from(manifest.bytes),
            },
        );
    }
    let mut now = BTreeMap::new();
    let mut conflicts = Vec::new();
    for t in journal.tags.iter_mut().filter(|t| !t.done) {
        let found = tag_digest(client, repo, &t.tag).await?;
        let planned = &images[&t.variant].digest;
        if t.kind == TagKind::Immutable
            && let Some(f) = found.as_ref().filter(|f| *f != planned)
        {
            conflicts.push(Conflict {
                tag: t.tag.clone(),
                found: f.to_string(),
                planned: planned.to_string(),
            });
        }
        if !t.looked {
            t.looked = true;
            t.previous = found.clone();
        }
        now.insert(t.tag.clone(), found);
    }
    journal.save()?;
    if !conflicts.is_empty() {
        return Err(Conflicts(conflicts).into());
    }
    Ok((images, now))
}

/// Writes every tag not yet written, in the journal's order, saving the
/// journal after each: a tag already at its image is only marked.
pub async fn promote(
    client: &Client,
    repo: &Repository,
    journal: &mut Journal,
    images: &BTreeMap<String, Image>,
    now: &BTreeMap<String, Option<Digest>>,
    progress: &(dyn Fn(String) + Sync),
) -> anyhow::Result<()> {
    for i in 0..journal.tags.len() {
        let t = &journal.tags[i];
        if t.done {
            continue;
        }
        let image = &images[&t.variant];
        if now.get(&t.tag).cloned().flatten().as_ref() == Some(&image.digest) {
            progress(format!("{} already at {}", t.tag, image.digest));
        } else {
            let reference = Reference::with_tag(repo, &t.tag)?;
            client
                .put_manifest(&reference, &image.media_type, image.bytes.clone())
                .await
                .with_context(|| format!("moving {} to {}", t.tag, image.digest))?;
            progress(format!("{} -> {}", t.tag, image.digest));
        }
        journal.tags[i].done = true;
        journal.save()?;
    }
    Ok(())
}

/// Puts the moving tags a release moved back where the journal found them.
/// A tag that did not exist before stays (a DELETE would remove every tag
/// of its digest); a tag moved since by someone else is left alone.
/// Returns what was done, one line per tag.
pub async fn rollback(
    client: &Client,
    repo: &Repository,
    journal: &Journal,
) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for t in journal
        .tags
        .iter()
        .filter(|t| t.kind == TagKind::Moving && t.looked)
    {
        let Some(ours) = journal.target(&t.variant) else {
            continue;
        };
        let now = tag_digest(client, repo, &t.tag).await?;
        if now.as_ref() != Some(ours) {
            done.push(format!(
                "{}: left at {} (not this release's {ours})",
                t.tag,
                now.map_or("nothing".into(), |d| d.to_string())
            ));
            continue;
        }
        let Some(previous) = &t.previous else {
            done.push(format!(
                "{}: left at {ours}: it did not exist before and tags are never deleted",
                t.tag
            ));
            continue;
        };
        let old = client
            .fetch_manifest(&Reference::with_tag(repo, &t.tag)?.by_digest(previous.clone()))
            .await
            .with_context(|| format!("reading the previous image of {}", t.tag))?;
        let reference = Reference::with_tag(repo, &t.tag)?;
        client
            .put_manifest(&reference, &old.media_type, Bytes::from(old.bytes))
            .await?;
        done.push(format!("{}: back at {previous}", t.tag));
    }
    Ok(done)
}
