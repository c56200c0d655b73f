//! Two platforms on one machine: the fixture family (fake tools, seconds to
//! build natively, about a minute under emulation) built, checked and
//! smoke-tested for linux/amd64 and linux/arm64 (qemu-user, as `scripts/dev-env
//! up` provisions it), pushed by digest as legs and released as one index
//! per variant; the same images in two legs give the same pins; a tool
//! that answers otherwise on arm64, or fails there, stops the variant and
//! the release.

use crate::engine_release::{fixture, fixture_family};
use crate::support::{self, Cli, skopeo_config_for_arch};
use serde_json::Value;
use std::path::Path;

/// The fixture family, released to `repository`, for both platforms.
fn two_platform_fixture(repository: &str, s: &support::Services) -> support::Project {
    fixture(&fixture_family(repository, s).platforms(&["linux/amd64", "linux/arm64"]))
}

fn cli(root: &Path) -> Cli {
    Cli::new(root).args(["--profile", "local"])
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `build --platform P --push-by-digest CI --metadata-file FILE`, passing.
fn build_leg(root: &Path, platform: &str, ci: &str, file: &str) -> Value {
    let run = cli(root)
        .args(["build", "--platform", platform, "--progress", "plain"])
        .args(["--push-by-digest", ci, "--metadata-file", file])
        .stderr_free("the builds' progress on each platform")
        .stdout_free("the summary tables of each platform")
        .run();
    for leg in read_json(&root.join(file))["legs"].as_array().unwrap() {
        let line = format!(
            "pushed {} {} {ci}@{}",
            leg["variant"].as_str().unwrap(),
            leg["platform"].as_str().unwrap(),
            leg["digest"].as_str().unwrap()
        );
        assert!(run.stdout().contains(&line), "{line}\n{}", run.stdout());
    }
    read_json(&root.join(file))
}

/// `(alias, version, index digest, platform -> child)` of every pin.
fn pins(root: &Path) -> Vec<(String, String, String, Value)> {
    let doc = read_json(&root.join("image_pins.json"));
    let mut out = Vec::new();
    for (alias, pin) in doc["images"].as_object().unwrap() {
        out.push((
            alias.clone(),
            pin["version"].as_str().unwrap_or_default().to_string(),
            pin["digest"].as_str().unwrap().to_string(),
            pin["platforms"].clone(),
        ));
    }
    out
}

#[test]
#[ignore = "tier: emulation"]
fn two_platforms_are_built_checked_and_released_as_indexes_and_two_legs_give_the_same_pins() {
    let Some(s) = support::two_platform_services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let ns = support::unique("multiarch");
    let registry = &s.registry;
    let release_one = format!("{registry}/{ns}/one");
    let project = two_platform_fixture(&release_one, &s);
    let root = project.path();
    let empty_pins = std::fs::read_to_string(root.join("image_pins.json")).unwrap();

    // One machine, one run: both platforms built and checked (arm64 under
    // emulation), then pushed by digest.
    let ci_one = format!("{registry}/{ns}/ci-one");
    let legs = build_leg(root, "all", &ci_one, "one.json");
    let got: Vec<(&str, &str)> = legs["legs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["variant"].as_str().unwrap(),
                l["platform"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("root", "linux/amd64"),
            ("kid", "linux/amd64"),
            ("root", "linux/arm64"),
            ("kid", "linux/arm64"),
        ]
    );
    // Two legs, one per platform (as two CI machines would run them): the
    // same inputs, so nothing is rebuilt and the same images are pushed.
    let ci_two = format!("{registry}/{ns}/ci-two");
    for (platform, file) in [("linux/arm64", "arm.json"), ("linux/amd64", "amd.json")] {
        let leg = build_leg(root, platform, &ci_two, file);
        for l in leg["legs"].as_array().unwrap() {
            let same = legs["legs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["variant"] == l["variant"] && o["platform"] == l["platform"]);
            assert_eq!(same.unwrap()["digest"], l["digest"], "{platform}: {l}");
        }
        assert_eq!(leg["legs"].as_array().unwrap().len(), 2, "{platform}");
    }

    cli(root)
        .args([
            "release", "--from", &ci_one, "--legs", "one.json", "--write",
        ])
        .stderr_may(r"release: .*")
        .stdout_free("the release notes")
        .run();
    let one = pins(root);
    assert_eq!(one.len(), 2, "{one:?}");
    for (alias, version, digest, platforms) in &one {
        assert_eq!(version, "1.0.0", "{alias}");
        let image = format!("{release_one}@{digest}");
        let children = platforms.as_object().unwrap();
        assert_eq!(
            children.keys().collect::<Vec<_>>(),
            ["linux/amd64", "linux/arm64"],
            "{alias}"
        );
        // What `resolve --platform` and skopeo choose from the index agree.
        for (platform, arch) in [("linux/amd64", "amd64"), ("linux/arm64", "arm64")] {
            let run = cli(root)
                .args(["resolve", "--platform", platform, &image])
                .stdout_like(format!(r"sha256:[0-9a-f]{{64}}\t{}", regex::escape(&image)))
                .run();
            let child = run.stdout().split('\t').next().unwrap().to_string();
            assert_eq!(child, children[platform], "{alias} {platform}");
            let config = skopeo_config_for_arch(arch, &image);
            let by_child = skopeo_config_for_arch(arch, &format!("{release_one}@{child}"));
            assert_eq!(
                config, by_child,
                "{alias} {platform}: skopeo picks the same child"
            );
        }
    }
    cli(root)
        .args(["pins", "verify"])
        .stdout("ok: 2 alias(es) pinned and verified in image_pins.json\n")
        .run();
    // `run` starts the engine's platform's own image of the index.
    let (_, _, _, kid_platforms) = one.iter().find(|p| p.0 == "kid").unwrap();
    let run = cli(root)
        .args(["run", "kid", "--print"])
        .stdout_free("the sandbox's command line")
        .run();
    let amd64 = format!(
        "{release_one}@{}",
        kid_platforms["linux/amd64"].as_str().unwrap()
    );
    assert!(run.stdout().contains(&amd64), "{amd64}\n{}", run.stdout());

    // The two-leg release, from the same start, into another release
    // repository (a release from legs builds nothing: the family's local
    // tags do not matter), gives the same pins.
    let release_two = format!("{registry}/{ns}/two");
    let manifest = std::fs::read_to_string(root.join("images.toml")).unwrap();
    std::fs::write(
        root.join("images.toml"),
        manifest.replace(&release_one, &release_two),
    )
    .unwrap();
    std::fs::write(root.join("image_pins.json"), &empty_pins).unwrap();
    // A release needs a leg for every platform.
    cli(root)
        .args(["release", "--from", &ci_two, "--legs", "amd.json"])
        .status(1)
        .stderr(
            "error: root: no leg for linux/arm64 (the legs give linux/amd64); it is \
             released for linux/amd64, linux/arm64\n",
        )
        .run();
    cli(root)
        .args([
            "release", "--from", &ci_two, "--legs", "amd.json", "--legs", "arm.json",
        ])
        .args(["--write"])
        .stderr_may(r"release: .*")
        .stdout_free("the release notes")
        .run();
    assert_eq!(pins(root), one, "two legs, the same pins as one run");
}

#[test]
#[ignore = "tier: emulation"]
fn a_tool_that_answers_otherwise_or_fails_on_arm64_fails_the_variant_and_nothing_is_pushed() {
    let Some(s) = support::two_platform_services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let ns = support::unique("multiarch-fail");
    let registry = &s.registry;
    let project = two_platform_fixture(&format!("{registry}/{ns}/rel"), &s);
    let root = project.path();
    let ci = format!("{registry}/{ns}/ci");
    // `beta` says another version on arm64: both checks pass, the
    // variant fails on the comparison.
    let kid = |arm64_line: &str| {
        format!(
            "#!/bin/sh\nset -eu\n# {}\nif [ \"$(uname -m)\" = aarch64 ]; then\n{}else\n{}fi\n",
            root.display(),
            arm64_line,
            support::checker_tool("beta", "beta 2.0.0")
        )
    };
    let fragment = root.join("docker/install-kid.sh");
    std::fs::write(&fragment, kid(&support::checker_tool("beta", "beta 2.0.1"))).unwrap();
    cli(root)
        .args(["build", "--platform", "all", "--progress", "plain"])
        .args(["--push-by-digest", &ci, "--metadata-file", "legs.json"])
        .status(2)
        .stderr_free("the builds' progress on each platform")
        .stdout_line(
            "kid failed: its tool versions differ between platforms: beta 2.0.0 on linux/amd64, \
             2.0.1 on linux/arm64",
        )
        .stdout_line("nothing pushed: not every image built and checked on every platform")
        .stdout_may(".*")
        .run();
    assert!(!root.join("legs.json").exists(), "no legs file");

    // `beta` is not installed on arm64: the arm64 check fails the variant;
    // the amd64 leg alone cannot be released.
    std::fs::write(&fragment, kid("true\n")).unwrap();
    let run = cli(root)
        .args(["build", "--platform", "linux/arm64", "--progress", "plain"])
        .args(["--push-by-digest", &ci, "--metadata-file", "legs.json"])
        .status(2)
        .stderr_free("the build's progress")
        .stdout_line("nothing pushed: not every image built and checked on every platform")
        .stdout_may(".*")
        .run();
    assert!(
        run.stdout().contains("kid failed (check): beta missing"),
        "{}",
        run.stdout()
    );
    build_leg(root, "linux/amd64", &ci, "amd.json");
    cli(root)
        .args(["release", "--from", &ci, "--legs", "amd.json", "--write"])
        .status(1)
        .stderr(
            "error: root: no leg for linux/arm64 (the legs give linux/amd64); it is \
             released for linux/amd64, linux/arm64\n",
        )
        .run();
}
