//! Faults the link injects, by rule: which requests (method, a regular
//! expression on the request target, the Nth match on and how many
//! matches from there) and what happens to them.
//!
//! A rule as JSON (`POST /_link/rules` takes a list of them, `--rules FILE`
//! too):
//!
//! ```json
//! {"method": "PATCH", "path": "/blobs/uploads/", "nth": 1, "times": 1,
//!  "fault": {"reset": {"at": "request_body", "after": 52428800}}}
//! ```
//!
//! - `{"status": {"code": 503}}`, `{"status": {"code": 429, "retry_after": "2"}}`:
//!   the link answers itself (the request's body is read and dropped; the
//!   request never reaches the upstream). A 503 burst is `times: N`.
//! - `{"reset": {"at": POINT, "after": N}}`: both connections are reset
//!   (TCP RST) at that point, the bytes before it forwarded.
//! - `{"stall": {"at": POINT, "after": N, "seconds": S}}`: nothing moves on
//!   that direction from that point for S seconds (then the exchange goes
//!   on), or for good without `seconds`; the connections stay open.
//!
//! POINT is `request_head` (before the request goes to the upstream),
//! `request_body` (after `after` bytes of the request's body: of its
//! payload, for a chunked one), `response_head` (the request was carried
//! out, no answer goes back) or `response_body` (after `after` bytes of the
//! response's body).

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleSpec {
    /// The request method; any when absent.
    #[serde(default)]
    pub(crate) method: Option<String>,
    /// A regular expression the request target (path and query) must match.
    pub(crate) path: String,
    /// The first matching request (1-based) the fault applies to.
    #[serde(default = "one")]
    pub(crate) nth: u64,
    /// How many matching requests from the `nth` on it applies to.
    #[serde(default = "one")]
    pub(crate) times: u64,
    pub(crate) fault: Fault,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Fault {
    Status {
        code: u16,
        #[serde(default)]
        retry_after: Option<String>,
    },
    Reset {
        at: Point,
        #[serde(default)]
        after: u64,
    },
    Stall {
        at: Point,
        #[serde(default)]
        after: u64,
        /// For good when absent.
        #[serde(default)]
        seconds: Option<f64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Point {
    RequestHead,
    RequestBody,
    ResponseHead,
    ResponseBody,
}

/// What happens at a point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Action {
    Reset,
    /// For this long, or for good.
    Stall(Option<Duration>),
}

/// A fault placed in one exchange: at `point`, after `after` body bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cut {
    pub(crate) point: Point,
    pub(crate) after: u64,
    pub(crate) action: Action,
}

impl Fault {
    /// The cut this fault makes, if it is one (a status is not).
    pub(crate) fn cut(&self) -> Option<Cut> {
        match *self {
            Fault::Status { .. } => None,
            Fault::Reset { at, after } => Some(Cut {
                point: at,
                after,
                action: Action::Reset,
            }),
            Fault::Stall { at, after, seconds } => Some(Cut {
                point: at,
                after,
                action: Action::Stall(seconds.map(Duration::from_secs_f64)),
            }),
        }
    }

    /// A short name for the stats.
    pub(crate) fn label(&self) -> String {
        match self {
            Fault::Status { code, retry_after } => match retry_after {
                Some(r) => format!("status {code} (Retry-After: {r})"),
                None => format!("status {code}"),
            },
            Fault::Reset { at, after } => format!("reset at {} after {after}", at.name()),
            Fault::Stall { at, after, seconds } => match seconds {
                Some(s) => format!("stall {s} s at {} after {after}", at.name()),
                None => format!("stall for good at {} after {after}", at.name()),
            },
        }
    }
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::RequestHead => "request_head",
            Point::RequestBody => "request_body",
            Point::ResponseHead => "response_head",
            Point::ResponseBody => "response_body",
        }
    }
}

