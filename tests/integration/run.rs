//! `run`: the run contract composed into a real `docker run`, and the
//! printed command line run for real through `sh` (a quoting bug is
//! invisible to a test that only compares strings).

use crate::support::{self, Cli};
use std::path::{Path, PathBuf};

/// A workspace whose path holds everything a shell or the engine's --mount
/// parser could misread; a shell that runs a piece of it as a command
/// creates `pwned` in the test's own directory ([`pwned`]).
fn hostile_workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!(
        "ws $(touch {}) `id` 'q' \"d\", c=1\nline2 -x --",
        pwned(dir.path()).display()
    );
    let ws = dir.path().join(name);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("marker"), "inside\n").unwrap();
    (dir, ws)
}

/// What the hostile workspace's `$(touch …)` would create: in the test's
/// own directory, so no other test or earlier run can have made it.
fn pwned(dir: &Path) -> PathBuf {
    dir.join("pwned")
}

const HOSTILE_ARGS: &[&str] = &[
    "a b",
    "$(echo injected)",
    "`echo injected`",
    "it's",
    "\"quoted\"",
    "--",
    "-x",
    "line1\nline2",
    "",
    "*",
];

/// What the container reports: its arguments, working directory, the
/// workspace's contents, its user and environment (sorted).
fn probe_command() -> Vec<String> {
    let script = "printf '[%s]\\n' \"$@\"; pwd; cat marker; id -u; env | sort";
    let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "probe".into()];
    argv.extend(HOSTILE_ARGS.iter().map(|s| s.to_string()));
    argv
}

fn run_cli(services: &support::Services, ws: &Path) -> Cli {
    Cli::new(ws)
        .env("DOCKER_HOST", &services.docker_host)
        .env("SUNABA_ENGINE", &services.engine)
        .args(["run", "--image", &services.base_image, "--workspace"])
        .args([ws])
}

#[test]
#[ignore = "tier: engine"]
fn printed_command_pasted_into_sh_starts_the_same_container_as_run() {
    let Some(services) = support::services() else {
        return;
    };
    let (dir, ws) = hostile_workspace();
    let direct = run_cli(&services, &ws)
        .args(["--"])
        .args(probe_command())
        .stdout_free("the container's own report, checked piece by piece below")
        .run();
    let out = direct.stdout();
    assert!(
        out.contains("[a b]\n[$(echo injected)]\n[`echo injected`]\n[it's]\n"),
        "{out}"
    );
    assert!(out.contains("[line1\nline2]\n[]\n[*]\n"), "{out}");
    assert!(out.contains("\n/workspace\ninside\n"), "{out}");
    assert!(out.contains("HOME=/home/sandbox\n"), "{out}");

    let printed = run_cli(&services, &ws)
        .args(["--print", "--"])
        .args(probe_command())
        .stdout_free("a shell command line (quoted newlines span lines); run through sh below")
        .run()
        .stdout()
        .to_string();
    let via_sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(printed.trim_end_matches('\n'))
        .env("DOCKER_HOST", &services.docker_host)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        via_sh.status.success(),
        "{}",
        String::from_utf8_lossy(&via_sh.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&via_sh.stdout),
        out,
        "sh ran another container"
    );

    let json = run_cli(&services, &ws)
        .args(["--print", "--json", "--"])
        .args(probe_command())
        .stdout_json()
        .run()
        .json();
    assert_eq!(json["schema"], "sunaba-images/run/v1");
    let argv: Vec<String> = serde_json::from_value(json["argv"].clone()).unwrap();
    let via_argv = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("DOCKER_HOST", &services.docker_host)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&via_argv.stdout), out);
    assert!(!pwned(dir.path()).exists(), "a path was run as a command");
}

