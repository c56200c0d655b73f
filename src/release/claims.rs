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
    /// The layer names the release's saves showed ([`LayerNames`]).
    names: LayerNames,
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
        for (owner, diff_ids) in images {
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
            names: LayerNames::default(),
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

    /// `me` stopped: every layer it owns and has not sent is given up.
    pub(crate) fn give_up(&self, me: &str) {
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
}

impl Theirs {
    /// The layer compressed, once its owner has it; `None` when the owner
    /// gave up. For the thread reading a `save` stream (it blocks).
    pub(crate) fn compressed_blocking(&self) -> Option<Compressed> {
        let claim = &self.claim;
        let state = claim.state.lock().expect("claim lock");
        let state = (claim.changed)
            .wait_while(state, |s| matches!(s, LayerState::Pending))
            .expect("claim lock");
        match &*state {
            LayerState::Compressed(c) | LayerState::Sent(c) => Some(c.clone()),
            _ => None,
        }
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
