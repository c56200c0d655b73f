//! The journal of one release, `target/sunaba-release/<id>.json`: the plan,
//! what each step has done so far and what the registry held before, written
//! atomically after every step (every staged variant, every tag written), so
//! `--resume` repeats no finished write and `--rollback` knows what the
//! moving tags pointed at.
//!
//! The journal's types are all here, what attaching records too
//! ([`AttachedSubject`]): the steps depend on the journal, never the
//! journal on a step.

use super::plan::Plan;
use crate::fsutil::{self, FileLock, FsError};
use crate::registry::Digest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The journal format this build writes and reads.
pub(crate) const SCHEMA: u32 = 1;

/// The directory of the journals, beside images.toml.
pub(crate) fn dir(root: &Path) -> PathBuf {
    root.join("target/sunaba-release")
}

/// Locks the journal directory `dir` for one release run (one release at a
/// time on this machine: `<dir>/release.lock`, held until dropped), and then
/// removes what a killed run's journal write left there: the temp file of
/// an atomic write that never reached its rename (`.<id>.json.<random>.tmp`).
/// Only with the lock held is no other run mid-write.
pub(crate) fn lock(dir: &Path) -> Result<FileLock, JournalError> {
    let lock = FileLock::acquire(&dir.join("release"))?;
    fsutil::remove_stale_temps_in(dir, |target| target.ends_with(".json"));
    Ok(lock)
}

/// The last step a release finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Step {
    /// The plan is recorded; nothing written yet.
    Planned,
    /// Every image is staged (in the repository by digest, untagged).
    Staged,
    /// The staged images were read back and gated; every tag was looked at.
    Verified,
    /// Every release tag points at its image.
    Promoted,
    /// Every released image has its signed referrers (or the release was
    /// planned without a signing key).
    Attached,
    /// image_pins.json is written: the release is done.
    Pinned,
    /// `--rollback` put the moving tags back.
    RolledBack,
}

/// A variant's staged image (in the release repository by digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Staged {
    /// The manifest the release tags will point at (version label stamped).
    pub digest: Digest,
    pub media_type: String,
    /// Its config blob (the checked config plus the version label); `None`
    /// for an index, whose platform images each have their own.
    pub config: Option<Digest>,
    /// What was pushed from the engine before the stamp, for an engine source.
    pub pushed: Option<Digest>,
    /// For an index: each platform (normalised, `linux/arm64`) and its
    /// stamped image. Empty for a single-platform image.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<crate::name::Platform, Digest>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TagKind {
    Immutable,
    Moving,
}

/// One release tag to write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TagWrite {
    pub tag: String,
    pub variant: String,
    pub kind: TagKind,
    /// Whether the tag was looked at before any tag moved, and what it
    /// pointed at then (`None`: absent). Recorded once, by the first run.
    pub looked: bool,
    pub previous: Option<Digest>,
    /// Written (or found at the image already).
    pub done: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub schema: u32,
    pub id: String,
    pub created: String,
    pub step: Step,
    pub plan: Plan,
    /// Variant -> its staged image.
    pub staged: BTreeMap<String, Staged>,
    /// Immutable tags first, then moving tags: the order they are written in.
    pub tags: Vec<TagWrite>,
    /// Why the last run stopped, when it failed.
    pub failure: Option<String>,
    /// The hint of the key the release signs with (`None`: it attaches
    /// nothing). The key itself is never journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<String>,
    /// Subject (an image or index digest) -> the referrers attached to it,
    /// once they are uploaded and listed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attached: BTreeMap<Digest, AttachedSubject>,
    #[serde(skip)]
    path: PathBuf,
}

/// What the journal records of a subject (an image or index digest) once
/// its referrers are attached and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AttachedSubject {
    pub variant: String,
    pub referrers: Vec<AttachedReferrer>,
    /// Whether they were listed through the fallback tag (the registry
    /// answered without `OCI-Subject`).
    pub fallback: bool,
}

