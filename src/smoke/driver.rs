//! The script a check runs in its one sandbox, and reading its output back.
//! The image's healthcheck and each suite's cases run side by side (a lane
//! per suite, its cases in order: container start-up, not the tools,
//! dominated one container per case), each case in its own copy under
//! /workspace, its output kept in the container's /tmp; then everything is
//! printed in sections framed by a random nonce, so no output can end a
//! section early.

use super::Case;
use crate::process::sh_quote;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Each case's time limit inside the container (`timeout`, when the image
/// has it).
pub(crate) const CASE_TIMEOUT: Duration = Duration::from_secs(120);
/// The bytes of output a case reports (its tail): `output` patterns are
/// matched against them.
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// The script text and the nonce framing its output.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub text: String,
    pub nonce: String,
}

/// What one case (or the healthcheck) did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ran {
    pub exit: Option<i32>,
    pub output: String,
    pub seconds: Option<f64>,
    /// CPU seconds (user + system) of everything it ran, from the shell's
    /// `times` (cumulative per lane as reported; per case once parsed).
    pub cpu: Option<f64>,
    /// More than [`OUTPUT_CAP`] bytes were printed; `output` is the tail.
    pub truncated: bool,
}

/// Everything the script reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Report {
    /// `id -u`, `id -g` inside the sandbox.
    pub user: Option<(u32, u32)>,
    /// The healthcheck's stdout (with its exit status) and stderr.
    pub healthcheck: Option<(Ran, String)>,
    /// Case id -> what it did.
    pub cases: BTreeMap<String, Ran>,
    /// Why the script gave up, if it did.
    pub fatal: Option<String>,
}

