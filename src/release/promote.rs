//! After staging: read every staged image back and gate it (verify), look at
//! every release tag before any moves (an immutable tag at another digest
//! stops the release with zero tag writes), point the tags at the staged
//! manifests by PUT of their exact bytes (no layer is sent again; a tag
//! already there costs its HEAD only), and `--rollback`.

use super::journal::{Journal, JournalError, Staged, TagKind, TagWrite};
use super::plan::Planned;
use crate::labels::{self, CheckRecord};
use crate::name::Platform;
use crate::registry::{
    self, Client, Digest, ImageConfig, Index, Manifest, Reference, Repository, media_type,
};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;

/// A staged manifest as read back: what the tags get.
pub(crate) struct Image {
    pub digest: Digest,
    pub media_type: String,
    pub bytes: Bytes,
}

/// What verify read back of each staged manifest, by digest: the index
/// of a multi-platform variant, and each platform image with its config.
/// The attach step describes exactly these images, so it takes them from
/// here instead of reading them again (issue 29: what the release already
/// read, it does not read again); only a resume past verify reads them.
pub(crate) type ReadBack = BTreeMap<Digest, (Manifest, Option<ImageConfig>)>;

/// What verify found: the images by variant (what the tags get), where
/// each unwritten tag points now, and every manifest and config it read.
pub(crate) struct Verified {
    pub images: BTreeMap<String, Image>,
    pub now: BTreeMap<String, Option<Digest>>,
    pub read_back: ReadBack,
}

/// An immutable tag that already names another image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    pub tag: String,
    pub found: String,
    pub planned: String,
}

/// Every conflict at once; nothing was written to a release tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) struct Conflicts(pub Vec<Conflict>);

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

/// Why verifying, promoting or rolling back a release stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PromoteError {
    /// The staged image of a variant could not be read back by digest.
    #[error("{variant}: the staged image is not there")]
    NotThere {
        variant: String,
        #[source]
        source: Box<registry::Error>,
    },
    /// The staged platform image of an index could not be read back.
    #[error("{variant}: the staged {platform} image is not there")]
    ChildNotThere {
        variant: String,
        platform: Platform,
        #[source]
        source: Box<registry::Error>,
    },
    /// A staged image read back does not pass the gate: why, as the gate
    /// says it (the platform first, for an index's image).
    #[error("{variant}: staged image {reference}: {why}")]
    Gate {
        variant: String,
        reference: String,
        why: String,
    },
    /// Immutable tags that already name other images; nothing was written.
    #[error(transparent)]
    Conflicts(#[from] Conflicts),
    #[error("moving {tag} to {digest}")]
    Move {
        tag: String,
        digest: Digest,
        #[source]
        source: Box<registry::Error>,
    },
    #[error("reading the previous image of {tag}")]
    ReadPrevious {
        tag: String,
        #[source]
        source: Box<registry::Error>,
    },
    /// A tag of the journal that is no tag.
    #[error(transparent)]
    Tag(#[from] crate::name::Invalid),
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// A release stopped at verify or promote is an operational failure (the
/// conflicts too: the registry holds what it holds), but for the errors
/// it carries that say their own.
impl crate::exit::HasStatus for PromoteError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            PromoteError::NotThere { .. }
            | PromoteError::ChildNotThere { .. }
            | PromoteError::Gate { .. }
            | PromoteError::Conflicts(_)
            | PromoteError::Move { .. }
            | PromoteError::ReadPrevious { .. } => Status::Failure,
            PromoteError::Tag(e) => e.exit_status(),
            PromoteError::Registry(e) => e.exit_status(),
            PromoteError::Journal(e) => e.exit_status(),
        }
    }
}

/// The digest `tag` points at, `None` when it does not exist (one HEAD).
pub(crate) async fn tag_digest(
    client: &Client,
    repo: &Repository,
    tag: &str,
) -> Result<Option<Digest>, PromoteError> {
    Ok(client
        .manifest_digest(&Reference::with_tag(repo, tag)?)
        .await?)
}