/// A referrer the release attached to one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AttachedReferrer {
    pub digest: Digest,
    pub predicate_type: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalError {
    #[error("no release {id} (no {path}); `ls {}` lists the releases", .path.parent().map(|p| p.display().to_string()).unwrap_or_default())]
    Missing { id: String, path: PathBuf },
    /// A journal asked for by something that is not a release id.
    #[error(transparent)]
    Id(#[from] super::NotAnId),
    #[error("cannot read the release journal {path}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the release journal {path}")]
    Malformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "cannot read the release journal {path}: schema {found}, this sunaba-images reads \
         schema {SCHEMA}"
    )]
    Schema { path: PathBuf, found: u32 },
    #[error(transparent)]
    Write(#[from] FsError),
    /// `--resume` of a release that was rolled back.
    #[error("release {id} was rolled back; plan a new release")]
    RolledBack { id: String },
    /// A new release while earlier ones wrote tags and did not finish.
    #[error(
        "release {} wrote tags and did not finish: resume it (`--resume ID`) or roll it back \
         (`--rollback ID`) first",
        .ids.join(", ")
    )]
    Unfinished { ids: Vec<String> },
}

/// A journal that cannot be read or written, or a release that cannot be
/// resumed or started as asked, is an operational failure: the release
/// ids are checked against the journals on disk, not the command line. A
/// text that is no release id at all is a usage error (clap refuses it on
/// the command line before this).
impl crate::exit::HasStatus for JournalError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            JournalError::Id(_) => crate::exit::Status::Usage,
            JournalError::Missing { .. }
            | JournalError::Unreadable { .. }
            | JournalError::Malformed { .. }
            | JournalError::Schema { .. }
            | JournalError::Write(_)
            | JournalError::RolledBack { .. }
            | JournalError::Unfinished { .. } => crate::exit::Status::Failure,
        }
    }
}

impl Journal {
    /// A new journal for `plan` (not yet saved).
    pub(crate) fn new(dir: &Path, plan: Plan, created: String) -> Journal {
        let mut tags = Vec::new();
        for kind in [TagKind::Immutable, TagKind::Moving] {
            for v in &plan.variants {
                let names = match kind {
                    TagKind::Immutable => vec![v.immutable.clone()],
                    TagKind::Moving => v.moving.clone(),
                };
                tags.extend(names.into_iter().map(|tag| TagWrite {
                    tag,
                    variant: v.variant.clone(),
                    kind,
                    looked: false,
                    previous: None,
                    done: false,
                }));
            }
        }
        Journal {
            schema: SCHEMA,
            path: dir.join(format!("{}.json", plan.id)),
            id: plan.id.clone(),
            created,
            step: Step::Planned,
            plan,
            staged: BTreeMap::new(),
            tags,
            failure: None,
            signing_key: None,
            attached: BTreeMap::new(),
        }
    }

