//! The link's own endpoints, on its listening address under `/_link/`
//! (not forwarded, counted, shaped or faulted):
//!
//! | request | does |
//! |---|---|
//! | `GET /_link/stats` | the counters and the exchange log, JSON |
//! | `DELETE /_link/stats` | zeroes them |
//! | `GET /_link/rules` | the fault rules, with how often each matched and applied |
//! | `POST /_link/rules` | adds rules (one rule or a list, JSON) |
//! | `DELETE /_link/rules` | removes every rule |
//! | `GET /_link/shape` | `{"up_bps", "down_bps", "rtt_ms"}` |
//! | `PUT /_link/shape` | sets them (`null` rate: unlimited) |

use crate::faults::{Rule, RuleSpec};
use crate::http::{Framing, RequestHead};
use crate::link::{Link, Side, reason};
use crate::shape::ShapeSpec;
use tokio::io::AsyncWriteExt;

/// The largest body an admin request may have.
const MAX_BODY: u64 = 1 << 20;

/// Answers one admin request; `false`: close the connection.
pub(crate) async fn serve(link: &Link, client: &mut Side, req: &RequestHead) -> bool {
    let body = match req.framing {
        Framing::Empty => Vec::new(),
        Framing::Length(n) if n <= MAX_BODY => match read_body(client, n as usize).await {
            Some(body) => body,
            None => return false,
        },
        Framing::Length(_) => {
            reply(client, 413, &error("a body over 1 MiB"), true).await;
            return false;
        }
        Framing::Chunked | Framing::UntilClose => {
            reply(client, 411, &error("send Content-Length"), true).await;
            return false;
        }
    };
    let path = req.target.split('?').next().unwrap_or("");
    let (status, answer) = answer(link, &req.method, path, &body);
    reply(client, status, &answer, req.close).await && !req.close
}

fn error(message: &str) -> Option<serde_json::Value> {
    Some(serde_json::json!({ "error": message }))
}

fn answer(link: &Link, method: &str, path: &str, body: &[u8]) -> (u16, Option<serde_json::Value>) {
    let json = |v: Result<serde_json::Value, serde_json::Error>| match v {
        Ok(v) => (200, Some(v)),
        Err(e) => (500, error(&e.to_string())),
    };
    match (method, path) {
        ("GET", "/_link/stats") => json(serde_json::to_value(link.stats.report())),
        ("DELETE", "/_link/stats") => {
            link.stats.reset();
            (204, None)
        }
        ("GET", "/_link/rules") => {
            let states: Vec<_> = link.rules().iter().map(Rule::state).collect();
            json(serde_json::to_value(states))
        }
        ("POST", "/_link/rules") => match parse_rules(body) {
            Ok(new) => {
                let mut rules = link.rules();
                let added = new.len();
                rules.extend(new);
                (
                    200,
                    Some(serde_json::json!({"added": added, "rules": rules.len()})),
                )
            }
            Err(e) => (400, error(&e)),
        },
        ("DELETE", "/_link/rules") => {
            link.rules().clear();
            (204, None)
        }
        ("GET", "/_link/shape") => json(serde_json::to_value(link.shape.spec())),
        ("PUT", "/_link/shape") => match serde_json::from_slice::<ShapeSpec>(body) {
            Ok(spec) => {
                link.shape.set(spec);
                json(serde_json::to_value(link.shape.spec()))
            }
            Err(e) => (400, error(&format!("a shape: {e}"))),
        },
        (_, "/_link/stats" | "/_link/rules" | "/_link/shape") => (405, error("method not allowed")),
        _ => (404, error("no such endpoint")),
    }
}

/// Rules from JSON: one rule or a list of them.
pub(crate) fn parse_rules(body: &[u8]) -> Result<Vec<Rule>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("rules: {e}"))?;
    let specs: Vec<RuleSpec> = match value {
        serde_json::Value::Array(_) => serde_json::from_value(value),
        _ => serde_json::from_value(value).map(|r| vec![r]),
    }
    .map_err(|e| format!("a rule: {e}"))?;
    specs.into_iter().map(Rule::new).collect()
}

async fn read_body(client: &mut Side, n: usize) -> Option<Vec<u8>> {
    while client.buf.buffered().len() < n {
        match client.buf.fill(&mut client.stream).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    let body = client.buf.buffered()[..n].to_vec();
    client.buf.consume(n);
    Some(body)
}

/// Writes an answer; `false` if the client is gone.
async fn reply(
    client: &mut Side,
    status: u16,
    body: &Option<serde_json::Value>,
    close: bool,
) -> bool {
    let body = body.as_ref().map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if status != 204 {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    head.push_str(&body);
    client.stream.write_all(head.as_bytes()).await.is_ok()
}
