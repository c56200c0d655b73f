//! `update-base` against the dev registry: the pin moves only when the image
//! for one of the family's platforms changed, the edit keeps images.toml's
//! comments and layout, and the generated files are re-rendered.

use crate::support::oci::{Image, Pushed, Pusher};
use crate::support::{Cli, Project, dev_registry, unique};
use serde_json::{Value, json};
use std::path::Path;

/// A test repository in the dev registry and a project whose upstream
/// follows `<repo>:stable`.
struct Setup {
    pusher: Pusher,
    repo: String,
    authority: String,
    project: crate::support::Project,
}

impl Setup {
    fn new(platforms: &str) -> Option<Setup> {
        let authority = dev_registry()?;
        let repo = unique("sunaba-test/update-base");
        let project = Project::shipped();
        project.edit("images.toml", |text| {
            regex::Regex::new(r#"(?m)^platforms = \[.*\]$"#)
                .unwrap()
                .replace(&text, format!("platforms = {platforms}").as_str())
                .into_owned()
        });
        Some(Setup {
            pusher: Pusher::plain(&authority),
            repo,
            authority,
            project,
        })
    }

    fn tag(&self) -> String {
        format!("{}/{}:stable", self.authority, self.repo)
    }

    fn image(&self, arch: &str, layer: &str) -> Pushed {
        let image = Image::linux(arch).layer(layer.as_bytes().to_vec());
        self.pusher
            .wait(self.pusher.image(&self.repo, None, &image))
    }

    /// Pushes an index of `children` (plus `extra` descriptors) as the tag.
    fn index(&self, children: &[(&str, &Pushed)], extra: Vec<Value>) -> Pushed {
        let mut manifests: Vec<Value> = children
            .iter()
            .map(|(arch, p)| p.descriptor(json!({"os": "linux", "architecture": arch})))
            .collect();
        manifests.extend(extra);
        self.pusher
            .wait(self.pusher.index(&self.repo, "stable", manifests))
    }

    /// Pins images.toml's upstream to the tag at `digest`; re-renders.
    fn pin(&self, digest: &str) {
        let path = self.manifest();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = regex::Regex::new(r#"(?m)^upstream = ".*"$"#)
            .unwrap()
            .replace(
                &text,
                format!("upstream = \"{}@{digest}\"", self.tag()).as_str(),
            )
            .into_owned();
        std::fs::write(&path, text).unwrap();
        self.cli(["render"]).stdout_may(".*").run();
    }

    fn manifest(&self) -> std::path::PathBuf {
        self.project.path().join("images.toml")
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.manifest()).unwrap()
    }

    fn cli<I, S>(&self, args: I) -> Cli
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.project.cli().args(args)
    }
}

fn short(digest: &str) -> &str {
    &digest[..19]
}

/// The lines of `after` that differ from `before` (same line count).
fn changed_lines(before: &str, after: &str) -> Vec<(String, String)> {
    let (a, b): (Vec<_>, Vec<_>) = (before.lines().collect(), after.lines().collect());
    assert_eq!(a.len(), b.len(), "line count changed");
    a.iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| (x.to_string(), y.to_string()))
        .collect()
}

fn file(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap()
}

