//! Independent registry requests in flight together, their answers in the
//! order they were asked.

use futures::{StreamExt as _, TryStreamExt as _};
use std::future::Future;

/// How many [`in_order`] keeps in flight when each task is one request: the
/// client's per-registry limit is what bounds them.
pub(crate) const REQUESTS: usize = 256;

/// Runs `tasks` with at most `at_once` in flight and returns their results
/// in input order. A failure is the first failing task's *in input order* —
/// what a loop asking one after another reported — not whichever failed
/// first in time (`try_join_all` returns that one), and it stops the rest.
pub(crate) async fn in_order<T, E, F>(
    tasks: impl IntoIterator<Item = F>,
    at_once: usize,
) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    futures::stream::iter(tasks)
        .buffered(at_once)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn results_and_the_error_follow_the_input_order() {
        let task = |i: u64, fails: bool| async move {
            // The later tasks end sooner.
            tokio::time::sleep(Duration::from_millis(30 - 10 * i)).await;
            if fails { Err(i) } else { Ok(i) }
        };
        let all = in_order([task(0, false), task(1, false), task(2, false)], 3).await;
        assert_eq!(all, Ok(vec![0, 1, 2]));
        // Task 2 fails first in time; task 1 is the first in order.
        let failed = in_order([task(0, false), task(1, true), task(2, true)], 3).await;
        assert_eq!(failed, Err(1));
    }

    #[tokio::test]
    async fn no_more_than_at_once_run_together() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let task = |_| async {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ()>(())
        };
        in_order((0..10).map(task), 3).await.unwrap();
        assert_eq!(most.load(Ordering::SeqCst), 3);
    }
}
