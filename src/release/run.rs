//! Carrying out a journaled release, step by step, each step saved before
//! the next starts: stage every image, verify (read back, gate, look at
//! every tag), promote (immutable tags first, then moving ones), pin last.
//! A run that stops anywhere leaves the journal saying how far it got;
//! running it again (`--resume`) skips what is done and converges to the
//! same end state.

use super::attach::AttachError;
use super::journal::{Journal, JournalError, Step};
use super::pin::PinError;
use super::plan::{Planned, Source};
use super::promote::PromoteError;
use super::stage::{StageError, Stager};
use super::{attach, pin, promote};
use crate::attest::registry_image::LayerReader;
use crate::engine::Engine;
use crate::registry::{Client, Repository};
use std::path::Path;

/// Why a release (or its rollback) stopped, by step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReleaseError {
    /// The plan's repository is no repository.
    #[error(transparent)]
    Repository(#[from] crate::name::Invalid),
    #[error("staging {variant}")]
    Stage {
        variant: String,
        #[source]
        source: Box<StageError>,
    },
    /// Verify (the gate, the immutable-tag conflicts), promote or rollback.
    #[error(transparent)]
    Promote(Box<PromoteError>),
    /// A resume of a signed release without its key.
    #[error(
        "release {id} signs with the key {hint}; pass it (--signing-key or --signing-key-env) \
         to resume"
    )]
    KeyMissing { id: String, hint: String },
    /// A resume of a signed release with another key than it signs with.
    #[error("release {id} signs with the key {hint}, not {given}; resume it with that key")]
    KeyMismatch {
        id: String,
        hint: String,
        given: String,
    },
    #[error(transparent)]
    Attach(Box<AttachError>),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

// Boxed (as `Attach`): a registry error inside makes these errors 128
// bytes, too large to return by value on every step (clippy's
// `result_large_err`).
impl From<AttachError> for ReleaseError {
    fn from(e: AttachError) -> ReleaseError {
        ReleaseError::Attach(Box::new(e))
    }
}

impl From<PromoteError> for ReleaseError {
    fn from(e: PromoteError) -> ReleaseError {
        ReleaseError::Promote(Box::new(e))
    }
}

/// A release that stopped is an operational failure (resume it), but for
/// the errors it carries that say their own.
impl crate::exit::HasStatus for ReleaseError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            ReleaseError::KeyMissing { .. } | ReleaseError::KeyMismatch { .. } => Status::Failure,
            ReleaseError::Repository(e) => e.exit_status(),
            ReleaseError::Stage { source, .. } => source.exit_status(),
            ReleaseError::Promote(e) => e.exit_status(),
            ReleaseError::Attach(e) => e.exit_status(),
            ReleaseError::Pin(e) => e.exit_status(),
            ReleaseError::Journal(e) => e.exit_status(),
        }
    }
}

/// How many images are staged at once: a family's six and their legs'
/// images. Each waits only for the layers it shares and for its turn to be
/// exported ([`super::claims`]: the engine exports one image at a time, in
/// the release's order), so a union's `save`, the largest, no longer waits
/// for a slot until its members are sent and then holds the release's tail
/// (5 s of `full`'s export and reading after the link had sent the last
/// layer, through the shaped link); while one image's layer is compressed,
/// others' are sent.
const IMAGES_AT_ONCE: usize = 8;

/// For each image to stage (its layers' diff_ids, `None` when unknown
/// before staging: a registry source), the earlier images it waits for
/// whole: an image of unknown layers waits for every image before it, and
/// every image after it waits for it. Engine images sharing layers do not
/// wait for each other here: each waits for the other's layers alone
/// ([`super::claims::LayerClaims`]).
fn staging_waits(layers: &[Option<Vec<String>>]) -> Vec<Vec<usize>> {
    let mut waits = Vec::with_capacity(layers.len());
    for (i, mine) in layers.iter().enumerate() {
        let wait: Vec<usize> = (0..i)
            .filter(|&j| layers[j].is_none() || mine.is_none())
            .collect();
        waits.push(wait);
    }
    waits
}

/// The images to stage in the order they start and claim layers: each
/// shared layer is sent by the first image that has it, so the image with
/// the fewest layers goes first, and of those the smallest (`layers`: each
/// image's diff_ids and size): the engine writes a whole image out before
/// its `save` sends a byte, so the smallest one's stream opens soonest. A
/// union (`full`, composed of its members' layers) then leaves each
/// member's layer to that member, which compresses and sends it while the
/// others do theirs, instead of reading all of them in its own one stream;
/// and it needs a slot only for what is its own. A stable sort: the plan's
/// order (parents first) among equals. Only when every image's layers are
/// known (engine images): a registry source keeps the plan's order, which
/// [`staging_waits`] relies on.
fn fewest_layers_first<T>(
    todo: Vec<T>,
    layers: Vec<Option<(Vec<String>, u64)>>,
) -> (Vec<T>, Vec<Option<Vec<String>>>) {
    if layers.iter().any(Option::is_none) {
        return (todo, layers.into_iter().map(|l| l.map(|l| l.0)).collect());
    }
    let mut both: Vec<(T, (Vec<String>, u64))> =
        todo.into_iter().zip(layers.into_iter().flatten()).collect();
    both.sort_by_key(|(_, (l, size))| (l.len(), *size));
    both.into_iter().map(|(t, (l, _))| (t, Some(l))).unzip()
}

/// The images of a release exported in one `save` ([`super::export`]):
/// from the engine, every image after the first two among those started
/// at once, which all are when every image's layers are known (none waits:
/// [`staging_waits`]). The first two are exported alone, one after the
/// other: Docker writes a whole image out before its `save` sends a byte,
/// so the smallest image's stream opens soonest and gets the link busy,
/// and the next (the family's base, whose large layer every other image
/// shares) opens seconds before the union of all the rest would. Measured
/// on the dev family through a 100 Mbit/s, 40 ms link: the first layer
/// body 1.99 s after the first request instead of 2.9 s, the release
/// 32.4 s instead of 33.5 s (docs/lab-notes.md).
fn exported_together(todo: &[Planned], layers: &[Option<Vec<String>>]) -> Vec<String> {
    if layers.iter().any(Option::is_none) {
        return Vec::new();
    }
    (todo.iter().take(IMAGES_AT_ONCE).skip(2))
        .filter_map(|p| match &p.source {
            Source::Engine { reference, .. } => Some(reference.clone()),
            Source::Registry { .. } => None,
        })
        .collect()
}