/// A rule with its compiled pattern and how many requests it matched.
#[derive(Debug)]
pub(crate) struct Rule {
    spec: RuleSpec,
    pattern: Regex,
    matched: u64,
    applied: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct RuleState {
    #[serde(flatten)]
    spec: RuleSpec,
    matched: u64,
    applied: u64,
}

impl Rule {
    pub(crate) fn new(spec: RuleSpec) -> Result<Rule, String> {
        let pattern = Regex::new(&spec.path).map_err(|e| format!("path {:?}: {e}", spec.path))?;
        if spec.nth == 0 {
            return Err("nth counts from 1".into());
        }
        match &spec.fault {
            Fault::Status { code, retry_after } => {
                if !(100..=599).contains(code) || (100..200).contains(code) {
                    return Err(format!("status {code}: a final status, 200 to 599"));
                }
                if let Some(r) = retry_after
                    && (r.is_empty() || r.len() > 64 || r.bytes().any(|b| b.is_ascii_control()))
                {
                    return Err(format!("retry_after {r:?}: not a header value"));
                }
            }
            Fault::Stall {
                seconds: Some(s), ..
            } if !(s.is_finite() && *s >= 0.0 && *s <= 86_400.0) => {
                return Err(format!("stall seconds {s}: 0 to 86400"));
            }
            _ => {}
        }
        Ok(Rule {
            spec,
            pattern,
            matched: 0,
            applied: 0,
        })
    }

    pub(crate) fn state(&self) -> RuleState {
        RuleState {
            spec: self.spec.clone(),
            matched: self.matched,
            applied: self.applied,
        }
    }
}

/// The first rule (in order) whose window takes this request; every rule
/// the request matches counts it.
pub(crate) fn choose(rules: &mut [Rule], method: &str, target: &str) -> Option<Fault> {
    let mut chosen = None;
    for rule in rules.iter_mut() {
        if rule.spec.method.as_deref().is_some_and(|m| m != method)
            || !rule.pattern.is_match(target)
        {
            continue;
        }
        rule.matched += 1;
        let n = rule.matched;
        let first = rule.spec.nth;
        if chosen.is_none() && n >= first && n - first < rule.spec.times {
            rule.applied += 1;
            chosen = Some(rule.spec.fault.clone());
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Rule {
        Rule::new(serde_json::from_str(json).unwrap()).unwrap()
    }

    #[test]
    fn the_nth_match_and_the_times_after_it_get_the_fault() {
        let mut rules = vec![rule(
            r#"{"method": "GET", "path": "^/v2/a/blobs/", "nth": 2, "times": 2,
                "fault": {"status": {"code": 503}}}"#,
        )];
        let got: Vec<bool> = (0..5)
            .map(|_| choose(&mut rules, "GET", "/v2/a/blobs/sha256:x").is_some())
            .collect();
        assert_eq!(got, [false, true, true, false, false]);
        assert!(choose(&mut rules, "HEAD", "/v2/a/blobs/sha256:x").is_none());
        assert!(choose(&mut rules, "GET", "/v2/b/blobs/sha256:x").is_none());
        assert_eq!((rules[0].matched, rules[0].applied), (5, 2));
    }

    #[test]
    fn rules_read_from_json_and_refuse_what_cannot_be_done() {
        let r = rule(
            r#"{"path": "uploads", "fault": {"stall": {"at": "response_body", "after": 10, "seconds": 1.5}}}"#,
        );
        assert_eq!(
            r.spec.fault.cut(),
            Some(Cut {
                point: Point::ResponseBody,
                after: 10,
                action: Action::Stall(Some(Duration::from_millis(1500)))
            })
        );
        for bad in [
            r#"{"path": "(", "fault": {"status": {"code": 503}}}"#,
            r#"{"path": "x", "nth": 0, "fault": {"status": {"code": 503}}}"#,
            r#"{"path": "x", "fault": {"status": {"code": 100}}}"#,
            r#"{"path": "x", "fault": {"status": {"code": 429, "retry_after": "2\r\nX: y"}}}"#,
            r#"{"path": "x", "fault": {"stall": {"at": "request_head", "seconds": -1}}}"#,
        ] {
            let spec: RuleSpec = serde_json::from_str(bad).unwrap();
            assert!(Rule::new(spec).is_err(), "{bad}");
        }
        assert!(
            serde_json::from_str::<RuleSpec>(r#"{"path": "x", "fault": {"explode": {}}}"#).is_err()
        );
    }
}
