//! `compose`: a union variant planned from its members' layers, on a
//! fixture family built on the real engine: `root`, members `a` and `b`
//! (each apt-installs a package needing `liblzo2-2`, their shared
//! dependency) and the union `ab`. The plan's merged dpkg and apt state is
//! checked against the `ab` the engine builds from Dockerfile.ab, and a
//! file the two fragments write differently is refused, naming both.

use crate::support::{self, EMPTY_PINS, Family, Project, Variant, fake_tool};
use std::collections::BTreeSet;

/// A fragment apt-installing `package` with the project's own
/// `docker/lib/common.sh` (its cleanup, as every shipped fragment ends),
/// retrying a fetch (this machine's resolver fails now and then mid-build),
/// writing `etc/fixture.conf` as `conf` and installing the fake `tool`.
fn apt_fragment(package: &str, conf: &str, tool: &str) -> String {
    format!(
        ". /run/sunaba/lib/common.sh\n\
         export DEBIAN_FRONTEND=noninteractive\n\
         echo 'Acquire::Retries \"4\";' > /etc/apt/apt.conf.d/80-fixture-retries\n\
         apt_install {package} >/dev/null\n\
         printf '%s\\n' '{conf}' > /etc/fixture.conf\n{}sunaba_cleanup\n",
        fake_tool(tool, &format!("{tool} 1.0.0"))
    )
}

