//! Which image of a release sends each layer, and how far it has got.
//!
//! The family's images share layers (base's are in every child, a
//! fragment's in its variant and in `full`). A shared layer is compressed
//! and sent once, by its owner: the first image in the release's order
//! that has it. The others are staged at the same time and wait only where
//! they must: their `save` stream reads past the layer once the owner has
//! compressed it (its compressed digest is then known), and their manifest
//! goes up once the owner has sent it. So while base's large layer is on
//! the wire, python's and go's are already being compressed and sent; the
//! link is never left idle waiting for a whole image.
//!
//! Ownership is fixed before staging starts ([`LayerClaims::new`], in the
//! release's order), and images start in that order, so an image waits
//! only for images started before it: no cycle, no deadlock. An owner that
//! stops ([`LayerClaims::give_up`]) releases whoever waits for it.
//!
//! The engine exports the images one at a time, in the same order
//! ([`LayerClaims::export_turn`]): Docker writes a whole image out before
//! its `save` stream sends a byte, so exports at once only delay the first
//! (the smallest image's, which gets the link busy) while the link idles. A
//! turn ends with the stream's first byte, never with another image's
//! work, so taking turns cannot deadlock either. Images exported together
//! in one stream ([`super::export`]) take one turn, the first member's,
//! which comes with the turn of the image before it
//! ([`LayerClaims::export_turn_beside_the_one_before`]): the engine takes
//! longest to write that one out, and the images exported alone are well
//! under way by then.

use super::export::SharedExport;
use crate::image::compress::Compressed;
use crate::image::save_stream::LayerNames;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};

/// How far the owner of a layer has got with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayerState {
    Pending,
    Compressed(Compressed),
    Sent(Compressed),
    /// The owner stopped before sending it.
    GaveUp,
}

/// The owners of a release's layers (by diff_id), and each one's state.
#[derive(Clone, Default)]
pub(crate) struct LayerClaims {
    by_layer: Arc<BTreeMap<String, Arc<Claim>>>,
    /// Each image's layers (diff_ids), by its local reference, as the
    /// release asked the engine: not asked again.
    layers: Arc<BTreeMap<String, Vec<String>>>,
    /// The layer names the release's saves showed ([`LayerNames`]).
    names: LayerNames,
    /// Whose turn it is to have the engine export its image.
    turns: Arc<Turns>,
    /// The images exported together, if any ([`super::export`]).
    shared: Option<Arc<SharedExport>>,
}

/// The images in the release's order and the index of the one whose turn
/// it is to export; an image that needs no export passes its turn.
#[derive(Default)]
struct Turns {
    order: Vec<String>,
    /// The turn now, and the turns ended (taken or passed) ahead of it:
    /// one lock.
    state: Mutex<(usize, std::collections::BTreeSet<usize>)>,
    changed: tokio::sync::Notify,
}

impl Turns {
    fn index(&self, me: &str) -> Option<usize> {
        self.order.iter().position(|o| o == me)
    }

    /// The turn now: every image before it has had or passed its own.
    fn now(&self) -> usize {
        self.state.lock().expect("turns lock").0
    }

    /// Ends turn `i`, taken or passed (an export taken beside an earlier
    /// one may end first): when it is the turn now, the next image whose
    /// turn has not ended has its turn.
    fn end(&self, i: usize) {
        let mut state = self.state.lock().expect("turns lock");
        let (next, ended) = &mut *state;
        ended.insert(i);
        if *next == i {
            while ended.contains(next) {
                *next += 1;
            }
            drop(state);
            self.changed.notify_waiters();
        }
    }
}

/// An image's turn to export (see [`LayerClaims::export_turn`]); it ends
/// when dropped.
pub(crate) struct ExportTurn {
    turns: Arc<Turns>,
    index: Option<usize>,
}

impl Drop for ExportTurn {
    fn drop(&mut self) {
        if let Some(i) = self.index {
            self.turns.end(i);
        }
    }
}

/// One layer's owner and state. Waited for two ways: by the thread that
/// reads a `save` stream (blocking, the condition variable) and by an
/// async push (the notify).
struct Claim {
    /// The image that sends it (its local reference).
    owner: String,
    state: Mutex<LayerState>,
    changed: Condvar,
    notify: tokio::sync::Notify,
}

/// Another image's layer, waited for (a handle: clones wait on the same
/// claim).
#[derive(Clone)]
pub(crate) struct Theirs {
    pub owner: String,
    claim: Arc<Claim>,
}

