//! The last step: image_pins.json from the journal's exact digests, under
//! the pins file's lock and replaced atomically, only after every tag was
//! written; and putting the previous pins back on `--rollback`.

use super::journal::Journal;
use crate::fsutil::FileLock;
use crate::pins::{Pin, PinsFile};
use anyhow::{Context as _, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// The pin each alias of the release gets.
pub(crate) fn pins_of(journal: &Journal) -> anyhow::Result<BTreeMap<String, Pin>> {
    let mut pins = BTreeMap::new();
    for v in &journal.plan.variants {
        let staged = journal
            .staged
            .get(&v.variant)
            .with_context(|| format!("{} is not staged", v.variant))?;
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
            repository: journal
                .plan
                .repository
                .parse()
                .context("the release plan's repository")?,
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
pub(crate) fn write(journal: &Journal, path: &Path) -> anyhow::Result<bool> {
    let new = pins_of(journal)?;
    let _lock = FileLock::acquire(path).context("cannot lock the pins file")?;
    crate::pins::remove_stale_temps(path);
    let (mut file, _) = PinsFile::load(path)?.unwrap_or_default();
    let expected = previous_pins(journal);
    for (alias, pin) in &new {
        let now = file.images.get(alias);
        if now != expected.get(alias).cloned().flatten().as_ref() && now != Some(pin) {
            bail!(
                "{}: the pin of {alias} changed since release {} was planned; the tags are \
                 published, pin them with `sunaba-images pin {alias} --to {} --write`",
                path.display(),
                journal.id,
                pin.version
            );
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
pub(crate) fn restore(journal: &Journal, path: &Path) -> anyhow::Result<Vec<String>> {
    let ours = pins_of(journal)?;
    let _lock = FileLock::acquire(path).context("cannot lock the pins file")?;
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
