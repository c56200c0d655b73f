//! The script a check runs in its one sandbox, and reading its output back.
//! The script is `templates/smoke-driver.sh`, compiled in and run as it is
//! (`sh -c`), so shellcheck sees exactly what runs: the healthcheck and the
//! cases come in as its arguments, never as script text. It runs the image's
//! healthcheck and each suite's cases side by side (a lane per suite, its
//! cases in order), each case in its own copy under /workspace, and prints
//! everything in sections framed by a random nonce, so no output can end a
//! section early.

use super::Case;
use std::collections::BTreeMap;
use std::time::Duration;

/// Each case's time limit inside the container (`timeout`, when the image
/// has it).
pub(crate) const CASE_TIMEOUT: Duration = Duration::from_secs(120);
/// The bytes of output a case reports (its tail): `output` patterns are
/// matched against them.
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;
/// The driver script (its arguments are described at its top).
const DRIVER: &str = include_str!("../../templates/smoke-driver.sh");

/// The driver's arguments and the nonce framing its output.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub args: Vec<String>,
    pub nonce: String,
}

impl Script {
    /// The arguments of `/bin/sh` that run the driver (`sunaba-check` is
    /// its `$0`).
    pub(crate) fn sh_args(&self) -> Vec<String> {
        ["-c", DRIVER, "sunaba-check"]
            .into_iter()
            .map(String::from)
            .chain(self.args.iter().cloned())
            .collect()
    }
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

/// The driver's run of `healthcheck` (argv) and every case, one lane per
/// suite, in the sandbox's workspace.
pub(crate) fn script(healthcheck: &[String], cases: &[Case]) -> Script {
    script_in(crate::run_contract::WORKSPACE, healthcheck, cases)
}

/// [`script`] with the cases' copies under `workspace`.
fn script_in(workspace: &str, healthcheck: &[String], cases: &[Case]) -> Script {
    let nonce = format!("sunaba-{:016x}", rand::random::<u64>());
    let mut lanes: BTreeMap<&str, usize> = cases.iter().map(|c| (c.suite.as_str(), 0)).collect();
    for (n, lane) in lanes.values_mut().enumerate() {
        *lane = n + 1;
    }
    let mut args = vec![
        nonce.clone(),
        CASE_TIMEOUT.as_secs().to_string(),
        OUTPUT_CAP.to_string(),
        workspace.to_string(),
        lanes.len().to_string(),
    ];
    push_command(&mut args, healthcheck);
    for c in cases {
        args.push(lanes[c.suite.as_str()].to_string());
        args.push(c.id.clone());
        push_command(&mut args, &c.argv);
    }
    Script { args, nonce }
}

/// A command as the driver takes it: how many words, then the words.
fn push_command(args: &mut Vec<String>, argv: &[String]) {
    args.push(argv.len().to_string());
    args.extend(argv.iter().cloned());
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
            // Words are data: nothing in them is expanded, split or run.
            case(
                "c-pass-01",
                "c",
                &["printf", "[%s]", "a b", "", "$HOME", "'q'", "*", "; exit 9"],
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
        let script = script_in(
            dir.path().to_str().unwrap(),
            &[
                "sh".into(),
                "-c".into(),
                "echo ok; echo warn >&2; exit 1".into(),
            ],
            &cases,
        );
        let out = std::process::Command::new("sh")
            .args(script.sh_args())
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
        let c1 = &report.cases["c-pass-01"];
        assert_eq!(c1.exit, Some(0));
        assert_eq!(c1.output, "[a b][][$HOME]['q'][*][; exit 9]");
        assert_eq!(report.cases["b-pass-01"].output, "sunaba-0 end x\nlate\n");
        assert_eq!(report.fatal, None);
    }
}
