//! The shaped link (`sunaba-link`, src/bin/sunaba-link) as tests start it:
//! a child process in front of an upstream on loopback, driven through its
//! admin endpoints (`/_link/…`), killed when dropped. Benchmarks start the
//! same program from bash (docs/testing.md#the-shaped-link-sunaba-link).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

pub struct Link {
    child: Child,
    addr: String,
}

impl Link {
    /// Starts a link to `upstream` (`host:port`) with these extra flags
    /// (`--rate 40mbit`, `--rtt 40ms`, …).
    pub fn start(upstream: &str, flags: &[&str]) -> Link {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sunaba-link"))
            .arg("--upstream")
            .arg(upstream)
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting sunaba-link");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim().to_string();
        assert!(
            addr.starts_with("127.0.0.1:"),
            "sunaba-link printed {line:?} for its address"
        );
        Link { child, addr }
    }

    /// `127.0.0.1:PORT`.
    pub fn authority(&self) -> &str {
        &self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the link with SIGTERM (it writes its stats file, if it has
    /// one) and waits for it.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: a signal to the child this value owns, which has not
        // been waited for (its pid is not reused yet).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.child.wait().unwrap()
    }

    /// The counters and the exchange log.
    pub fn stats(&self) -> serde_json::Value {
        let (status, body) = self.admin("GET", "/_link/stats", None);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The counters and the exchange log once no exchange is open. The
    /// link counts a write after it returned and closes an exchange after
    /// its last write, so a client that has read its whole answer can ask
    /// before either happened. This asks again, every 10 ms for up to 5 s,
    /// and gives the last answer either way: the test's own assertions
    /// then say what is off.
    pub fn settled_stats(&self) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let stats = self.stats();
            if stats["open"] == 0 || std::time::Instant::now() >= deadline {
                return stats;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The exchanges whose target contains `part`, once none is open
    /// (`settled_stats`): for a test whose client is done.
    pub fn exchanges(&self, part: &str) -> Vec<serde_json::Value> {
        self.settled_stats()["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["target"].as_str().unwrap().contains(part))
            .cloned()
            .collect()
    }

    /// The exchanges of `method` whose target contains `part`, in the
    /// order they came.
    pub fn exchanges_of(&self, method: &str, part: &str) -> Vec<serde_json::Value> {
        let mut out: Vec<serde_json::Value> = (self.exchanges(part).into_iter())
            .filter(|e| e["method"] == method)
            .collect();
        out.sort_by_key(|e| e["id"].as_u64());
        out
    }

    pub fn clear_stats(&self) {
        assert_eq!(self.admin("DELETE", "/_link/stats", None).0, 204);
    }

    /// Adds a rule (or a list of them).
    pub fn add_rules(&self, rules: serde_json::Value) {
        let (status, body) = self.admin("POST", "/_link/rules", Some(rules));
        assert_eq!(status, 200, "{body}");
    }

    pub fn set_shape(&self, up_bps: Option<u64>, down_bps: Option<u64>, rtt_ms: u64) {
        let shape = serde_json::json!({"up_bps": up_bps, "down_bps": down_bps, "rtt_ms": rtt_ms});
        let (status, body) = self.admin("PUT", "/_link/shape", Some(shape));
        assert_eq!(status, 200, "{body}");
    }

    /// One admin request on a connection of its own: (status, body).
    pub fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, String) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = TcpStream::connect(&self.addr).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        let status = reply[9..12].parse().unwrap();
        let body = reply
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body bytes of one side (`request` or `response`) of an exchange.
pub fn body(e: &serde_json::Value, side: &str) -> u64 {
    e[side]["body"].as_u64().unwrap()
}

/// `(status, outcome, body bytes)` of each exchange, one side.
pub fn seen(
    exchanges: &[serde_json::Value],
    side: &str,
) -> Vec<(serde_json::Value, serde_json::Value, u64)> {
    (exchanges.iter())
        .map(|e| (e["status"].clone(), e["outcome"].clone(), body(e, side)))
        .collect()
}

/// Bytes that do not compress (so a shaped link carries all of them), a
/// different run for each `seed`.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
