//! Exit statuses, command by command (docs/contracts.md "Exit statuses"):
//! 0 done, 1 operational failure, 2 a gate found problems, 64 usage error;
//! and a stdout closed by its reader ends a command quietly with 0.

use crate::support::oci::{Image, Pusher};
use crate::support::{self, Cli, Project};

/// clap's report of an unknown subcommand or flag: the error line first,
/// then tips and usage.
fn usage_error(cli: Cli, first_line: &str) -> Cli {
    cli.status(64)
        .stderr_line(first_line)
        .stderr_may("")
        .stderr_may("  tip: .*")
        .stderr_like("Usage: sunaba-images .*")
        .stderr_line("For more information, try '--help'.")
}

#[test]
fn render_check_exits_0_when_current_64_on_usage_2_on_drift_1_on_a_broken_manifest() {
    let dir = Project::shipped();
    dir.cli()
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
    usage_error(
        dir.cli().args(["render", "--chek"]),
        "error: unexpected argument '--chek' found",
    )
    .run();

    let dockerfile = dir.path().join("docker/Dockerfile.go");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(&dockerfile, format!("{text}RUN echo drift\n")).unwrap();
    dir.cli()
        .args(["render", "--check"])
        .status(2)
        .stdout_line("--- a/docker/Dockerfile.go (committed)")
        .stdout_line("+++ b/docker/Dockerfile.go (rendered)")
        .stdout_like(r"@@ .* @@")
        .stdout_line("-RUN echo drift")
        .stdout_may(" .*")
        .stderr_like(r"render --check: 1 drifted, 0 missing, 0 stray; .*")
        .run();

    let manifest = dir.path().join("images.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n[variants.broken\n")).unwrap();
    dir.cli()
        .args(["render", "--check"])
        .status(1)
        .stderr_like(
            r"error: loading the image family manifest: images.toml: TOML parse error at line \d+, column \d+",
        )
        .stderr_may(r" *\d* \|.*")
        .stderr_line("unclosed table, expected `]`")
        .run();
}

#[test]
fn pins_verify_exits_64_on_usage_2_on_problems_1_without_a_pins_file() {
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    usage_error(
        dir.cli().args(["pins", "verfy"]),
        "error: unrecognized subcommand 'verfy'",
    )
    .run();
    // An empty pins file: every alias is unpinned, a problem each (found
    // without asking the registry anything).
    let aliases = crate::support::shipped_aliases();
    let cli = dir
        .cli()
        .args(["--profile", "local", "pins", "verify"])
        .status(2)
        .stderr(format!("pins verify: {} problem(s)\n", aliases.len()));
    aliases.keys().fold(cli, |cli, alias| {
            cli.stdout_like(format!(
                r"problem: {alias}: not pinned \(variant \w+\); run `sunaba-images pin {alias} --write`"
            ))
        })
        .run();
    std::fs::remove_file(dir.path().join("image_pins.json")).unwrap();
    dir.cli()
        .args(["--profile", "local", "pins", "verify"])
        .status(1)
        .stderr(
            "error: image_pins.json does not exist; create it with `sunaba-images pin --write`\n",
        )
        .run();
}

#[test]
#[ignore = "tier: engine"]
fn check_exits_64_on_usage_2_for_a_failing_image_1_without_an_engine() {
    let dir = Project::shipped();
    usage_error(
        dir.cli().args(["check", "--bogus"]),
        "error: unexpected argument '--bogus' found",
    )
    .run();
    // --image with two variants is refused before an engine is even chosen,
    // let alone the image pulled.
    dir.cli()
        .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
        .args([
            "check",
            "go",
            "full",
            "--image",
            "127.0.0.1:1/never/pushed:x",
        ])
        .status(64)
        .stderr("error: --image checks one image: name at most one variant\n")
        .run();
    let Some(s) = support::services() else {
        return;
    };
    // Never built under this name: the check runs and fails.
    let repository = format!("{}/{}/sandbox", s.registry, support::unique("exit-check"));
    let dir = Project::shipped_publishing_to(&repository);
    dir.cli()
        .env("SUNABA_ENGINE", &s.engine)
        .args(["--profile", "local", "check", "minimal"])
        .status(2)
        .stdout_like(format!(
            r"FAIL minimal  {}:minimal  size - / budget .*",
            regex::escape(&repository)
        ))
        .stdout_like(r"  problem: image .* not found locally; build it first .*")
        .run();
    // The engine cannot be reached: the check cannot run at all.
    dir.cli()
        .env("SUNABA_ENGINE", &s.engine)
        .env("DOCKER_HOST", "unix:///nonexistent/sunaba/docker.sock")
        .args(["--profile", "local", "check", "minimal"])
        .status(1)
        .stderr_like(
            r"error: .*the container engine is not running or not reachable .*DOCKER_HOST=unix:///nonexistent/sunaba/docker\.sock.*",
        )
        .run();
}

