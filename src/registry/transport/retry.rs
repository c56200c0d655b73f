//! Retrying: which failures are worth another attempt, jittered exponential
//! backoff, `Retry-After` (seconds or HTTP date), and the budget of the
//! whole request.

use super::{Clock, Failure, Response, Sleeper};

use crate::registry::error::error_detail;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How failed requests are retried: jittered exponential backoff for 408,
/// 429, 500, 502, 503, 504 and connection errors, `Retry-After` honoured,
/// everything within `total`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Delay before the first retry; doubled each time, with full jitter.
    pub base_delay: Duration,
    /// Cap of one backoff delay (not of `Retry-After`, which only `total` bounds).
    pub max_delay: Duration,
    /// The budget of the whole request, retries and waits included: the
    /// time it may spend waiting (backoff, connecting, for answers), on
    /// the [`Clock`]. Time a body spends moving is not spent from it (see
    /// [`Budget`]), so a transfer that keeps moving is never cut by it.
    pub total: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            total: Duration::from_secs(120),
        }
    }
}

/// Why the retry layer stopped trying: for the caller's message.
pub(crate) struct Exhausted {
    pub attempts: u32,
    pub elapsed: Duration,
    /// The last failure, with a note when `Retry-After` asked for more time
    /// than the bound leaves.
    pub last: String,
}

/// What to do after a failed attempt.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Wait(Duration),
    Stop {
        /// Set when the stop is because `Retry-After` reaches past `total`.
        retry_after_beyond_bound: Option<Duration>,
    },
}

impl RetryPolicy {
    /// No retries at all (one attempt).
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `retry` (0 = the first retry).
    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max_delay);
        // Full jitter: spreads clients that failed together.
        let factor = 0.5 + rand::random::<f64>() / 2.0;
        Duration::try_from_secs_f64(exp.as_secs_f64() * factor).unwrap_or(exp)
    }

    /// After `attempts` attempts and `elapsed` time: wait (the server's
    /// `Retry-After`, else backoff) or stop, never passing `total`.
    fn decide(&self, attempts: u32, elapsed: Duration, retry_after: Option<Duration>) -> Decision {
        let delay = retry_after.unwrap_or_else(|| self.backoff(attempts.saturating_sub(1)));
        let past_bound = |wait: Duration| elapsed.saturating_add(wait) >= self.total;
        if attempts >= self.max_attempts || past_bound(delay) {
            return Decision::Stop {
                retry_after_beyond_bound: retry_after.filter(|w| past_bound(*w)),
            };
        }
        Decision::Wait(delay)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy says
    /// stop; `attempt` gets the deadline of the budget left (on `clock`,
    /// which also measures what is used), and `sleeper` waits between
    /// attempts. `exhausted` says what running out of attempts means to
    /// the caller.
    pub(crate) async fn run<T, E, F, Fut>(
        &self,
        timing: (&Clock, &Sleeper),
        mut attempt: F,
        exhausted: impl FnOnce(Exhausted) -> E,
    ) -> Result<T, E>
    where
        F: FnMut(Instant) -> Fut,
        Fut: Future<Output = Result<T, Failure<E>>>,
    {
        self.run_budgeted(timing, |budget| attempt(budget.deadline()), exhausted)
            .await
    }

    /// [`RetryPolicy::run`], `attempt` getting the request's [`Budget`]
    /// itself, to credit the time its bodies moved.
    pub(crate) async fn run_budgeted<T, E, F, Fut>(
        &self,
        (clock, sleeper): (&Clock, &Sleeper),
        mut attempt: F,
        exhausted: impl FnOnce(Exhausted) -> E,
    ) -> Result<T, E>
    where
        F: FnMut(Budget) -> Fut,
        Fut: Future<Output = Result<T, Failure<E>>>,
    {
        let started = clock.now();
        let budget = Budget::new(clock.clone(), self.total);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let this = attempt(budget.clone());
            let (reason, wait) = match ENCLOSING.scope(budget.clone(), this).await {
                Ok(done) => return Ok(done),
                Err(Failure::Fatal(kind)) => return Err(kind),
                Err(Failure::Retryable { reason, wait }) => (reason, wait),
            };
            let elapsed = clock.now().saturating_duration_since(started);
            match self.decide(attempts, budget.used(), wait) {
                Decision::Wait(delay) => sleeper.sleep(delay).await,
                Decision::Stop {
                    retry_after_beyond_bound,
                } => {
                    let last = match retry_after_beyond_bound {
                        Some(w) => format!(
                            "{reason} (Retry-After asks for {} s, beyond the {} s bound)",
                            w.as_secs(),
                            self.total.as_secs()
                        ),
                        None => reason,
                    };
                    return Err(exhausted(Exhausted {
                        attempts,
                        elapsed,
                        last,
                    }));
                }
            }
        }
    }
}

