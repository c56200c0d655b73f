//! `plan --json` golden tests on a fixture family of the test's own (so a
//! new toolchain in the shipped images.toml changes no golden file): its
//! published images synthetic ones carrying the labels a build writes
//! (`dev.sunaba.definition`, `org.opencontainers.image.base.digest`), and an
//! upstream of the test's own in the dev registry.
//!
//! The golden files change only when `plan`'s output does; rewrite them with
//! `SUNABA_BLESS=1 cargo test --test integration -- --include-ignored plan::` (the dev registry
//! up) and review the diff.

use crate::support::oci::{Image, Pusher};
use crate::support::{self, Cli, EMPTY_PINS, Family, Project, Variant, check_label_with, sha256};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The fixture family: a root `core`, three children (`both` takes the
/// fragments of `one` and `two`, as the shipped default takes every
/// toolchain) and a second root `solo`, for two platforms; its `local`
/// profile publishes to `repository` from `upstream` (a tag), pinned by
/// `SUNABA_BASE_REF`.
fn family(repository: &str, upstream: &str) -> Family {
    Family::new("both")
        .repository("example.invalid/plan-fixture")
        .platforms(&["linux/amd64", "linux/arm64"])
        .tool("alpha")
        .tool("beta")
        .tool("gamma")
        .tool("delta")
        .fragment("core", &["alpha"])
        .fragment("one", &["beta"])
        .fragment("two", &["gamma"])
        .fragment("solo", &["delta"])
        .variant(
            Variant::new("core")
                .fragments(&["core"])
                .aliases(&["neutral"]),
        )
        .variant(
            Variant::new("one")
                .parent("core")
                .fragments(&["one"])
                .aliased()
                .serves_fake(),
        )
        .variant(
            Variant::new("two")
                .parent("core")
                .fragments(&["two"])
                .aliased(),
        )
        .variant(
            Variant::new("both")
                .parent("core")
                .fragments(&["one", "two"])
                .aliased()
                .serves_fake(),
        )
        .variant(Variant::new("solo").fragments(&["solo"]).aliased())
        .profile("repository", repository)
        .profile("upstream", upstream)
        .profile("upstream_env", "SUNABA_BASE_REF")
}

/// The fixture's variants, as many as `plan` lists.
const VARIANTS: usize = 5;

/// Every fixture tool at a version, and its smoke suite passed: a check
/// record any fixture variant can be pinned by.
fn fixture_tools() -> BTreeMap<String, String> {
    ["alpha", "beta", "gamma", "delta"]
        .iter()
        .map(|t| (t.to_string(), "1.0.0".to_string()))
        .collect()
}

fn golden(name: &str, actual: &str) {
    let path = support::repo_root()
        .join("tests/integration/golden")
        .join(name);
    if std::env::var_os("SUNABA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (SUNABA_BLESS=1 writes it)", path.display()));
    if expected != actual {
        let diff = similar::TextDiff::from_lines(expected.as_str(), actual)
            .unified_diff()
            .header("golden", "actual")
            .to_string();
        panic!(
            "{} differs (SUNABA_BLESS=1 rewrites it):\n{diff}",
            path.display()
        );
    }
}

/// The plan with digests named: the upstreams by their role, the rest
/// as `<sha256>` (definitions change with every template edit).
fn normalized(plan: &Value, names: &BTreeMap<String, &str>) -> String {
    let text = serde_json::to_string_pretty(plan).unwrap();
    let re = regex::Regex::new("sha256:[0-9a-f]{64}").unwrap();
    let text = re.replace_all(&text, |c: &regex::Captures| {
        names
            .get(&c[0])
            .map_or("<sha256>".to_string(), |n| format!("<{n}>"))
    });
    format!("{text}\n")
}

struct Plan {
    project: Project,
    pusher: Pusher,
    ns: String,
    /// The upstream as `SUNABA_BASE_REF` pins it (the local profile's
    /// `upstream_env`): the last one pushed.
    base_ref: std::cell::RefCell<String>,
}

impl Plan {
    fn cli(&self) -> Cli {
        self.project
            .cli()
            .env("SUNABA_BASE_REF", self.base_ref.borrow().as_str())
    }

    fn plan(&self) -> Value {
        self.cli()
            .args(["--profile", "local", "plan", "--json", "--format", "human"])
            .stdout_json()
            .run()
            .json()
    }

    fn push_upstream(&self, salt: &str) -> String {
        let image = Image::linux("amd64").layer(format!("debian {salt}").into_bytes());
        let repo = format!("{}/debian", self.ns);
        let p = &self.pusher;
        let digest = p.wait(p.image(&repo, Some("trixie-slim"), &image)).digest;
        *self.base_ref.borrow_mut() =
            format!("{}/{repo}@{digest}", support::dev_registry().unwrap());
        digest
    }

