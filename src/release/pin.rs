//! The last step: image_pins.json from the journal's exact digests, under
//! the pins file's lock and replaced atomically, only after every tag was
//! written; and putting the previous pins back on `--rollback`.

use super::journal::Journal;
use crate::fsutil::{FileLock, FsError};
use crate::pins::{Pin, PinsError, PinsFile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the pins of a release cannot be written (or put back).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PinError {
    /// The journal says the release got this far without staging a variant.
    #[error("{variant} is not staged")]
    NotStaged { variant: String },
    #[error("the release plan's repository")]
    Repository(#[source] crate::name::Invalid),
    #[error("cannot lock the pins file")]
    Lock(#[source] FsError),
    #[error(transparent)]
    File(#[from] PinsError),
    /// Someone pinned the alias since the plan was made.
    #[error(
        "{}: the pin of {alias} changed since release {id} was planned; the tags are \
         published, pin them with `sunaba-images pin {alias} --to {version} --write`",
        .path.display()
    )]
    Changed {
        path: PathBuf,
        alias: String,
        id: String,
        version: semver::Version,
    },
}

/// Each kind is an operational failure, but for a name that does not
/// parse, which says its own.
impl crate::exit::HasStatus for PinError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            PinError::NotStaged { .. } | PinError::Lock(_) | PinError::Changed { .. } => {
                Status::Failure
            }
            PinError::Repository(e) => e.exit_status(),
            PinError::File(e) => e.exit_status(),
        }
    }
}

/// The pin each alias of the release gets.
pub(crate) fn pins_of(journal: &Journal) -> Result<BTreeMap<String, Pin>, PinError> {
    let mut pins = BTreeMap::new();
    for v in &journal.plan.variants {
        let staged = journal
            .staged
            .get(&v.variant)
            .ok_or_else(|| PinError::NotStaged {
                variant: v.variant.clone(),
            })?;
        let digest = staged.digest.clone();
        // An index: its platform images; a single image: itself.
        let platforms = if staged.platforms.is_empty() {
            v.platforms
                .iter()
                .map(|p| (p.clone(), digest.clone()))
                .collect()
        } else {
            staged.platforms.clone()
        };
        let mut referrers = BTreeMap::new();
        for (subject, _) in super::attach::subjects(staged) {
            if let Some(a) = journal.attached.get(&subject) {
                let digests = a.referrers.iter().map(|r| r.digest.clone()).collect();
                referrers.insert(subject, digests);
            }
        }
        let pin = Pin {
            repository: (journal.plan.repository.parse()).map_err(PinError::Repository)?,
            tag: v.immutable.clone(),
            version: v.version.clone(),
            digest,
            platforms,
            tools: v.tools.clone(),
            referrers,
        };
        for alias in &v.aliases {
            pins.insert(alias.clone(), pin.clone());
        }
    }
    Ok(pins)
}

/// Writes the release's pins. Inside the lock the file is read again; an
/// alias whose pin is neither the one the plan saw nor the release's own
/// stops the write (someone pinned meanwhile: the plan's versions may be
/// stale). Returns whether the file changed.
pub(crate) fn write(journal: &Journal, path: &Path) -> Result<bool, PinError> {
    let new = pins_of(journal)?;
    let _lock = FileLock::acquire(path).map_err(PinError::Lock)?;
    crate::fsutil::remove_stale_temps(path);
    let (mut file, _) = PinsFile::load(path)?.unwrap_or_default();
    let expected = previous_pins(journal);
    for (alias, pin) in &new {
        let now = file.images.get(alias);
        if now != expected.get(alias).cloned().flatten().as_ref() && now != Some(pin) {
            return Err(PinError::Changed {
                path: path.to_path_buf(),
                alias: alias.clone(),
                id: journal.id.clone(),
                version: pin.version.clone(),
            });
        }
    }
    let before = file.clone();
    file.images.extend(new);
    if file == before {
        return Ok(false);
    }
    file.save(path)?;
    Ok(true)
}

/// Puts back the pins the plan saw, for aliases that still carry the
/// release's pin. Returns the aliases restored.
pub(crate) fn restore(journal: &Journal, path: &Path) -> Result<Vec<String>, PinError> {
    let ours = pins_of(journal)?;
    let _lock = FileLock::acquire(path).map_err(PinError::Lock)?;
    let Some((mut file, _)) = PinsFile::load(path)? else {
        return Ok(Vec::new());
    };
    let mut restored = Vec::new();
    for (alias, previous) in previous_pins(journal) {
        if file.images.get(&alias) != ours.get(&alias) {
            continue;
        }
        match previous {
            Some(p) => file.images.insert(alias.clone(), p),
            None => file.images.remove(&alias),
        };
        restored.push(alias);
    }
    if !restored.is_empty() {
        file.save(path)?;
    }
    Ok(restored)
}

fn previous_pins(journal: &Journal) -> BTreeMap<String, Option<Pin>> {
    journal
        .plan
        .variants
        .iter()
        .flat_map(|v| v.previous_pins.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::journal::Staged;
    use super::super::journal::tests::planned;
    use super::super::plan::Plan;
    use super::*;
    use crate::exit::{HasStatus, Status};
    use crate::registry::Digest;

    /// A journal of variant `a` (alias `a`) releasing to `repository`,
    /// staged unless `staged` is false.
    fn journal(dir: &Path, repository: &str, staged: bool) -> Journal {
        let plan = Plan {
            id: "r1".into(),
            repository: repository.into(),
            variants: vec![planned("a", &["a"])],
            unchanged: Vec::new(),
        };
        let mut j = Journal::new(dir, plan, "now".into());
        if staged {
            let image = Staged {
                digest: Digest::sha256(b"a"),
                media_type: crate::registry::media_type::OCI_MANIFEST.into(),
                config: None,
                pushed: None,
                platforms: BTreeMap::new(),
            };
            j.staged.insert("a".into(), image);
        }
        j
    }

    #[test]
    fn each_kind_of_pin_error_is_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image_pins.json");

        let e = write(&journal(dir.path(), "r.io/s", false), &path).unwrap_err();
        assert!(
            matches!(&e, PinError::NotStaged { variant } if variant == "a"),
            "{e}"
        );
        assert_eq!(e.exit_status(), Status::Failure);

        let e = write(&journal(dir.path(), "-v=/:/host", true), &path).unwrap_err();
        assert!(matches!(&e, PinError::Repository(_)), "{e}");
        assert_eq!(e.exit_status(), Status::Usage, "the name's own status");

        std::fs::write(&path, "{").unwrap();
        let e = write(&journal(dir.path(), "r.io/s", true), &path).unwrap_err();
        assert!(matches!(&e, PinError::File(PinsError::Parse { .. })), "{e}");
        assert_eq!(e.exit_status(), Status::Failure);

        // Someone pinned `a` to something else since the plan was made.
        let release = journal(dir.path(), "r.io/s", true);
        let mut theirs = pins_of(&release).unwrap()["a"].clone();
        theirs.digest = Digest::sha256(b"theirs");
        let file = PinsFile {
            images: BTreeMap::from([("a".to_string(), theirs)]),
            ..PinsFile::default()
        };
        file.save(&path).unwrap();
        let e = write(&release, &path).unwrap_err();
        assert!(
            matches!(&e, PinError::Changed { alias, id, .. } if alias == "a" && id == "r1"),
            "{e}"
        );
        assert_eq!(e.exit_status(), Status::Failure);

        let lock = PinError::Lock(FsError::Lock {
            path: path.clone(),
            source: std::io::Error::other("busy"),
        });
        assert_eq!(lock.exit_status(), Status::Failure);
    }
}