impl LayerClaims {
    /// Claims for a release staging `images` (each image's local reference
    /// and its layers' diff_ids) in this order: each layer is owned by the
    /// first image that has it.
    pub(crate) fn new<'a>(images: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Self {
        let mut claims = BTreeMap::new();
        let mut order = Vec::new();
        let mut layers = BTreeMap::new();
        for (owner, diff_ids) in images {
            order.push(owner.to_string());
            layers.insert(owner.to_string(), diff_ids.to_vec());
            for diff_id in diff_ids {
                claims.entry(diff_id.clone()).or_insert_with(|| {
                    Arc::new(Claim {
                        owner: owner.to_string(),
                        state: Mutex::new(LayerState::Pending),
                        changed: Condvar::new(),
                        notify: tokio::sync::Notify::new(),
                    })
                });
            }
        }
        LayerClaims {
            by_layer: Arc::new(claims),
            layers: Arc::new(layers),
            names: LayerNames::default(),
            turns: Arc::new(Turns {
                order,
                ..Turns::default()
            }),
            shared: None,
        }
    }

    /// These claims with `members` exported together, in one `save`
    /// stream ([`super::export`]): images of these claims, all staged at
    /// once (the stream waits for each to join or leave).
    pub(crate) fn exported_together(mut self, members: Vec<String>) -> Self {
        self.shared = Some(Arc::new(SharedExport::new(members)));
        self
    }

    /// The export `me` is a member of, if it shares one.
    pub(crate) fn shared_export(&self, me: &str) -> Option<&Arc<SharedExport>> {
        self.shared.as_ref().filter(|s| s.has(me))
    }

    /// The layers (diff_ids) of the image `me`, when these claims were made
    /// with them.
    pub(crate) fn layers(&self, me: &str) -> Option<&[String]> {
        self.layers.get(me).map(Vec::as_slice)
    }

    /// The image that sends the layer `diff_id`.
    pub(crate) fn owner_of(&self, diff_id: &str) -> Option<String> {
        self.by_layer.get(diff_id).map(|c| c.owner.clone())
    }

    /// The layer `diff_id` compressed, once its owner has it; `None` when
    /// the owner gave up or no image of the release has it. Blocks.
    pub(crate) fn compressed_blocking(&self, diff_id: &str) -> Option<Compressed> {
        self.by_layer.get(diff_id)?.compressed_blocking()
    }

    /// Waits for `me`'s turn to have the engine export its image: every
    /// image before it in the release's order has had its turn (or passed
    /// it). The turn ends when the returned guard is dropped, which the
    /// caller does at the stream's first byte. An image not in the order
    /// (a push outside a release) has its turn at once.
    pub(crate) async fn export_turn(&self, me: &str) -> ExportTurn {
        self.turn_once_come(me, 0).await
    }

    /// [`LayerClaims::export_turn`], taken beside the image just before
    /// `me`, when that one's turn comes: for the shared export, which the
    /// engine takes longest to write out (the union of the rest), so it
    /// starts with the last image exported alone instead of after it.
    pub(crate) async fn export_turn_beside_the_one_before(&self, me: &str) -> ExportTurn {
        self.turn_once_come(me, 1).await
    }

    /// `me`'s turn, taken once the turn `early` places before it has come.
    async fn turn_once_come(&self, me: &str, early: usize) -> ExportTurn {
        let index = self.turns.index(me);
        if let Some(i) = index {
            let i = i.saturating_sub(early);
            loop {
                // Registered before `next` is read: an end in between
                // still wakes it.
                let changed = self.turns.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.turns.now() >= i {
                    break;
                }
                changed.await;
            }
        }
        ExportTurn {
            turns: Arc::clone(&self.turns),
            index,
        }
    }

    /// `me` needs no export (or stopped): the images after it need not wait
    /// for its turn.
    pub(crate) fn pass_turn(&self, me: &str) {
        if let Some(i) = self.turns.index(me) {
            self.turns.end(i);
        }
        if let Some(shared) = &self.shared {
            shared.leave(me);
        }
    }

    /// What the release's saves so far said of their layers' names: a
    /// layer another save read is not read again ([`LayerNames`]).
    pub(crate) fn names(&self) -> &LayerNames {
        &self.names
    }

    /// The layers of `diff_ids` that another image than `me` sends.
    pub(crate) fn theirs(&self, me: &str, diff_ids: &[String]) -> BTreeMap<String, Theirs> {
        (diff_ids.iter())
            .filter_map(|d| {
                let claim = self.by_layer.get(d).filter(|c| c.owner != me)?;
                let theirs = Theirs {
                    owner: claim.owner.clone(),
                    claim: Arc::clone(claim),
                };
                Some((d.clone(), theirs))
            })
            .collect()
    }

    /// `me` has compressed its layer `c` (another layer's, or one it does
    /// not own: nothing).
    pub(crate) fn compressed(&self, me: &str, c: &Compressed) {
        if let Some(claim) = self.mine(me, &c.diff_id) {
            claim.advance(|s| match s {
                LayerState::Pending => Some(LayerState::Compressed(c.clone())),
                _ => None,
            });
        }
    }

    /// `me`'s layer `c` is in the release repository.
    pub(crate) fn sent(&self, me: &str, c: &Compressed) {
        if let Some(claim) = self.mine(me, &c.diff_id) {
            claim.advance(|s| match s {
                LayerState::Sent(_) => None,
                _ => Some(LayerState::Sent(c.clone())),
            });
        }
    }

    /// `me` stopped: every layer it owns and has not sent is given up, and
    /// its export turn passed.
    pub(crate) fn give_up(&self, me: &str) {
        self.pass_turn(me);
        for claim in self.by_layer.values().filter(|c| c.owner == me) {
            claim.advance(|s| match s {
                LayerState::Sent(_) => None,
                _ => Some(LayerState::GaveUp),
            });
        }
    }

    fn mine(&self, me: &str, diff_id: &str) -> Option<&Arc<Claim>> {
        self.by_layer.get(diff_id).filter(|c| c.owner == me)
    }
}