#[test]
#[ignore = "tier: engine"]
fn only_asked_allowed_variables_reach_the_container() {
    let Some(services) = support::services() else {
        return;
    };
    let (_dir, ws) = hostile_workspace();
    let out = run_cli(&services, &ws)
        .env("NOT_ASKED", "hidden")
        .env("MY_SECRET_THING", "s3cr3t-value")
        .args(["--env", "PLAIN_UNSET_VAR", "--env", "LANG", "--"])
        .args(["env"])
        .stdout_like("PATH=.*")
        .stdout_like("HOSTNAME=sunaba-.*")
        .stdout_line("HOME=/home/sandbox")
        .stdout_like("LANG=.*")
        .stderr("note: PLAIN_UNSET_VAR is not set here, so it is not passed\n")
        .run();
    let env = out.stdout();
    assert!(!env.contains("NOT_ASKED"), "{env}");
    assert!(!env.contains("s3cr3t"), "{env}");
    assert!(!env.contains("DOCKER_HOST"), "{env}");

    // A name on the deny list is refused before anything starts, by name.
    for name in [
        "GITHUB_TOKEN",
        "MY_SECRET_THING",
        "DOCKER_HOST",
        "AWS_REGION",
    ] {
        let refused = run_cli(&services, &ws)
            .env(name, "s3cr3t-value")
            .args(["--env", name, "--", "env"])
            .status(64)
            .stderr_like(format!("error: .*{name}.*"))
            .run();
        assert!(!refused.stderr().contains("s3cr3t"));
    }

    // Asked and allowed: the value crosses, yet it is never on the argv.
    let asked = run_cli(&services, &ws)
        .env("PLAIN_VALUE", "visible value")
        .args(["--env", "PLAIN_VALUE", "--", "env"])
        .stdout_line("PLAIN_VALUE=visible value")
        .stdout_like("PATH=.*")
        .stdout_like("HOSTNAME=sunaba-.*")
        .stdout_line("HOME=/home/sandbox")
        .run();
    assert!(
        asked.stdout().contains("PLAIN_VALUE=visible value\n"),
        "{}",
        asked.stdout()
    );
    let printed = run_cli(&services, &ws)
        .env("PLAIN_VALUE", "visible value")
        .args(["--env", "PLAIN_VALUE", "--print", "--", "env"])
        .stdout_free("a shell command line (the workspace path spans lines)")
        .run()
        .stdout()
        .to_string();
    assert!(
        printed.contains("--env=PLAIN_VALUE ") && !printed.contains("visible value"),
        "{printed}"
    );
}

#[test]
#[ignore = "tier: engine"]
fn the_sandboxed_commands_status_is_the_exit_status() {
    let Some(services) = support::services() else {
        return;
    };
    let (_dir, ws) = hostile_workspace();
    run_cli(&services, &ws)
        .args(["--", "sh", "-c", "exit 7"])
        .status(7)
        .run();
}

#[test]
#[ignore = "tier: engine"]
fn an_alias_runs_its_pinned_digest_and_an_unpinned_one_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "ab".repeat(32));
    std::fs::write(
        dir.path().join("image_pins.json"),
        serde_json::json!({"schema": 1, "images": {"full": {
            "repository": "127.0.0.1:5000/sunaba/sandbox", "tag": "full-1.0.0",
            "version": "1.0.0", "digest": digest, "platforms": {}, "tools": {}}}})
        .to_string(),
    )
    .unwrap();
    // --json needs no engine run; but it needs the engine's resources, so
    // use the dev engine when there is one, and only check the refusal otherwise.
    Cli::new(dir.path())
        .args(["run", "python", "--print"])
        .status(64)
        .stderr_like("error: unknown pinned alias `python` \\(.*image_pins.json declares: .*full.*\\); name an image with --image to run an unpinned one")
        .run();
    let Some(services) = support::services() else {
        return;
    };
    let json = Cli::new(dir.path())
        .env("DOCKER_HOST", &services.docker_host)
        .env("SUNABA_ENGINE", &services.engine)
        .args(["run", "full", "--print", "--json", "--", "true"])
        .stdout_json()
        .run()
        .json();
    let argv: Vec<String> = serde_json::from_value(json["argv"].clone()).unwrap();
    let image = format!("127.0.0.1:5000/sunaba/sandbox@{digest}");
    assert_eq!(
        argv[argv.len() - 3..],
        ["--", image.as_str(), "true"],
        "{argv:?}"
    );
    assert!(
        argv.iter()
            .any(|a| a == "--label=dev.sunaba.sandbox.alias=full"),
        "{argv:?}"
    );
}

/// From a script or CI (stdin a pipe, not a terminal) the sandbox gets no
/// stdin unless `-i` asks for it: a tool that reads stdin when it is a pipe
/// (ripgrep's documented heuristic) must search the workspace instead.
/// With `-i` the pipe reaches the command.
#[test]
#[ignore = "tier: engine"]
fn stdin_reaches_the_sandbox_only_with_interactive() {
    let Some(services) = support::services() else {
        return;
    };
    let (_dir, ws) = hostile_workspace();
    // What ripgrep asks: is stdin a pipe or a file it could read?
    let probe = "if [ -p /dev/stdin ] || [ -f /dev/stdin ]; then echo stdin; else echo none; fi";
    run_cli(&services, &ws)
        .stdin_bytes("from the pipe\n")
        .args(["--", "sh", "-c", probe])
        .stdout("none\n")
        .run();
    run_cli(&services, &ws)
        .stdin_bytes("from the pipe\n")
        .args(["-i", "--", "cat"])
        .stdout("from the pipe\n")
        .run();
    // The printed command line says the same.
    let printed = run_cli(&services, &ws)
        .stdin_bytes("ignored\n")
        .args(["--print", "--", "true"])
        .stdout_free("a shell command line, checked for the flag below")
        .run();
    assert!(
        !printed.stdout().contains("--interactive"),
        "{}",
        printed.stdout()
    );
}

