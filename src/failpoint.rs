//! Crash points for tests: `SUNABA_FAILPOINT=NAME` (or `NAME#N`) makes the
//! process die, as a `kill -9` would (no destructors, no flush), the first
//! (or N-th) time it reaches the point NAME. A test then kills a run at
//! *each* write, deterministically, instead of at random moments.
//!
//! Debug builds only: a release build compiles [`hit`] to nothing, so no
//! environment variable can crash a shipped binary.
//!
//! | point | where |
//! |---|---|
//! | `atomic-write.before-rename` | `fsutil::atomic_write`: the temp file written and synced, the target untouched |
//! | `atomic-write.after-rename` | `fsutil::atomic_write`: the target replaced, the directory not yet synced |
//! | `release.tag-answered` | `release`: the registry answered a tag write, the journal does not know yet |
//! | `release.referrer-answered` | `release`: the registry answered a referrer manifest PUT, its subject's fallback tag not yet written |
//! | `release.referrers-listed` | `release`: a subject's fallback tag written, the journal does not know yet |

/// Dies here when `SUNABA_FAILPOINT` names this point (and this is the
/// N-th time it is reached).
#[inline]
pub(crate) fn hit(point: &str) {
    #[cfg(debug_assertions)]
    armed::hit(point);
    #[cfg(not(debug_assertions))]
    let _ = point;
}

#[cfg(debug_assertions)]
mod armed {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The armed point and after how many hits it fires; read once.
    fn armed() -> Option<&'static (String, u64)> {
        static ARMED: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
        ARMED
            .get_or_init(|| {
                let spec = std::env::var("SUNABA_FAILPOINT").ok()?;
                Some(parse(&spec))
            })
            .as_ref()
    }

    pub(super) fn parse(spec: &str) -> (String, u64) {
        match spec.rsplit_once('#') {
            Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1).max(1)),
            None => (spec.to_string(), 1),
        }
    }

    pub(super) fn hit(point: &str) {
        static HITS: AtomicU64 = AtomicU64::new(0);
        static DYING: Mutex<()> = Mutex::new(());
        let Some((name, nth)) = armed() else {
            return;
        };
        if name != point || HITS.fetch_add(1, Ordering::SeqCst) + 1 != *nth {
            return;
        }
        // Held forever: no other thread gets past a point while we die.
        let _dying = DYING.lock();
        eprintln!("failpoint {point}#{nth}: dying here");
        std::process::abort();
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    #[test]
    fn a_spec_names_the_point_and_which_hit_fires() {
        assert_eq!(
            armed::parse("atomic-write.before-rename"),
            ("atomic-write.before-rename".into(), 1)
        );
        assert_eq!(
            armed::parse("release.tag-answered#7"),
            ("release.tag-answered".into(), 7)
        );
        assert_eq!(armed::parse("x#0"), ("x".into(), 1));
    }

    use super::armed;
}
