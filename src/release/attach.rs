//! The attach step (issue 19): signed statements about every released
//! image, uploaded as OCI 1.1 referrers after promotion and before pins.
//!
//! # What is attached
//!
//! For each platform image a release publishes (the image itself for a
//! single-platform variant, each platform's stamped image of an index):
//! - an **image signature** (predicate `https://sigstore.dev/cosign/sign/v1`,
//!   an empty predicate: the statement's subject is what is signed);
//! - **SLSA v1 provenance**, from facts the build recorded on the image
//!   (its `org.opencontainers.image.*` and `dev.sunaba.*` labels: source,
//!   revision, base by digest, build inputs) and the release (variant,
//!   platform, the source image, the release id as invocation id);
//! - the **test result** its check record label states (`TestResult::of_record`);
//! - an **SPDX 2.3 SBOM** of the pushed image's layers (dpkg's status and
//!   os-release): what staging noted of each layer in the layer cache as
//!   it compressed it, else read from the registry (each distinct layer
//!   blob of the release fetched once and gunzipped as a stream, and
//!   noted; `attest::registry_image`), the same bytes `sbom` writes for
//!   the image.
//!
//! For an index (a multi-platform variant), also a signature and a
//! provenance of the index itself. Each statement is an in-toto Statement
//! v1 in a DSSE envelope (ECDSA P-256), wrapped as a Sigstore bundle v0.3:
//! one referrer manifest per bundle (`attest::referrer`).
//!
//! # How, and why so
//! - **The pinned digests never change**: the referrers point at the
//!   images (`subject`); no index or image is rewritten (buildx's
//!   in-index attestations do change the index digest).
//! - **Deterministic**: statements carry only recorded facts (no clock),
//!   RFC 6979 signatures are a function of key and payload, so the same
//!   release gives the same referrer digests — which is what makes a
//!   resumed attach idempotent.
//! - **The fallback tag**: a registry that answers a referrer's PUT
//!   without `OCI-Subject` has no referrers API (Debian's docker-registry
//!   2.8 never has), so the subject's `sha256-<hex>` tag is read, the new
//!   entries merged in (by digest: never listed twice; others' entries
//!   kept) and written back, each entry with its `artifactType` and
//!   annotations (what sigstore/cosign#4641 lost).
//! - **What the release read is not read again**: each subject's manifest,
//!   and an image's config, are those verify read back before promoting
//!   (`promote::ReadBack`); only a resume past verify reads them here.
//! - **Resumable**: the journal records each subject once its referrers
//!   are uploaded *and* listed; a resumed release skips those and redoes
//!   the rest, whose PUTs write the same bytes again and whose merge adds
//!   nothing already listed. The key is not journaled, its hint is: a
//!   resume must be given the same key.

use super::journal::{AttachedReferrer, AttachedSubject, Journal, JournalError, Staged};
use super::plan::{Planned, Source};
use crate::attest::statement::{self, BuildFacts, Resource, TestResult};
use crate::attest::{AttestError, Bundle, PrivateKey, dsse, referrer};
use crate::labels;
use crate::registry::{
    self, Client, Digest, ErrorKind, Reference, Repository, fallback_reference, media_type as mt,
};
use bytes::Bytes;

/// Why attaching stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttachError {
    /// The journal says the release got this far without staging a variant.
    #[error("{variant} is not staged")]
    NotStaged { variant: String },
    #[error("attaching to {variant} ({subject})")]
    Subject {
        variant: String,
        subject: Digest,
        #[source]
        source: Box<AttachError>,
    },
    /// Reading an image's files, or a referrer or its listing.
    #[error(transparent)]
    Attest(#[from] AttestError),
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Attaching fails operationally, but for the errors it carries that say
/// their own.
impl crate::exit::HasStatus for AttachError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            AttachError::NotStaged { .. } => Status::Failure,
            AttachError::Subject { source, .. } => source.exit_status(),
            AttachError::Attest(e) => e.exit_status(),
            AttachError::Registry(e) => e.exit_status(),
            AttachError::Journal(e) => e.exit_status(),
        }
    }
}

/// What attaching talks to.
pub(crate) struct Attacher<'a> {
    pub client: &'a Client,
    pub repo: &'a Repository,
    pub key: &'a PrivateKey,
    /// images.toml, for the lock files each SBOM lists.
    pub manifest: Option<&'a crate::manifest::Manifest>,
    /// The empty config blob is in the repository (looked at once).
    pub has_empty: std::cell::Cell<bool>,
    /// The staged manifests (and configs) verify read, by digest; a
    /// subject missing here (a resume past verify) is read from the
    /// registry.
    pub read_back: super::promote::ReadBack,
    /// The layers read so far (each distinct blob once), from the layer
    /// cache's notes when it has them.
    pub layers: crate::attest::registry_image::LayerReader,
    /// The checkout's commit and the git ref it is (see [`checkout_ref`]).
    pub checkout: Option<CheckoutRef>,
}

