//! The link's shape: a bandwidth per direction (a token bucket each, shared
//! by every connection, as one access link is) and a round-trip time.
//!
//! What "RTT 40 ms" means here: each direction delays every message (a
//! request head, an interim or final response head, a status the link
//! answers itself) by half the RTT before its first byte goes on, and the
//! body streams right behind it at the shaped rate. So one request/response
//! turnaround costs the RTT, a body of B bytes at rate R ends RTT/2 + B/R
//! after it began, and a new connection costs one more RTT before its first
//! request goes on (the TCP handshake, which the kernel's loopback accept
//! does not have; TLS's round trips are not modelled). What is not
//! modelled: TCP's slow start and window limits (a link with a large
//! bandwidth-delay product streams at full rate at once) and loss.

use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// What an idle link may send at once, as time at its rate: it also
/// absorbs a late timer or a busy scheduler (a wake-up that late still
/// finds its tokens), so a transfer's time stays its size over the rate.
const BURST_TIME: f64 = 0.025;
/// And at least this many bytes, so a slow link still moves in pieces.
const BURST_MIN: f64 = 16.0 * 1024.0;

/// The largest piece a shaped direction forwards at a time (its tokens are
/// taken before it goes), so waits stay short and smooth.
pub(crate) const SHAPED_CHUNK: usize = 16 * 1024;

/// A token bucket (as GCRA: the time at which the bucket would be empty
/// again), `None` rate: unlimited.
#[derive(Debug)]
pub(crate) struct Bucket {
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Bytes per second.
    rate: Option<f64>,
    /// When everything admitted so far has drained at `rate`.
    drained_at: Instant,
}

impl Bucket {
    pub(crate) fn new(bits_per_second: Option<u64>) -> Bucket {
        Bucket {
            state: Mutex::new(BucketState {
                rate: bits_per_second.map(|b| b as f64 / 8.0),
                drained_at: Instant::now(),
            }),
        }
    }

    pub(crate) fn set_rate(&self, bits_per_second: Option<u64>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.rate = bits_per_second.map(|b| b as f64 / 8.0);
        s.drained_at = Instant::now();
    }

    pub(crate) fn is_shaped(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rate
            .is_some()
    }

    /// Waits until `n` bytes may pass.
    pub(crate) async fn take(&self, n: usize) {
        let until = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let Some(rate) = s.rate else { return };
            let now = Instant::now();
            let start = s.drained_at.max(now);
            s.drained_at = start + Duration::from_secs_f64(n as f64 / rate);
            let burst = (rate * BURST_TIME).max(BURST_MIN);
            s.drained_at
                .checked_sub(Duration::from_secs_f64(burst / rate))
                .unwrap_or(now)
        };
        if until > Instant::now() {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// What the link is shaped to, as `GET /_link/shape` shows it and
/// `PUT /_link/shape` sets it (a field left out is left as it is there;
/// `null` means unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShapeSpec {
    /// Client → upstream, bits per second.
    pub(crate) up_bps: Option<u64>,
    /// Upstream → client, bits per second.
    pub(crate) down_bps: Option<u64>,
    /// Round-trip time in milliseconds (half each way).
    pub(crate) rtt_ms: u64,
}

/// The link's live shape.
#[derive(Debug)]
pub(crate) struct Shape {
    pub(crate) up: Bucket,
    pub(crate) down: Bucket,
    rtt: Mutex<Duration>,
}

impl Shape {
    pub(crate) fn new(spec: ShapeSpec) -> Shape {
        Shape {
            up: Bucket::new(spec.up_bps),
            down: Bucket::new(spec.down_bps),
            rtt: Mutex::new(Duration::from_millis(spec.rtt_ms)),
        }
    }

    pub(crate) fn set(&self, spec: ShapeSpec) {
        self.up.set_rate(spec.up_bps);
        self.down.set_rate(spec.down_bps);
        *self.rtt.lock().unwrap_or_else(|e| e.into_inner()) = Duration::from_millis(spec.rtt_ms);
    }

    pub(crate) fn spec(&self) -> ShapeSpec {
        let bps = |b: &Bucket| {
            b.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .rate
                .map(|r| (r * 8.0).round() as u64)
        };
        ShapeSpec {
            up_bps: bps(&self.up),
            down_bps: bps(&self.down),
            rtt_ms: self.rtt().as_millis() as u64,
        }
    }

    pub(crate) fn rtt(&self) -> Duration {
        *self.rtt.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Half the round trip: what each message waits before it goes on.
    pub(crate) async fn one_way(&self) {
        let half = self.rtt() / 2;
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
    }

    /// The handshake a new connection would cost on a real link.
    pub(crate) async fn handshake(&self) {
        let rtt = self.rtt();
        if !rtt.is_zero() {
            tokio::time::sleep(rtt).await;
        }
    }
}

/// Parses a rate: `100mbit`, `40Mbit`, `1.5gbit`, `512kbit`, `8000bit`
/// (bits per second, SI prefixes, as links are sold), or `none`/`0`:
/// unlimited.
pub(crate) fn parse_rate(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim().to_ascii_lowercase();
    if t == "none" || t == "0" || t == "unlimited" {
        return Ok(None);
    }
    let (number, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n, *scale)))
        .ok_or_else(|| {
            format!(
                "{:?}: a rate is a number of bit, kbit, mbit or gbit (per second), or none",
                text
            )
        })?;
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
    let bps = value * scale;
    if !(8.0..=1e12).contains(&bps) {
        return Err(format!("{text:?}: a rate from 8bit to 1000gbit"));
    }
    Ok(Some(bps.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_links_are_sold() {
        assert_eq!(parse_rate("100mbit"), Ok(Some(100_000_000)));
        assert_eq!(parse_rate("40Mbit"), Ok(Some(40_000_000)));
        assert_eq!(parse_rate("1.5gbit"), Ok(Some(1_500_000_000)));
        assert_eq!(parse_rate("512kbit"), Ok(Some(512_000)));
        assert_eq!(parse_rate("none"), Ok(None));
        for bad in ["100", "100mb", "fast", "-5mbit", "NaNmbit", "1bit"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_bucket_lets_its_rate_through_after_a_small_burst() {
        let bucket = Bucket::new(Some(8_000_000)); // 1 MB/s: a 25 kB burst
        let start = Instant::now();
        bucket.take(25_000).await;
        assert!(
            start.elapsed() < Duration::from_millis(5),
            "an idle link sends a burst at once"
        );
        for _ in 0..20 {
            bucket.take(10_000).await;
        }
        // The burst + 200 kB at 1 MB/s, less the burst it may be ahead: 0.2 s
        // (a late wake-up is made up by the next piece, not added).
        let took = start.elapsed().as_secs_f64();
        assert!((0.195..0.26).contains(&took), "{took}");
        let unlimited = Bucket::new(None);
        let start = Instant::now();
        unlimited.take(1 << 30).await;
        assert!(start.elapsed() < Duration::from_millis(5));
    }
}
