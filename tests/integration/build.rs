//! `build` and `check` on the real engine, with a fixture family of tiny
//! fragments that write fake tools (fast), plus the error paths.

use crate::support::{
    self, Cli, Family, Project, Run, Services, Variant, fake_tool, services, sha256,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture family: `root` (alpha, and netcheck, which exits 0 only when
/// loopback is the one network interface) with children `kid1` (beta, the
/// default, serving `fake`) and `kid2` (gamma); `solo` (delta) on its own;
/// and `bad`, whose fragment installs nothing that answers as owed, in a
/// budget it cannot fit.
fn family(repository: &str, upstream: &str) -> Family {
    Family::new("kid1")
        .repository(repository)
        .upstream(upstream)
        .tool_min("alpha", "1.0.0")
        .presence_tool("netcheck")
        .tool("beta")
        .tool("gamma")
        .tool_min("delta", "1.0.0")
        .fragment("root", &["alpha", "netcheck"])
        .fragment("one", &["beta"])
        .fragment("two", &["gamma"])
        .fragment("solo", &["delta"])
        .fragment("bad", &["beta", "gamma", "delta"])
        .variant(Variant::new("root").fragments(&["root"]))
        .variant(
            Variant::new("kid1")
                .parent("root")
                .fragments(&["one"])
                .serves_fake(),
        )
        .variant(Variant::new("kid2").parent("root").fragments(&["two"]))
        .variant(Variant::new("solo").fragments(&["solo"]))
        .variant(Variant::new("bad").fragments(&["bad"]).size_budget("1KiB"))
}

/// A fixture project of [`family`] with a repository of its own, and an
/// engine wrapper that logs every engine call (start, end, exit status,
/// argv). Cold: the repository is in every fragment, so no test builds on
/// another's cache (these tests assert what is built, in what order).
struct Fixture {
    project: Project,
    repo: String,
    engine: Option<String>,
}

#[derive(Debug)]
struct Call {
    start: f64,
    end: f64,
    args: String,
}

impl Fixture {
    fn new(name: &str, services: Option<&Services>) -> Fixture {
        let upstream = services
            .map(Services::pinned_base)
            .unwrap_or_else(|| format!("debian:trixie-slim@sha256:{}", "0".repeat(64)));
        Fixture::with_upstream(name, services, &upstream)
    }

    /// A fixture family built FROM `upstream` (`name:tag@sha256:…`).
    fn with_upstream(name: &str, services: Option<&Services>, upstream: &str) -> Fixture {
        let repo = format!("sunaba-fixture/{name}-{}", std::process::id());
        // The fixture's name makes its layers its own: no cache hits from
        // other tests or earlier runs (the CA secret is not in a cache key).
        let mut project = Project::fixture(&family(&repo, upstream))
            .salt(&repo)
            .fragment(
                "root",
                &format!(
                    "# Proves the CA secret was mounted without keeping it: only its hash stays.\n\
                     if [ -s /run/secrets/ca_bundle ]; then\n  \
                     sha256sum /run/secrets/ca_bundle | cut -c1-64 > /etc/fixture-ca-seen\nfi\n\
                     cat > /usr/local/bin/netcheck <<'EOF'\n#!/bin/sh\n\
                     [ \"$(ls /sys/class/net)\" = lo ] || {{ echo \"networked: $(ls /sys/class/net | tr '\\n' ' ')\"; exit 1; }}\n\
                     EOF\nchmod +x /usr/local/bin/netcheck\n{}",
                    fake_tool("alpha", "alpha 1.2.3")
                ),
            )
            .fragment("one", &support::checker_tool("beta", "beta 2.0.0"))
            .fragment("two", &fake_tool("gamma", "gamma 3.0.0"))
            .fragment("solo", &fake_tool("delta", "delta 1.5.0"))
            // beta missing; a different program under gamma's name; delta too old.
            .fragment(
                "bad",
                &format!(
                    "{}{}",
                    fake_tool("gamma", "GNU something-else 9.9"),
                    fake_tool("delta", "delta 0.1.0")
                ),
            );
        let engine = services.map(|s| s.engine.clone());
        if let Some(engine) = &engine {
            let (log, wrapper) = (project.join("engine.log"), project.join("engine-wrapper"));
            support::write_program(
                &wrapper,
                &format!(
                    "#!/bin/sh\nstart=$(date +%s.%N)\n'{engine}' \"$@\"\nrc=$?\n\
                     printf '%s %s %s %s\\n' \"$start\" \"$(date +%s.%N)\" \"$rc\" \"$(printf '%s' \"$*\" | tr '\\n' ' ')\" >> '{}'\n\
                     exit $rc\n",
                    log.display()
                ),
            );
            project = project.env("SUNABA_ENGINE", &wrapper);
        }
        Fixture {
            project: project.render(),
            repo,
            engine,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.project.join(rel)
    }

    fn write_fragment(&self, name: &str, body: &str) {
        self.project.write_fragment(name, body);
    }

    fn cli<I, S>(&self, args: I) -> Cli
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.project.cli().args(args)
    }

    fn tag(&self, variant: &str) -> String {
        format!("{}:{variant}", self.repo)
    }

    /// Engine calls since the last `clear_calls`.
    fn calls(&self) -> Vec<Call> {
        let text = std::fs::read_to_string(self.path("engine.log")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                let start = parts.next().unwrap().parse().unwrap();
                let end = parts.next().unwrap().parse().unwrap();
                let _rc = parts.next();
                Call {
                    start,
                    end,
                    args: parts.next().unwrap_or("").to_string(),
                }
            })
            .collect()
    }

    fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.path("engine.log"));
    }

    /// Image builds (not the metadata-only check records) per variant.
    fn variant_builds(&self) -> BTreeMap<String, (f64, f64)> {
        self.calls()
            .into_iter()
            .filter(|c| is_build(&c.args))
            .filter_map(|c| {
                let v = c
                    .args
                    .split(' ')
                    .find_map(|a| a.strip_prefix("--label=dev.sunaba.variant="))?
                    .to_string();
                Some((v, (c.start, c.end)))
            })
            .collect()
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.engine.as_ref().unwrap())
            .args(args)
            .output()
            .unwrap()
    }

    fn inspect(&self, reference: &str) -> serde_json::Value {
        let out = self.docker(&["image", "inspect", reference]);
        assert!(out.status.success(), "inspect {reference}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0].clone()
    }

    fn check_label(&self, reference: &str) -> Option<serde_json::Value> {
        let info = self.inspect(reference);
        let raw = info["Config"]["Labels"]["dev.sunaba.check"].as_str()?;
        Some(serde_json::from_str(raw).unwrap())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(engine) = &self.engine {
            support::remove_images(engine, &self.repo);
        }
    }
}