/// The stanzas of a deb822 file, sorted (what `compose` merges compares
/// by): each one's lines, without the blank lines between.
fn stanzas(text: &str) -> BTreeSet<String> {
    text.split("\n\n")
        .map(|s| s.trim_matches('\n').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// What the engine prints for `args`, which must succeed.
fn engine_out(engine: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(engine)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `path` of `image`, read from a container made (never started) of it.
fn file_of(engine: &str, image: &str, path: &str) -> String {
    let run = |args: &[&str]| engine_out(engine, args);
    let container = run(&["create", image]);
    let container = container.trim();
    let text = run(&["cp", &format!("{container}:{path}"), "-"]);
    run(&["rm", container]);
    // `cp … -` writes a tar of the one file.
    let mut archive = tar::Archive::new(text.as_bytes());
    let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut entry, &mut out).unwrap();
    out
}

/// The fixture family under `repository`: `root`, members `a` (lzop) and
/// `b` (lrzip), which share `liblzo2-2`, and the union `ab`; for
/// `platforms` (none: the engine's own).
fn fixture(repository: &str, s: &support::Services, platforms: &[&str]) -> Project {
    let family = Family::new("ab")
        .repository(repository)
        .upstream(&s.pinned_base())
        .platforms(platforms)
        .tool("alpha")
        .tool("beta")
        .tool("gamma")
        .fragment("root", &["alpha"])
        .fragment("a", &["beta"])
        .fragment("b", &["gamma"])
        .variant(Variant::new("root").fragments(&["root"]))
        .variant(Variant::new("a").parent("root").fragments(&["a"]))
        .variant(Variant::new("b").parent("root").fragments(&["b"]))
        .variant(
            Variant::new("ab")
                .parent("root")
                .fragments(&["a", "b"])
                .aliased(),
        )
        .profile("repository", repository)
        .profile("upstream", &s.pinned_base());
    let common = std::fs::read(support::repo_root().join("docker/lib/common.sh")).unwrap();
    Project::fixture(&family)
        .file("image_pins.json", EMPTY_PINS)
        .file("docker/lib/common.sh", common)
        .fragment("root", &fake_tool("alpha", "alpha 1.0.0"))
        .fragment("a", &apt_fragment("lzop", "same", "beta"))
        .fragment("b", &apt_fragment("lrzip", "same", "gamma"))
        .env("SUNABA_ENGINE", &s.engine)
        .render()
}

#[test]
#[ignore = "tier: engine"]
fn a_union_is_planned_from_its_members_layers_with_the_state_the_dockerfile_gives_and_a_conflict_is_refused()
 {
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    composed_proved_and_refused(&s, "compose");
}

/// Podman (4.3 here) builds the members, composes the union (its `load`
/// reads every layer file of an archive and it has no chain-ID look-up, so
/// the composer reads the engine's save) and refuses the conflict the same
/// way; nothing is run (`--no-check`: `podman run` cannot start a container
/// in every sandbox).
#[test]
#[ignore = "tier: engine"]
fn on_podman_too_a_union_is_composed_proved_equal_and_a_conflict_refused() {
    let Some(s) = support::podman_services() else {
        return;
    };
    let _heavy = support::machine_lock();
    composed_proved_and_refused(&s, "compose-podman");
}

/// The fixture's `ab` planned, composed by `build`, compared path by path
/// with the `ab` its Dockerfile built, and refused once `b` writes
/// `etc/fixture.conf` its own way, on `s`'s engine.
fn composed_proved_and_refused(s: &support::Services, name: &str) {
    let repository = format!("{}/fixture", support::unique(name));
    let p = fixture(&repository, s, &[]);
    // Built the old way first: what the composition is proved against.
    let build = |variants: &[&str]| {
        p.cli()
            .args([
                "build",
                "--from-dockerfile",
                "--no-check",
                "--progress",
                "plain",
            ])
            .args(variants)
            .stdout_free("the build's summary")
            .stderr_free("the build's progress")
            .run();
    };
    p.cli()
        .args(["compose", "ab"])
        .status(1)
        .stderr_line(format!(
            "error: cannot compose `ab`: the engine has no build of root, a, b \
             ({repository}:VARIANT); build them first: `sunaba-images build root a b`"
        ))
        .run();
    build(&["a", "b", "ab"]);

    let plan = p
        .cli()
        .args(["compose", "ab", "--json"])
        .stdout_json()
        .stderr_line(format!(
            "compose: reading {repository}:root, {repository}:a, {repository}:b"
        ))
        .run()
        .json();
    assert_eq!(plan["schema"], "sunaba-images/compose/v1");
    // The union's own steps: Dockerfile.ab without the fragments' RUN steps.
    let dockerfile = plan["dockerfile"].as_str().unwrap();
    let rendered = p.read("docker/Dockerfile.ab");
    assert!(
        !dockerfile.contains("sh /run/sunaba/install-"),
        "{dockerfile}"
    );
    for fragment in ["a", "b"] {
        assert!(
            dockerfile.contains(&format!("# Composed: fragment `{fragment}`'s layer is")),
            "{dockerfile}"
        );
    }
    let kept = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("ENV ") || l.starts_with("ARG ") || l.starts_with("LABEL "))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        kept(dockerfile),
        kept(&rendered),
        "the same ARGs, ENVs and LABELs"
    );
    assert_eq!(plan["parent"], "root");
    let layers: Vec<(&str, &str)> = plan["fragment_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["fragment"].as_str().unwrap(),
                l["variant"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(layers, [("a", "a"), ("b", "b")]);
    // Each member's fragment layer is the layer its own image has.
    let member_layers = |v: &str| -> Vec<String> {
        let image = format!("{repository}:{v}");
        let format = "{{json .RootFS.Layers}}";
        let out = engine_out(&s.engine, &["image", "inspect", "--format", format, &image]);
        serde_json::from_str(&out).unwrap()
    };
    for (i, v) in ["a", "b"].iter().enumerate() {
        let diff_id = plan["fragment_layers"][i]["diff_id"].as_str().unwrap();
        assert!(
            member_layers(v).iter().any(|d| d == diff_id),
            "{v}: {diff_id}"
        );
    }
    let identical: Vec<&str> = plan["shared"]["identical"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(identical.contains(&"etc/fixture.conf"), "{identical:?}");
    assert!(
        identical
            .iter()
            .any(|p| p.starts_with("var/lib/dpkg/info/liblzo2-2")),
        "the shared dependency's files are the same in both layers: {identical:?}"
    );
    assert_eq!(
        plan["shared"]["merged"],
        serde_json::json!(["var/lib/apt/extended_states", "var/lib/dpkg/status"])
    );
    // The merged state holds the stanzas of the `ab` built from its
    // Dockerfile: each package once, whatever the order.
    for file in plan["state_files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap();
        let built = stanzas(&file_of(
            &s.engine,
            &format!("{repository}:ab"),
            &format!("/{path}"),
        ));
        assert_eq!(file["stanzas"], built.len(), "{path}");
        let sorted: Vec<String> = {
            // The plan's bytes are its stanzas sorted by package: the same
            // set hashes the same once sorted the same way.
            let mut v: Vec<String> = built.iter().cloned().collect();
            v.sort_by_key(|s| {
                let field = |name: &str| {
                    s.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_string())
                        .unwrap_or_default()
                };
                (field("Package:"), field("Architecture:"))
            });
            v
        };
        let text = sorted
            .iter()
            .map(|s| format!("{s}\n"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(file["sha256"], support::sha256(text.as_bytes()), "{path}");
    }
    let status = plan["state_files"][0]["path"].as_str().unwrap();
    assert_eq!(status, "var/lib/dpkg/status");

    // Composed (the default): `build ab` assembles `ab` from a's and b's layers
    // and a state layer, and builds only its own steps; path by path it is
    // the `ab` its Dockerfile built.
    let built = format!("{repository}:ab-dockerfile");
    let tagged = std::process::Command::new(&s.engine)
        .args(["tag", &format!("{repository}:ab"), &built])
        .status()
        .unwrap();
    assert!(tagged.success());
    p.cli()
        .args(["build", "--no-check", "--progress", "plain", "ab"])
        .stdout_free("the build's summary")
        .stderr_free("the build's progress")
        .run();
    let log = p.read("target/sunaba-build/logs/ab.log");
    assert!(log.starts_with("# composed ab as sha256:"), "{log}");
    assert!(
        !log.contains("sh /run/sunaba/install-"),
        "no fragment ran: {log}"
    );
    let composed = member_layers("ab");
    let dockerfile_built = member_layers("ab-dockerfile");
    for (i, v) in ["a", "b"].iter().enumerate() {
        let diff_id = plan["fragment_layers"][i]["diff_id"].as_str().unwrap();
        assert!(
            composed.iter().any(|d| d == diff_id),
            "{v}'s layer is in the composed ab: {composed:?}"
        );
    }
    // The Dockerfile ran b's install over a's packages: another layer.
    let b_layer = plan["fragment_layers"][1]["diff_id"].as_str().unwrap();
    assert!(!dockerfile_built.iter().any(|d| d == b_layer));
    let compared = p
        .cli()
        .args(["compose", "ab", "--compare", &built, "--json"])
        .stdout_json()
        .stderr_line(format!("compose: reading {repository}:ab and {built}"))
        .run()
        .json();
    assert_eq!(compared["schema"], "sunaba-images/compose-compare/v1");
    assert_eq!(compared["equivalent"], true, "{compared:#}");
    assert_eq!(compared["differences"], serde_json::json!([]));
    assert!(compared["paths"].as_u64().unwrap() > 1000, "{compared:#}");
    let state: Vec<(&str, bool)> = compared["state_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["same_stanzas"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        state,
        [
            ("var/lib/apt/extended_states", true),
            ("var/lib/dpkg/status", true)
        ]
    );
    // Against an image of other files, the differences are listed, status 1.
    p.cli()
        .args(["compose", "ab", "--compare", &format!("{repository}:a")])
        .status(1)
        .stdout_like(r"compose: \S+:ab against \S+:a: \d+ paths, [1-9]\d* differ")
        .stdout_may(r"  .*")
        .stderr_line(format!("compose: reading {repository}:ab and {repository}:a"))
        .stderr_like(r"error: \S+:ab is not what \S+:a is: \d+ path\(s\) differ, and a state file's stanzas; the composition must not be pinned \(see the list above\)")
        .run();

    // b now writes etc/fixture.conf its own way: `ab` cannot be composed.
    let tags = || -> String {
        let out = std::process::Command::new(&s.engine)
            .args(["images", "--format", "{{.Tag}} {{.ID}}", &repository])
            .output()
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines.join("\n")
    };
    p.write_fragment("b", &apt_fragment("lrzip", "b-own", "gamma"));
    build(&["b"]);
    let tags_before = tags();
    p.cli()
        .args(["compose", "ab"])
        .status(1)
        .stderr_line(format!(
            "compose: reading {repository}:root, {repository}:a, {repository}:b"
        ))
        .stderr_line(
            "error: planning the composition of `ab`: cannot compose `ab`: etc/fixture.conf: \
             fragments `a` and `b` both write it, differently (size 5 / 6, content); a composed \
             image would depend on their order: have one fragment write it (or both the same), \
             or write it in the parent",
        )
        .run();
    assert_eq!(
        tags(),
        tags_before,
        "nothing tagged, nothing loaded under the repository"
    );
    // The build, which composes `ab` by default, refuses it the same way,
    // and it too tags nothing.
    let run = p
        .cli()
        .args(["build", "--no-check", "--progress", "plain", "--json", "ab"])
        .status(1)
        .stdout_json()
        .stderr_free("the build's progress and its failure")
        .run();
    let results = run.json()["platforms"][0]["results"].clone();
    let ab = results
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["variant"] == "ab")
        .unwrap_or_else(|| panic!("{results}"));
    assert_eq!(ab["result"], "failed", "{ab}");
    assert!(
        ab.to_string().contains(
            "etc/fixture.conf: fragments `a` and `b` both write it, differently (size 5 / 6, content)"
        ),
        "{ab}"
    );
    assert_eq!(tags(), tags_before, "a refused composition tags nothing");
    support::remove_images(&s.engine, &repository);
}

#[test]
#[ignore = "tier: emulation"]
fn a_foreign_platforms_union_is_composed_from_that_platforms_members() {
    let Some(s) = support::two_platform_services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let repository = format!("{}/fixture", support::unique("compose-arm64"));
    let p = fixture(&repository, &s, &["linux/amd64", "linux/arm64"]);
    let run = p
        .cli()
        .args(["build", "--platform", "linux/arm64", "--progress", "plain"])
        .args(["--no-check", "--json", "ab"])
        .stdout_json()
        .stderr_free("the emulated builds' progress")
        .run();
    let results = run.json()["platforms"][0]["results"].clone();
    let built: BTreeSet<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["result"], "built", "{r}");
            r["variant"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        built,
        BTreeSet::from(["root", "a", "b", "ab"]),
        "its members too"
    );
    let log = p.read("target/sunaba-build/logs/arm64/ab.log");
    assert!(log.starts_with("# composed ab as sha256:"), "{log}");
    assert!(
        !log.contains("sh /run/sunaba/install-"),
        "no fragment ran: {log}"
    );
    let inspect = |image: &str, format: &str| {
        engine_out(&s.engine, &["image", "inspect", "--format", format, image])
            .trim()
            .to_string()
    };
    let ab = format!("{repository}:ab-arm64");
    assert_eq!(inspect(&ab, "{{.Architecture}}"), "arm64");
    // b's fragment layer, as b's arm64 build made it, is ab's too.
    let layers = |image: &str| -> Vec<String> {
        serde_json::from_str(&inspect(image, "{{json .RootFS.Layers}}")).unwrap()
    };
    let (ab_layers, b_layers) = (layers(&ab), layers(&format!("{repository}:b-arm64")));
    let root_layers = layers(&format!("{repository}:root-arm64")).len();
    assert!(
        ab_layers.contains(&b_layers[root_layers]),
        "{ab_layers:?}\n{b_layers:?}"
    );
    support::remove_images(&s.engine, &repository);
}