    /// Publishes every variant as `<variant>-1.0.0`, labelled as a build
    /// of the current definitions on `base` would be, and pins them.
    fn publish(&self, plan: &Value, base: &str) {
        let repo = format!("{}/sandbox", self.ns);
        for v in plan["variants"].as_array().unwrap() {
            let variant = v["variant"].as_str().unwrap();
            let inputs = sha256(variant.as_bytes());
            let suites = BTreeMap::from([("fake".to_string(), 1)]);
            let mut labels = check_label_with("pass", variant, &inputs, &fixture_tools(), &suites);
            labels.insert(
                "dev.sunaba.definition".into(),
                v["definition"].as_str().unwrap().into(),
            );
            labels.insert("org.opencontainers.image.base.digest".into(), base.into());
            let image = Image::linux("amd64")
                .labels(&labels)
                .layer(variant.as_bytes().to_vec());
            let p = &self.pusher;
            p.wait(p.image(&repo, Some(&format!("{variant}-1.0.0")), &image));
        }
        self.cli()
            .args(["--profile", "local", "pin", "--write"])
            .stdout_free("the pin plan table")
            .run();
    }
}

fn project(name: &str) -> Option<Plan> {
    let host = support::dev_registry()?;
    let ns = support::unique(&format!("plan-{name}"));
    let family = family(
        &format!("{host}/{ns}/sandbox"),
        &format!("{host}/{ns}/debian:trixie-slim"),
    );
    let mut project = Project::fixture(&family).file("image_pins.json", EMPTY_PINS);
    for fragment in ["core", "one", "two", "solo"] {
        project = project.fragment(fragment, &format!("echo {fragment}\n"));
    }
    Some(Plan {
        project: project.render(),
        pusher: Pusher::plain(&host),
        ns,
        base_ref: Default::default(),
    })
}

fn append(path: &Path, text: &str) {
    let mut body = std::fs::read_to_string(path).unwrap();
    body.push_str(text);
    std::fs::write(path, body).unwrap();
}

#[test]
#[ignore = "tier: registry"]
fn plan_json_nothing_then_a_fragment_then_the_base() {
    let Some(p) = project("golden") else {
        return;
    };
    let base1 = p.push_upstream("1");
    let names = |extra: &[(&String, &'static str)]| -> BTreeMap<String, &'static str> {
        extra.iter().map(|(d, n)| (d.to_string(), *n)).collect()
    };

    let fresh = p.plan();
    golden(
        "plan-new.json",
        &normalized(&fresh, &names(&[(&base1, "base-1")])),
    );
    p.publish(&fresh, &base1);

    let nothing = p.plan();
    assert_eq!(nothing["has_work"], false);
    golden(
        "plan-nothing.json",
        &normalized(&nothing, &names(&[(&base1, "base-1")])),
    );
    p.cli()
        .args(["--profile", "local", "plan"])
        .stdout_like("VARIANT +BUILD +WHY")
        .stdout_may(r"\S+ +no +as published \(\S+-1\.0\.0\)")
        .stdout_line(format!("0 of {VARIANTS} variant(s) to build"))
        .run();

    // One fragment changed: its users only (two and both carry `two`).
    let script = p.project.path().join("docker/install-two.sh");
    let original = std::fs::read_to_string(&script).unwrap();
    append(&script, "# a change\n");
    let fragment = p.plan();
    let jobs: Vec<&str> = fragment["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["variant"].as_str().unwrap())
        .collect();
    // `both` is composed from one's and two's layers: after its members.
    assert_eq!(jobs, ["two", "both"], "build order");
    golden(
        "plan-fragment.json",
        &normalized(&fragment, &names(&[(&base1, "base-1")])),
    );
    std::fs::write(&script, original).unwrap();

    // The base moved: everything.
    let base2 = p.push_upstream("2");
    let rebased = p.plan();
    assert_eq!(
        rebased["matrix"]["include"].as_array().unwrap().len(),
        VARIANTS
    );
    golden(
        "plan-base.json",
        &normalized(&rebased, &names(&[(&base1, "base-1"), (&base2, "base-2")])),
    );
}

#[test]
#[ignore = "tier: registry"]
fn plan_format_github_sets_the_step_outputs() {
    let Some(p) = project("github") else {
        return;
    };
    p.push_upstream("1");
    let out = p.project.path().join("github-output");
    let summary = p.project.path().join("github-summary");
    p.cli()
        .args(["--profile", "local", "plan"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", &out)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdout_free("the plan table")
        .run();
    let outputs = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = outputs.lines().collect();
    assert_eq!(lines[0], "has_work=true");
    let matrix: Value = serde_json::from_str(lines[1].strip_prefix("matrix=").unwrap()).unwrap();
    assert_eq!(matrix["include"].as_array().unwrap().len(), VARIANTS);
    assert_eq!(matrix["include"][0]["why"], "new variant (no alias pinned)");
    // One leg per platform of images.toml, each on a runner of its own.
    let legs: Value = serde_json::from_str(lines[2].strip_prefix("legs=").unwrap()).unwrap();
    assert_eq!(
        legs,
        serde_json::json!({"include": [
            {"platform": "linux/amd64", "slug": "amd64", "runner": "ubuntu-24.04"},
            {"platform": "linux/arm64", "slug": "arm64", "runner": "ubuntu-24.04-arm"},
        ]})
    );
    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(
        summary.starts_with("### What needs building\n"),
        "{summary}"
    );
}