impl Claim {
    fn advance(&self, next: impl Fn(&LayerState) -> Option<LayerState>) {
        let mut state = self.state.lock().expect("claim lock");
        if let Some(n) = next(&state) {
            *state = n;
            drop(state);
            self.changed.notify_all();
            self.notify.notify_waiters();
        }
    }

    fn now(&self) -> LayerState {
        self.state.lock().expect("claim lock").clone()
    }

    /// The layer compressed, once its owner has it; `None` when the owner
    /// gave up. Blocks (the thread reading a `save` stream).
    fn compressed_blocking(&self) -> Option<Compressed> {
        let state = self.state.lock().expect("claim lock");
        let state = (self.changed)
            .wait_while(state, |s| matches!(s, LayerState::Pending))
            .expect("claim lock");
        match &*state {
            LayerState::Compressed(c) | LayerState::Sent(c) => Some(c.clone()),
            _ => None,
        }
    }
}

impl Theirs {
    /// The layer compressed, once its owner has it; `None` when the owner
    /// gave up. For the thread reading a `save` stream (it blocks).
    pub(crate) fn compressed_blocking(&self) -> Option<Compressed> {
        self.claim.compressed_blocking()
    }

    /// The layer, once its owner has sent it; `None` when the owner gave up.
    pub(crate) async fn sent(&self) -> Option<Compressed> {
        loop {
            // Registered before the state is read: a change in between
            // still wakes it.
            let changed = self.claim.notify.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.claim.now() {
                LayerState::Sent(c) => return Some(c),
                LayerState::GaveUp => return None,
                LayerState::Pending | LayerState::Compressed(_) => changed.await,
            }
        }
    }
}

/// Gives up `me`'s claims when dropped (its push stopped, by an error or
/// by being dropped): a no-op for the layers it sent.
pub(crate) struct GiveUpOnDrop<'a> {
    pub claims: &'a LayerClaims,
    pub me: &'a str,
}