/// What a release talks to.
pub(crate) struct Releaser<'a> {
    pub client: &'a Client,
    /// For an engine source; `None` when every image comes from a registry.
    pub engine: Option<&'a dyn Engine>,
    pub pins_path: &'a Path,
    /// The key to sign attestations with; must be the journal's
    /// (`signing_key`) when it has one.
    pub key: Option<&'a crate::attest::PrivateKey>,
    /// images.toml, for the lock files the SBOMs list.
    pub manifest: Option<&'a crate::manifest::Manifest>,
    /// This user's layer cache: what staging compresses and notes, what
    /// attaching reads an SBOM's layers from first. `None` when it cannot
    /// be opened (an engine image's push then says why).
    pub layer_cache: Option<&'a crate::image::layer_cache::LayerCache>,
    /// One line per thing done, for people.
    pub progress: &'a (dyn Fn(String) + Sync),
}

impl Releaser<'_> {
    /// Runs (or continues) `journal` to its end; on failure the journal
    /// records why, and image_pins.json is untouched unless every tag was
    /// written.
    pub(crate) async fn carry_out(&self, journal: &mut Journal) -> Result<(), ReleaseError> {
        let outcome = self.steps(journal).await;
        journal.failure = (outcome.as_ref().err()).map(|e| crate::error_chain::error_chain(e));
        journal.save()?;
        outcome
    }

    async fn steps(&self, journal: &mut Journal) -> Result<(), ReleaseError> {
        let repo: Repository = journal.plan.repository.parse()?;
        if journal.step < Step::Staged {
            self.stage_all(&repo, journal).await?;
            journal.step = Step::Staged;
            journal.save()?;
        }
        // Empty on a resume past verify: attaching reads the images then.
        let mut read_back = promote::ReadBack::new();
        if journal.step < Step::Promoted {
            let verified = promote::verify(self.client, &repo, journal).await?;
            if journal.step < Step::Verified {
                journal.step = Step::Verified;
                journal.save()?;
            }
            let (images, now) = (&verified.images, &verified.now);
            promote::promote(self.client, &repo, journal, images, now, self.progress).await?;
            read_back = verified.read_back;
            journal.step = Step::Promoted;
            journal.save()?;
        }
        if journal.step < Step::Attached {
            self.attach(&repo, journal, read_back).await?;
            journal.step = Step::Attached;
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

    /// The stage step: every image the journal has not staged, several at
    /// once ([`IMAGES_AT_ONCE`]) so one image's layers are compressed
    /// while another's are sent, but an image waits for the earlier images
    /// whose layers it shares ([`staging_waits`]): a layer is compressed
    /// and sent once, by the first image that has it, and the images after
    /// it find it in the cache and the repository. The journal is saved as
    /// each image is staged.
    async fn stage_all(
        &self,
        repo: &Repository,
        journal: &mut Journal,
    ) -> Result<(), ReleaseError> {
        use futures::StreamExt as _;
        let todo: Vec<_> = (journal.plan.variants.iter())
            .filter(|p| !journal.staged.contains_key(&p.variant))
            .cloned()
            .collect();
        let mut stager = Stager {
            client: self.client,
            engine: self.engine,
            repository: repo,
            cache: self.layer_cache,
            claims: Default::default(),
        };
        // The engine is asked (`docker inspect`) and the next step needs
        // the answers: run here, the runtime told.
        let images =
            tokio::task::block_in_place(|| stager.engine_images(&todo)).map_err(|source| {
                // One question for every engine image: the first is named.
                let first = todo
                    .iter()
                    .find(|p| matches!(p.source, Source::Engine { .. }));
                ReleaseError::Stage {
                    variant: first.map(|p| p.variant.clone()).unwrap_or_default(),
                    source,
                }
            })?;
        let layers = (images.into_iter())
            .map(|i| i.map(|i| (i.layers, i.size)))
            .collect();
        let (todo, layers) = fewest_layers_first(todo, layers);
        let waits = staging_waits(&layers);
        // Each shared layer is sent by the first image (in this order)
        // that has it; images start in this order.
        stager.claims = super::claims::LayerClaims::new((todo.iter().zip(&layers)).filter_map(
            |(p, l)| match (&p.source, l) {
                (Source::Engine { reference, .. }, Some(l)) => {
                    Some((reference.as_str(), l.as_slice()))
                }
                _ => None,
            },
        ));
        let exported_together = exported_together(&todo, &layers);
        if exported_together.len() > 1 {
            stager.claims = stager.claims.exported_together(exported_together);
        }
        let stager = stager;
        let mut started = vec![false; todo.len()];
        let mut staged = vec![false; todo.len()];
        let mut running = futures::stream::FuturesUnordered::new();
        loop {
            for i in 0..todo.len() {
                if !started[i]
                    && running.len() < IMAGES_AT_ONCE
                    && waits[i].iter().all(|&j| staged[j])
                {
                    started[i] = true;
                    let (planned, stager) = (&todo[i], &stager);
                    running.push(async move { (i, stager.stage(planned).await) });
                }
            }
            let Some((i, result)) = running.next().await else {
                break;
            };
            let planned = &todo[i];
            let done = result.map_err(|source| ReleaseError::Stage {
                variant: planned.variant.clone(),
                source: Box::new(source),
            })?;
            (self.progress)(format!(
                "staged {} {} as {}",
                planned.variant, planned.version, done.digest
            ));
            journal.staged.insert(planned.variant.clone(), done);
            journal.save()?;
            staged[i] = true;
        }
        Ok(())
    }

    /// The attach step: nothing without a signing key; with one, the
    /// journal's key and no other. `read_back`: what verify read of the
    /// staged images (see [`promote::ReadBack`]).
    async fn attach(
        &self,
        repo: &Repository,
        journal: &mut Journal,
        read_back: promote::ReadBack,
    ) -> Result<(), ReleaseError> {
        let Some(hint) = journal.signing_key.clone() else {
            return Ok(());
        };
        let id = journal.id.clone();
        let key = (self.key).ok_or_else(|| ReleaseError::KeyMissing {
            id: id.clone(),
            hint: hint.clone(),
        })?;
        let given = key.public().hint();
        if given != hint {
            return Err(ReleaseError::KeyMismatch { id, hint, given });
        }
        let attacher = attach::Attacher {
            client: self.client,
            repo,
            key,
            manifest: self.manifest,
            has_empty: Default::default(),
            read_back,
            layers: match self.layer_cache {
                Some(cache) => LayerReader::keeping(Box::new(cache.clone())),
                None => LayerReader::default(),
            },
            checkout: self.manifest.and_then(|m| attach::checkout_ref(&m.root)),
        };
        Ok(attach::attach_all(&attacher, journal, self.progress).await?)
    }

    /// Puts the journal's moving tags back where they were, and the pins
    /// the release wrote back to what they were. Immutable tags stay.
    pub(crate) async fn roll_back(
        &self,
        journal: &mut Journal,
    ) -> Result<Vec<String>, ReleaseError> {
        let repo: Repository = journal.plan.repository.parse()?;
        let mut done = promote::rollback(self.client, &repo, journal).await?;
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

#[cfg(test)]
mod tests {
    use super::super::journal::TagKind;
    use super::super::journal::tests::planned;
    use super::super::plan::{Plan, Source};
    use super::*;
    use crate::labels;
    use crate::pins::PinsFile;
    use crate::registry::fake::FakeRegistry;
    use crate::registry::{Digest, Index, Reference, media_type as mt};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// The config of a checked image for `arch` (`variant`): a check record
    /// that passes (or fails) for its inputs, listing no tools.
    fn config(arch: &str, variant: Option<&str>, status: &str) -> serde_json::Value {
        let inputs = format!("sha256:{}", "1".repeat(64));
        let record = json!({"schema": 1, "status": status, "inputs": inputs, "tools": {}});
        let mut c = json!({
            "architecture": arch,
            "os": "linux",
            "config": {"Labels": {
                labels::CHECK: record.to_string(),
                labels::INPUTS: inputs,
            }},
        });
        if let Some(v) = variant {
            c["variant"] = json!(v);
        }
        c
    }

    /// A source index in `src/x` under `tag`: an amd64 Docker image, an
    /// arm64/v8 OCI image (its check `arm_status`) and an attestation.
    fn source_index(reg: &FakeRegistry, tag: &str, arm_status: &str) -> Digest {
        let amd = reg.put_image("src/x", &config("amd64", None, "pass"), mt::DOCKER_MANIFEST);
        let arm = reg.put_image(
            "src/x",
            &config("arm64", Some("v8"), arm_status),
            mt::OCI_MANIFEST,
        );
        let att = reg.put_image("src/x", &config("unknown", None, "pass"), mt::OCI_MANIFEST);
        let size = |d: &Digest| {
            reg.state().manifests[&("src/x".into(), d.to_string())]
                .1
                .len()
        };
        let entry = |d: &Digest, t: &str, p: serde_json::Value| json!({"mediaType": t, "digest": d, "size": size(d), "platform": p});
        let index = json!({
            "schemaVersion": 2,
            "mediaType": mt::OCI_INDEX,
            "manifests": [
                entry(&arm, mt::OCI_MANIFEST, json!({"os": "linux", "architecture": "arm64", "variant": "v8"})),
                entry(&att, mt::OCI_MANIFEST, json!({"os": "unknown", "architecture": "unknown"})),
                entry(&amd, mt::DOCKER_MANIFEST, json!({"os": "linux", "architecture": "amd64"})),
            ],
            "annotations": {"created": "now"},
        });
        let bytes = serde_json::to_vec_pretty(&index).unwrap();
        reg.put_manifest("src/x", Some(tag), mt::OCI_INDEX, &bytes)
    }

    fn journal_for(dir: &Path, reg: &FakeRegistry, index: &Digest) -> Journal {
        journal_moving(dir, reg, index, &["a"])
    }

    /// [`journal_for`] with these moving tags.
    fn journal_moving(dir: &Path, reg: &FakeRegistry, index: &Digest, moving: &[&str]) -> Journal {
        let mut p = planned("a", moving);
        p.source = Source::Registry {
            reference: format!("{}/src/x@{index}", reg.authority),
        };
        let plan = Plan {
            id: "20261201T000001.000Z-0001".into(),
            repository: format!("{}/rel/y", reg.authority),
            variants: vec![p],
            unchanged: Vec::new(),
        };
        Journal::new(dir, plan, "2026-12-01T00:00:00Z".into())
    }

    /// A released-from-registry fixture: the fake registry holding the
    /// source index (its arm64 check `arm_status`), a pins path and the
    /// journal planned for it.
    struct Fixture {
        rt: tokio::runtime::Runtime,
        reg: FakeRegistry,
        client: Client,
        dir: tempfile::TempDir,
        pins_path: std::path::PathBuf,
        source: Digest,
    }

    fn fixture(arm_status: &str) -> (Fixture, Journal) {
        let rt = runtime();
        let reg = rt.block_on(FakeRegistry::start());
        let client = reg.client();
        let source = source_index(&reg, "a", arm_status);
        let dir = tempfile::tempdir().unwrap();
        let pins_path = dir.path().join("image_pins.json");
        let journal = journal_for(dir.path(), &reg, &source);
        let f = Fixture {
            rt,
            reg,
            client,
            dir,
            pins_path,
            source,
        };
        (f, journal)
    }

    impl Fixture {
        /// A release of `journal` without a key, run to its end.
        fn carry_out(&self, journal: &mut Journal) -> Result<(), ReleaseError> {
            self.rt.block_on(self.releaser(None).carry_out(journal))
        }

        fn releaser<'a>(&'a self, key: Option<&'a crate::attest::PrivateKey>) -> Releaser<'a> {
            Releaser {
                client: &self.client,
                engine: None,
                pins_path: &self.pins_path,
                key,
                manifest: None,
                layer_cache: None,
                progress: &|_| {},
            }
        }
    }

    /// A kind's tags are written at once, the moving ones only after every
    /// immutable one; the journal records them all.
    #[test]
    fn tags_of_a_kind_are_written_at_once_and_the_moving_after_the_immutable() {
        let (f, _) = fixture("pass");
        let mut journal = journal_moving(f.dir.path(), &f.reg, &f.source, &["a-1.0", "a-1", "a"]);
        let moving = 3;
        {
            let mut s = f.reg.state();
            s.held_method = Some("PUT");
            // Tag writes (`/manifests/a…`), not the manifests put by digest.
            s.held_path = Some("/manifests/a");
            s.hold = Some(moving);
        }
        f.carry_out(&mut journal).unwrap();
        assert!(journal.tags.iter().all(|t| t.done), "{:?}", journal.tags);
        let s = f.reg.state();
        assert_eq!(s.max_in_flight, moving, "{:?}", s.log);
        let tag_puts: Vec<&String> = (s.log.iter())
            .filter(|l| l.starts_with("PUT ") && l.contains("/manifests/a"))
            .collect();
        let kind_of = |line: &str| {
            let tag = line.rsplit('/').next().unwrap();
            journal.tags.iter().find(|t| t.tag == tag).unwrap().kind
        };
        let first_moving = (tag_puts.iter())
            .position(|l| kind_of(l) == TagKind::Moving)
            .unwrap();
        assert!(
            tag_puts[first_moving..]
                .iter()
                .all(|l| kind_of(l) == TagKind::Moving),
            "{tag_puts:?}"
        );
        assert_eq!(tag_puts.len(), journal.tags.len(), "{tag_puts:?}");
    }

    /// The real family's shape: engine images share layers and do not wait
    /// for each other whole (their claims do that per layer); a registry
    /// source (layers unknown) waits for every image before it and every
    /// image after it waits for it.
    #[test]
    fn only_an_image_of_unknown_layers_is_waited_for_whole() {
        let l = |ids: &[&str]| Some(ids.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let family = [
            l(&["b1", "b2"]),                    // 0 base
            l(&["m1"]),                          // 1 minimal
            l(&["b1", "b2", "py"]),              // 2 python
            l(&["b1", "b2", "py", "go2", "js"]), // 3 full
        ];
        assert_eq!(staging_waits(&family), vec![Vec::<usize>::new(); 4]);
        let mixed = [l(&["a"]), None, l(&["c"])];
        assert_eq!(staging_waits(&mixed), vec![vec![], vec![0], vec![1]]);
    }

    /// Members before their union, parents before children; a registry
    /// source (layers unknown) keeps the plan's order.
    #[test]
    fn images_are_staged_fewest_layers_first_when_all_are_known() {
        let l = |ids: &[&str], size: u64| {
            Some((ids.iter().map(|s| s.to_string()).collect::<Vec<_>>(), size))
        };
        let todo = vec!["base", "minimal", "full", "go", "js", "python"];
        let layers = vec![
            l(&["b1", "b2"], 450),
            l(&["b1", "m"], 225),
            l(&["b1", "b2", "py", "go", "js", "state"], 989),
            l(&["b1", "b2", "go"], 772),
            l(&["b1", "b2", "js"], 521),
            l(&["b1", "b2", "py"], 596),
        ];
        let (order, sorted) = fewest_layers_first(todo.clone(), layers.clone());
        assert_eq!(
            order,
            ["minimal", "base", "js", "python", "go", "full"],
            "the fewest layers first, and of those the smallest image"
        );
        assert_eq!(
            sorted[5],
            layers[2].clone().map(|l| l.0),
            "each image keeps its layers"
        );
        let mut unknown = layers;
        unknown[3] = None;
        let (order, _) = fewest_layers_first(todo.clone(), unknown);
        assert_eq!(order, todo);
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_index_is_staged_stamped_per_platform_promoted_as_staged_and_pinned_with_its_platforms() {
        let (f, mut journal) = fixture("pass");
        let (rt, reg, client, dir) = (&f.rt, &f.reg, &f.client, &f.dir);
        let (pins_path, source) = (&f.pins_path, &f.source);
        let releaser = f.releaser(None);
        f.rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        assert_eq!(journal.step, Step::Pinned);

        let staged = journal.staged["a"].clone();
        assert_eq!(staged.media_type, mt::OCI_INDEX, "an OCI child among them");
        assert_eq!(staged.config, None);
        let platforms: Vec<String> = staged.platforms.keys().map(ToString::to_string).collect();
        assert_eq!(platforms, ["linux/amd64", "linux/arm64"], "no attestation");

        // What the tags name is the staged index, byte for byte, listing
        // the stamped images; every stamped config carries the version.
        let s = reg.state();
        let staged_bytes = s.manifests[&("rel/y".into(), staged.digest.to_string())]
            .1
            .clone();
        let tags: Vec<&str> = s
            .tags
            .keys()
            .filter(|(r, _)| r == "rel/y")
            .map(|(_, t)| t.as_str())
            .collect();
        assert_eq!(tags.len(), 2, "only the release tags: {tags:?}");
        for tag in ["a-1.0.0", "a"] {
            assert_eq!(
                s.tags[&("rel/y".into(), tag.into())],
                staged.digest.to_string(),
                "{tag}"
            );
        }
        drop(s);
        let index = Index::parse("i", &staged_bytes).unwrap();
        assert_eq!(index.entries.len(), 2);
        let listed: BTreeMap<crate::name::Platform, Digest> = index
            .platforms()
            .into_iter()
            .map(|(p, d)| (p.normalized(), d))
            .collect();
        assert_eq!(listed, staged.platforms);
        let repo: crate::registry::Repository = format!("{}/rel/y", reg.authority).parse().unwrap();
        for child in staged.platforms.values() {
            let r = Reference::in_repo(&repo, child.clone());
            let config = rt.block_on(client.image_config(&r, None)).unwrap();
            assert_eq!(config.labels[labels::VERSION], "1.0.0");
        }

        // The pin: the index, and each platform's stamped image.
        let (pins, _) = PinsFile::load(pins_path).unwrap().unwrap();
        let pin = &pins.images["a"];
        assert_eq!(pin.digest, staged.digest);
        assert_eq!(pin.platforms, staged.platforms);

        // Staging again (a resumed release) gives the same digest and puts
        // no manifest again.
        let puts = reg.state().count("PUT", "/manifests/");
        let mut again = journal_for(dir.path(), reg, source);
        again.plan.id = "20261201T000002.000Z-0002".into();
        let stager = super::super::stage::Stager {
            client,
            engine: None,
            repository: &repo,
            cache: None,
            claims: Default::default(),
        };
        let restaged = rt.block_on(stager.stage(&again.plan.variants[0])).unwrap();
        assert_eq!(restaged, staged);
        assert_eq!(reg.state().count("PUT", "/manifests/"), puts);
    }

    #[test]
    fn a_signed_release_attaches_to_each_platform_and_the_index_and_attaching_again_adds_nothing() {
        let (f, mut journal) = fixture("pass");
        let reg = &f.reg;
        let pins_path = &f.pins_path;
        let key = crate::attest::PrivateKey::generate();
        journal.signing_key = Some(key.public().hint());
        let releaser = f.releaser(Some(&key));
        f.rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        assert_eq!(journal.step, Step::Pinned);
        let staged = journal.staged["a"].clone();
        assert_eq!(journal.attached.len(), 3, "two platforms and the index");
        assert_eq!(journal.attached[&staged.digest].referrers.len(), 2);
        let (pins, _) = PinsFile::load(pins_path).unwrap().unwrap();
        let pin = &pins.images["a"];
        assert_eq!(
            pin.digest, staged.digest,
            "attaching changes no pinned digest"
        );
        assert_eq!(pin.platforms, staged.platforms);
        let listed = |subject: &Digest| {
            let tag = crate::registry::fallback_tag(subject);
            let s = reg.state();
            let digest = s.tags[&("rel/y".to_string(), tag)].clone();
            let bytes = s.manifests[&("rel/y".to_string(), digest)].1.clone();
            crate::attest::referrer::entries("i", &bytes).unwrap()
        };
        for (subject, digests) in &pin.referrers {
            let entries = listed(subject);
            let in_index: Vec<String> = entries.iter().map(|e| e.digest.clone()).collect();
            let pinned: Vec<String> = digests.iter().map(ToString::to_string).collect();
            assert_eq!(in_index, pinned, "{subject}");
            assert!(entries.iter().all(|e| e.artifact_type.is_some()));
        }

        // Attaching the same release again (as a resume that lost its
        // journal entries would): the same referrer digests, none listed twice.
        let before = pin.referrers.clone();
        let text = std::fs::read_to_string(pins_path).unwrap();
        journal.attached.clear();
        journal.step = Step::Promoted;
        f.rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        assert_eq!(std::fs::read_to_string(pins_path).unwrap(), text);
        for (subject, digests) in &before {
            assert_eq!(listed(subject).len(), digests.len(), "{subject}");
        }

        // A resume with another key is refused before anything is written.
        journal.attached.clear();
        journal.step = Step::Promoted;
        let other = crate::attest::PrivateKey::generate();
        let wrong = Releaser {
            key: Some(&other),
            ..releaser
        };
        let err = f.rt.block_on(wrong.carry_out(&mut journal)).unwrap_err();
        assert!(
            matches!(&err, ReleaseError::KeyMismatch { hint, given, .. }
                if *hint == key.public().hint() && *given == other.public().hint()),
            "{err}"
        );
        assert!(err.to_string().contains("resume it with that key"), "{err}");
        assert_eq!(journal.failure, Some(err.to_string()), "journaled as said");
    }

    /// The requests of the attach step: what the fake logged after the
    /// last release tag was written (pinning asks the registry nothing).
    fn attach_log(reg: &FakeRegistry) -> Vec<String> {
        let log = reg.state().log.clone();
        let is_tag = |l: &String| {
            l.starts_with("PUT ")
                && l.rsplit_once("/manifests/")
                    .is_some_and(|(_, t)| !t.starts_with("sha256"))
        };
        let last_tag = log.iter().rposition(is_tag).expect("the tags were written");
        log[last_tag + 1..].to_vec()
    }

    /// Two engine images, `a` and `b`, on one base layer (its dpkg status
    /// and os-release), planned for release to `reg`'s `rel/y`.
    fn two_on_one_base(dir: &Path, reg: &FakeRegistry) -> (Saves, Plan) {
        use crate::image::fixtures::{file, layer};
        let labels = config("amd64", None, "pass")["config"]["Labels"].clone();
        let base = layer(&[
            file("etc/os-release", "ID=debian\nVERSION_ID=\"13\"\n"),
            file(
                "var/lib/dpkg/status",
                "Package: base-files\nStatus: install ok installed\nVersion: 13.8\nArchitecture: amd64\n",
            ),
        ]);
        let tops = [
            layer(&[file(
                "var/lib/dpkg/status",
                "Package: bash\nStatus: install ok installed\nVersion: 5.2\nArchitecture: amd64\n",
            )]),
            layer(&[file("usr/bin/tool", "not wanted")]),
        ];
        let engine = Saves(
            (tops.iter())
                .map(|top| {
                    let layers = [base.clone(), top.clone()];
                    crate::release::publish::tests::saved_with_labels(dir, &layers, labels.clone())
                })
                .collect(),
        );
        let variants = ["a", "b"]
            .iter()
            .zip(&engine.0)
            .map(|(v, saved)| {
                let mut p = planned(v, &[v]);
                p.source = Source::Engine {
                    reference: format!("local/{v}"),
                    image_id: saved.info.id.clone(),
                };
                p
            })
            .collect();
        let plan = Plan {
            id: "20261201T000001.000Z-0001".into(),
            repository: format!("{}/rel/y", reg.authority),
            variants,
            unchanged: Vec::new(),
        };
        (engine, plan)
    }

    /// Staging an engine image sends its config and its stamped config as
    /// soon as the config is known, before its manifest (so an image's last
    /// layer is followed by its manifests alone), and the stamp reads no
    /// config back from the registry.
    #[test]
    fn staging_sends_both_configs_before_the_manifest_and_reads_no_config_back() {
        let rt = runtime();
        let reg = rt.block_on(FakeRegistry::start());
        let client = reg.client();
        let dir = tempfile::tempdir().unwrap();
        let (engine, plan) = two_on_one_base(dir.path(), &reg);
        let cold = released_cold(&rt, &client, &engine, dir.path(), plan);
        cold.result.unwrap();
        let journal = cold.journal;
        let log = reg.state().log.clone();
        let at = |what: &str| {
            (log.iter()
                .position(|l| l.starts_with("PUT ") && l.contains(what)))
            .unwrap_or_else(|| panic!("no PUT of {what}: {log:#?}"))
        };
        for planned in &journal.plan.variants {
            let Source::Engine {
                image_id: config, ..
            } = &planned.source
            else {
                unreachable!("engine images")
            };
            let staged = &journal.staged[&planned.variant];
            let pushed = staged.pushed.clone().unwrap();
            let stamped_config = staged.config.clone().unwrap();
            let manifest = at(&format!("/manifests/{pushed}"));
            assert!(at(&format!("digest={config}")) < manifest, "{log:#?}");
            assert!(
                at(&format!("digest={stamped_config}")) < manifest,
                "{log:#?}"
            );
            assert!(
                !log.iter()
                    .any(|l| l.starts_with("GET ") && l.contains(config)),
                "the config was not read back: {log:#?}"
            );
        }
    }

    /// Issue 29, acceptance 5: verify read every staged manifest and
    /// config, so attaching reads none of them again. Per platform image on
    /// a registry without the referrers API: 4 × (bundle POST + PUT,
    /// referrer PUT) and the fallback tag's GET + PUT (14), and here its
    /// one layer (staging mounted it, never read it); per index 2 × 3 + 2;
    /// once, the empty config's HEAD + POST + PUT. Before: 2 more per
    /// image (manifest and config GET), 1 more per index.
    #[test]
    fn attaching_after_verify_reads_no_manifest_or_config_again_and_a_resume_past_it_does() {
        let (f, mut journal) = fixture("pass");
        let key = crate::attest::PrivateKey::generate();
        journal.signing_key = Some(key.public().hint());
        let releaser = f.releaser(Some(&key));
        f.rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        let staged = journal.staged["a"].clone();
        let subjects: Vec<&Digest> = staged.platforms.values().chain([&staged.digest]).collect();
        let configs: Vec<String> = staged
            .platforms
            .values()
            .map(|d| {
                let bytes = f.reg.state().manifests[&("rel/y".into(), d.to_string())]
                    .1
                    .clone();
                crate::registry::config_descriptor("c", &bytes)
                    .unwrap()
                    .0
                    .to_string()
            })
            .collect();
        let reads = |log: &[String]| {
            let manifests = (subjects.iter())
                .map(|d| {
                    let target = format!("/manifests/{d}");
                    log.iter()
                        .filter(|l| l.starts_with("GET ") && l.ends_with(&target))
                        .count()
                })
                .sum::<usize>();
            let configs = (configs.iter())
                .map(|d| {
                    let target = format!("/blobs/{d}");
                    log.iter()
                        .filter(|l| l.starts_with("GET ") && l.ends_with(&target))
                        .count()
                })
                .sum::<usize>();
            (manifests, configs)
        };
        let log = attach_log(&f.reg);
        assert_eq!(reads(&log), (0, 0), "{log:#?}");
        let layer_gets = log
            .iter()
            .filter(|l| l.starts_with("GET ") && l.contains("/blobs/"))
            .count();
        assert_eq!(layer_gets, 2, "each platform image's own layer: {log:#?}");
        assert_eq!(log.len(), 2 * (14 + 1) + 8 + 3, "{log:#?}");

        // A resume past verify (killed while attaching) has nothing read
        // back: it reads each subject once, and each image's config.
        journal.attached.clear();
        journal.step = Step::Promoted;
        let before = f.reg.state().log.len();
        f.rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        let log = f.reg.state().log[before..].to_vec();
        assert_eq!(reads(&log), (3, 2), "{log:#?}");
    }

    /// An engine holding the images `0` (by ID).
    struct Saves(Vec<crate::release::publish::tests::Saved>);

    impl Saves {
        fn image(&self, id: &str) -> Option<&crate::release::publish::tests::Saved> {
            self.0.iter().find(|s| s.info.id == id)
        }
    }

    impl crate::engine::Engine for Saves {
        fn describe(&self) -> String {
            "saves".into()
        }
        fn program(&self) -> &Path {
            Path::new("/bin/false")
        }
        fn log_format(&self) -> crate::engine::LogFormat {
            crate::engine::LogFormat::BuildKit
        }
        fn platform(&self) -> Result<crate::name::Platform, crate::engine::EngineError> {
            Ok("linux/amd64".parse().expect("a platform"))
        }
        fn resources(&self) -> Result<crate::engine::Resources, crate::engine::EngineError> {
            unreachable!()
        }
        fn build_cmd(&self, _: &crate::engine::BuildRequest) -> crate::process::Cmd {
            unreachable!()
        }
        fn inspect(
            &self,
            id: &str,
        ) -> Result<Option<crate::engine::ImageInfo>, crate::engine::EngineError> {
            Ok(self.image(id).map(|s| s.info.clone()))
        }
        fn save_cmd(&self, id: &str) -> crate::process::Cmd {
            let stream = self.image(id).map(|s| s.stream.clone()).unwrap_or_default();
            crate::process::Cmd::new("cat").arg(stream)
        }
    }

    /// Issue 29, acceptance 5, from the engine: staging read every layer
    /// it compressed and noted what the SBOM needs of each in the layer
    /// cache, so the attach step fetches no blob at all: 14 requests per
    /// image (and the empty config's 3 once), where it fetched each image's
    /// manifest and config and each distinct layer. The SBOMs are the same
    /// bytes as read from the blobs: attaching again without the cache
    /// makes the same referrers.
    #[test]
    fn attaching_after_staging_from_the_engine_fetches_no_blob() {
        let rt = runtime();
        let reg = rt.block_on(FakeRegistry::start());
        let client = reg.client();
        let dir = tempfile::tempdir().unwrap();
        let (engine, plan) = two_on_one_base(dir.path(), &reg);
        let mut journal = Journal::new(dir.path(), plan, "2026-12-01T00:00:00Z".into());
        let key = crate::attest::PrivateKey::generate();
        journal.signing_key = Some(key.public().hint());
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = crate::image::layer_cache::LayerCache::open(cache_dir.path()).unwrap();
        let pins_path = dir.path().join("image_pins.json");
        let releaser = Releaser {
            client: &client,
            engine: Some(&engine),
            pins_path: &pins_path,
            key: Some(&key),
            manifest: None,
            layer_cache: Some(&cache),
            progress: &|_| {},
        };
        rt.block_on(releaser.carry_out(&mut journal)).unwrap();
        assert_eq!(journal.attached.len(), 2);
        let log = attach_log(&reg);
        let gets = |log: &[String], what: &str| {
            log.iter()
                .filter(|l| l.starts_with("GET ") && l.contains(what))
                .count()
        };
        assert_eq!(gets(&log, "/blobs/"), 0, "{log:#?}");
        assert_eq!(gets(&log, "/manifests/sha256:"), 0, "no image read again");
        assert_eq!(gets(&log, "/manifests/sha256-"), 2, "the fallback tags");
        assert_eq!(log.len(), 2 * 14 + 3, "{log:#?}");

        // Read from the blobs instead (no cache: a resume past verify that
        // reads everything), the statements are the same bytes: the same
        // referrer digests, none listed anew.
        let attached = journal.attached.clone();
        journal.attached.clear();
        journal.step = Step::Promoted;
        let before = reg.state().log.len();
        let uncached = Releaser {
            layer_cache: None,
            ..releaser
        };
        rt.block_on(uncached.carry_out(&mut journal)).unwrap();
        assert_eq!(journal.attached, attached);
        let log = reg.state().log[before..].to_vec();
        assert_eq!(gets(&log, "/blobs/"), 2 + 3, "two configs, three layers");
        assert_eq!(
            reg.state().count("PUT", "/manifests/sha256-"),
            2,
            "written by the first attach only"
        );
    }

    /// An engine holding the images of `saves`, whose `save` of one image
    /// works for those `alone` only, and whose `save` of several gives one
    /// stream of them (or fails, `fails`), noting what it was asked.
    struct Together {
        saves: Saves,
        alone: Vec<String>,
        fails: bool,
        asked: std::sync::Mutex<Vec<Vec<String>>>,
        dir: std::path::PathBuf,
    }

    impl crate::engine::Engine for Together {
        fn describe(&self) -> String {
            "together".into()
        }
        fn program(&self) -> &Path {
            Path::new("/bin/false")
        }
        fn log_format(&self) -> crate::engine::LogFormat {
            crate::engine::LogFormat::BuildKit
        }
        fn platform(&self) -> Result<crate::name::Platform, crate::engine::EngineError> {
            self.saves.platform()
        }
        fn resources(&self) -> Result<crate::engine::Resources, crate::engine::EngineError> {
            unreachable!()
        }
        fn build_cmd(&self, _: &crate::engine::BuildRequest) -> crate::process::Cmd {
            unreachable!()
        }
        fn inspect(
            &self,
            id: &str,
        ) -> Result<Option<crate::engine::ImageInfo>, crate::engine::EngineError> {
            self.saves.inspect(id)
        }
        fn save_cmd(&self, id: &str) -> crate::process::Cmd {
            if self.alone.iter().any(|a| a == id) {
                self.saves.save_cmd(id)
            } else {
                crate::process::Cmd::new("false")
            }
        }
        fn save_images_cmd(&self, ids: &[String]) -> crate::process::Cmd {
            self.asked.lock().unwrap().push(ids.to_vec());
            if self.fails {
                return crate::process::Cmd::new("sh")
                    .args(["-c", "echo no such image >&2; exit 1"]);
            }
            let streams: Vec<Vec<u8>> = (ids.iter())
                .map(|id| std::fs::read(&self.saves.image(id).unwrap().stream).unwrap())
                .collect();
            let streams: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
            let merged = crate::image::fixtures::merged_save_stream(&streams);
            let path = self.dir.join(format!("merged-{}.tar", ids.len()));
            std::fs::write(&path, merged).unwrap();
            crate::process::Cmd::new("cat").arg(path)
        }
    }

    /// Four engine images `a` (one layer), `b` (a's and one of its own),
    /// `c` (b's and one of its own) and `d` (c's and one of its own),
    /// planned in the order d, c, b, a; and the releaser's parts.
    fn four_on_one_another(dir: &Path, fails: bool) -> (Together, Plan) {
        use crate::image::fixtures::{file, layer};
        let layers = [
            layer(&[file("etc/os-release", "ID=debian\n")]),
            layer(&[file("usr/bin/b", "b\n")]),
            layer(&[file("usr/bin/c", "c\n")]),
            layer(&[file("usr/bin/d", "d\n")]),
        ];
        let labels = config("amd64", None, "pass")["config"]["Labels"].clone();
        let saves = Saves(
            (1..=4)
                .map(|n| {
                    crate::release::publish::tests::saved_with_labels(
                        dir,
                        &layers[..n],
                        labels.clone(),
                    )
                })
                .collect(),
        );
        let variants = ["d", "c", "b", "a"]
            .iter()
            .map(|v| {
                let n = (v.as_bytes()[0] - b'a') as usize;
                let mut p = planned(v, &[v]);
                p.source = Source::Engine {
                    reference: format!("local/{v}"),
                    image_id: saves.0[n].info.id.clone(),
                };
                p
            })
            .collect();
        let plan = Plan {
            id: "20261201T000001.000Z-0001".into(),
            repository: String::new(),
            variants,
            unchanged: Vec::new(),
        };
        let engine = Together {
            alone: vec![saves.0[0].info.id.clone(), saves.0[1].info.id.clone()],
            saves,
            fails,
            asked: Default::default(),
            dir: dir.to_path_buf(),
        };
        (engine, plan)
    }

    /// Releases [`four_on_one_another`] (whose shared save `fails` or
    /// not) into a fake registry with an empty layer cache.
    struct FourReleased {
        result: Result<(), ReleaseError>,
        journal: Journal,
        engine: Together,
        reg: FakeRegistry,
        cache: crate::image::layer_cache::LayerCache,
        pins_path: std::path::PathBuf,
        _dirs: [tempfile::TempDir; 2],
        _rt: tokio::runtime::Runtime,
    }

    fn release_four(fails: bool) -> FourReleased {
        let rt = runtime();
        let reg = rt.block_on(FakeRegistry::start());
        let client = reg.client();
        let dir = tempfile::tempdir().unwrap();
        let (engine, mut plan) = four_on_one_another(dir.path(), fails);
        plan.repository = format!("{}/rel/y", reg.authority);
        let cold = released_cold(&rt, &client, &engine, dir.path(), plan);
        FourReleased {
            result: cold.result,
            journal: cold.journal,
            engine,
            reg,
            cache: cold.cache,
            pins_path: cold.pins_path,
            _dirs: [dir, cold.cache_dir],
            _rt: rt,
        }
    }

    /// What [`released_cold`] left.
    struct Cold {
        result: Result<(), ReleaseError>,
        journal: Journal,
        cache: crate::image::layer_cache::LayerCache,
        cache_dir: tempfile::TempDir,
        pins_path: std::path::PathBuf,
    }

    /// `plan` released from `engine` (its journal and pins in `dir`) with
    /// an empty layer cache and no signing key.
    fn released_cold(
        rt: &tokio::runtime::Runtime,
        client: &Client,
        engine: &dyn crate::engine::Engine,
        dir: &Path,
        plan: Plan,
    ) -> Cold {
        let mut journal = Journal::new(dir, plan, "2026-12-01T00:00:00Z".into());
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = crate::image::layer_cache::LayerCache::open(cache_dir.path()).unwrap();
        let pins_path = dir.join("image_pins.json");
        let releaser = Releaser {
            client,
            engine: Some(engine),
            pins_path: &pins_path,
            key: None,
            manifest: None,
            layer_cache: Some(&cache),
            progress: &|_| {},
        };
        let result = rt.block_on(releaser.carry_out(&mut journal));
        Cold {
            result,
            journal,
            cache,
            cache_dir,
            pins_path,
        }
    }

    #[test]
    /// Issue 29: the engine writes a layer the images share once. The
    /// first two images (fewest layers) are exported alone, each in its
    /// turn; the others in one `save` of them all (their own `save` fails
    /// here), each layer compressed and sent once, by its owner, and each
    /// image's manifest names its own config and layers.
    fn images_after_the_first_two_are_exported_in_one_save_and_each_layer_sent_once() {
        let four = release_four(false);
        let (journal, engine, reg, cache) = (&four.journal, &four.engine, &four.reg, &four.cache);
        assert!(four.result.is_ok(), "{:?}", four.result);
        let ids = |n: usize| engine.saves.0[n].info.id.clone();
        assert_eq!(*engine.asked.lock().unwrap(), [vec![ids(2), ids(3)]]);
        let s = reg.state();
        for (v, n) in [("a", 0), ("b", 1), ("c", 2), ("d", 3)] {
            let staged = &journal.staged[v];
            let bytes = &s.manifests[&("rel/y".into(), staged.digest.to_string())].1;
            let doc: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            let layers = doc["layers"].as_array().unwrap();
            assert_eq!(layers.len(), n + 1, "{v}");
            for (i, l) in layers.iter().enumerate() {
                let digest = l["digest"].as_str().unwrap();
                let c = cache.compressed(&engine.saves.0[n].info.layers[i]).unwrap();
                assert_eq!(digest, c.digest, "{v} layer {i}");
            }
        }
        for diff_id in &engine.saves.0[3].info.layers {
            let c = cache.compressed(diff_id).unwrap();
            let puts = s.count("PUT", &format!("digest={}", c.digest));
            assert_eq!(puts, 1, "{diff_id} sent once: {:#?}", s.log);
        }
        // Each layer, and each image's config as saved and as stamped.
        assert_eq!(s.count("PUT", "/blobs/uploads/"), 4 + 4 * 2, "{:#?}", s.log);
    }

    #[test]
    fn a_failed_shared_save_fails_the_release_naming_the_images_and_the_engines_words() {
        let four = release_four(true);
        let (journal, pins_path) = (&four.journal, &four.pins_path);
        let e = four.result.as_ref().unwrap_err();
        let err = crate::error_chain::error_chain(&e);
        assert!(
            err.contains("the save of local/c, local/d (one stream for them all): "),
            "{err}"
        );
        assert!(err.contains("no such image"), "{err}");
        assert_eq!(
            crate::exit::HasStatus::exit_status(e),
            crate::exit::Status::Failure
        );
        assert!(!journal.wrote_tags());
        assert!(!pins_path.exists());
    }

    #[test]
    fn a_failing_arm64_check_stops_the_release_before_any_release_tag() {
        let (f, mut journal) = fixture("fail");
        let reg = &f.reg;
        let pins_path = &f.pins_path;
        let releaser = f.releaser(None);
        let e = f.rt.block_on(releaser.carry_out(&mut journal)).unwrap_err();
        assert!(
            matches!(promoting(&e), Some(PromoteError::Gate { variant, why, .. })
                if variant == "a" && why.starts_with("linux/arm64: ")),
            "{e}"
        );
        let err = crate::error_chain::error_chain(&e);
        assert!(
            err.contains("linux/arm64: it carries no passing check record"),
            "{err}"
        );
        assert!(!journal.wrote_tags());
        let s = reg.state();
        let tags: Vec<&str> = s
            .tags
            .keys()
            .filter(|(r, _)| r == "rel/y")
            .map(|(_, t)| t.as_str())
            .collect();
        assert!(tags.is_empty(), "staging writes no tag: {tags:?}");
        assert!(!pins_path.exists());
    }

    /// The verify or promote error a release stopped with, if that is why.
    fn promoting(e: &ReleaseError) -> Option<&PromoteError> {
        match e {
            ReleaseError::Promote(e) => Some(e),
            _ => None,
        }
    }

    #[test]
    fn each_step_stops_with_its_own_kind_of_error_and_every_kind_is_a_failure() {
        use crate::exit::{HasStatus, Status};
        let mut kinds = Vec::new();

        // Staging: the source image is not in the registry.
        let (f, mut journal) = fixture("pass");
        journal.plan.variants[0].source = Source::Registry {
            reference: format!("{}/src/x@{}", f.reg.authority, Digest::sha256(b"none")),
        };
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(
            matches!(&e, ReleaseError::Stage { variant, source }
                if variant == "a" && matches!(**source, StageError::Registry(_))),
            "{e}"
        );
        kinds.push(e);

        // Verify: the staged image is gone.
        let (f, mut journal) = fixture("pass");
        let gone = super::super::journal::Staged {
            digest: Digest::sha256(b"gone"),
            media_type: mt::OCI_MANIFEST.into(),
            config: None,
            pushed: None,
            platforms: BTreeMap::new(),
        };
        journal.staged.insert("a".into(), gone);
        journal.step = Step::Staged;
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(
            matches!(promoting(&e), Some(PromoteError::NotThere { variant, .. })
                if variant == "a"),
            "{e}"
        );
        kinds.push(e);

        // Verify: the immutable tag names another image already.
        let (f, mut journal) = fixture("pass");
        f.reg
            .put_manifest("rel/y", Some("a-1.0.0"), mt::OCI_MANIFEST, b"{}");
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(
            matches!(promoting(&e), Some(PromoteError::Conflicts(c))
                if c.0.len() == 1 && c.0[0].tag == "a-1.0.0"),
            "{e}"
        );
        assert!(!journal.wrote_tags());
        kinds.push(e);

        // Promote: the registry refuses the tag.
        let (f, mut journal) = fixture("pass");
        (f.reg.state().faults).push(("PUT", "/manifests/a-1.0.0".into(), 400));
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(
            matches!(promoting(&e), Some(PromoteError::Move { tag, .. }) if tag == "a-1.0.0"),
            "{e}"
        );
        kinds.push(e);

        // Attach: a signed release resumed without its key.
        let (f, mut journal) = fixture("pass");
        journal.signing_key = Some("0123".into());
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(
            matches!(&e, ReleaseError::KeyMissing { hint, .. } if hint == "0123"),
            "{e}"
        );
        assert_eq!(journal.step, Step::Promoted, "stopped before attaching");
        kinds.push(e);

        // Pin: the pins file cannot be read.
        let (f, mut journal) = fixture("pass");
        std::fs::write(&f.pins_path, "{").unwrap();
        let e = f.carry_out(&mut journal).unwrap_err();
        assert!(matches!(&e, ReleaseError::Pin(PinError::File(_))), "{e}");
        assert_eq!(journal.step, Step::Attached, "every tag written, no pin");
        let saved = Journal::load(f.dir.path(), &journal.id).unwrap();
        assert_eq!(
            saved.failure,
            Some(crate::error_chain::error_chain(&e)),
            "journaled"
        );
        kinds.push(e);

        for e in &kinds {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
    }
}
