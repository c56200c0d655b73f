//! `pins verify --rebuild` (issue 18, item 4): a fresh release of a
//! fixture family, built again from the same checkout with no cache under
//! the scratch repository, gives the pinned digest for the variant whose
//! fragment is deterministic, and fails for the one whose fragment writes
//! the time into a file, naming the alias, both digests, the layer, its
//! step and the path, and what differs in it.

use crate::release::Rig;
use crate::support::{self, EMPTY_PINS, Project, Services};

/// The engine-release fixture family (`root`, and its child `kid`), built
/// under `local`, releasing to `repository`; `kid`'s fragment writes the
/// build's time into /opt/stamp.
fn project(repository: &str, local: &str, s: &Services) -> Project {
    let family = crate::engine_release::fixture_family(repository, s).repository(local);
    let p = Project::fixture(&family)
        .salt(local)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .file("image_pins.json", EMPTY_PINS);
    p.write_fragment("root", &support::checker_tool("alpha", "alpha 1.2.3"));
    p.write_fragment(
        "kid",
        &format!(
            "mkdir -p /opt && date +%s%N > /opt/stamp\n{}",
            support::checker_tool("beta", "beta 2.0.0")
        ),
    );
    p.render()
}

#[test]
#[ignore = "tier: engine"]
fn a_rebuild_gives_the_pinned_digest_and_a_timestamp_written_by_a_fragment_is_named() {
    let Some(s) = support::services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let local = support::unique("sunaba-rebuild/family");
    let rig = Rig::with_project("rebuild", "fixture", |repo| project(repo, &local, &s)).unwrap();
    rig.cli()
        .args(["release", "--write", "--notes", "notes.md"])
        .stderr_free("the build's progress and the release's")
        .run();
    let pins = rig.pins_text();

    let run = rig
        .cli()
        .args(["pins", "verify", "--rebuild"])
        .status(2)
        .stdout_free("one verdict per alias, checked below")
        .stderr_free("the rebuild's progress")
        .run();
    let out = run.stdout();
    eprintln!("{out}");
    let pinned: serde_json::Value = serde_json::from_str(&pins).unwrap();
    let root = pinned["images"]["root"]["digest"].as_str().unwrap();
    assert!(
        out.contains(&format!(
            "ok: root linux/amd64: the rebuild is the pinned image ({root})"
        )),
        "{out}"
    );
    let kid = pinned["images"]["kid"]["digest"].as_str().unwrap();
    assert!(
        out.contains(&format!(
            "problem: kid: linux/amd64: the rebuild differs\n  pinned:  {kid}\n  rebuilt: sha256:"
        )),
        "{out}"
    );
    // The first differing layer is the kid fragment's, and in it only the
    // stamp differs, in content (its time is clamped like every other).
    let layer = out
        .lines()
        .find(|l| l.trim_start().starts_with("layer "))
        .unwrap_or_else(|| panic!("no layer line in {out}"));
    assert!(layer.ends_with("(RUN install-kid.sh):"), "{layer}");
    let entries: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("layer "))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(entries.len(), 1, "{out}");
    assert!(
        entries[0].starts_with("opt/stamp: content sha256:") && !entries[0].contains("mtime"),
        "{out}"
    );
    assert_eq!(rig.pins_text(), pins, "verifying writes nothing");

    // Only the deterministic alias asked: it passes.
    rig.cli()
        .args(["pins", "verify", "--rebuild", "root"])
        .stdout(format!(
            "ok: root linux/amd64: the rebuild is the pinned image ({root})\nok: 2 alias(es) pinned and verified in image_pins.json\n"
        ))
        .stderr_free("the rebuild's progress")
        .run();
    support::remove_images(&s.engine, &local);
    support::remove_images(&s.engine, &format!("{local}-rebuild"));
}