fn is_build(args: &str) -> bool {
    args.starts_with("build ") || args.starts_with("buildx build ")
}

/// What `build` prints on stdout: the summary table, the totals line and,
/// when checks ran, their reports (tests require the rows they care about).
fn summary(cli: Cli) -> Cli {
    cli.stdout_may("")
        .stdout_like("variant +result +image +build +check +note")
        .stdout_may(r"\S+ +(built|skipped|FAILED|not attempted) +.*")
        .stdout_like(
            r"\d+ built, \d+ skipped, \d+ failed, \d+ not attempted; wall time .*; engine builds started: \d+",
        )
        .stdout_may("checks:")
        .stdout_may(r"(PASS|FAIL) \S+  \S+  size .*")
        .stdout_may(r"  (ok|missing|mismatch|too-old|failed|not-checked) +\S+ .*")
        .stdout_may(r"  smoke (pass|FAIL|skip) .*")
        .stdout_may(r"    \| .*")
        .stdout_may(r"  note: .*")
        .stdout_may(r"  problem: .*")
}

/// What `build --progress plain` prints on stderr: the engine chosen, then
/// timestamped progress lines.
fn progress(cli: Cli) -> Cli {
    cli.stderr_like(r"engine: docker .* at .* \(.*\)")
        .stderr_may(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S+: .*")
}

/// What `check` prints: a report per image.
pub(crate) fn check_report(cli: Cli) -> Cli {
    cli.stdout_may(r"(PASS|FAIL) \S+  \S+  size .*")
        .stdout_may(r"  (ok|missing|mismatch|too-old|failed|not-checked) +\S+ .*")
        .stdout_may(r"  smoke (pass|FAIL|skip) .*")
        .stdout_may(r"    \| .*")
        .stdout_may(r"  note: .*")
        .stdout_may(r"  problem: .*")
}

fn summary_row(run: &Run, variant: &str) -> String {
    let stdout = run.stdout();
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(variant))
        .unwrap_or_else(|| panic!("no summary row for {variant} in:\n{stdout}"))
        .to_string()
}