fn words(argv: &[String]) -> String {
    argv.iter()
        .map(|w| sh_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The script: `healthcheck` (argv) and every case, one lane per suite.
pub(crate) fn script(healthcheck: &[String], cases: &[Case]) -> Script {
    let nonce = format!("sunaba-{:016x}", rand::random::<u64>());
    let mut s = String::new();
    let _ = write!(
        s,
        "set -u\n\
         n={nonce}\n\
         o=/tmp/{nonce}\n\
         if ! mkdir -p \"$o\"; then echo \"$n fatal cannot create $o in the container\"; exit 0; fi\n\
         if command -v timeout >/dev/null 2>&1; then t='timeout -k 5 {limit}'; else t=; fi\n\
         now() {{ date +%s%N 2>/dev/null; }}\n\
         run_case() {{\n\
         \tc=$1\n\
         \tshift\n\
         \ts=$(now)\n\
         \t(cd \"/workspace/$c\" && exec $t \"$@\") </dev/null >\"$o/$c\" 2>&1\n\
         \tr=$?\n\
         \ttimes >\"$o/$c.cpu\"\n\
         \techo \"$r $s $(now) $(sed -n 2p \"$o/$c.cpu\" | tr -d ' ')\" >\"$o/$c.rc\"\n\
         }}\n\
         show() {{\n\
         \tprintf '%s begin %s\\n' \"$n\" \"$1\"\n\
         \ttail -c {cap} \"$o/$1\" 2>/dev/null\n\
         \tprintf '\\n%s end %s %s %s\\n' \"$n\" \"$1\" \"$(wc -c <\"$o/$1\" 2>/dev/null || echo 0)\" \"$(cat \"$o/$1.rc\" 2>/dev/null)\"\n\
         }}\n\
         {{ s=$(now); {hc} </dev/null >\"$o/hc\" 2>\"$o/hc.err\"; echo \"$? $s $(now)\" >\"$o/hc.rc\"; }} &\n",
        limit = CASE_TIMEOUT.as_secs(),
        cap = OUTPUT_CAP,
        hc = words(healthcheck),
    );
    let mut lanes: BTreeMap<&str, Vec<&Case>> = BTreeMap::new();
    for c in cases {
        lanes.entry(&c.suite).or_default().push(c);
    }
    for lane in lanes.values() {
        s.push_str("{\n");
        for c in lane {
            let _ = writeln!(s, "\trun_case {} {}", sh_quote(&c.id), words(&c.argv));
        }
        s.push_str("} &\n");
    }
    s.push_str(
        "wait\nprintf '%s id %s %s\\n' \"$n\" \"$(id -u)\" \"$(id -g)\"\nshow hc\nshow hc.err\n",
    );
    for c in cases {
        let _ = writeln!(s, "show {}", sh_quote(&c.id));
    }
    Script { text: s, nonce }
}

/// One framed section: its text and the rest of its `end` line.
fn section<'a>(out: &'a str, nonce: &str, name: &str) -> Option<(&'a str, Vec<&'a str>)> {
    let begin = format!("{nonce} begin {name}\n");
    let start = out.find(&begin)? + begin.len();
    let end = format!("\n{nonce} end {name} ");
    let stop = start + out[start..].find(&end)?;
    let rest = &out[stop + end.len()..];
    let line = rest.split('\n').next().unwrap_or("");
    Some((&out[start..stop], line.split_whitespace().collect()))
}

/// Seconds between two `date +%s%N` stamps, when the image's date has `%N`.
fn seconds(start: Option<&&str>, end: Option<&&str>) -> Option<f64> {
    let start: u128 = start?.parse().ok()?;
    let end: u128 = end?.parse().ok()?;
    Some(end.checked_sub(start)? as f64 / 1e9)
}

/// The children's line of `times` without blanks (`0m1.23s0m0.04s`):
/// user + system seconds.
fn cpu(times: Option<&&str>) -> Option<f64> {
    let re = regex::Regex::new(r"([0-9]+)m([0-9.]+)s").expect("a valid pattern");
    let text = times?;
    let parts: Vec<f64> = re
        .captures_iter(text)
        .filter_map(|c| Some(c[1].parse::<f64>().ok()? * 60.0 + c[2].parse::<f64>().ok()?))
        .collect();
    (parts.len() == 2).then(|| parts.iter().sum())
}

fn ran(out: &str, nonce: &str, name: &str) -> Option<Ran> {
    let (text, fields) = section(out, nonce, name)?;
    // fields: size [exit start end [times]]
    Some(Ran {
        exit: fields.get(1).and_then(|e| e.parse().ok()),
        output: text.to_string(),
        seconds: seconds(fields.get(2), fields.get(3)),
        cpu: cpu(fields.get(4)),
        truncated: fields
            .first()
            .and_then(|s| s.parse::<usize>().ok())
            .is_some_and(|n| n > OUTPUT_CAP),
    })
}

/// Reads the script's output back.
pub(crate) fn parse(out: &str, nonce: &str, cases: &[Case]) -> Report {
    let field = |key: &str| {
        let marker = format!("{nonce} {key} ");
        out.lines()
            .find_map(|l| l.strip_prefix(&marker))
            .map(str::to_string)
    };
    let user = field("id").and_then(|l| {
        let mut it = l.split_whitespace().map(|w| w.parse::<u32>().ok());
        Some((it.next()??, it.next()??))
    });
    let healthcheck = ran(out, nonce, "hc").map(|hc| {
        let stderr = section(out, nonce, "hc.err")
            .map(|(t, _)| t.to_string())
            .unwrap_or_default();
        (hc, stderr)
    });
    let mut ran_cases: BTreeMap<String, Ran> = cases
        .iter()
        .filter_map(|c| ran(out, nonce, &c.id).map(|r| (c.id.clone(), r)))
        .collect();
    // A lane's `times` are cumulative: each case's CPU is its step.
    let mut lane_total: BTreeMap<&str, f64> = BTreeMap::new();
    for c in cases {
        if let Some(r) = ran_cases.get_mut(&c.id) {
            let before = lane_total.get(c.suite.as_str()).copied().unwrap_or(0.0);
            if let Some(total) = r.cpu {
                r.cpu = Some((total - before).max(0.0));
                lane_total.insert(&c.suite, total);
            }
        }
    }
    Report {
        user,
        healthcheck,
        cases: ran_cases,
        fatal: field("fatal"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_for_real_and_reads_back() {
        // The script itself, in a plain sh with a scratch "/workspace".
        let dir = tempfile::tempdir().unwrap();
        let case = |id: &str, suite: &str, argv: &[&str]| Case {
            id: id.into(),
            suite: suite.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..crate::smoke::tests::case()
        };
        let cases = [
            case(
                "a-pass-01",
                "a",
                &["sh", "-c", "echo \"it's here\"; pwd; exit 3"],
            ),
            case("a-pass-02", "a", &["printf", "%s", "no newline"]),
            case(
                "b-pass-01",
                "b",
                &["sh", "-c", "echo sunaba-0 end x; echo late >&2"],
            ),
        ];
        for c in &cases {
            std::fs::create_dir_all(dir.path().join(&c.id)).unwrap();
        }
        let script = script(
            &[
                "sh".into(),
                "-c".into(),
                "echo ok; echo warn >&2; exit 1".into(),
            ],
            &cases,
        );
        let text = script.text.replace(
            "\"/workspace/$c\"",
            &format!("{}/\"$c\"", dir.path().display()),
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&text)
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let report = parse(&stdout, &script.nonce, &cases);
        assert!(report.user.is_some(), "{stdout}");
        let (hc, hc_err) = report.healthcheck.unwrap();
        assert_eq!(
            (hc.exit, hc.output.as_str(), hc_err.as_str()),
            (Some(1), "ok\n", "warn\n")
        );
        let a1 = &report.cases["a-pass-01"];
        assert_eq!(a1.exit, Some(3));
        assert!(a1.output.starts_with("it's here\n"), "{a1:?}");
        assert!(a1.output.ends_with("/a-pass-01\n"), "{a1:?}");
        assert!(a1.seconds.is_some_and(|s| s >= 0.0), "{a1:?}");
        assert!(a1.cpu.is_some_and(|s| s >= 0.0), "{a1:?}");
        assert_eq!(report.cases["a-pass-02"].output, "no newline");
        assert_eq!(report.cases["b-pass-01"].output, "sunaba-0 end x\nlate\n");
        assert_eq!(report.fatal, None);
    }
}