#[test]
#[ignore = "tier: registry"]
fn resolve_exits_64_on_usage_or_a_bad_reference_or_platform_and_1_for_a_missing_tag() {
    let dir = tempfile::tempdir().unwrap();
    Cli::new(dir.path())
        .args(["resolve"])
        .status(64)
        .stderr(
            "error: the following required arguments were not provided:\n  <REF>...\n\n\
             Usage: sunaba-images resolve <REF>...\n\nFor more information, try '--help'.\n",
        )
        .run();
    // A malformed --platform value or reference is a usage error too, though
    // the command (not clap) parses it.
    Cli::new(dir.path())
        .args(["resolve", "Debian:12"])
        .status(64)
        .stderr_like(r#"^error: invalid image reference "Debian:12": .*"#)
        .run();
    Cli::new(dir.path())
        .args(["resolve", "--platform", "bad", "127.0.0.1:1/x:1"])
        .status(64)
        .stderr(
            "error: invalid value 'bad' for '--platform <LIST|all>': invalid platform \"bad\": \
             expected OS/ARCH or OS/ARCH/VARIANT, e.g. linux/amd64 or linux/arm64/v8\n\n\
             For more information, try '--help'.\n",
        )
        .run();
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let missing = format!("{registry}/library/debian:no-such-tag");
    Cli::new(dir.path())
        .args(["resolve", &missing])
        .status(1)
        .stderr(format!(
            "error: {missing}: not found in registry {registry} (HTTP 404): MANIFEST_UNKNOWN \
             manifest unknown\nerror: 1 of 1 reference(s) could not be resolved\n"
        ))
        .run();
}

// A reader that closes stdout early (`| head -1`): the command ends with 0
// and says nothing. Each command here prints more than the (shrunk) pipe
// holds, so it writes to the closed pipe for certain.

#[test]
#[ignore = "tier: engine"]
fn a_closed_stdout_ends_resolve_quietly_with_0() {
    let Some(s) = support::services() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = Cli::new(dir.path())
        .args(["resolve"])
        .args(vec![s.base_image.as_str(); 60])
        .stdout_like(format!(
            r"sha256:[0-9a-f]{{64}}\t{}",
            regex::escape(&s.base_image)
        ))
        .run_closing_stdout_after_first_line();
    assert!(
        s.base_ref
            .ends_with(run.stdout().split('\t').next().unwrap())
    );
}

#[test]
#[ignore = "tier: registry"]
fn a_closed_stdout_ends_tags_quietly_with_0() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let repo = format!("{}/tags", support::unique("exit-pipe"));
    let pusher = Pusher::plain(&registry);
    let long = "x".repeat(100);
    pusher.wait(async {
        let image = pusher
            .image(&repo, Some("t000"), &Image::linux("amd64"))
            .await;
        for i in 1..60 {
            let tag = format!("t{i:03}-{long}");
            pusher
                .manifest(&repo, &tag, image.media_type, &image.bytes)
                .await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    Cli::new(dir.path())
        .args(["tags", &format!("{registry}/{repo}")])
        .stdout_like(r"t\d{3}(-x{100})?")
        .run_closing_stdout_after_first_line();
}

#[test]
fn a_closed_stdout_ends_pins_show_quietly_with_0() {
    let dir = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "ab".repeat(32));
    let images: serde_json::Map<String, serde_json::Value> = (0..60)
        .map(|i| {
            (
                format!("alias-{i:03}"),
                serde_json::json!({
                    "repository": "127.0.0.1:5000/a-rather-long/repository-name/sandbox",
                    "tag": "full-1.0.0", "version": "1.0.0", "digest": digest,
                    "platforms": {}, "tools": {}}),
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("image_pins.json"),
        serde_json::json!({"schema": 1, "images": images}).to_string(),
    )
    .unwrap();
    Cli::new(dir.path())
        .args(["pins", "show"])
        .stdout(format!(
            "alias-000\t127.0.0.1:5000/a-rather-long/repository-name/sandbox@{digest}\n"
        ))
        .run_closing_stdout_after_first_line();
}

/// The same mistake exits the same way in every command: a variant, alias,
/// fragment, smoke suite or platform the project does not declare is a
/// usage error (64) that names what is declared, found before an engine is
/// chosen or a registry asked (neither exists here).
#[test]
fn an_unknown_name_exits_64_in_every_command_before_any_engine_or_registry() {
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    let unknown = |what: &str, place: &str| {
        format!(
            r"error: unknown {what} `nosuch` \({} declares: [^)]*\)(; .*)?",
            regex::escape(place)
        )
    };
    let cases: &[(&[&str], String)] = &[
        (&["build", "nosuch"], unknown("variant", "images.toml")),
        (&["check", "nosuch"], unknown("variant", "images.toml")),
        (
            &["next-version", "nosuch", "--image", "127.0.0.1:1/x:1"],
            unknown("variant", "images.toml"),
        ),
        (
            &["release", "nosuch"],
            unknown("releasable variant", "images.toml"),
        ),
        (&["lock", "nosuch"], unknown("fragment", "images.toml")),
        (&["pin", "nosuch"], unknown("alias", "images.toml")),
        (
            &["run", "nosuch", "--print"],
            unknown("pinned alias", "image_pins.json"),
        ),
        (
            &["pins", "show", "nosuch"],
            unknown("pinned alias", "image_pins.json"),
        ),
        (
            &["sbom", "nosuch"],
            unknown("pinned alias", "image_pins.json"),
        ),
        (
            &["check", "--suite", "nosuch"],
            unknown("smoke suite", "images.toml [smoke]"),
        ),
        (
            &["detect", "--language", "nosuch", "."],
            unknown("language", "images.toml [languages]"),
        ),
    ];
    for (args, message) in cases {
        dir.cli()
            .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
            .args(["--profile", "local"])
            .args(args.iter().copied())
            .status(64)
            .stderr_like(message)
            .run();
    }
    // A platform outside the family's `platforms`.
    for args in [
        &["build", "--platform", "linux/s390x"][..],
        &["check", "--platform", "linux/s390x"][..],
    ] {
        dir.cli()
            .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
            .args(["--profile", "local"])
            .args(args.iter().copied())
            .status(64)
            .stderr_like(r"error: unknown platform `linux/s390x` \(images.toml `platforms` declares: linux/.*\)")
            .run();
    }
}