fn owed(label: &serde_json::Value) -> BTreeSet<String> {
    label["tools"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
#[ignore = "tier: engine"]
fn fixture_family_order_parallelism_skip_and_selective_rebuild() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("graph", Some(&s));
    let marker = format!("SUNABA-TEST-CA-{}", std::process::id());
    let ca = fx.path("ca.pem");
    std::fs::write(&ca, format!("-----BEGIN CERTIFICATE-----\n{marker}\n")).unwrap();

    // A build without a check leaves no record; `check` adds it without a layer
    // and moves the tags to the labelled image.
    summary(progress(fx.cli([
        "build",
        "solo",
        "--no-check",
        "--progress",
        "plain",
    ])))
    .stdout_like(r"solo +built +[0-9a-f]{12} +\S+ +- +not checked \(--no-check\)")
    .run();
    let unchecked = fx.inspect(&fx.tag("solo"));
    assert!(fx.check_label(&fx.tag("solo")).is_none());
    check_report(fx.cli(["check", "solo"]))
        .stdout_like(format!(r"PASS solo  {}  .*", fx.tag("solo")))
        .stdout_like(r"  ok +delta +1\.5\.0 *")
        .run();
    let checked = fx.inspect(&fx.tag("solo"));
    assert_ne!(unchecked["Id"], checked["Id"]);
    assert_eq!(unchecked["RootFS"]["Layers"], checked["RootFS"]["Layers"]);
    let label = fx.check_label(&fx.tag("solo")).unwrap();
    assert_eq!(label["status"], "pass");
    assert_eq!(label["tools"]["delta"], "1.5.0");
    assert_eq!(
        label["inputs"],
        checked["Config"]["Labels"]["dev.sunaba.inputs"]
    );
    let inputs_tags: Vec<_> = checked["RepoTags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.as_str().unwrap().contains(":solo-inputs-"))
        .collect();
    assert_eq!(inputs_tags.len(), 1, "{checked}");

    // Cold build of the rest: parents first. That independent children
    // build in parallel, bounded by --jobs, is the scheduler's unit test
    // (`jobs_bound_parents_first_then_nothing_to_do`, with the fake engine):
    // proving an overlap here would need the builds to sleep.
    fx.clear_calls();
    let all = ["root", "kid1", "kid2", "solo"];
    let build_all = || {
        let mut args = vec![
            "build",
            "--jobs",
            "4",
            "--progress",
            "plain",
            "--container-ca-bundle",
        ];
        args.push(ca.to_str().unwrap());
        args.extend(all);
        summary(progress(fx.cli(args)))
    };
    let run = build_all().run();
    let builds = fx.variant_builds();
    assert_eq!(
        builds.keys().collect::<Vec<_>>(),
        ["kid1", "kid2", "root"],
        "solo was checked already, so it is skipped"
    );
    let (root, kid1, kid2) = (builds["root"], builds["kid1"], builds["kid2"]);
    assert!(root.1 <= kid1.0 && root.1 <= kid2.0, "{builds:?}");
    assert!(summary_row(&run, "solo").contains("skipped"));
    for v in ["root", "kid1", "kid2"] {
        assert!(summary_row(&run, v).contains("built"), "{}", run.stdout());
    }

    // Every image carries a passing record of exactly the tools it owes.
    let expected: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("root", &["alpha", "netcheck"][..]),
        ("kid1", &["alpha", "netcheck", "beta"][..]),
        ("kid2", &["alpha", "netcheck", "gamma"][..]),
    ]);
    for (v, tools) in &expected {
        let label = fx.check_label(&fx.tag(v)).unwrap();
        assert_eq!(label["status"], "pass");
        assert_eq!(label["variant"], *v);
        // kid1 serves `fake`: its smoke ran beta on the pass and defect projects.
        let suites = if *v == "kid1" {
            serde_json::json!({"fake": 2})
        } else {
            serde_json::json!({})
        };
        assert_eq!(label["smoke"]["suites"], suites, "{label}");
        assert_eq!(
            owed(&label),
            tools.iter().map(|t| t.to_string()).collect::<BTreeSet<_>>()
        );
        let labels = &fx.inspect(&fx.tag(v))["Config"]["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.title"],
            format!("sunaba-{v}")
        );
        assert_eq!(
            labels["org.opencontainers.image.source"],
            "https://example.invalid/sunaba-fixture"
        );
        assert!(
            labels["org.opencontainers.image.created"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
    }
    // The children were built FROM the parent just built.
    let root_layers = fx.inspect(&fx.tag("root"))["RootFS"]["Layers"].clone();
    let kid_layers = fx.inspect(&fx.tag("kid1"))["RootFS"]["Layers"].clone();
    let root_layers = root_layers.as_array().unwrap();
    assert_eq!(
        &kid_layers.as_array().unwrap()[..root_layers.len()],
        &root_layers[..]
    );

    // The CA bundle was available to the fragment, and is in no layer, no
    // history entry and no config.
    let seen = fx.docker(&[
        "run",
        "--rm",
        &fx.tag("kid1"),
        "cat",
        "/etc/fixture-ca-seen",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&seen.stdout).trim(),
        &sha256(&std::fs::read(&ca).unwrap())["sha256:".len()..]
    );
    let tar = fx.path("kid1.tar");
    let saved = fx.docker(&["save", "--output", tar.to_str().unwrap(), &fx.tag("kid1")]);
    assert!(saved.status.success(), "{saved:?}");
    let bytes = std::fs::read(&tar).unwrap();
    assert!(bytes.len() > 1_000_000);
    assert!(
        !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
        "the CA bundle is in a layer"
    );
    let history = fx.docker(&["history", "--no-trunc", &fx.tag("kid1")]);
    assert!(!String::from_utf8_lossy(&history.stdout).contains(&marker));
    assert!(!fx.inspect(&fx.tag("kid1")).to_string().contains(&marker));

    // The check container had no network: netcheck passed there, while the
    // same probe fails in a container with the default network.
    let networked = fx.docker(&["run", "--rm", &fx.tag("root"), "netcheck"]);
    assert!(!networked.status.success(), "{networked:?}");
    assert!(String::from_utf8_lossy(&networked.stdout).contains("networked"));

    // Nothing changed: no engine build at all.
    fx.clear_calls();
    let run = build_all()
        .stdout_like(r"0 built, 4 skipped, 0 failed, 0 not attempted; .*; engine builds started: 0")
        .run();
    let calls = fx.calls();
    assert!(
        !calls.iter().any(|c| is_build(&c.args)),
        "engine builds on a no-op build: {calls:?}"
    );
    assert!(
        run.stdout().contains("0 built, 4 skipped"),
        "{}",
        run.stdout()
    );
    assert!(run.stdout().contains("engine builds started: 0"));

    // One fragment changes: only the variant using it is rebuilt.
    let two = fx.path("docker/install-two.sh");
    let mut text = std::fs::read_to_string(&two).unwrap();
    text.push_str("echo changed\n");
    std::fs::write(&two, text).unwrap();
    fx.clear_calls();
    let run = build_all()
        .stdout_like(r"1 built, 3 skipped, 0 failed, 0 not attempted; .*")
        .run();
    assert_eq!(fx.variant_builds().keys().collect::<Vec<_>>(), ["kid2"]);
    assert!(
        run.stdout().contains("1 built, 3 skipped"),
        "{}",
        run.stdout()
    );

    // A child alone brings its parent along, skipped since it is unchanged.
    fx.clear_calls();
    let run = summary(progress(fx.cli(["build", "kid1", "--progress", "plain"])))
        .stdout_like(r"0 built, 2 skipped, 0 failed, 0 not attempted; .*")
        .run();
    assert!(fx.variant_builds().is_empty());
    assert!(
        run.stdout().contains("0 built, 2 skipped"),
        "{}",
        run.stdout()
    );
    assert!(summary_row(&run, "root").contains("skipped"));

    // The smoke changed (a project's bytes): kid1 is checked again, not
    // rebuilt; root (which runs no smoke) keeps its record.
    std::fs::write(fx.path("tests/smoke/fake/pass/b.txt"), "also fine\n").unwrap();
    fx.clear_calls();
    let run = summary(progress(fx.cli(["build", "kid1", "--progress", "plain"])))
        .stdout_like(r"0 built, 2 skipped, 0 failed, 0 not attempted; .*engine builds started: 0")
        .run();
    assert!(
        summary_row(&run, "kid1").contains("inputs unchanged, smoke changed: checked now"),
        "{}",
        run.stdout()
    );
    assert!(summary_row(&run, "root").contains("check passed before"));
}

/// Acceptance: two different local images under the upstream's tag; the
/// build uses the pinned digest (pulled by digest, since only the stale
/// image is local), never what the tag points at here.
#[test]
#[ignore = "tier: engine"]
fn a_stale_local_tag_never_replaces_the_pinned_upstream() {
    let Some(s) = services() else {
        return;
    };
    let docker = |args: &[&str]| {
        let out = Command::new(&s.engine).args(args).output().unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let repo = format!(
        "{}/sunaba-fixture/upstream-{}",
        s.registry,
        std::process::id()
    );
    let tag = format!("{repo}:trixie-slim");
    // The pinned image: the dev base, pushed under the tag.
    docker(&["tag", &s.base_ref, &tag]);
    docker(&["push", &tag]);
    let digest = docker(&[
        "image",
        "inspect",
        "--format",
        "{{json .RepoDigests}}",
        &tag,
    ]);
    let digests: Vec<String> = serde_json::from_str(&digest).unwrap();
    let pinned_digest = digests
        .iter()
        .find_map(|d| d.strip_prefix(&format!("{repo}@")))
        .unwrap()
        .to_string();
    let pinned_layers = docker(&[
        "image",
        "inspect",
        "--format",
        "{{json .RootFS.Layers}}",
        &tag,
    ]);
    // A stale image under the same tag, local only; the pinned one is not
    // local any more under this repository.
    let name = format!("sunaba-stale-{}", std::process::id());
    docker(&[
        "run",
        "--name",
        &name,
        &s.base_ref,
        "sh",
        "-c",
        "echo stale > /stale-marker",
    ]);
    docker(&["commit", &name, &tag]);
    docker(&["rm", &name]);
    docker(&["image", "rm", &format!("{repo}@{pinned_digest}")]);

    let fx = Fixture::with_upstream("upstream", Some(&s), &format!("{tag}@{pinned_digest}"));
    fx.write_fragment(
        "solo",
        &format!(
            "if [ -e /stale-marker ]; then echo 'built FROM the stale image'; exit 1; fi\n{}",
            fake_tool("delta", "delta 1.5.0")
        ),
    );
    fx.clear_calls();
    summary(progress(fx.cli([
        "build",
        "solo",
        "--no-check",
        "--progress",
        "plain",
    ])))
    .env("SOURCE_DATE_EPOCH", "1700000000")
    .stdout_like(r"solo +built +.*")
    .run();
    let pulls: Vec<String> = fx
        .calls()
        .into_iter()
        .filter(|c| c.args.starts_with("pull "))
        .map(|c| c.args)
        .collect();
    assert_eq!(pulls, [format!("pull --quiet -- {repo}@{pinned_digest}")]);
    let info = fx.inspect(&fx.tag("solo"));
    let labels = &info["Config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.base.name"], tag);
    assert_eq!(
        labels["org.opencontainers.image.base.digest"],
        pinned_digest
    );
    assert_eq!(
        labels["org.opencontainers.image.created"],
        "2023-11-14T22:13:20Z"
    );
    let pinned: Vec<String> = serde_json::from_str(&pinned_layers).unwrap();
    let layers: Vec<String> = serde_json::from_value(info["RootFS"]["Layers"].clone()).unwrap();
    assert_eq!(
        layers[..pinned.len()],
        pinned[..],
        "not built on the pinned image"
    );
    // The tag still names the stale image: nothing moved it.
    let stale = docker(&["run", "--rm", &tag, "cat", "/stale-marker"]);
    assert_eq!(stale, "stale");
    let _ = Command::new(&s.engine)
        .args(["image", "rm", &tag, &format!("{repo}@{pinned_digest}")])
        .output();
}

#[test]
#[ignore = "tier: engine"]
fn failing_fragment_stops_descendants_not_siblings() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("fail", Some(&s));
    fx.write_fragment("root", "echo 'about to fail'\nexit 3\n");
    let cli = fx.cli([
        "build",
        "root",
        "kid1",
        "kid2",
        "solo",
        "--progress",
        "plain",
    ]);
    // After the summary: the failing step and the last lines of the
    // engine's log, which are the engine's own words.
    let run = progress(cli)
        .status(1)
        .stdout_free("ends with the engine's build log")
        .run();
    let out = run.stdout();
    assert!(summary_row(&run, "root").contains("FAILED"), "{out}");
    for kid in ["kid1", "kid2"] {
        let row = summary_row(&run, kid);
        assert!(
            row.contains("not attempted") && row.contains("parent root failed"),
            "{row}"
        );
    }
    assert!(summary_row(&run, "solo").contains("built"), "{out}");
    assert_eq!(
        fx.variant_builds().keys().collect::<Vec<_>>(),
        ["root", "solo"]
    );
    // The failing step, the end of its log and where the whole log is.
    assert!(
        out.contains("step [2/5] RUN sh /run/sunaba/install-root.sh failed"),
        "{out}"
    );
    assert!(out.contains("exit code: 3"), "{out}");
    assert!(out.contains("about to fail"), "{out}");
    let log = fx.path("target/sunaba-build/logs/root.log");
    assert!(
        out.contains(&format!("full log: {}", log.display())),
        "{out}"
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("about to fail")
    );
}

