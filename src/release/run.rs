//! Carrying out a journaled release, step by step, each step saved before
//! the next starts: stage every image, verify (read back, gate, look at
//! every tag), promote (immutable tags first, then moving ones), pin last.
//! A run that stops anywhere leaves the journal saying how far it got;
//! running it again (`--resume`) skips what is done and converges to the
//! same end state.

use super::journal::{Journal, Step};
use super::stage::Stager;
use super::{pin, promote};
use crate::engine::Engine;
use crate::registry::{Client, Repository};
use anyhow::Context as _;
use std::path::Path;

/// What a release talks to.
pub struct Releaser<'a> {
    pub client: &'a Client,
    pub rt: &'a tokio::runtime::Runtime,
    /// For an engine source; `None` when every image comes from a registry.
    pub engine: Option<&'a dyn Engine>,
    pub pins_path: &'a Path,
    /// One line per thing done, for people.
    pub progress: &'a (dyn Fn(String) + Sync),
}

impl Releaser<'_> {
    /// Runs (or continues) `journal` to its end; on failure the journal
    /// records why, and image_pins.json is untouched unless every tag was
    /// written.
    pub fn carry_out(&self, journal: &mut Journal) -> anyhow::Result<()> {
        let outcome = self.steps(journal);
        journal.failure = outcome.as_ref().err().map(|e| format!("{e:#}"));
        journal.save()?;
        outcome
    }

    fn steps(&self, journal: &mut Journal) -> anyhow::Result<()> {
        let repo: Repository = journal.plan.repository.parse()?;
        if journal.step < Step::Staged {
            let stager = Stager {
                client: self.client,
                rt: self.rt,
                engine: self.engine,
                repository: &repo,
            };
            for planned in journal.plan.variants.clone() {
                if journal.staged.contains_key(&planned.variant) {
                    continue;
                }
                let staged = stager
                    .stage(&planned)
                    .with_context(|| format!("staging {}", planned.variant))?;
                (self.progress)(format!(
                    "staged {} {} as {} ({})",
                    planned.variant, planned.version, planned.staging, staged.digest
                ));
                journal.staged.insert(planned.variant.clone(), staged);
                journal.save()?;
            }
            journal.step = Step::Staged;
            journal.save()?;
        }
        if journal.step < Step::Promoted {
            let (images, now) = self
                .rt
                .block_on(promote::verify(self.client, &repo, journal))?;
            if journal.step < Step::Verified {
                journal.step = Step::Verified;
                journal.save()?;
            }
            self.rt.block_on(promote::promote(
                self.client,
                &repo,
                journal,
                &images,
                &now,
                self.progress,
            ))?;
            journal.step = Step::Promoted;
            journal.save()?;
        }
        if journal.step < Step::Pinned {
            if pin::write(journal, self.pins_path)? {
                (self.progress)(format!("wrote {}", self.pins_path.display()));
            }
            journal.step = Step::Pinned;
            journal.save()?;
        }
        Ok(())
    }

    /// Puts the journal's moving tags back where they were, and the pins
    /// the release wrote back to what they were. Immutable tags stay.
    pub fn roll_back(&self, journal: &mut Journal) -> anyhow::Result<Vec<String>> {
        let repo: Repository = journal.plan.repository.parse()?;
        let mut done = self
            .rt
            .block_on(promote::rollback(self.client, &repo, journal))?;
        if journal.step >= Step::Pinned || journal.tags.iter().all(|t| t.done) {
            for alias in pin::restore(journal, self.pins_path)? {
                done.push(format!("pin of {alias}: back to what it was"));
            }
        }
        journal.step = Step::RolledBack;
        journal.save()?;
        Ok(done)
    }
}
