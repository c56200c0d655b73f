//! `pins verify --rebuild` (issue 18, item 4): a fresh release of a
//! fixture family, built again from the same checkout with no cache under
//! the scratch repository, gives the pinned digest for the variant whose
//! fragment is deterministic, and fails for the one whose fragment writes
//! the time into a file, naming the alias, both digests, the layer, its
//! step and the path, and what differs in it.

use crate::release::Rig;
use crate::support::link::{Link, seen};
use crate::support::{self, EMPTY_PINS, Project, Services};
use serde_json::json;

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
    // The project names a link to the registry (not the rig's proxy, which
    // buffers whole bodies and answers no `Range`): what the release sends
    // and `pins verify --rebuild` reads crosses it.
    let mut link = None;
    let rig = Rig::with_project("rebuild", "fixture", |repo| {
        let (_proxy, path) = repo.split_once('/').unwrap();
        let l = Link::start(&s.registry, &["--rtt", "10ms"]);
        let repo = format!("{}/{path}", l.authority());
        link = Some(l);
        project(&repo, &local, &s)
    })
    .unwrap();
    let link = link.unwrap();
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
    // Kid's parent is rebuilt under the scratch repository: its local name
    // is not an input (its image, the same as the pinned root's, is).
    assert!(!out.contains("label dev.sunaba.inputs"), "{out}");
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

    // The read side through the link (issue 29, acceptance 3): the pinned
    // layer that explains the difference, its download reset half-way, is
    // read on from where it broke (`Range`: a 206 with the rest) and the
    // verdict is the same.
    let n: usize = regex::Regex::new(r"layer (\d+) of \d+")
        .unwrap()
        .captures(layer)
        .unwrap_or_else(|| panic!("no layer number in {layer:?}"))[1]
        .parse()
        .unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(
        &(rig
            .pusher
            .wait(rig.pusher.get(&rig.repo, &format!("manifests/{kid}"))))
        .unwrap(),
    )
    .unwrap();
    if let Some(child) = manifest["manifests"][0]["digest"].as_str() {
        let child = rig
            .pusher
            .wait(rig.pusher.get(&rig.repo, &format!("manifests/{child}")));
        manifest = serde_json::from_slice(&child.unwrap()).unwrap();
    }
    let pinned_layer = &manifest["layers"][n - 1];
    let blob = format!(
        "/v2/{}/blobs/{}",
        rig.repo,
        pinned_layer["digest"].as_str().unwrap()
    );
    let len = pinned_layer["size"].as_u64().unwrap();
    let cut = len / 2;
    link.clear_stats();
    link.add_rules(json!({
        "method": "GET", "path": format!("^{}$", regex::escape(&blob)), "times": 1,
        "fault": {"reset": {"at": "response_body", "after": cut}}
    }));
    let again = rig
        .cli()
        .args(["pins", "verify", "--rebuild", "kid"])
        .status(2)
        .stdout_free("the verdict, compared below")
        .stderr_free("the rebuild's progress")
        .run();
    // Kid's verdict, each line up to its first digest (the rebuilt image
    // and the stamp's content differ from one rebuild to the next).
    let verdict = |out: &str| -> Vec<String> {
        (out.lines())
            .skip_while(|l| !l.starts_with("problem: kid:"))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || l.starts_with("  "))
            .map(|(_, l)| l.split("sha256:").next().unwrap().to_string())
            .collect()
    };
    assert!(verdict(out).len() >= 4, "{out}");
    assert_eq!(verdict(again.stdout()), verdict(out));
    assert_eq!(
        seen(&link.exchanges_of("GET", &blob), "response"),
        [
            (json!(200), json!("reset"), cut),
            (json!(206), json!("complete"), len - cut),
        ],
        "the pinned layer's GETs: the reset one, then the rest from where it broke"
    );

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