#[test]
#[ignore = "tier: engine"]
fn check_names_missing_wrong_and_old_tools_and_older_renders() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("check", Some(&s));
    // Not built yet: a failed check that says what to do, in the report.
    fx.cli(["check", "kid2"])
        .status(2)
        .stdout(format!(
            "FAIL kid2  {tag}  size - / budget 500.0 MiB  (0.0s)\n  \
             problem: image {tag} not found locally; build it first (`sunaba-images build kid2`)\n",
            tag = fx.tag("kid2")
        ))
        .run();
    // A report per platform asked for, the gate failing when any fails.
    // (The engine here is linux/amd64: arm64's image is the `-arm64` tag.)
    let report = |tag: String| {
        format!(
            "FAIL kid2  {tag}  size - / budget 500.0 MiB  (0.0s)\n  \
             problem: image {tag} not found locally; build it first (`sunaba-images build kid2`)\n"
        )
    };
    fx.cli(["check", "kid2", "--platform", "linux/amd64,linux/arm64"])
        .status(2)
        .stdout(report(fx.tag("kid2")) + &report(fx.tag("kid2") + "-arm64"))
        .run();
    summary(progress(fx.cli([
        "build",
        "bad",
        "--no-check",
        "--progress",
        "plain",
    ])))
    .run();
    let junit = fx.path("junit.xml");
    let run = fx
        .cli(["check", "bad", "--json", "--junit", junit.to_str().unwrap()])
        .status(2)
        .stdout_json()
        .run();
    let reports = run.json();
    assert_eq!(reports["schema"], "sunaba-images/check/v1");
    let report = &reports["reports"][0];
    assert_eq!(report["passed"], false);
    let status: BTreeMap<String, (String, String, String)> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tool"].as_str().unwrap().to_string(),
                (
                    t["status"].as_str().unwrap().to_string(),
                    t["version"].as_str().unwrap().to_string(),
                    t["detail"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(status["beta"].0, "missing");
    assert!(status["beta"].2.contains("not found"), "{status:?}");
    assert_eq!(status["gamma"].0, "mismatch");
    assert!(status["gamma"].2.contains("something-else"), "{status:?}");
    assert_eq!(status["delta"].0, "too-old");
    assert_eq!(status["delta"].1, "0.1.0");
    let problems = report["problems"].to_string();
    assert!(
        problems.contains("exceeds the budget of 1.0 KiB by ")
            && problems.contains("raise images.toml variants.bad.size_budget"),
        "{problems}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"tests="4" failures="4""#), "{xml}");
    assert!(xml.contains(r#"name="beta""#), "{xml}");
    // A failed check records nothing.
    assert!(fx.check_label(&fx.tag("bad")).is_none());

    // `build` runs the check and fails on it (the gate exit status).
    let run = summary(progress(fx.cli(["build", "bad", "--progress", "plain"])))
        .status(2)
        .stdout_like(r"bad failed \(check\): beta missing; .*")
        .stdout_like(format!(
            "full log: {}",
            regex::escape(
                &fx.path("target/sunaba-build/logs/bad.log")
                    .display()
                    .to_string()
            )
        ))
        .run();
    let row = summary_row(&run, "bad");
    assert!(
        row.contains("check failed") && row.contains("beta missing"),
        "{row}"
    );
    // Under `--format github` every finding of the check is an annotation
    // titled `build: …`, at its line of images.toml, the worst first.
    let text = std::fs::read_to_string(fx.path("images.toml")).unwrap();
    let line = |header: &str| text.lines().position(|l| l == header).unwrap() + 1;
    let image = format!(r"{}-inputs-[0-9a-f]{{12}}", regex::escape(&fx.tag("bad")));
    // `IMAGE` in `message` stands for the image checked.
    let annotation = |table: &str, title: &str, message: &str| {
        format!(
            r"::error file=images\.toml,line={},title=build%3A bad%3A {}::{}",
            line(table),
            regex::escape(title),
            regex::escape(message).replace("IMAGE", &image)
        )
    };
    let run = summary(progress(fx.cli([
        "build",
        "bad",
        "--progress",
        "plain",
        "--format",
        "github",
    ])))
    .status(2)
    .stdout_like(annotation(
        "[tools.beta]",
        "beta missing",
        "bad (IMAGE): beta missing (version -): beta not found on PATH",
    ))
    .stdout_like(annotation(
        "[tools.gamma]",
        "gamma mismatch",
        "bad (IMAGE): gamma mismatch (version -): output of 'gamma --version' does not match \
         /gamma ([0-9]+\\.[0-9]+\\.[0-9]+)/: GNU something-else 9.9",
    ))
    .stdout_like(annotation(
        "[tools.delta]",
        "delta too-old",
        "bad (IMAGE): delta too-old (version 0.1.0): 0.1.0 is below the minimum 1.0.0",
    ))
    .stdout_like(
        r#"::error file=images\.toml,line=\d+,title=build%3A bad%3A over its size budget::bad: size [0-9.]+ MiB exceeds the budget of 1\.0 KiB by [0-9.]+ MiB: raise images\.toml variants\.bad\.size_budget \(size_budget = "\d+MiB" leaves about 10%25 headroom\), or make the image smaller"#,
    )
    .stdout_like(r"bad failed \(check\): beta missing; .*")
    .stdout_like("full log: .*")
    .run();
    let titles: Vec<&str> = (run.lines().iter().take(4))
        .map(|l| {
            l.split("title=")
                .nth(1)
                .unwrap_or(l)
                .split("::")
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        titles,
        [
            "build%3A bad%3A beta missing",
            "build%3A bad%3A gamma mismatch",
            "build%3A bad%3A delta too-old",
            "build%3A bad%3A over its size budget"
        ],
        "the annotations first, the worst first"
    );

    // An image from an older render: images.toml now owes one more tool.
    let manifest = fx.path("images.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "provides = [\"beta\", \"gamma\", \"delta\"]",
        "provides = [\"beta\", \"gamma\", \"delta\", \"alpha\"]",
    );
    std::fs::write(&manifest, text).unwrap();
    let run = check_report(fx.cli(["check", "bad"])).status(2).run();
    let row = run
        .stdout()
        .lines()
        .find(|l| l.contains("alpha"))
        .unwrap_or_default()
        .to_string();
    assert!(
        row.contains("not-checked") && row.contains("older render"),
        "{}",
        run.stdout()
    );
}

/// A tool that silently does nothing fails the smoke (the seeded defect
/// goes unreported), and so does one that writes into the workspace; the
/// build fails on it, naming the case.
#[test]
#[ignore = "tier: engine"]
fn a_tool_that_does_nothing_or_writes_the_workspace_fails_smoke_and_build() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("smoke", Some(&s));
    fx.write_fragment(
        "one",
        "cat > /usr/local/bin/beta <<'EOF'\n#!/bin/sh\n\
         if [ \"$1\" = check ]; then touch .beta-cache; echo 'beta: clean'; exit 0; fi\n\
         echo 'beta 2.0.0'\nEOF\nchmod +x /usr/local/bin/beta\n",
    );
    summary(progress(fx.cli(["build", "kid1", "--progress", "plain"])))
        .status(2)
        .stdout_may(r"    \| .*")
        .stdout_like(
            r"kid1 failed \(check\): smoke fake/beta check \. \[defect\]: exit status 0, expected 1; output does not match /DEFECT in \./a\.txt/; changed the workspace, which this command must only read: added \.beta-cache; hint: the usual cause is a tool's cache or build directory in the project: .*; smoke fake/beta check \. \[pass\]: changed the workspace, .*",
        )
        .stdout_like(r"full log: .*")
        .run();
    // No record of kid1's own (a child inherits its parent's label).
    let label = fx.check_label(&fx.tag("kid1"));
    assert!(
        label.as_ref().is_none_or(|l| l["variant"] == "root"),
        "{label:?}"
    );

    let junit = fx.path("junit.xml");
    let run = fx
        .cli([
            "check",
            "kid1",
            "--json",
            "--junit",
            junit.to_str().unwrap(),
        ])
        .status(2)
        .stdout_json()
        .run();
    let smoke = run.json()["reports"][0]["smoke"].clone();
    let defect = smoke
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["project"] == "defect")
        .unwrap();
    assert_eq!(defect["status"], "fail");
    assert_eq!(defect["exit"], 0);
    assert_eq!(defect["expected_exit"], 1);
    assert_eq!(defect["argv"], serde_json::json!(["beta", "check", "."]));
    assert_eq!(defect["changed"], serde_json::json!(["added .beta-cache"]));
    assert_eq!(defect["output_tail"], "beta: clean");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(
            r#"<testcase classname="sunaba.kid1.smoke.fake" name="beta check . [defect]">"#
        ),
        "{xml}"
    );
    assert!(
        xml.contains("<system-out>beta: clean</system-out>"),
        "{xml}"
    );
}

#[test]
#[ignore = "tier: engine"]
fn check_of_a_good_image_by_reference_and_junit() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("byref", Some(&s));
    summary(progress(fx.cli(["build", "solo", "--progress", "plain"]))).run();
    let id = fx.inspect(&fx.tag("solo"))["Id"]
        .as_str()
        .unwrap()
        .to_string();
    let junit = fx.path("junit.xml");
    // The variant comes from the image's label; an unchanged record is kept.
    fx.cli([
        "check",
        "--image",
        &fx.tag("solo"),
        "--junit",
        junit.to_str().unwrap(),
    ])
    .stdout_like(format!(
        r"PASS solo  {}  size \S+ MiB / budget 500\.0 MiB  \(\S+s\)",
        fx.tag("solo")
    ))
    .stdout_like(r"  ok +delta +1\.5\.0 *")
    .run();
    assert_eq!(fx.inspect(&fx.tag("solo"))["Id"], id.as_str());
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"tests="2" failures="0""#), "{xml}");
}

#[test]
fn missing_engine_binary_is_a_clear_error() {
    let fx = Fixture::new("nobinary", None);
    fx.cli(["build"])
        .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
        .status(1)
        .stderr(
            "error: choosing the container engine: container engine `/nonexistent/bin/docker` \
             (from SUNABA_ENGINE) was not found; install Docker (with BuildKit) or Podman, or \
             name the binary with the profile's `engine` key or SUNABA_ENGINE\n",
        )
        .run();
}

/// A fake `docker` CLI reporting `version`, with or without buildx.
fn fake_docker(dir: &Path, version: &str, buildx: bool) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("docker");
    let buildx = if buildx {
        "echo 'github.com/docker/buildx v0.20.0'"
    } else {
        "echo \"docker: unknown command: docker buildx\" >&2; exit 1"
    };
    support::write_program(
        &path,
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n\
             --version) echo \"Docker version {version}, build 0000000\" ;;\n\
             version) echo \"{version}\"; echo 'Cannot connect to the Docker daemon' >&2; exit 1 ;;\n\
             buildx) {buildx} ;;\n\
             *) echo \"fake docker: unexpected $*\" >&2; exit 99 ;;\nesac\n"
        ),
    );
    path
}