#[test]
#[ignore = "tier: registry"]
fn an_unchanged_index_and_a_moved_index_with_the_same_children_leave_the_pin() {
    let Some(s) = Setup::new(r#"["linux/amd64", "linux/arm64"]"#) else {
        return;
    };
    let (amd, arm) = (s.image("amd64", "a1"), s.image("arm64", "r1"));
    let index = s.index(&[("amd64", &amd), ("arm64", &arm)], vec![]);
    s.pin(&index.digest);
    let before = s.text();

    s.cli(["update-base"])
        .stdout_line(format!("upstream  {} (images.toml `upstream`)", s.tag()))
        .stdout_line(format!("pinned    {} (index)", index.digest))
        .stdout_line(format!("current   {} (index)", index.digest))
        .stdout_line(format!("  linux/amd64  {}  unchanged", short(&amd.digest)))
        .stdout_line(format!("  linux/arm64  {}  unchanged", short(&arm.digest)))
        .stderr("update-base: up to date (the tag still points at the pinned image for linux/amd64, linux/arm64)\n")
        .run();

    // The tag moves to an index that only gained an attestation and another
    // architecture: same images for our platforms, so no change.
    let attestation = s.image("amd64", "attestation");
    let s390x = s.image("s390x", "s1");
    let moved = s.index(
        &[("amd64", &amd), ("arm64", &arm), ("s390x", &s390x)],
        vec![attestation.descriptor(json!({"os": "unknown", "architecture": "unknown"}))],
    );
    assert_ne!(moved.digest, index.digest);
    s.cli(["update-base", "--write"])
        .stdout_line(format!("upstream  {} (images.toml `upstream`)", s.tag()))
        .stdout_line(format!("pinned    {} (index)", index.digest))
        .stdout_line(format!("current   {} (index)", moved.digest))
        .stdout_line(format!("  linux/amd64  {}  unchanged", short(&amd.digest)))
        .stdout_line(format!("  linux/arm64  {}  unchanged", short(&arm.digest)))
        .stderr(format!(
            "update-base: up to date (the tag moved to {}, but not the images for linux/amd64, linux/arm64)\n",
            short(&moved.digest)
        ))
        .run();
    assert_eq!(s.text(), before, "nothing is written");
}

