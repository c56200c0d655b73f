//! A command line clap accepts but the command cannot carry out as asked
//! is a usage error (64), said by the kind of error the command returns
//! (docs/contracts.md "Exit statuses"), before any engine or registry is
//! reached.

use crate::support::Project;

#[test]
fn what_a_command_refuses_on_its_command_line_exits_64_before_any_engine_or_registry() {
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    let file = dir.path().join("images.toml");
    let file = file.to_str().unwrap();
    let digest = format!("sha256:{}", "a".repeat(64));
    let target_by_digest = format!("127.0.0.1:1/nowhere/sandbox@{digest}");
    let said = |message: &str| regex::escape(message);
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["pin", "python", "go", "--to", "1.0.0"],
            said("error: --to picks one version of one variant: name exactly one alias"),
        ),
        (
            vec!["check", "python", "go", "--image", "127.0.0.1:1/x:1"],
            said("error: --image checks one image: name at most one variant"),
        ),
        (
            vec!["assemble", &target_by_digest, &digest],
            said(&format!(
                "error: {target_by_digest}: name a tag (or just the repository), not a digest: \
                 the index's digest is known once it is assembled"
            )),
        ),
        (
            vec!["assemble", "127.0.0.1:1/a/b:x", "127.0.0.1:1/c/d:x-amd64"],
            said(
                "error: 127.0.0.1:1/c/d:x-amd64: not in 127.0.0.1:1/a/b; push it there first (an \
                 index names images of its own repository)",
            ),
        ),
        (
            vec!["run", "--image", "alpine:3", "--workspace", file, "--print"],
            said(&format!("error: the workspace {file} is not a directory")),
        ),
        (
            vec![
                "run",
                "--image",
                "alpine:3",
                "--env",
                "AWS_SECRET_ACCESS_KEY",
                "--print",
            ],
            format!(
                "{}.*",
                said(
                    "error: environment variable AWS_SECRET_ACCESS_KEY may not cross into a sandbox:"
                )
            ),
        ),
        (
            vec![
                "run",
                "--image",
                "alpine:3",
                "--directive",
                "--privileged",
                "--print",
            ],
            format!(
                "{}.*",
                said("error: runtime directive \"--privileged\" is not allowed in a sandbox")
            ),
        ),
    ];
    for (args, message) in cases {
        dir.cli()
            .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
            .args(["--profile", "local"])
            .args(args)
            .status(64)
            .stderr_like(&message)
            .run();
    }
}