tokio::task_local! {
    /// The budget of the retried request an exchange runs in, if any: a
    /// request its caller retries as part of a larger unit (an upload
    /// session's PUT) credits the unit's budget too.
    static ENCLOSING: Budget;
}

/// What one request (its retries included) may still spend, on a
/// [`Clock`]: [`RetryPolicy::total`] less the time used, the time its
/// bodies spent moving not counted — that is progress, not waiting. A
/// stall after ten minutes of moving has used only the stall, so it is
/// retried like a stall at the start.
#[derive(Debug, Clone)]
pub(crate) struct Budget(Arc<BudgetState>);

#[derive(Debug)]
struct BudgetState {
    clock: Clock,
    started: Instant,
    total: Duration,
    moved: Mutex<Duration>,
    /// The budget of the retried unit this request is part of.
    enclosing: Option<Budget>,
}

impl Budget {
    /// A budget of `total` from now, within the one the caller runs in.
    pub(crate) fn new(clock: Clock, total: Duration) -> Budget {
        let enclosing = ENCLOSING.try_with(Budget::clone).ok();
        Budget(Arc::new(BudgetState {
            started: clock.now(),
            clock,
            total,
            moved: Mutex::new(Duration::ZERO),
            enclosing,
        }))
    }

    /// Gives back `moving`, time a body was moving bytes (here and in the
    /// enclosing budgets).
    pub(crate) fn credit(&self, moving: Duration) {
        let mut moved = self.0.moved.lock().expect("budget lock");
        *moved = moved.saturating_add(moving);
        drop(moved);
        if let Some(outer) = &self.0.enclosing {
            outer.credit(moving);
        }
    }

    /// The time spent other than moving bytes.
    pub(crate) fn used(&self) -> Duration {
        let moved = *self.0.moved.lock().expect("budget lock");
        let elapsed = self.0.clock.now().saturating_duration_since(self.0.started);
        elapsed.saturating_sub(moved)
    }

    /// What is left to spend.
    pub(crate) fn remaining(&self) -> Duration {
        self.0.total.saturating_sub(self.used())
    }

    /// When what is left runs out, if nothing moves from now on (far off
    /// for a budget too large for the clock).
    pub(crate) fn deadline(&self) -> Instant {
        let now = self.0.clock.now();
        now.checked_add(self.remaining())
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
    }
}

/// The timeout of one exchange: the per-request bound, cut to what the
/// whole run has left by `clock`.
pub(crate) fn exchange_timeout(
    request_timeout: Duration,
    deadline: Instant,
    clock: &Clock,
) -> Duration {
    request_timeout
        .min(deadline.saturating_duration_since(clock.now()))
        .max(Duration::from_millis(1))
}

/// Statuses a later attempt may well not get.
pub(crate) fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// `resp`, or a retryable failure when its status is one to retry.
pub(crate) fn check_status(resp: Response) -> Result<Response, Failure> {
    if !retryable(resp.status) {
        return Ok(resp);
    }
    Err(Failure::Retryable {
        reason: format!("HTTP {}{}", resp.status.as_u16(), error_detail(&resp.body)),
        wait: retry_after(&resp.headers),
    })
}