/// A Docker CLI that cannot build with BuildKit: named, it is refused with
/// the name of one on PATH that can; not named, it is passed over for that
/// one.
#[test]
fn docker_without_buildkit_is_refused_naming_one_that_can_or_passed_over() {
    let fx = Fixture::new("nobuildkit", None);
    let new = fake_docker(&fx.path("new-cli"), "28.2.2", false);
    let old = fake_docker(&fx.path("old-cli"), "20.10.24+dfsg1", false);
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        new.parent().unwrap().display(),
        old.parent().unwrap().display()
    );
    fx.cli(["build"])
        .env("SUNABA_ENGINE", &new)
        .env("PATH", &path)
        .status(1)
        .stderr(format!(
            "error: choosing the container engine: {} (Docker CLI 28.2.2) cannot build with \
             BuildKit: it has no buildx plugin, and Docker CLIs from 23.0 on no longer carry \
             BuildKit built in. Install the docker-buildx plugin, or use a CLI that can: \
             SUNABA_ENGINE={}\n",
            new.display(),
            old.display()
        ))
        .run();
    // Not named: the first docker on PATH that can build is taken (this
    // fake one has no daemon to talk to, wherever DOCKER_HOST points).
    fx.cli(["build"])
        .env_remove("SUNABA_ENGINE")
        .env("DOCKER_HOST", "unix:///nonexistent/sunaba/docker.sock")
        .env("PATH", &path)
        .status(1)
        .stderr_line(format!(
            "engine: docker 20.10.24+dfsg1 at {} (built-in BuildKit)",
            old.display()
        ))
        .stderr_like(format!(
            r"error: building the image family: the container engine is not running or not reachable \({}, DOCKER_HOST=.*\): Cannot connect to the Docker daemon; start it .*",
            regex::escape(&old.display().to_string())
        ))
        .run();
}

#[test]
#[ignore = "tier: engine"]
fn engine_not_running_is_a_clear_error() {
    let Some(s) = services() else {
        return;
    };
    let fx = Fixture::new("notrunning", None);
    fx.cli(["build"])
        .env("SUNABA_ENGINE", &s.engine)
        .env("DOCKER_HOST", "unix:///nonexistent/sunaba/docker.sock")
        .status(1)
        .stderr_like(r"engine: docker .* \(.*\)")
        .stderr_like(
            r"error: building the image family: the container engine is not running or not reachable \(.*, DOCKER_HOST=unix:///nonexistent/sunaba/docker\.sock\): .*; start it \(for development: `scripts/dev-env up` and source its env file\)",
        )
        .run();
}
