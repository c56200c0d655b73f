//! `check VARIANT --image REF` of a custom image (issue 21): a user's own
//! image, built FROM the plain upstream with the tools installed by hand and
//! no HEALTHCHECK or labels of ours, is checked with the project's rendered
//! healthcheck mounted into the sandbox and the variant's smoke under the
//! run contract, and passes as `python`; the plain upstream fails, naming
//! every tool it lacks and what the posture needs that it lacks.

use crate::support::{self, Cli, Project, Services, shipped_manifest};
use std::collections::BTreeMap;
use std::process::Command;

/// `[fragments.NAME.args]` and the shared `[args]` it names, from the
/// shipped images.toml, as `NAME=value` words for a shell.
fn fragment_args(fragment: &str) -> String {
    let doc = shipped_manifest();
    let table = &doc["fragments"][fragment];
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    if let Some(own) = table.get("args").and_then(|a| a.as_table()) {
        for (k, v) in own {
            args.insert(k.clone(), v.as_str().unwrap().to_string());
        }
    }
    for shared in table
        .get("shared_args")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
    {
        let k = shared.as_str().unwrap();
        args.insert(k.into(), doc["args"][k].as_str().unwrap().to_string());
    }
    args.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A Dockerfile a user might write: FROM the plain upstream, the tools
/// installed with the fragment scripts (their locks verify every download),
/// the environment the python tools' caches need, a user 1000:1000. No
/// HEALTHCHECK, no label.
fn custom_dockerfile(base: &str) -> String {
    let step = |fragment: &str, script: &str| {
        format!(
            "RUN --mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle \\\n    \
             --mount=type=bind,source=docker/lib,target=/run/sunaba/lib \\\n    \
             --mount=type=bind,source=docker/locks/{fragment},target=/run/sunaba/lock \\\n    \
             --mount=type=bind,source=docker/{script},target=/run/sunaba/{script} \\\n    \
             {} sh /run/sunaba/{script}\n",
            fragment_args(fragment)
        )
    };
    format!(
        "FROM {base}\n\
         {}{}\
         RUN useradd --uid 1000 --user-group --home-dir /home/sandbox --no-create-home sandbox \\\n    \
         && install -d -o 1000 -g 1000 /home/sandbox /workspace \\\n    \
         && git config --system safe.directory '*'\n\
         ENV HOME=/home/sandbox XDG_CACHE_HOME=/home/sandbox/.cache LANG=C.UTF-8 \\\n    \
         GIT_OPTIONAL_LOCKS=0 NPM_CONFIG_UPDATE_NOTIFIER=false PYTHONDONTWRITEBYTECODE=1 \\\n    \
         PYTEST_ADDOPTS='-o cache_dir=/home/sandbox/.cache/pytest' \\\n    \
         RUFF_CACHE_DIR=/home/sandbox/.cache/ruff UV_CACHE_DIR=/home/sandbox/.cache/uv \\\n    \
         UV_PYTHON_DOWNLOADS=never\n\
         USER 1000:1000\n\
         WORKDIR /workspace\n",
        step("core", "install-core.sh"),
        step("python", "install-python-tools.sh"),
    )
}

/// `docker build` of `dockerfile` (in the project, the context) as `tag`,
/// with the machine's CA bundle as the secret the fragment scripts read
/// (as the `local` profile's `ca_bundle` gives the family's builds).
fn build(s: &Services, project: &Project, dockerfile: &str, tag: &str) {
    project.write("custom.Dockerfile", dockerfile);
    let out = Command::new(&s.engine)
        .env("DOCKER_BUILDKIT", "1")
        .args(["build", "--quiet", "-t", tag])
        .args([
            "--secret",
            "id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt",
            "-f",
        ])
        .arg(project.join("custom.Dockerfile"))
        .arg(project.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Tags this test made, removed when it ends (pass or fail).
struct Tags<'a> {
    engine: &'a str,
    tags: Vec<String>,
}

impl Drop for Tags<'_> {
    fn drop(&mut self) {
        for tag in &self.tags {
            let _ = Command::new(self.engine)
                .args(["image", "rm", "--force", tag])
                .output();
        }
    }
}

/// `check python --image IMAGE`, the run contract's engine.
fn check(project: &Project, image: &str) -> Cli {
    project
        .cli()
        .args(["--profile", "local", "check", "python", "--image", image])
}

fn inspect(s: &Services, image: &str, format: &str) -> String {
    let out = Command::new(&s.engine)
        .args(["image", "inspect", "--format", format, image])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
#[ignore = "tier: engine"]
fn a_custom_image_with_the_tools_and_no_healthcheck_passes_as_python_and_the_plain_upstream_fails()
{
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let project = Project::shipped().env("SUNABA_ENGINE", &s.engine);
    let tag = format!("sunaba-custom/{}:python", support::unique("custom"));
    let root = format!("{tag}-root");
    let _made = Tags {
        engine: &s.engine,
        tags: vec![tag.clone(), root.clone()],
    };
    build(&s, &project, &custom_dockerfile(&s.base_ref), &tag);
    assert_eq!(inspect(&s, &tag, "{{json .Config.Healthcheck}}"), "null");
    assert_eq!(inspect(&s, &tag, "{{json .Config.Labels}}"), "null");

    // Passes (exit 0): every tool by the rendered healthcheck, every smoke case.
    let run = check(&project, &tag).args(["--json"]).stdout_json().run();
    let report = &run.json()["reports"][0];
    assert_eq!(report["passed"], true, "{report:#}");
    assert_eq!(report["custom"], true);
    assert_eq!(report["problems"], serde_json::json!([]), "{report:#}");
    let tools = report["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 18, "{tools:#?}");
    assert!(tools.iter().all(|t| t["status"] == "ok"), "{tools:#?}");
    let suites: std::collections::BTreeSet<&str> = report["smoke"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["suite"].as_str().unwrap())
        .collect();
    assert_eq!(suites, ["neutral", "python"].into(), "{report:#}");
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the image has no HEALTHCHECK of its own (a custom image need not)"),
        "{notes}"
    );
    assert!(notes.contains("no pass is recorded"), "{notes}");
    assert!(report["size"].as_u64().unwrap() > 0);
    assert_eq!(
        inspect(&s, &tag, "{{json .Config.Labels}}"),
        "null",
        "nothing recorded on a custom image"
    );

    // The same image running as root: the posture's need is said plainly.
    build(&s, &project, &format!("FROM {tag}\nUSER 0:0\n"), &root);
    let run = check(&project, &root)
        .args(["--json"])
        .stdout_json()
        .status(2)
        .run();
    let problems = run.json()["reports"][0]["problems"].to_string();
    assert!(
        problems.contains(
            "the posture needs a non-root default user 1000:1000 and the image lacks one: \
             its USER is \\\"0:0\\\", uid 0 gid 0 (root)"
        ),
        "{problems}"
    );

    // The plain upstream: every tool named, the user and the environment it
    // lacks; its real size, not 0 B.
    let run = check(&project, &s.base_ref)
        .status(2)
        .stdout_free("asserted line by line below")
        .run();
    let out = run.stdout();
    assert!(
        out.starts_with(&format!("FAIL python  {}  size ", s.base_ref)),
        "{out}"
    );
    assert!(!out.lines().next().unwrap().contains(" 0 B"), "{out}");
    for tool in [
        "git",
        "gh",
        "rg",
        "ast-grep",
        "sg",
        "sd",
        "fd",
        "ctags",
        "jq",
        "node",
        "npm",
        "ca-certificates",
        "python3",
        "pip",
        "uv",
        "ruff",
        "pyright",
        "pytest",
    ] {
        // Missing, or not the tool (util-linux's `sg`, an empty CA file).
        let row = regex::Regex::new(&format!(
            r"(?m)^\s*(missing|mismatch|failed)\s+{}\s",
            regex::escape(tool)
        ))
        .unwrap();
        assert!(row.is_match(out), "{tool}: {out}");
    }
    assert!(
        out.contains("the posture needs a non-root default user 1000:1000"),
        "{out}"
    );
    assert!(
        out.contains("its USER is not set, so it runs as root"),
        "{out}"
    );
    assert!(
        out.contains("the posture's environment is not in the image's ENV: XDG_CACHE_HOME="),
        "{out}"
    );
}
