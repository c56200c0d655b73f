//! One engine `save` for several images of a release.
//!
//! The engine's export is most of what staging a family from the engine
//! costs: Docker writes an image's every layer out before its `save`
//! stream sends a byte (2.9 s for the dev `base`, 5.3 s for `full`), and a
//! save of one image holds every layer of it, so six saves export `base`'s
//! layers six times and each fragment's layer twice (its member's and
//! `full`'s). A save of several images holds a layer they share once
//! (Docker links the later names to the first file; Podman's multi-image
//! archive names layers by diff_id): the engine writes each layer once.
//!
//! So the release's first two images are exported alone, one after the
//! other (the smallest image's stream starts soonest and gets the link
//! busy; the next, the family's base, starts well before the union of the
//! rest would), and the images started beside them ([`super::run`]) are
//! exported together, in one stream read once: each
//! layer compressed, when its owner ([`LayerClaims`]) lacks it, and handed
//! to that owner's uploads. Each member pushes as before, from its part of
//! the stream instead of a stream of its own.
//!
//! The stream starts when every member has either joined (said what it
//! has, taken its hand-over) or left (needs no export, or stopped), so it
//! knows every member's wants before reading; the first member to join, in
//! the release's order, asks the engine for it in that member's export
//! turn, which comes with the last image exported alone's (Docker takes
//! ~10 s to write the union out: started beside base's export instead of
//! after its first byte, the loopback release took 16.9 s instead of
//! 17.3-18.2 s, docs/lab-notes.md). A failure of the one stream is every
//! joined member's failure.

use super::claims::LayerClaims;
use super::publish::{PublishError, Ready, SaveRead};
use crate::engine::Engine;
use crate::image::compress::Compressed;
use crate::image::layer_cache::LayerCache;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// How many compressed layers wait for one member's uploads: the stream
/// goes on with the other members' layers meanwhile, and stops (holding the
/// disk to this many per member) when a member's uploads fall behind.
const WAITING_PER_MEMBER: usize = 2;

/// The images of a release exported together (see the module's docs).
pub(crate) struct SharedExport {
    /// The members' local references, in the release's order.
    members: Vec<String>,
    gathering: Mutex<Gathering>,
    gathered: tokio::sync::Notify,
    outcome: tokio::sync::watch::Sender<Option<Arc<Outcome>>>,
}

#[derive(Default)]
struct Gathering {
    joined: Vec<Member>,
    left: BTreeSet<String>,
    /// The stream was asked for: every member had joined or left, and
    /// the joined ones were taken away for it.
    started: bool,
}

impl Gathering {
    /// Every member joined or left.
    fn complete(&self, members: usize) -> bool {
        self.started || self.joined.len() + self.left.len() >= members
    }
}

/// A member that joined: what it has and where its layers go.
struct Member {
    me: String,
    image_id: String,
    diff_ids: Vec<String>,
    have: BTreeMap<String, Compressed>,
    send: tokio::sync::mpsc::Sender<Ready>,
}

/// What the one stream gave: its small files (every member's config among
/// them) and, by member, the layers compressed for it.
type Read = (Vec<Vec<u8>>, BTreeMap<String, Vec<Compressed>>);
type Outcome = Result<Read, ExportFailure>;

/// Why the shared stream failed, for each member (one error, many
/// readers: its words and its exit status).
#[derive(Debug, Clone)]
pub(crate) struct ExportFailure {
    pub images: String,
    pub message: String,
    pub status: crate::exit::Status,
}

/// A member joining: the image `image_id` (`me`, its local reference),
/// its layers `diff_ids`, of which the repository has `have`.
pub(crate) struct Joining<'a> {
    pub me: &'a str,
    pub image_id: &'a str,
    pub diff_ids: &'a [String],
    pub have: &'a BTreeMap<String, Compressed>,
}

/// A joined member's wait for the stream's end.
pub(crate) struct Part {
    me: String,
    outcome: tokio::sync::watch::Receiver<Option<Arc<Outcome>>>,
}

impl SharedExport {
    pub(crate) fn new(members: Vec<String>) -> SharedExport {
        SharedExport {
            members,
            gathering: Mutex::default(),
            gathered: tokio::sync::Notify::new(),
            outcome: tokio::sync::watch::channel(None).0,
        }
    }

    pub(crate) fn has(&self, me: &str) -> bool {
        self.members.iter().any(|m| m == me)
    }