    pub(crate) fn load(dir: &Path, id: &str) -> Result<Journal, JournalError> {
        let id = &super::parse_id(id)?;
        let path = dir.join(format!("{id}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JournalError::Missing {
                    id: id.to_string(),
                    path,
                });
            }
            Err(source) => return Err(JournalError::Unreadable { path, source }),
        };
        let mut journal: Journal =
            serde_json::from_str(&text).map_err(|source| JournalError::Malformed {
                path: path.clone(),
                source,
            })?;
        if journal.schema != SCHEMA {
            let found = journal.schema;
            return Err(JournalError::Schema { path, found });
        }
        journal.path = path;
        Ok(journal)
    }

    /// Replaces the file atomically: a reader (or a resumed run after a
    /// kill) sees the journal before or after a step, never half of it.
    pub(crate) fn save(&self) -> Result<(), JournalError> {
        let mut text = serde_json::to_string_pretty(self).expect("a journal serialises");
        text.push('\n');
        fsutil::atomic_write(&self.path, text.as_bytes())?;
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Some tag write has happened (so the registry is half-released until
    /// the release is resumed or rolled back).
    pub(crate) fn wrote_tags(&self) -> bool {
        self.tags.iter().any(|t| t.done)
    }

    pub(crate) fn finished(&self) -> bool {
        matches!(self.step, Step::Pinned | Step::RolledBack)
    }

    /// Some image is still to be read from the engine and pushed.
    pub(crate) fn needs_engine(&self) -> bool {
        self.plan.variants.iter().any(|v| {
            matches!(v.source, super::plan::Source::Engine { .. })
                && !self.staged.contains_key(&v.variant)
        })
    }

    /// The digest a tag of `variant` is to point at, once it is staged.
    pub(crate) fn target(&self, variant: &str) -> Option<&Digest> {
        self.staged.get(variant).map(|s| &s.digest)
    }
}

impl Journal {
    /// A journal to resume: one that was rolled back is not.
    pub(crate) fn load_resumable(dir: &Path, id: &str) -> Result<Journal, JournalError> {
        let journal = Journal::load(dir, id)?;
        if journal.step == Step::RolledBack {
            return Err(JournalError::RolledBack { id: id.to_string() });
        }
        Ok(journal)
    }

    /// The journal of a new release of `plan`, saved before anything is
    /// written. A release that wrote tags and did not finish comes first:
    /// resumed or rolled back.
    pub(crate) fn start(
        dir: &Path,
        plan: Plan,
        signing_key: Option<String>,
    ) -> Result<Journal, JournalError> {
        let ids = unfinished(dir);
        if !ids.is_empty() {
            return Err(JournalError::Unfinished { ids });
        }
        let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let mut journal = Journal::new(dir, plan, created);
        journal.signing_key = signing_key;
        journal.save()?;
        Ok(journal)
    }
}

/// The releases in `dir` that wrote tags and are neither done nor rolled
/// back, by id: a new release waits until they are resumed or rolled back.
pub(crate) fn unfinished(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // Only a release's own name: not a temporary file, nor
            // anything else someone left there.
            super::parse_id(name.strip_suffix(".json")?).ok()
        })
        .filter(|id| Journal::load(dir, id).is_ok_and(|j| !j.finished() && j.wrote_tags()))
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::plan::{Planned, Source};
    use super::*;
    use crate::semver_rules::Bump;
    use semver::Version;

    const R1: &str = "20261201T000001.000Z-0001";
    const R2: &str = "20261201T000002.000Z-0002";
    const R3: &str = "20261201T000003.000Z-0003";
    const R4: &str = "20261201T000004.000Z-0004";

    pub(crate) fn planned(variant: &str, moving: &[&str]) -> Planned {
        Planned {
            variant: variant.into(),
            aliases: vec![variant.into()],
            version: Version::new(1, 0, 0),
            previous: None,
            bump: Bump::Major,
            why: "first release".into(),
            changes: Vec::new(),
            tools: Default::default(),
            platforms: vec!["linux/amd64".parse().unwrap()],
            source: Source::Registry {
                reference: format!("r/src@sha256:{}", "0".repeat(64)),
            },
            immutable: format!("{variant}-1.0.0"),
            moving: moving.iter().map(|m| m.to_string()).collect(),
            previous_pins: BTreeMap::new(),
        }
    }

    #[test]
    fn tags_are_ordered_immutable_first_and_the_journal_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            id: R1.into(),
            repository: "r/s".into(),
            variants: vec![planned("a", &["a-1.0", "a"]), planned("b", &["b"])],
            unchanged: Vec::new(),
        };
        let mut j = Journal::new(dir.path(), plan, "2026-12-01T00:00:00Z".into());
        let order: Vec<(&str, TagKind)> = j.tags.iter().map(|t| (t.tag.as_str(), t.kind)).collect();
        assert_eq!(
            order,
            [
                ("a-1.0.0", TagKind::Immutable),
                ("b-1.0.0", TagKind::Immutable),
                ("a-1.0", TagKind::Moving),
                ("a", TagKind::Moving),
                ("b", TagKind::Moving),
            ]
        );
        j.save().unwrap();
        assert_eq!(Journal::load(dir.path(), R1).unwrap(), j);
        assert!(unfinished(dir.path()).is_empty(), "no tag written yet");
        j.tags[0].done = true;
        j.save().unwrap();
        assert_eq!(unfinished(dir.path()), [R1]);
        j.step = Step::Pinned;
        j.save().unwrap();
        assert!(unfinished(dir.path()).is_empty());
        let err = Journal::load(dir.path(), "20261201T000009Z-0009")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("no release 20261201T000009Z-0009"), "{err}");
        // Only a release's own file counts; a stray `.json` there is not one.
        std::fs::write(dir.path().join("notes.json"), "{}").unwrap();
        assert!(unfinished(dir.path()).is_empty());
    }

    #[test]
    fn taking_the_lock_removes_what_a_killed_journal_write_left() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            id: R1.into(),
            repository: "r/s".into(),
            variants: vec![planned("a", &["a"])],
            unchanged: Vec::new(),
        };
        Journal::new(dir.path(), plan, "2026-12-01T00:00:00Z".into())
            .save()
            .unwrap();
        // As `atomic_write` names its temp file, killed before the rename.
        let left = dir.path().join(format!(".{R1}.json.Ab12Cd.tmp"));
        std::fs::write(&left, "{half a journal").unwrap();
        let journal = std::fs::read(dir.path().join(format!("{R1}.json"))).unwrap();
        let held = lock(dir.path()).unwrap();
        assert!(!left.exists(), "the killed write's temp file is removed");
        assert_eq!(
            std::fs::read(dir.path().join(format!("{R1}.json"))).unwrap(),
            journal
        );
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [format!("{R1}.json"), "release.lock".to_string()]);
        drop(held);
    }

    /// A journal `r1` in `dir` whose file is `text`.
    fn written(dir: &Path, text: &str) -> Result<Journal, JournalError> {
        std::fs::write(dir.join(format!("{R1}.json")), text).unwrap();
        Journal::load(dir, R1)
    }

    fn plan(id: &str) -> Plan {
        Plan {
            id: id.into(),
            repository: "r/s".into(),
            variants: vec![planned("a", &["a"])],
            unchanged: Vec::new(),
        }
    }

    #[test]
    fn the_journal_names_no_step_of_the_release() {
        let source = include_str!("journal.rs");
        let (code, _) = source.split_once("#[cfg(test)]").unwrap();
        for step in ["attach", "stage", "promote", "pin", "run", "gather", "legs"] {
            for import in [format!("super::{step}"), format!("release::{step}")] {
                assert!(!code.contains(&import), "journal.rs imports {import}");
            }
        }
    }

    #[test]
    fn each_kind_of_journal_error_is_its_own_and_a_failure() {
        use crate::exit::{HasStatus, Status};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let kinds = [
            Journal::load(d, R4).unwrap_err(),
            written(d, "{").unwrap_err(),
            written(d, &text_with_schema(d, 7)).unwrap_err(),
            Journal::load(&d.join(format!("{R1}.json")), R2).unwrap_err(),
            Journal::load(d, "../r1").unwrap_err(),
        ];
        assert!(matches!(&kinds[0], JournalError::Missing { id, .. } if id == R4));
        assert!(
            matches!(&kinds[1], JournalError::Malformed { .. }),
            "{}",
            kinds[1]
        );
        assert!(
            matches!(&kinds[2], JournalError::Schema { found: 7, .. }),
            "{}",
            kinds[2]
        );
        assert_eq!(
            crate::error_chain::error_chain(&kinds[2]),
            format!(
                "cannot read the release journal {}: schema 7, this sunaba-images reads schema 1",
                d.join(format!("{R1}.json")).display()
            )
        );
        assert!(
            matches!(&kinds[3], JournalError::Unreadable { .. }),
            "{}",
            kinds[3]
        );
        assert!(
            crate::error_chain::error_chain(&kinds[3]).contains("Not a directory"),
            "the cause is kept: {}",
            crate::error_chain::error_chain(&kinds[3])
        );
        assert!(
            matches!(&kinds[4], JournalError::Id(_)),
            "a path is no id: {}",
            kinds[4]
        );
        assert_eq!(kinds[4].exit_status(), Status::Usage);

        let mut rolled = Journal::new(d, plan(R2), "now".into());
        rolled.step = Step::RolledBack;
        rolled.save().unwrap();
        let e = Journal::load_resumable(d, R2).unwrap_err();
        assert!(
            matches!(&e, JournalError::RolledBack { id } if id == R2),
            "{e}"
        );

        let mut half = Journal::new(d, plan(R3), "now".into());
        half.tags[0].done = true;
        half.save().unwrap();
        let e = Journal::start(d, plan(R4), None).unwrap_err();
        assert!(
            matches!(&e, JournalError::Unfinished { ids } if ids == &[R3]),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "release {R3} wrote tags and did not finish: resume it (`--resume ID`) or roll it \
                 back (`--rollback ID`) first"
            )
        );

        let write = JournalError::Write(FsError::Write {
            path: d.into(),
            source: std::io::Error::other("full"),
        });
        for e in kinds[..4].iter().chain([&e, &write]) {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
        let rolled_back = JournalError::RolledBack { id: R2.into() };
        assert_eq!(rolled_back.exit_status(), Status::Failure);
    }

    /// The text of a saved journal with its schema set to `schema`.
    fn text_with_schema(dir: &Path, schema: u32) -> String {
        let mut j = Journal::new(dir, plan(R1), "now".into());
        j.schema = schema;
        serde_json::to_string(&j).unwrap()
    }
}
