//! What went over the link: connections, requests, bytes per direction
//! (on the wire: heads, bodies and chunked framing), and one record per
//! exchange, as `GET /_link/stats` and the stats file show them. Counters
//! move as bytes do, so a reader sees a transfer in progress.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Exchanges kept in the log (the oldest go first); the totals count all.
const LOG_LIMIT: usize = 100_000;

/// One exchange's counters, shared with the connection moving its bytes.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub(crate) request_head: AtomicU64,
    pub(crate) request_body: AtomicU64,
    pub(crate) response_head: AtomicU64,
    pub(crate) response_body: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) head: u64,
    /// Body bytes on the wire (a chunked body's framing included).
    pub(crate) body: u64,
}

/// One request and its response, as far as they went.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Exchange {
    pub(crate) id: u64,
    pub(crate) connection: u64,
    pub(crate) method: String,
    pub(crate) target: String,
    /// The final status the client got (`None`: none reached it).
    pub(crate) status: Option<u16>,
    pub(crate) request: Message,
    pub(crate) response: Message,
    /// The fault a rule put on it.
    pub(crate) fault: Option<String>,
    /// `in progress`, `complete`, `reset`, `stalled`, `client closed`,
    /// `upstream closed`, `upstream unreachable`, `bad response`.
    pub(crate) outcome: String,
    /// When the request head arrived, in ms since the link started: with
    /// `ms`, when the exchange was in flight (so which ones overlapped).
    pub(crate) start_ms: f64,
    /// From the request head's arrival to the exchange's end (so far).
    pub(crate) ms: f64,
}

/// An exchange under way: its record, and its live counters.
#[derive(Debug)]
pub(crate) struct Open {
    pub(crate) record: Exchange,
    pub(crate) live: Arc<Live>,
    pub(crate) started: std::time::Instant,
}

impl Open {
    pub(crate) fn snapshot(&self) -> Exchange {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Exchange {
            request: Message {
                head: get(&self.live.request_head),
                body: get(&self.live.request_body),
            },
            response: Message {
                head: get(&self.live.response_head),
                body: get(&self.live.response_body),
            },
            ms: self.started.elapsed().as_secs_f64() * 1e3,
            ..self.record.clone()
        }
    }
}

#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    pub(crate) connections: AtomicU64,
    pub(crate) requests: AtomicU64,
    /// What `start_ms` counts from.
    epoch: std::time::Instant,
    log: Mutex<Log>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            up: AtomicU64::default(),
            down: AtomicU64::default(),
            connections: AtomicU64::default(),
            requests: AtomicU64::default(),
            epoch: std::time::Instant::now(),
            log: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    faults: u64,
    next_id: u64,
    open: BTreeMap<u64, Open>,
    done: VecDeque<Exchange>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) connections: u64,
    pub(crate) requests: u64,
    /// Requests a rule put a fault on.
    pub(crate) faults: u64,
    pub(crate) bytes: Bytes,
    /// Exchanges under way. A write is counted once it returned and an
    /// exchange closed after its last write, so a client can have read a
    /// whole answer before either: `open` 0 says the counters are final.
    pub(crate) open: usize,
    /// Finished exchanges first (oldest first), then those under way.
    pub(crate) exchanges: Vec<Exchange>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Bytes {
    /// Client → upstream.
    pub(crate) up: u64,
    /// Upstream → client.
    pub(crate) down: u64,
}

impl Stats {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the record of an exchange; returns its id and counters.
    pub(crate) fn open(&self, mut record: Exchange) -> (u64, Arc<Live>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut log = self.log();
        log.next_id += 1;
        let id = log.next_id;
        record.id = id;
        let started = std::time::Instant::now();
        record.start_ms = started.duration_since(self.epoch).as_secs_f64() * 1e3;
        if record.fault.is_some() {
            log.faults += 1;
        }
        let live = Arc::new(Live::default());
        log.open.insert(
            id,
            Open {
                record,
                live: live.clone(),
                started,
            },
        );
        (id, live)
    }

    /// Closes an exchange with its final status and outcome.
    pub(crate) fn close(&self, id: u64, status: Option<u16>, outcome: &str) {
        let mut log = self.log();
        let Some(open) = log.open.remove(&id) else {
            return;
        };
        let mut done = open.snapshot();
        done.status = status;
        done.outcome = outcome.to_string();
        if log.done.len() == LOG_LIMIT {
            log.done.pop_front();
        }
        log.done.push_back(done);
    }

    /// Sets what an open exchange is doing now (`stalled`, say).
    pub(crate) fn mark(&self, id: u64, status: Option<u16>, outcome: &str) {
        if let Some(open) = self.log().open.get_mut(&id) {
            open.record.outcome = outcome.to_string();
            if status.is_some() {
                open.record.status = status;
            }
        }
    }

    pub(crate) fn report(&self) -> Report {
        let log = self.log();
        Report {
            connections: self.connections.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            faults: log.faults,
            bytes: Bytes {
                up: self.up.load(Ordering::Relaxed),
                down: self.down.load(Ordering::Relaxed),
            },
            open: log.open.len(),
            exchanges: log
                .done
                .iter()
                .cloned()
                .chain(log.open.values().map(Open::snapshot))
                .collect(),
        }
    }

    /// Forgets everything counted (open exchanges stay open, from zero).
    pub(crate) fn reset(&self) {
        for a in [&self.up, &self.down, &self.connections, &self.requests] {
            a.store(0, Ordering::Relaxed);
        }
        let mut log = self.log();
        log.faults = 0;
        log.done.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(target: &str) -> Exchange {
        Exchange {
            id: 0,
            connection: 1,
            method: "GET".into(),
            target: target.into(),
            status: None,
            request: Message::default(),
            response: Message::default(),
            fault: None,
            outcome: "in progress".into(),
            start_ms: 0.0,
            ms: 0.0,
        }
    }

    #[test]
    fn each_exchange_says_when_it_started_so_overlaps_show() {
        let stats = Stats::default();
        let (a, _) = stats.open(record("/a"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, _) = stats.open(record("/b"));
        assert_eq!(stats.report().open, 2);
        std::thread::sleep(std::time::Duration::from_millis(20));
        stats.close(a, Some(200), "complete");
        let (c, _) = stats.open(record("/c"));
        stats.close(b, Some(200), "complete");
        stats.close(c, Some(200), "complete");
        assert_eq!(stats.report().open, 0);
        let log = stats.report().exchanges;
        let [a, b, c] = [&log[0], &log[1], &log[2]].map(|e| (e.start_ms, e.start_ms + e.ms));
        assert!(a.0 >= 0.0 && a.0 + 20.0 <= b.0, "{log:?}");
        // b started while a was in flight; c after a ended, while b was.
        assert!(b.0 < a.1 && a.1 <= c.0 && c.0 < b.1, "{log:?}");
        // Zeroing the counters keeps the clock.
        stats.reset();
        let (_, _) = stats.open(record("/d"));
        assert!(stats.report().exchanges[0].start_ms >= c.0);
    }
}