/// Reads each staged image back by digest (bytes verified) and gates its
/// config: the version stamped, a passing check record of the inputs and
/// the tools planned. A staged index is read back whole: it must list the
/// staged platform images, each gated the same way. Then looks at every
/// tag not yet written: the first run records where each pointed.
pub(crate) async fn verify(
    client: &Client,
    repo: &Repository,
    journal: &mut Journal,
) -> Result<Verified, PromoteError> {
    // Every image read back and every tag looked at, all at once (the
    // client bounds them per registry): over a link with latency, one at a
    // time is a round trip of nothing each, and the tags need not wait
    // for the images.
    let reading = (journal.plan.variants.iter())
        .map(|planned| read_back_one(client, repo, planned, &journal.staged[&planned.variant]));
    let looking = (journal.tags.iter().filter(|t| !t.done))
        .map(|t| async move { tag_digest(client, repo, &t.tag).await });
    let (read, found_all) = futures::future::try_join(
        futures::future::try_join_all(reading),
        futures::future::try_join_all(looking),
    )
    .await?;
    let mut images = BTreeMap::new();
    let mut read_back = ReadBack::new();
    for (variant, image, read) in read {
        images.insert(variant, image);
        read_back.extend(read);
    }
    let mut found_all = found_all.into_iter();
    let mut now = BTreeMap::new();
    let mut conflicts = Vec::new();
    for t in journal.tags.iter_mut().filter(|t| !t.done) {
        let found = found_all.next().expect("one answer per tag looked at");
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
    Ok(Verified {
        images,
        now,
        read_back,
    })
}

/// One staged image read back by digest and gated (see [`verify`]): its
/// variant, the image, and what was read (manifests and configs, by
/// digest).
async fn read_back_one(
    client: &Client,
    repo: &Repository,
    planned: &Planned,
    staged: &Staged,
) -> Result<(String, Image, ReadBack), PromoteError> {
    let mut read_back = ReadBack::new();
    let digest = staged.digest.clone();
    let reference = Reference::in_repo(repo, digest.clone());
    let manifest =
        (client.fetch_manifest(&reference).await).map_err(|source| PromoteError::NotThere {
            variant: planned.variant.clone(),
            source: Box::new(source),
        })?;
    let fail = |why: String| PromoteError::Gate {
        variant: planned.variant.clone(),
        reference: reference.to_string(),
        why,
    };
    if media_type::is_index(&manifest.media_type) {
        let listed: BTreeMap<crate::name::Platform, Digest> =
            Index::parse(&reference.to_string(), &manifest.bytes)?
                .platforms()
                .into_iter()
                .map(|(p, d)| (p.normalized(), d))
                .collect();
        if listed != staged.platforms {
            return Err(fail(format!(
                "the index lists {}, but {} were staged",
                describe(&listed),
                describe(&staged.platforms)
            )));
        }
        for (platform, child) in &listed {
            let child_ref = reference.by_digest(child.clone());
            let child_manifest = (client.fetch_manifest(&child_ref).await).map_err(|source| {
                PromoteError::ChildNotThere {
                    variant: planned.variant.clone(),
                    platform: platform.clone(),
                    source: Box::new(source),
                }
            })?;
            let config = client.config_of(&child_ref, &child_manifest).await?;
            gate(&config.labels, planned).map_err(|why| fail(format!("{platform}: {why}")))?;
            read_back.insert(child.clone(), (child_manifest, Some(config)));
        }
        read_back.insert(digest.clone(), (manifest.clone(), None));
    } else {
        let config = client.config_of(&reference, &manifest).await?;
        gate(&config.labels, planned).map_err(fail)?;
        read_back.insert(digest.clone(), (manifest.clone(), Some(config)));
    }
    let image = Image {
        digest,
        media_type: manifest.media_type.clone(),
        bytes: Bytes::from(manifest.bytes),
    };
    Ok((planned.variant.clone(), image, read_back))
}

/// A staged config's gate: the version stamped, a passing check record of
/// its inputs listing the tools planned.
fn gate(labels: &BTreeMap<String, String>, planned: &Planned) -> Result<(), String> {
    if labels.get(labels::VERSION) != Some(&planned.version.to_string()) {
        return Err(format!(
            "its {} label is {:?}, not {}",
            labels::VERSION,
            labels.get(labels::VERSION),
            planned.version
        ));
    }
    match CheckRecord::passing_for(labels) {
        Some(r) if r.tools == planned.tools => Ok(()),
        Some(_) => Err("its check record lists other tools than planned".into()),
        None => Err("it carries no passing check record of its inputs".into()),
    }
}

/// `linux/amd64 (sha256:…), …` for messages.
fn describe(platforms: &BTreeMap<crate::name::Platform, Digest>) -> String {
    if platforms.is_empty() {
        return "no platform images".into();
    }
    platforms
        .iter()
        .map(|(p, d)| format!("{p} ({})", d.short()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes every tag not yet written, saving the journal after each. The
/// journal lists the immutable tags before the moving ones, and a kind's
/// tags are written all at once (the client bounds the requests per
/// registry; over a 40 ms round trip the family's 24 tags one after
/// another were a second of the release), the moving ones only once every
/// immutable one is written. Answers are recorded, and said, in the
/// journal's order; a tag already at its image is only marked.
pub(crate) async fn promote(
    client: &Client,
    repo: &Repository,
    journal: &mut Journal,
    images: &BTreeMap<String, Image>,
    now: &BTreeMap<String, Option<Digest>>,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(), PromoteError> {
    use futures::StreamExt as _;
    for kind in [TagKind::Immutable, TagKind::Moving] {
        let todo: Vec<(usize, TagWrite)> = (journal.tags.iter().cloned().enumerate())
            .filter(|(_, t)| t.kind == kind && !t.done)
            .collect();
        let at_once = todo.len().max(1);
        let writes = todo.into_iter().map(|(i, t)| {
            let image = &images[&t.variant];
            async move {
                if now.get(&t.tag).cloned().flatten().as_ref() == Some(&image.digest) {
                    return Ok((i, format!("{} already at {}", t.tag, image.digest)));
                }
                let reference = Reference::with_tag(repo, &t.tag)?;
                (client
                    .put_manifest(&reference, &image.media_type, image.bytes.clone())
                    .await)
                    .map_err(|source| PromoteError::Move {
                        tag: t.tag.clone(),
                        digest: image.digest.clone(),
                        source: Box::new(source),
                    })?;
                crate::failpoint::hit("release.tag-answered");
                Ok::<_, PromoteError>((i, format!("{} -> {}", t.tag, image.digest)))
            }
        });
        // In the journal's order, all started at once: a failure stops the
        // rest (the writes already answered stay, and a resume finds them
        // at their image).
        let mut answers = futures::stream::iter(writes).buffered(at_once);
        while let Some(answer) = answers.next().await {
            let (i, said) = answer?;
            progress(said);
            journal.tags[i].done = true;
            journal.save()?;
        }
    }
    Ok(())
}

/// Puts the moving tags a release moved back where the journal found them.
/// A tag that did not exist before stays (a DELETE would remove every tag
/// of its digest); a tag moved since by someone else is left alone.
/// Returns what was done, one line per tag.
pub(crate) async fn rollback(
    client: &Client,
    repo: &Repository,
    journal: &Journal,
) -> Result<Vec<String>, PromoteError> {
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
        let at = Reference::with_tag(repo, &t.tag)?.by_digest(previous.clone());
        let old =
            (client.fetch_manifest(&at).await).map_err(|source| PromoteError::ReadPrevious {
                tag: t.tag.clone(),
                source: Box::new(source),
            })?;
        let reference = Reference::with_tag(repo, &t.tag)?;
        client
            .put_manifest(&reference, &old.media_type, Bytes::from(old.bytes))
            .await?;
        done.push(format!("{}: back at {previous}", t.tag));
    }
    Ok(done)
}