impl Drop for GiveUpOnDrop<'_> {
    fn drop(&mut self) {
        self.claims.give_up(self.me);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(id: &str) -> Compressed {
        Compressed {
            diff_id: id.into(),
            digest: format!("{id}-gz"),
            size: 1,
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_first_image_with_a_layer_owns_it() {
        let (base, python, full) = (
            ids(&["b1", "b2"]),
            ids(&["b1", "b2", "py"]),
            ids(&["b1", "py", "go"]),
        );
        let claims = LayerClaims::new([
            ("base", base.as_slice()),
            ("python", python.as_slice()),
            ("full", full.as_slice()),
        ]);
        assert!(claims.theirs("base", &base).is_empty());
        let of_python = claims.theirs("python", &python);
        assert_eq!(of_python.keys().collect::<Vec<_>>(), ["b1", "b2"]);
        assert!(of_python.values().all(|t| t.owner == "base"));
        let of_full: BTreeMap<_, _> = (claims.theirs("full", &full).into_iter())
            .map(|(d, t)| (d, t.owner))
            .collect();
        assert_eq!(
            of_full,
            BTreeMap::from([("b1".into(), "base".into()), ("py".into(), "python".into())])
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn images_export_in_the_release_order_one_at_a_time_and_a_passed_turn_is_skipped() {
        let (a, b, c) = (ids(&["1"]), ids(&["2"]), ids(&["3"]));
        let claims = LayerClaims::new([
            ("a", a.as_slice()),
            ("b", b.as_slice()),
            ("c", c.as_slice()),
        ]);
        let order = Arc::new(Mutex::new(Vec::new()));
        let take = |me: &'static str| {
            let (claims, order) = (claims.clone(), Arc::clone(&order));
            tokio::spawn(async move {
                let turn = claims.export_turn(me).await;
                order.lock().unwrap().push(me);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                drop(turn);
            })
        };
        // c asks first, then b; a has not asked yet: neither may go.
        let (tc, tb) = (take("c"), take("b"));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(order.lock().unwrap().is_empty());
        // a needs no export: b goes, then c.
        claims.pass_turn("a");
        tb.await.unwrap();
        tc.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["b", "c"]);
        // A push outside the release's order never waits.
        drop(claims.export_turn("elsewhere").await);
    }

    /// The shared export's turn (`c`'s) comes with the one before it
    /// (`b`'s), not after it; and when it ends first, the turns after it
    /// (`d`'s) wait only for `b`'s to end too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_taken_beside_the_one_before_starts_with_it_and_may_end_first() {
        let layers: Vec<Vec<String>> = ["1", "2", "3", "4"].iter().map(|l| ids(&[l])).collect();
        let claims = LayerClaims::new(
            ["a", "b", "c", "d"]
                .into_iter()
                .zip(layers.iter().map(Vec::as_slice)),
        );
        let a = claims.export_turn("a").await;
        let beside = {
            let claims = claims.clone();
            tokio::spawn(async move { claims.export_turn_beside_the_one_before("c").await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(!beside.is_finished(), "b's turn has not come");
        drop(a);
        let b = claims.export_turn("b").await;
        let c = tokio::time::timeout(std::time::Duration::from_secs(5), beside)
            .await
            .expect("c's turn comes with b's")
            .unwrap();
        let d = {
            let claims = claims.clone();
            tokio::spawn(async move { drop(claims.export_turn("d").await) })
        };
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(!d.is_finished(), "b's turn is not over");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), d)
            .await
            .expect("d's turn comes once b's and c's have ended")
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_image_that_stops_passes_its_turn() {
        let (a, b) = (ids(&["1"]), ids(&["2"]));
        let claims = LayerClaims::new([("a", a.as_slice()), ("b", b.as_slice())]);
        let waiting = {
            let claims = claims.clone();
            tokio::spawn(async move { drop(claims.export_turn("b").await) })
        };
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(!waiting.is_finished());
        drop(GiveUpOnDrop {
            claims: &claims,
            me: "a",
        });
        waiting.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_gets_the_layer_compressed_then_sent_or_nothing_when_the_owner_gives_up() {
        let (base, python) = (ids(&["b1", "b2"]), ids(&["b1", "b2", "py"]));
        let claims = LayerClaims::new([("base", base.as_slice()), ("python", python.as_slice())]);
        let mut theirs = claims.theirs("python", &python);
        let b1 = theirs.remove("b1").unwrap();
        let b2 = theirs.remove("b2").unwrap();
        // The save thread blocks until base has compressed b1.
        let reading = tokio::task::spawn_blocking(move || (b1.compressed_blocking(), b1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!reading.is_finished(), "nothing compressed yet");
        // Only the owner moves a claim.
        claims.compressed("python", &layer("b1"));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!reading.is_finished());
        claims.compressed("base", &layer("b1"));
        let (got, b1) = reading.await.unwrap();
        assert_eq!(got, Some(layer("b1")));
        claims.sent("base", &layer("b1"));
        assert_eq!(b1.sent().await, Some(layer("b1")));
        // base stops before sending b2: python's wait ends with nothing.
        drop(GiveUpOnDrop {
            claims: &claims,
            me: "base",
        });
        assert_eq!(b2.sent().await, None);
        assert_eq!(b2.compressed_blocking(), None);
        // Sent stays sent after a give-up.
        assert_eq!(b1.sent().await, Some(layer("b1")));
    }
}