/// A commit and the git ref whose tip it is, as the checkout says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckoutRef {
    pub commit: String,
    pub git_ref: String,
}

/// The ref the release's checkout is on, from facts only: GitHub's
/// `GITHUB_REF` with its `GITHUB_SHA` when both are set, else `git
/// symbolic-ref HEAD` with `git rev-parse HEAD` in `root` (a detached HEAD
/// is on no ref: `None`). The provenance of an image records it only when
/// the image's recorded revision is that very commit (a `-dirty` build,
/// or one of another commit, gets no ref).
pub(crate) fn checkout_ref(root: &std::path::Path) -> Option<CheckoutRef> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let (Some(git_ref), Some(commit)) = (env("GITHUB_REF"), env("GITHUB_SHA")) {
        return Some(CheckoutRef { commit, git_ref });
    }
    git_checkout_ref(root)
}

/// `git symbolic-ref HEAD` and `git rev-parse HEAD` in `root`; `None` for
/// a detached HEAD or no repository.
fn git_checkout_ref(root: &std::path::Path) -> Option<CheckoutRef> {
    let git = |args: &[&str]| {
        crate::process::Cmd::new("git")
            .arg("-C")
            .arg(root)
            .args(args.iter().copied())
            .run()
            .ok()
            .map(|o| o.stdout.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    Some(CheckoutRef {
        git_ref: git(&["symbolic-ref", "-q", "HEAD"])?,
        commit: git(&["rev-parse", "HEAD"])?,
    })
}

/// The subjects of a variant's staged image: each platform image (the
/// image itself when single-platform), then the index, if any.
pub(crate) fn subjects(staged: &Staged) -> Vec<(Digest, bool)> {
    if staged.platforms.is_empty() {
        return vec![(staged.digest.clone(), false)];
    }
    let mut out: Vec<(Digest, bool)> = staged
        .platforms
        .values()
        .map(|d| (d.clone(), false))
        .collect();
    out.push((staged.digest.clone(), true));
    out
}

/// Attaches what the journal has not yet recorded as attached, saving the
/// journal after every subject.
pub(crate) async fn attach_all(
    attacher: &Attacher<'_>,
    journal: &mut Journal,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(), AttachError> {
    for planned in journal.plan.variants.clone() {
        let staged = journal
            .staged
            .get(&planned.variant)
            .ok_or_else(|| AttachError::NotStaged {
                variant: planned.variant.clone(),
            })?
            .clone();
        for (subject, is_index) in subjects(&staged) {
            if journal.attached.contains_key(&subject) {
                continue;
            }
            let done = (attacher.attach(&planned, &staged, &subject, is_index, &journal.id))
                .await
                .map_err(|source| AttachError::Subject {
                    variant: planned.variant.clone(),
                    subject: subject.clone(),
                    source: Box::new(source),
                })?;
            progress(format!(
                "attached {} referrer(s) to {} {}{}",
                done.referrers.len(),
                planned.variant,
                subject,
                if done.fallback {
                    " (listed in its sha256-<hex> tag)"
                } else {
                    ""
                }
            ));
            journal.attached.insert(subject, done);
            journal.save()?;
        }
    }
    Ok(())
}

impl Attacher<'_> {
    async fn attach(
        &self,
        planned: &Planned,
        staged: &Staged,
        subject: &Digest,
        is_index: bool,
        invocation: &str,
    ) -> Result<AttachedSubject, AttachError> {
        let (manifest, config) = self.described(subject, is_index).await?;
        let descriptor = referrer::Descriptor {
            media_type: manifest.media_type.clone(),
            digest: subject.to_string(),
            size: manifest.bytes.len() as u64,
            artifact_type: None,
            annotations: Default::default(),
        };
        // An image comes with its config, an index without.
        let statements = match &config {
            Some(config) => (self.of_image(planned, &manifest, config, invocation)).await?,
            None => self.of_index(planned, staged, subject, invocation),
        };
        let empty = Digest::sha256(referrer::EMPTY_JSON);
        if !self.has_empty.get() {
            if self.client.blob_size(self.repo, &empty).await?.is_none() {
                self.client
                    .upload_blob(self.repo, Bytes::from_static(referrer::EMPTY_JSON))
                    .await?;
            }
            self.has_empty.set(true);
        }
        let mut referrers = Vec::new();
        let mut entries = Vec::new();
        let mut fallback = false;
        for (predicate_type, payload) in statements {
            let bundle = Bundle::sign(dsse::IN_TOTO, &payload, self.key).to_json();
            // Uploaded without asking first: a bundle is new but for a
            // resume, which costs its bytes again, not a request each time.
            self.client
                .upload_blob(self.repo, Bytes::from(bundle.clone()))
                .await?;
            let bytes = referrer::manifest(&descriptor, &bundle, predicate_type);
            let digest = Digest::sha256(&bytes);
            let (_, answered) = self
                .client
                .put_manifest_answered(
                    &Reference::in_repo(self.repo, digest.clone()),
                    mt::OCI_MANIFEST,
                    Bytes::from(bytes.clone()),
                )
                .await?;
            crate::failpoint::hit("release.referrer-answered");
            fallback |= !answered;
            entries.push(referrer::entry(&bytes)?);
            referrers.push(AttachedReferrer {
                digest,
                predicate_type: predicate_type.to_string(),
            });
        }
        if fallback {
            self.list_in_fallback(subject, &entries).await?;
        }
        Ok(AttachedSubject {
            variant: planned.variant.clone(),
            referrers,
            fallback,
        })
    }

    /// The manifest of `subject` (and its config, for an image): as verify read them, else from the registry.
    async fn described(
        &self,
        subject: &Digest,
        is_index: bool,
    ) -> Result<(registry::Manifest, Option<registry::ImageConfig>), AttachError> {
        if let Some((manifest, config)) = self.read_back.get(subject)
            && is_index == config.is_none()
        {
            return Ok((manifest.clone(), config.clone()));
        }
        let reference = Reference::in_repo(self.repo, subject.clone());
        let manifest = self.client.fetch_manifest(&reference).await?;
        let config = match is_index {
            true => None,
            false => Some(self.client.config_of(&reference, &manifest).await?),
        };
        Ok((manifest, config))
    }

    /// Read-modify-write of the subject's fallback tag.
    async fn list_in_fallback(
        &self,
        subject: &Digest,
        entries: &[referrer::Descriptor],
    ) -> Result<(), AttachError> {
        let tag = fallback_reference(self.repo, subject);
        let existing = match self.client.fetch_manifest(&tag).await {
            Ok(m) => Some(m.bytes),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(index) = referrer::merge(existing.as_deref(), entries)? {
            self.client
                .put_manifest(&tag, mt::OCI_INDEX, Bytes::from(index))
                .await?;
            crate::failpoint::hit("release.referrers-listed");
        }
        Ok(())
    }

    fn subject_of(&self, digest: &Digest) -> Vec<Resource> {
        vec![Resource::sha256(self.repo.to_string(), &digest.to_string())]
    }

    /// Signature, provenance, test result and SBOM of a platform image.
    async fn of_image(
        &self,
        planned: &Planned,
        manifest: &crate::registry::Manifest,
        config: &crate::registry::ImageConfig,
        invocation: &str,
    ) -> Result<Vec<(&'static str, Vec<u8>)>, AttachError> {
        let digest = &manifest.digest;
        let subject = self.subject_of(digest);
        let platform = config.platform.normalized().to_string();
        let mut facts = facts(planned, &config.labels, &platform, invocation);
        if let Some(c) = &self.checkout
            && c.commit == facts.commit
        {
            facts.git_ref = c.git_ref.clone();
        }
        let record = labels::CheckRecord::from_labels(&config.labels).and_then(Result::ok);
        let result = match &record {
            Some(r) => TestResult::of_record(r),
            None => TestResult {
                result: "FAILED",
                configuration: Vec::new(),
                url: None,
                passed_tests: Vec::new(),
                warned_tests: Vec::new(),
                failed_tests: vec!["check: no readable check record".into()],
            },
        };
        let sbom_subject = crate::attest::sbom::Subject::by_digest(
            &self.repo.to_string(),
            &digest.to_string(),
            config.created.as_deref().unwrap_or_default(),
        );
        // From the registry, not the engine's `save` even for an engine
        // source: `save` streams the whole uncompressed image (12 s for
        // `full` on Docker 20.10), the layer reader only the distinct
        // compressed blobs of the release (docs/lab-notes.md).
        let files = self
            .layers
            .files(self.client, self.repo, &sbom_subject.name, &manifest.bytes)
            .await?;
        let arch = config.platform.architecture.to_string();
        let locked = crate::attest::locked::of_image_labels(self.manifest, &config.labels, &arch);
        let (sbom, _) = crate::attest::sbom::of_files(
            &sbom_subject,
            &files,
            &locked,
            crate::attest::sbom::Format::SpdxJson,
            env!("CARGO_PKG_VERSION"),
        );
        let sbom: serde_json::Value = serde_json::from_slice(&sbom).expect("our SBOM is JSON");
        let mut statements = signature_and_provenance(&subject, &facts);
        statements.push((
            statement::TEST_RESULT,
            statement::statement(&subject, statement::TEST_RESULT, &result),
        ));
        statements.push((
            referrer::SPDX,
            statement::statement(&subject, referrer::SPDX, &sbom),
        ));
        Ok(statements)
    }

    /// Signature and provenance of an index (its platforms' own facts are
    /// in theirs).
    fn of_index(
        &self,
        planned: &Planned,
        staged: &Staged,
        digest: &Digest,
        invocation: &str,
    ) -> Vec<(&'static str, Vec<u8>)> {
        let subject = self.subject_of(digest);
        let platforms: Vec<String> = staged.platforms.keys().map(ToString::to_string).collect();
        let mut facts = facts(
            planned,
            &Default::default(),
            &platforms.join(","),
            invocation,
        );
        facts.dependencies.extend(
            staged
                .platforms
                .iter()
                .map(|(p, d)| Resource::sha256(format!("{}@{p}", self.repo), &d.to_string())),
        );
        signature_and_provenance(&subject, &facts)
    }
}

/// The two statements every subject gets: the signature (an empty
/// predicate: the signed subject is the claim) and the provenance.
fn signature_and_provenance(
    subject: &[Resource],
    facts: &BuildFacts,
) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            referrer::SIGN,
            statement::statement(subject, referrer::SIGN, &serde_json::json!({})),
        ),
        (
            statement::PROVENANCE,
            statement::statement(
                subject,
                statement::PROVENANCE,
                &statement::provenance(facts),
            ),
        ),
    ]
}