#[test]
#[ignore = "tier: registry"]
fn a_changed_child_moves_only_the_upstream_line_and_re_renders() {
    let Some(s) = Setup::new(r#"["linux/amd64", "linux/arm64"]"#) else {
        return;
    };
    let (amd, arm) = (s.image("amd64", "a1"), s.image("arm64", "r1"));
    let index = s.index(&[("amd64", &amd), ("arm64", &arm)], vec![]);
    s.pin(&index.digest);
    let before = s.text();
    let dockerfile_before = file(s.project.path(), "docker/Dockerfile.base");

    // A security rebuild of arm64 only.
    let arm2 = s.image("arm64", "r2");
    let new = s.index(&[("amd64", &amd), ("arm64", &arm2)], vec![]);
    let table = |cli: Cli| {
        cli.stdout_line(format!("upstream  {} (images.toml `upstream`)", s.tag()))
            .stdout_line(format!("pinned    {} (index)", index.digest))
            .stdout_line(format!("current   {} (index)", new.digest))
            .stdout_like(format!("  linux/amd64  {} +unchanged", short(&amd.digest)))
            .stdout_line(format!(
                "  linux/arm64  {} -> {}  changed",
                short(&arm.digest),
                short(&arm2.digest)
            ))
    };
    table(s.cli(["update-base"]))
        .status(2)
        .stderr("update-base: the images for linux/arm64 changed; run `sunaba-images update-base --write`\n")
        .run();
    assert_eq!(s.text(), before);
    let line = before
        .lines()
        .position(|l| l.starts_with("upstream = "))
        .unwrap()
        + 1;
    let summary = s.project.path().join("summary.md");
    let run = table(s.cli(["update-base", "--format", "github"]))
        .env("GITHUB_STEP_SUMMARY", &summary)
        .status(2)
        .stdout_line(format!(
            "::error file=images.toml,line={line},title=update-base%3A upstream::the images for \
             linux/arm64 changed: {} is now {}, the pin is {}; run `sunaba-images update-base --write`",
            s.tag(),
            new.digest,
            index.digest
        ))
        .stderr("update-base: the images for linux/arm64 changed; run `sunaba-images update-base --write`\n")
        .run();
    assert!(run.lines()[0].starts_with("::error "), "{}", run.stdout());
    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(
        summary.starts_with("### update-base\n\n1 error(s), 0 warning(s):\n\n- **error** update-base: upstream: the images for linux/arm64 changed"),
        "{summary}"
    );
    assert_eq!(s.text(), before);

    table(s.cli(["update-base", "--write"]))
        .stderr("update-base: the images for linux/arm64 changed; wrote the new pin to images.toml `upstream` and re-rendered 2 file(s)\n")
        .run();
    let after = s.text();
    assert_eq!(
        changed_lines(&before, &after),
        [(
            format!("upstream = \"{}@{}\"", s.tag(), index.digest),
            format!("upstream = \"{}@{}\"", s.tag(), new.digest)
        )],
        "only the upstream line changed; every comment is kept"
    );
    let dockerfile = file(s.project.path(), "docker/Dockerfile.base");
    assert_eq!(
        changed_lines(&dockerfile_before, &dockerfile),
        [(
            format!("ARG BASE_IMAGE={}@{}", s.tag(), index.digest),
            format!("ARG BASE_IMAGE={}@{}", s.tag(), new.digest)
        )]
    );
    s.cli(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
    // Now current.
    let run = s
        .cli(["update-base", "--json"])
        .stdout_json()
        .stderr_like("update-base: up to date .*")
        .run();
    assert_eq!(run.json()["changed"], false);
}

#[test]
#[ignore = "tier: registry"]
fn a_pinned_digest_gone_from_the_registry_is_an_error_naming_it() {
    let Some(s) = Setup::new(r#"["linux/amd64", "linux/arm64"]"#) else {
        return;
    };
    let (amd, arm) = (s.image("amd64", "a1"), s.image("arm64", "r1"));
    let index = s.index(&[("amd64", &amd), ("arm64", &arm)], vec![]);
    s.pin(&index.digest);
    let new = s.index(
        &[("amd64", &s.image("amd64", "a2")), ("arm64", &arm)],
        vec![],
    );
    s.pusher
        .wait(s.pusher.delete_manifest(&s.repo, &index.digest));
    let before = s.text();
    s.cli(["update-base", "--write"])
        .status(1)
        .stderr(format!(
            "error: updating the upstream (images.toml `upstream`): the pinned upstream {}@{} is \
             gone from the registry (the tag now points at {}); builds on a machine without a \
             copy cannot pull it. `update-base --write --force` pins the tag's current image\n",
            s.tag(),
            index.digest,
            new.digest
        ))
        .run();
    assert_eq!(s.text(), before);
    s.cli(["update-base", "--write", "--force"])
        .stdout_may(".*")
        .stderr_like(r"update-base: the images for linux/amd64, linux/arm64 changed; wrote .*")
        .run();
    assert!(s.text().contains(&format!("{}@{}", s.tag(), new.digest)));
}

#[test]
#[ignore = "tier: registry"]
fn a_single_manifest_upstream_is_its_own_child() {
    let Some(s) = Setup::new(r#"["linux/amd64"]"#) else {
        return;
    };
    // A base pushed as one image (as `docker import` + push makes it).
    let one = s.pusher.wait(s.pusher.image(
        &s.repo,
        Some("stable"),
        &Image::linux("amd64").layer(b"m1".to_vec()),
    ));
    s.pin(&one.digest);
    s.cli(["update-base"])
        .stdout_line(format!("pinned    {} (manifest)", one.digest))
        .stdout_line(format!("current   {} (manifest)", one.digest))
        .stdout_like(r"upstream  .*")
        .stdout_line(format!("  linux/amd64  {}  unchanged", short(&one.digest)))
        .stderr_like("update-base: up to date .*")
        .run();
    let two = s.pusher.wait(s.pusher.image(
        &s.repo,
        Some("stable"),
        &Image::linux("amd64").layer(b"m2".to_vec()),
    ));
    let run = s
        .cli(["update-base", "--write", "--json"])
        .stdout_json()
        .stderr_like("update-base: the images for linux/amd64 changed; wrote .*")
        .run();
    let v = run.json();
    assert_eq!(v["changed"], true);
    assert_eq!(v["written"], true);
    assert_eq!(v["current"]["index"], false);
    assert_eq!(v["current"]["digest"], two.digest.as_str());
    assert_eq!(v["platforms"][0]["old"], one.digest.as_str());
    assert_eq!(v["platforms"][0]["new"], two.digest.as_str());
    assert_eq!(v["new_reference"], format!("{}@{}", s.tag(), two.digest));
    assert!(
        s.text()
            .contains(&format!("upstream = \"{}@{}\"", s.tag(), two.digest))
    );
}

#[test]
#[ignore = "tier: registry"]
fn a_tag_only_upstream_is_refused_until_update_base_pins_it() {
    let Some(s) = Setup::new(r#"["linux/amd64"]"#) else {
        return;
    };
    let one = s.pusher.wait(s.pusher.image(
        &s.repo,
        Some("stable"),
        &Image::linux("amd64").layer(b"t1".to_vec()),
    ));
    let path = s.manifest();
    let text = regex::Regex::new(r#"(?m)^upstream = ".*"$"#)
        .unwrap()
        .replace(&s.text(), format!("upstream = \"{}\"", s.tag()).as_str())
        .into_owned();
    std::fs::write(&path, text).unwrap();
    s.cli(["render", "--check"])
        .status(1)
        .stderr_like(r"error: loading the image family manifest: .*images\.toml: 1 problem\(s\):")
        .stderr_like(format!(
            r"  - line \d+: upstream: `{}` is a tag only, not pinned by digest \(hint: pin it as name:tag@sha256:<index digest>: `sunaba-images update-base --write` resolves the tag and writes the line\)",
            regex::escape(&s.tag())
        ))
        .run();
    s.cli(["update-base", "--write"])
        .stdout_may(".*")
        .stderr_like("update-base: the images for linux/amd64 changed; wrote the new pin .*")
        .run();
    assert!(
        s.text()
            .contains(&format!("upstream = \"{}@{}\"", s.tag(), one.digest))
    );
    s.cli(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
}

/// `outdated` holds the upstream to the tag too: once the tag's image for
/// the family's platform moved, it is behind (exit 2), and under `--format
/// github` annotated at images.toml's `upstream`. A fixture family pins no
/// npm, PyPI or Debian package, so the registry is all it asks.
#[test]
#[ignore = "tier: registry"]
fn outdated_annotates_an_upstream_whose_image_moved_at_its_line() {
    use crate::support::{Family, Variant};
    let Some(authority) = dev_registry() else {
        return;
    };
    let repo = unique("sunaba-test/outdated");
    let pusher = Pusher::plain(&authority);
    let push = |layer: &[u8]| {
        let image = Image::linux("amd64").layer(layer.to_vec());
        pusher.wait(pusher.image(&repo, Some("stable"), &image))
    };
    let one = push(b"o1");
    let tag = format!("{authority}/{repo}:stable");
    let family = Family::new("kid")
        .upstream(&format!("{tag}@{}", one.digest))
        .platforms(&["linux/amd64"])
        .tool("alpha")
        .tool("beta")
        .fragment("root", &["alpha"])
        .fragment("kid", &["beta"])
        .variant(Variant::new("root").fragments(&["root"]))
        .variant(
            Variant::new("kid")
                .parent("root")
                .fragments(&["kid"])
                .serves_fake(),
        );
    let project = crate::engine_release::fixture(&family);
    let row = |cli: Cli| {
        cli.stdout_like("fragment +package +from +pinned +wanted +latest +bump +status +note")
            .stderr_like(r"outdated: 1 pinned, [01] behind, 0 could not be checked")
    };
    let summary = project.path().join("summary.md");
    row(project.cli().args(["outdated"]))
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdout_like(r"- +upstream +oci +sha256:[0-9a-f]{12} +sha256:[0-9a-f]{12} .* current +")
        .run();
    assert_eq!(
        std::fs::read_to_string(&summary).unwrap(),
        "### outdated\n\nEvery pinned version is the newest on its track.\n\n"
    );

    let two = push(b"o2");
    let line = project
        .read("images.toml")
        .lines()
        .position(|l| l.starts_with("upstream = "))
        .unwrap()
        + 1;
    row(project.cli().args(["outdated", "--format", "github"]))
        .status(2)
        .stdout_line(format!(
            "::error file=images.toml,line={line},title=outdated%3A upstream::upstream is behind: \
             pinned {tag}@{}, the newest on its track is {} (digest bump; latest {}) (the tag's \
             images changed: `sunaba-images update-base --write`)",
            one.digest, two.digest, two.digest
        ))
        .stdout_like(r"- +upstream +oci .* BEHIND .*")
        .run();
}