    /// `me` will not join (it needs no export, or it stopped): the stream
    /// need not wait for it. Nothing once it joined.
    pub(crate) fn leave(&self, me: &str) {
        if !self.has(me) {
            return;
        }
        let mut g = self.gathering.lock().unwrap_or_else(|e| e.into_inner());
        if !g.started && g.joined.iter().all(|m| m.me != me) && g.left.insert(me.to_string()) {
            self.check_gathered(&g);
        }
    }

    fn check_gathered(&self, g: &Gathering) {
        if g.complete(self.members.len()) {
            self.gathered.notify_waiters();
        }
    }

    fn is_gathered(&self) -> bool {
        let g = self.gathering.lock().unwrap_or_else(|e| e.into_inner());
        g.complete(self.members.len())
    }

    /// Joins `joining` and waits for the others; the first joined member
    /// in the release's order starts the stream, in its export turn (which
    /// comes with the turn of the image before it).
    pub(crate) async fn join(
        self: &Arc<Self>,
        engine: &dyn Engine,
        claims: &LayerClaims,
        cache: &LayerCache,
        joining: Joining<'_>,
    ) -> (tokio::sync::mpsc::Receiver<Ready>, Part) {
        let Joining {
            me,
            image_id,
            diff_ids,
            have,
        } = joining;
        let (send, layers) = tokio::sync::mpsc::channel(WAITING_PER_MEMBER);
        {
            let mut g = self.gathering.lock().unwrap_or_else(|e| e.into_inner());
            g.joined.push(Member {
                me: me.to_string(),
                image_id: image_id.to_string(),
                diff_ids: diff_ids.to_vec(),
                have: have.clone(),
                send,
            });
            self.check_gathered(&g);
        }
        loop {
            // Registered before the count is read: a join in between
            // still wakes it.
            let gathered = self.gathered.notified();
            tokio::pin!(gathered);
            gathered.as_mut().enable();
            if self.is_gathered() {
                break;
            }
            gathered.await;
        }
        let part = Part {
            me: me.to_string(),
            outcome: self.outcome.subscribe(),
        };
        let starting = {
            let mut g = self.gathering.lock().unwrap_or_else(|e| e.into_inner());
            let leader = (self.members.iter()).find(|m| g.joined.iter().any(|j| &j.me == *m));
            if g.started || leader.map(String::as_str) != Some(me) {
                None
            } else {
                g.started = true;
                Some(std::mem::take(&mut g.joined))
            }
        };
        if let Some(joined) = starting {
            self.start(engine, claims, cache, me, joined).await;
        }
        (layers, part)
    }