/// A stand-in for the engine that writes each command line it is given to
/// `log` and answers as a Docker 20.10 CLI with a daemon would (version,
/// platform, resources), so a `run --print` that reaches the engine prints
/// its command line; every other call fails. The log exists once anything
/// called the engine.
fn recording_engine(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("engine-calls");
    let program = dir.join("docker");
    support::write_program(
        &program,
        &format!(
            "#!/bin/sh\n\
             echo \"$*\" >> '{log}'\n\
             case \"$*\" in\n\
             --version) echo 'Docker version 20.10.24, build 297e128' ;;\n\
             'version --format'*Client*) echo 20.10.24 ;;\n\
             'version --format'*Server*) echo linux/amd64 ;;\n\
             'info --format'*) echo '8589934592 2 runc,' ;;\n\
             *) exit 1 ;;\n\
             esac\n",
            log = log.display()
        ),
    );
    (program, log)
}

fn pins_with_repository(dir: &Path, repository: &str, digest: &str) {
    let text = serde_json::to_string_pretty(&serde_json::json!({"schema": 1, "images": {"full": {
        "repository": repository, "tag": "full-1.0.0", "version": "1.0.0",
        "digest": digest, "platforms": {}, "tools": {}}}}))
    .unwrap();
    std::fs::write(dir.join("image_pins.json"), text + "\n").unwrap();
}

/// Issue 28: the image of `run` was a bare word on the engine's command
/// line, so `--image=--privileged` switched the posture off and a pins file
/// (what a pull request changes) whose repository was `-v=/:/host` mounted
/// the host's root. Each is refused as bad input (64) naming the value,
/// before the engine is asked anything.
#[test]
fn an_image_or_pinned_repository_that_reads_as_an_option_is_refused_before_any_engine_call() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, log) = recording_engine(dir.path());
    let run = |args: &[&str]| {
        Cli::new(dir.path())
            .env("SUNABA_ENGINE", &engine)
            .args(["run"])
            .args(args)
            .args(["--print", "--", "true"])
    };
    for image in ["--privileged", "-v=/:/host"] {
        run(&[&format!("--image={image}")])
            .status(64)
            .stderr_like(format!(
                "error: invalid value '{0}' for '--image <REF>': invalid image reference \
                 \"{0}\": .*",
                regex::escape(image)
            ))
            .stderr_may("")
            .stderr_may("For more information, try '--help'.")
            .run();
    }
    let digest = format!("sha256:{}", "ab".repeat(32));
    pins_with_repository(dir.path(), "-v=/:/host", &digest);
    run(&["full"])
        .status(64)
        .stderr(
            "error: image_pins.json:5:7: at `images.full.repository` (fix the file; nothing was \
             written): invalid image reference \"-v=/:/host\": a name cannot start with '-' (a \
             command line would read it as an option)\n",
        )
        .run();
    assert!(
        !log.exists(),
        "the engine was called: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // The stand-in is an engine: a valid pin reaches it, and the image is
    // the word after `--`.
    pins_with_repository(dir.path(), "127.0.0.1:5000/sunaba/sandbox", &digest);
    let printed = run(&["full"])
        .stdout_like(format!(
            r".* --env=HOME=/home/sandbox -- 127\.0\.0\.1:5000/sunaba/sandbox@{digest} true"
        ))
        .run();
    assert!(!printed.stdout().contains("--privileged"));
    assert!(log.exists());
}

/// The command line `run ALIAS --print` emits for a pin of an image in the
/// registry, run for real through `sh`: the sandbox starts (the engine
/// reads every option as one word and the image after `--`) and it has no
/// `/host` (a pins file can no longer give it one).
#[test]
#[ignore = "tier: engine"]
fn the_printed_command_line_of_a_pin_runs_for_real_with_no_host_inside() {
    let Some(services) = support::services() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (repository, digest) = services.base_ref.rsplit_once('@').unwrap();
    pins_with_repository(dir.path(), repository, digest);
    let cli = || {
        Cli::new(dir.path())
            .env("DOCKER_HOST", &services.docker_host)
            .env("SUNABA_ENGINE", &services.engine)
            .args(["run", "full", "--workspace"])
            .args([dir.path()])
    };
    let probe = "if [ -e /host ]; then echo host; else echo no-host; fi; \
                 touch /x 2>/dev/null || echo read-only";
    let printed = cli()
        .args(["--print", "--", "sh", "-c", probe])
        .stdout_free("a shell command line, run through sh below")
        .run()
        .stdout()
        .to_string();
    assert!(
        printed.contains(&format!(" -- {repository}@{digest} sh -c ")),
        "{printed}"
    );
    let via_sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(printed.trim_end_matches('\n'))
        .env("DOCKER_HOST", &services.docker_host)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        via_sh.status.success(),
        "{}",
        String::from_utf8_lossy(&via_sh.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&via_sh.stdout),
        "no-host\nread-only\n"
    );
}