/// `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ErrorKind;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(30);
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(27) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
        let past = SystemTime::now() - Duration::from_secs(30);
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(past)).unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO), "a past date: now");
    }

    #[test]
    fn backoff_grows_with_jitter_and_cap() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            total: Duration::from_secs(60),
        };
        for _ in 0..50 {
            let d0 = p.backoff(0);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100),
                "{d0:?}"
            );
            let d3 = p.backoff(3);
            assert!(
                d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(800),
                "{d3:?}"
            );
            assert!(p.backoff(20) <= Duration::from_millis(1000));
        }
        let distinct: std::collections::BTreeSet<_> = (0..20).map(|_| p.backoff(2)).collect();
        assert!(distinct.len() > 1, "jittered");
    }

    #[test]
    fn backoff_never_overflows() {
        let p = RetryPolicy {
            base_delay: Duration::from_secs(u64::MAX / 2),
            max_delay: Duration::MAX,
            ..RetryPolicy::default()
        };
        assert!(p.backoff(u32::MAX) >= Duration::from_secs(u64::MAX / 4));
    }

    #[test]
    fn decisions_respect_attempts_and_the_total_bound() {
        let p = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            total: Duration::from_secs(10),
        };
        let s = Duration::from_secs;
        assert!(matches!(p.decide(1, s(0), None), Decision::Wait(_)));
        assert_eq!(p.decide(2, s(0), Some(s(2))), Decision::Wait(s(2)));
        let no_note = Decision::Stop {
            retry_after_beyond_bound: None,
        };
        assert_eq!(p.decide(3, s(0), None), no_note, "attempts used up");
        assert_eq!(p.decide(1, s(10), None), no_note, "time used up");
        assert_eq!(
            p.decide(1, s(5), Some(s(60))),
            Decision::Stop {
                retry_after_beyond_bound: Some(s(60))
            },
            "Retry-After past the bound stops at once and says why"
        );
        assert_eq!(RetryPolicy::none().decide(1, s(0), None), no_note);
    }

    #[tokio::test]
    async fn run_waits_through_the_sleeper_and_stops_at_the_bound_on_the_clock() {
        use std::sync::{Arc, Mutex};
        let waits: Arc<Mutex<Vec<Duration>>> = Default::default();
        let start = Instant::now();
        let clock = {
            let waits = waits.clone();
            Clock::from_fn(move || start + waits.lock().unwrap().iter().sum())
        };
        let sleeper = {
            let waits = waits.clone();
            Sleeper::from_fn(move |d| {
                waits.lock().unwrap().push(d);
                Box::pin(async {})
            })
        };
        let p = RetryPolicy {
            max_attempts: 100,
            base_delay: Duration::from_secs(4),
            max_delay: Duration::from_secs(4),
            total: Duration::from_secs(60),
        };
        let out: Result<(), ErrorKind> = p
            .run(
                (&clock, &sleeper),
                |_| async { Err(Failure::retryable("busy")) },
                |e| ErrorKind::GaveUp {
                    attempts: e.attempts,
                    elapsed_ms: e.elapsed.as_millis(),
                    last: e.last,
                },
            )
            .await;
        let waits = waits.lock().unwrap().clone();
        let waited: Duration = waits.iter().sum();
        let Err(ErrorKind::GaveUp {
            attempts,
            elapsed_ms,
            ..
        }) = out
        else {
            panic!("{out:?}");
        };
        assert_eq!(attempts as usize, waits.len() + 1);
        assert_eq!(elapsed_ms, waited.as_millis(), "measured on the clock");
        // Each wait 2-4 s: the last one that fits leaves less than 4 s.
        assert!(
            waited < p.total && waited > p.total - Duration::from_secs(4),
            "{waited:?} {waits:?}"
        );
        // Retry-After is asked for exactly.
        let waits: Arc<Mutex<Vec<Duration>>> = Default::default();
        let sleeper = {
            let waits = waits.clone();
            Sleeper::from_fn(move |d| {
                waits.lock().unwrap().push(d);
                Box::pin(async {})
            })
        };
        let mut calls = 0;
        let out = p
            .run(
                (&Clock::system(), &sleeper),
                |_| {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n == 1 {
                            Err(Failure::Retryable {
                                reason: "429".into(),
                                wait: Some(Duration::from_secs(7)),
                            })
                        } else {
                            Ok(n)
                        }
                    }
                },
                |_| unreachable!(),
            )
            .await;
        assert_eq!(out.unwrap(), 2);
        assert_eq!(*waits.lock().unwrap(), [Duration::from_secs(7)]);
    }

    /// A clock a test moves by hand.
    fn hand_clock() -> (Clock, std::sync::Arc<std::sync::Mutex<Instant>>) {
        let now = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
        let reads = now.clone();
        (Clock::from_fn(move || *reads.lock().unwrap()), now)
    }

    #[tokio::test]
    async fn a_budget_counts_waiting_not_moving_and_credits_the_enclosing_one() {
        let (clock, now) = hand_clock();
        let s = Duration::from_secs;
        let outer = Budget::new(clock.clone(), s(10));
        *now.lock().unwrap() += s(4);
        assert_eq!(outer.remaining(), s(6));
        outer.credit(s(3));
        assert_eq!((outer.used(), outer.remaining()), (s(1), s(9)));
        let inner = ENCLOSING
            .scope(outer.clone(), async {
                let inner = Budget::new(clock.clone(), s(10));
                *now.lock().unwrap() += s(600);
                inner.credit(s(599));
                inner
            })
            .await;
        assert_eq!(inner.remaining(), s(9), "ten minutes moving cost 1 s");
        assert_eq!(outer.used(), s(2), "and the enclosing budget the same");
        assert_eq!(outer.deadline(), *now.lock().unwrap() + s(8));
        let spent = Budget::new(clock.clone(), s(1));
        *now.lock().unwrap() += s(5);
        assert_eq!(spent.remaining(), Duration::ZERO);
    }

    /// An attempt that moved bytes for ten minutes and then failed has
    /// used only its waiting: it is retried, well within a 10 s budget.
    #[tokio::test]
    async fn a_failure_after_a_long_transfer_is_retried() {
        let (clock, now) = hand_clock();
        let sleeper = Sleeper::from_fn(|_| Box::pin(async {}));
        let p = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            total: Duration::from_secs(10),
        };
        let mut calls = 0;
        let out = p
            .run_budgeted(
                (&clock, &sleeper),
                |budget| {
                    calls += 1;
                    let n = calls;
                    let now = now.clone();
                    async move {
                        if n > 1 {
                            return Ok(n);
                        }
                        *now.lock().unwrap() += Duration::from_secs(605);
                        budget.credit(Duration::from_secs(600));
                        Err(Failure::retryable("stalled after 600 s of moving"))
                    }
                },
                |_: Exhausted| ErrorKind::Config {
                    reason: "gave up".into(),
                },
            )
            .await;
        assert_eq!(out, Ok(2));
    }

    #[test]
    fn which_statuses_retry() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [200, 301, 400, 401, 403, 404, 501, 505] {
            assert!(!retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[tokio::test]
    async fn run_retries_transient_failures_and_reports_the_last() {
        let p = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            total: Duration::from_secs(5),
        };
        let mut calls = 0;
        let out: Result<(), ErrorKind> = p
            .run(
                (&Clock::system(), &Sleeper::system()),
                |_| {
                    calls += 1;
                    let n = calls;
                    async move { Err(Failure::retryable(format!("boom {n}"))) }
                },
                |e| ErrorKind::GaveUp {
                    attempts: e.attempts,
                    elapsed_ms: 0,
                    last: e.last,
                },
            )
            .await;
        assert_eq!(
            out.unwrap_err(),
            ErrorKind::GaveUp {
                attempts: 3,
                elapsed_ms: 0,
                last: "boom 3".into()
            }
        );
        let mut calls = 0;
        let out = p
            .run(
                (&Clock::system(), &Sleeper::system()),
                |_| {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n < 2 {
                            Err(Failure::retryable("once"))
                        } else {
                            Ok(n)
                        }
                    }
                },
                |_| unreachable!(),
            )
            .await;
        assert_eq!(out.unwrap(), 2);
        let fatal = ErrorKind::Config { reason: "x".into() };
        let out: Result<(), _> = p
            .run(
                (&Clock::system(), &Sleeper::system()),
                |_| {
                    let k = fatal.clone();
                    async move { Err(Failure::Fatal(k)) }
                },
                |_| unreachable!(),
            )
            .await;
        assert_eq!(out.unwrap_err(), fatal, "fatal failures are not retried");
    }
}