    /// Reads the members' one stream on a blocking thread, in `leader`'s
    /// export turn (the others' turns are passed: this is theirs too).
    async fn start(
        self: &Arc<Self>,
        engine: &dyn Engine,
        claims: &LayerClaims,
        cache: &LayerCache,
        leader: &str,
        mut joined: Vec<Member>,
    ) {
        for m in self.members.iter().filter(|m| *m != leader) {
            claims.pass_turn(m);
        }
        let turn = claims.export_turn_beside_the_one_before(leader).await;
        // In the release's order, however they came.
        joined.sort_by_key(|j| self.members.iter().position(|m| *m == j.me));
        let ids: Vec<String> = joined.iter().map(|m| m.image_id.clone()).collect();
        let save = engine.save_images_cmd(&ids);
        let images = (joined.iter().map(|m| m.me.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let (claims, cache, this) = (claims.clone(), cache.clone(), Arc::clone(self));
        tokio::task::spawn_blocking(move || {
            let read = read_together(&save, turn, &joined, &claims, &cache);
            let outcome = read.map_err(|e| {
                let e = e.into_error();
                ExportFailure {
                    images,
                    message: crate::error_chain::error_chain(&e),
                    status: crate::exit::HasStatus::exit_status(&e),
                }
            });
            this.outcome.send_replace(Some(Arc::new(outcome)));
        });
    }
}

/// The members' one `save` stream read: each layer an owner among them
/// lacks compressed, remembered and handed to it; a layer owned outside
/// them (by the images exported alone) waited for until its owner has
/// compressed it, then read past.
fn read_together(
    save: &crate::process::Cmd,
    turn: super::claims::ExportTurn,
    joined: &[Member],
    claims: &LayerClaims,
    cache: &LayerCache,
) -> Result<Read, crate::process::PipeError<PublishError>> {
    let images: Vec<Vec<String>> = joined.iter().map(|m| m.diff_ids.clone()).collect();
    let member = |owner: &str| joined.iter().find(|m| m.me == owner);
    let had = |d: &str| {
        if let Some(c) = joined.iter().find_map(|m| m.have.get(d)) {
            return Some(c.clone());
        }
        match claims.owner_of(d) {
            Some(owner) if member(&owner).is_none() => claims.compressed_blocking(d),
            _ => None,
        }
    };
    let mut compressed: BTreeMap<String, Vec<Compressed>> = BTreeMap::new();
    let (small, _) = save.read_stdout(|out| {
        let mut out = super::publish::EndsTurn::new(out, turn);
        crate::image::local::read_and_compress(
            &mut out,
            &images,
            claims.names(),
            Some(super::publish::STREAM_FROM),
            had,
            |c| super::publish::is_noted(cache, c),
            |c, spill| super::publish::note_layer(cache, c, spill),
            |handed| {
                // A layer whose owner stopped goes to no one: whoever waits
                // for it hears the owner stopped.
                let owner = (claims.owner_of(handed.diff_id()))
                    .and_then(|owner| Some((member(&owner)?, owner)));
                let ready = Ready::of(handed, |c| {
                    cache.remember(c);
                    if let Some((_, owner)) = &owner {
                        claims.compressed(owner, c);
                        compressed.entry(owner.clone()).or_default().push(c.clone());
                    }
                });
                match (ready, owner) {
                    (Some(ready), Some((m, _))) => {
                        (m.send.blocking_send(ready)).map_err(|_| PublishError::UploadStopped)
                    }
                    _ => Ok(()),
                }
            },
        )
    })?;
    Ok((small, compressed))
}

impl Part {
    /// Waits for the stream's end: the small files and `me`'s layers
    /// compressed, or the failure every member shares.
    pub(crate) async fn finish(mut self) -> SaveRead {
        let outcome = loop {
            if let Some(o) = self.outcome.borrow_and_update().clone() {
                break o;
            }
            if self.outcome.changed().await.is_err() {
                // The export was dropped before its stream ended: only
                // when the release itself stopped.
                break Arc::new(Err(ExportFailure {
                    images: String::new(),
                    message: "the shared export stopped".into(),
                    status: crate::exit::Status::Failure,
                }));
            }
        };
        match &*outcome {
            Ok((small, mine)) => Ok((
                small.clone(),
                mine.get(&self.me).cloned().unwrap_or_default(),
            )),
            Err(f) => Err(crate::process::PipeError::Stream(
                PublishError::ExportedTogether(f.clone()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whichever member joins last, every member's join returns (the
    /// first-joined leader takes the members away to start the stream: a
    /// member still waiting must see the gathering complete all the same),
    /// the engine is asked once, and a failed stream is each member's
    /// error, naming them all.
    #[test]
    fn every_member_returns_whichever_joins_last_and_all_hear_the_one_failure() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = LayerCache::open(dir.path()).unwrap();
        // Its `save` of several images is `/bin/false save …`: it fails.
        let engine = crate::engine::fake::FakeEngine::default();
        let have = BTreeMap::new();
        for (first, second) in [("x", "y"), ("y", "x")] {
            let claims = LayerClaims::default().exported_together(vec!["x".into(), "y".into()]);
            let shared = Arc::clone(claims.shared_export("x").unwrap());
            let joining = |me| Joining {
                me,
                image_id: "sha256:1",
                diff_ids: &[],
                have: &have,
            };
            let parts = rt.block_on(async {
                let a = shared.join(&engine, &claims, &cache, joining(first));
                let b = async {
                    tokio::task::yield_now().await;
                    shared.join(&engine, &claims, &cache, joining(second)).await
                };
                let both = async { futures::join!(a, b) };
                tokio::time::timeout(std::time::Duration::from_secs(20), both)
                    .await
                    .unwrap_or_else(|_| panic!("{second} joined last: a join never returned"))
            });
            for (_, part) in [parts.0, parts.1] {
                match rt.block_on(part.finish()) {
                    Err(crate::process::PipeError::Stream(PublishError::ExportedTogether(f))) => {
                        assert_eq!(f.images, "x, y");
                        assert_eq!(f.status, crate::exit::Status::Failure);
                    }
                    Err(other) => panic!("{other}"),
                    Ok(_) => panic!("a failed save was read"),
                }
            }
        }
    }
}