/// The provenance facts of a variant's image: what its labels recorded
/// (source, revision, base by digest, build inputs) and what the release
/// knows (variant, platform, the source image, its id).
fn facts(
    planned: &Planned,
    labels: &std::collections::BTreeMap<String, String>,
    platform: &str,
    invocation: &str,
) -> BuildFacts {
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let mut dependencies = Vec::new();
    if let Some(base) = labels.get(labels::OCI_BASE_DIGEST) {
        let name = labels
            .get(labels::OCI_BASE_NAME)
            .cloned()
            .unwrap_or_else(|| "base".into());
        dependencies.push(Resource::sha256(name, base));
    }
    if let Some(inputs) = labels.get(labels::INPUTS) {
        dependencies.push(Resource::sha256("build inputs", inputs));
    }
    match &planned.source {
        Source::Engine {
            reference,
            image_id,
        } => {
            dependencies.push(Resource::sha256(reference.clone(), image_id));
        }
        Source::Registry { reference } => {
            if let Some((name, digest)) = reference.rsplit_once('@') {
                dependencies.push(Resource::sha256(name, digest));
            }
        }
    }
    BuildFacts {
        repository: label(labels::OCI_SOURCE),
        // The build records no git ref (the revision is the commit); the
        // attacher sets the checkout's when it is of that commit.
        git_ref: String::new(),
        commit: label(labels::OCI_REVISION),
        variant: planned.variant.clone(),
        platform: platform.to_string(),
        dependencies,
        builder_version: env!("CARGO_PKG_VERSION").to_string(),
        invocation_id: invocation.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkout_ref_is_the_branch_head_names_and_none_when_detached() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        git(&["init", "-q", "-b", "trunk"]);
        git(&["commit", "-q", "--allow-empty", "-m", "one"]);
        let commit = git(&["rev-parse", "HEAD"]);
        assert_eq!(
            git_checkout_ref(dir.path()),
            Some(CheckoutRef {
                commit: commit.clone(),
                git_ref: "refs/heads/trunk".into()
            })
        );
        git(&["checkout", "-q", "--detach"]);
        assert_eq!(git_checkout_ref(dir.path()), None, "a detached HEAD");
        let elsewhere = tempfile::tempdir().unwrap();
        assert_eq!(git_checkout_ref(elsewhere.path()), None, "no repository");
    }

    #[test]
    fn attaching_fails_operationally_and_names_the_subject() {
        use crate::exit::{HasStatus, Status};
        let missing = crate::registry::Error::status("r.io/a@sha256:x", "r.io", 404, b"");
        let e = AttachError::Subject {
            variant: "python".into(),
            subject: Digest::sha256(b"a"),
            source: Box::new(missing.into()),
        };
        assert!(
            matches!(&e, AttachError::Subject { source, .. } if matches!(**source, AttachError::Registry(_)))
        );
        assert_eq!(
            crate::error_chain::error_chain(&e),
            format!(
                "attaching to python ({}): r.io/a@sha256:x: not found in registry r.io (HTTP 404)",
                Digest::sha256(b"a")
            )
        );
        assert_eq!(e.exit_status(), Status::Failure);
        let not_staged = AttachError::NotStaged {
            variant: "go".into(),
        };
        assert_eq!(not_staged.to_string(), "go is not staged");
        assert_eq!(not_staged.exit_status(), Status::Failure);
    }
}
