//! Size caps on what registries and token endpoints send, and reading a
//! response body under one (and the idle timeout).

use crate::error_chain::error_chain;
use std::time::Duration;

/// The caps a client is built with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub manifest: usize,
    pub token: usize,
    pub config: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // distribution refuses manifests over 4 MiB; so do we.
            manifest: 4 << 20,
            token: 1 << 20,
            config: 16 << 20,
        }
    }
}

/// Error bodies are only summarised, so a little is enough.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 << 10;

/// The cap on one success body, what that body is (for messages), and
/// whether a success body that breaks off is answered with what arrived
/// (`Response::broken` says why) instead of failing the exchange: for a
/// caller that resumes it with `Range` (a blob download).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    pub bytes: usize,
    pub what: &'static str,
    pub partial: bool,
}

pub(crate) enum ReadError {
    TooLarge,
    /// The body broke off: why, and the bytes that had arrived.
    Broken {
        reason: String,
        received: Vec<u8>,
    },
    /// No byte arrived for the idle timeout: the bytes that had.
    Stalled {
        received: Vec<u8>,
        expected: Option<u64>,
    },
}

/// The whole body of `resp`, refused as soon as it is known to exceed
/// `limit` (by `Content-Length` or by what has arrived), given up when no
/// byte arrives for `idle` (a body that keeps arriving is read to its end,
/// however long that takes).
pub(crate) async fn read_limited(
    resp: &mut reqwest::Response,
    limit: usize,
    idle: Duration,
) -> Result<Vec<u8>, ReadError> {
    let expected = resp.content_length();
    if expected.is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut buf = Vec::new();
    loop {
        let Ok(next) = tokio::time::timeout(idle, resp.chunk()).await else {
            return Err(ReadError::Stalled {
                received: buf,
                expected,
            });
        };
        match next {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    return Err(ReadError::TooLarge);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf),
            Err(e) => {
                let reason = format!(
                    "the response body broke off after {} of {} bytes: {}",
                    buf.len(),
                    expected.map_or("?".to_string(), |n| n.to_string()),
                    // Without the URL: its query may be a signature.
                    error_chain(&e.without_url())
                );
                return Err(ReadError::Broken {
                    reason,
                    received: buf,
                });
            }
        }
    }
}
