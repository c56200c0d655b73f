use super::*;
use crate::image::fixtures::{dir, file, layer, save_stream_of_steps};
use serde_json::json;
use std::path::Path;

fn real_manifest() -> Manifest {
    Manifest::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("images.toml")).unwrap()
}

#[test]
fn the_real_familys_full_is_composed_of_python_go_and_js_on_base() {
    let recipe = recipe(&real_manifest(), "full").unwrap();
    assert_eq!(recipe.parent, "base");
    let members: Vec<(&str, &str)> = recipe
        .members
        .iter()
        .map(|m| (m.fragment.as_str(), m.variant.as_str()))
        .collect();
    assert_eq!(members, [("python", "python"), ("go", "go"), ("js", "js")]);
}

#[test]
fn a_variant_that_is_no_union_of_members_is_refused_saying_why() {
    let manifest = real_manifest();
    let why = |m: &Manifest, v: &str| recipe(m, v).unwrap_err().to_string();
    assert_eq!(
        why(&manifest, "base"),
        "variant `base` cannot be composed: it has no parent (it is built FROM the upstream image)"
    );
    assert_eq!(
        why(&manifest, "python"),
        "variant `python` cannot be composed: it installs 1 fragment(s); a composed variant is a \
         union of two or more"
    );
    assert!(why(&manifest, "nope").contains("images.toml has no such variant (it has: base,"));
    let mut no_go = manifest.clone();
    no_go.variants.remove("go");
    assert_eq!(
        why(&no_go, "full"),
        "variant `full` cannot be composed: fragment `go` is built by no variant of its own on \
         `base` (add one: [variants.go] with parent = \"base\" and fragments = [\"go\"])"
    );
    let mut twice = manifest.clone();
    let mut python2 = twice.variants["python"].clone();
    python2.name = "python2".into();
    twice.variants.insert("python2".into(), python2);
    assert_eq!(
        why(&twice, "full"),
        "variant `full` cannot be composed: fragment `python` is built alone on `base` by both \
         `python` and `python2`: keep one of them"
    );
    assert_eq!(
        crate::exit::HasStatus::exit_status(&recipe(&manifest, "base").unwrap_err()),
        crate::exit::Status::Usage
    );
}

const PY: &str = "RUN |1 X=1 /bin/sh -c sh /run/sunaba/install-python-tools.sh # buildkit";
const GO: &str = "RUN /bin/sh -c sh /run/sunaba/install-go.sh # buildkit";
const POSTURE: &str = "RUN /bin/sh -c set -eu; groupadd";
const STATUS: &str = "var/lib/dpkg/status";

fn scripts() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("install-python-tools.sh".into(), "python".into()),
        ("install-go.sh".into(), "go".into()),
    ])
}

fn stanza(p: &str) -> String {
    format!("Package: {p}\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\n")
}

fn recipe_py_go() -> Recipe {
    Recipe {
        variant: "full".into(),
        parent: "base".into(),
        members: vec![
            Member {
                fragment: "python".into(),
                variant: "python".into(),
            },
            Member {
                fragment: "go".into(),
                variant: "go".into(),
            },
        ],
    }
}

/// The parent's save and its members', each member on the parent's
/// layers with its fragment layer, a posture layer and the healthcheck.
fn family(go_on: &[Vec<u8>], go_gitconfig: &str) -> BTreeMap<&'static str, Vec<u8>> {
    let base = vec![layer(&[dir("usr"), file(STATUS, &stanza("base-files"))])];
    let python_layer = layer(&[
        dir("usr"),
        file("usr/bin/python3", "elf"),
        file("etc/gitconfig", "[safe]\n"),
        file(
            STATUS,
            &[stanza("base-files"), stanza("libz"), stanza("python3")].join("\n"),
        ),
    ]);
    let go_layer = layer(&[
        dir("usr"),
        file("usr/bin/go", "elf"),
        file("etc/gitconfig", go_gitconfig),
        file(
            STATUS,
            &[stanza("base-files"), stanza("golang"), stanza("libz")].join("\n"),
        ),
    ]);
    let posture = layer(&[dir("workspace")]);
    let member = |on: &[Vec<u8>], own: Vec<u8>, step: &str| {
        let mut layers = on.to_vec();
        layers.extend([own, posture.clone()]);
        save_stream_of_steps(
            &layers,
            "2026-01-01T00:00:00Z",
            &["FROM x", step, POSTURE],
            json!({}),
        )
    };
    BTreeMap::from([
        (
            "base",
            save_stream_of_steps(&base, "2026-01-01T00:00:00Z", &["FROM x"], json!({})),
        ),
        ("python", member(&base, python_layer, PY)),
        ("go", member(go_on, go_layer, GO)),
    ])
}

fn planned(saves: &BTreeMap<&'static str, Vec<u8>>) -> Result<Plan, ComposeError> {
    let mut read = Vec::new();
    for variant in ["base", "python", "go"] {
        let image = format!("local/sandbox:{variant}");
        let saved = read_save(&image, saves[variant].as_slice(), None)?;
        read.push((image, saved));
    }
    plan(&recipe_py_go(), &scripts(), read)
}

#[test]
fn a_plan_takes_each_members_fragment_layer_and_merges_dpkg_status_against_the_parent() {
    let base_layer = vec![layer(&[dir("usr"), file(STATUS, &stanza("base-files"))])];
    let plan = planned(&family(&base_layer, "[safe]\n")).unwrap();
    assert_eq!(plan.parent_layers.len(), 1);
    let layers: Vec<(&str, usize)> = plan
        .fragment_layers
        .iter()
        .map(|l| (l.member.fragment.as_str(), l.paths))
        .collect();
    assert_eq!(layers, [("python", 4), ("go", 4)]);
    assert_eq!(plan.overlap.identical, ["etc/gitconfig", "usr"]);
    assert_eq!(plan.overlap.merged, [STATUS]);
    assert_eq!(plan.state.len(), 1);
    assert_eq!(plan.state[0].path, STATUS);
    assert_eq!(plan.state[0].stanzas, 4);
    assert_eq!(
        String::from_utf8(plan.state[0].bytes.clone()).unwrap(),
        [
            stanza("base-files"),
            stanza("golang"),
            stanza("libz"),
            stanza("python3")
        ]
        .join("\n")
    );
}

#[test]
fn two_fragments_writing_one_file_differently_are_refused_naming_both_and_the_path() {
    let base_layer = vec![layer(&[dir("usr"), file(STATUS, &stanza("base-files"))])];
    let err = planned(&family(&base_layer, "[user]\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot compose `full`: etc/gitconfig: fragments `python` and `go` both write it, \
         differently (content); a composed image would depend on their order: have one \
         fragment write it (or both the same), or write it in the parent"
    );
}

#[test]
fn a_member_built_on_another_parent_is_refused_with_what_to_rebuild() {
    let other_base = vec![layer(&[dir("usr"), file(STATUS, &stanza("other"))])];
    let err = planned(&family(&other_base, "[safe]\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "go (local/sandbox:go) was not built on base (local/sandbox:base) as it is now: its first \
         layers differ; build them again (`sunaba-images build go`)"
    );
}

#[test]
fn one_save_of_every_image_reads_and_keeps_a_shared_layer_once() {
    let base_layer = vec![layer(&[dir("usr"), file(STATUS, &stanza("base-files"))])];
    let saves = family(&base_layer, "[safe]\n");
    let together = crate::image::fixtures::merged_save_stream(&[
        &saves["base"],
        &saves["python"],
        &saves["go"],
    ]);
    let spill = tempfile::tempdir().unwrap();
    let read = read_saves("base, python, go", together.as_slice(), Some(spill.path())).unwrap();
    assert_eq!(read.len(), 3, "each image by its ID");
    // Each layer file of the stream once: base's is one, shared.
    let kept = std::fs::read_dir(spill.path()).unwrap().count();
    let files = tar::Archive::new(together.as_slice())
        .entries()
        .unwrap()
        .filter(|e| {
            let e = e.as_ref().unwrap();
            e.path().unwrap().ends_with("layer.tar")
        })
        .count();
    let alone: usize = ["base", "python", "go"]
        .iter()
        .map(|v| {
            read_save(v, saves[v].as_slice(), None)
                .unwrap()
                .layers
                .len()
        })
        .sum();
    assert_eq!(kept, files);
    assert!(files < alone, "{files} layer files, {alone} read alone");
    for saved in read.values() {
        for (diff_id, _) in &saved.layers {
            let blob = std::fs::read(&saved.blobs[diff_id]).unwrap();
            assert_eq!(&crate::image::fixtures::digest(&blob), diff_id);
        }
    }
    // The plan from the images read together is the plan from each alone.
    let by_config = |save: &[u8]| {
        let one = read_saves("one", save, None).unwrap();
        let (id, _) = one.into_iter().next().unwrap();
        (id.clone(), read[&id].clone())
    };
    let images: Vec<(String, Saved)> = ["base", "python", "go"]
        .iter()
        .map(|v| by_config(&saves[v]))
        .collect();
    let together_plan = plan(&recipe_py_go(), &scripts(), images).unwrap();
    let alone = planned(&saves).unwrap();
    assert_eq!(together_plan.state, alone.state);
    assert_eq!(together_plan.overlap, alone.overlap);
    assert_eq!(together_plan.parent_layers, alone.parent_layers);
    assert_eq!(
        together_plan.blobs.len(),
        3,
        "base's layer and each fragment layer"
    );
}

/// Keeps `layer` in the process's layer store, as a normalisation that
/// rewrote it would; returns its diff_id.
fn keep_written(layer: &[u8]) -> String {
    let diff_id = crate::image::fixtures::digest(layer);
    let mut copy = crate::image::layer_store::LayerCopy::start();
    let mut both = copy.writer(Box::leak(Box::new(std::io::sink())));
    std::io::Write::write_all(&mut both, layer).unwrap();
    let whole = both.finish();
    copy.keep(&diff_id, whole);
    diff_id
}

/// A config with these layers and steps, written into a load archive (as
/// the normaliser and the relabeller write one); returns the image ID.
fn written_config(diff_ids: &[&String], steps: &[&str], salt: &str) -> String {
    let config = json!({
        "architecture": "amd64", "os": "linux", "config": {"Labels": {"salt": salt}},
        "history": steps.iter().map(|s| json!({"created_by": s})).collect::<Vec<_>>(),
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    crate::image::load_archive::write_config_and_manifest(&mut std::io::sink(), &config, &[], &[])
        .unwrap()
}

#[test]
fn a_run_composes_from_the_layers_it_wrote_and_leaves_what_it_lacks_to_the_save() {
    const EXT: &str = "var/lib/apt/extended_states";
    let salt = "read-written";
    // The upstream's layer is never rewritten, so never kept; the parent's
    // own layer above it holds both state files.
    let upstream = layer(&[dir("etc"), file(STATUS, &stanza("base-files"))]);
    let upstream_id = crate::image::fixtures::digest(&upstream);
    let core = keep_written(&layer(&[
        file(STATUS, &[stanza("base-files"), stanza(salt)].join("\n")),
        file(EXT, ""),
    ]));
    let member_layer = |p: &'static str| {
        layer(&[
            dir("usr"),
            file(
                if p == "python3" {
                    "usr/bin/python3"
                } else {
                    "usr/bin/go"
                },
                p,
            ),
            file(
                STATUS,
                &[stanza("base-files"), stanza(salt), stanza(p)].join("\n"),
            ),
        ])
    };
    let (py, go) = (
        keep_written(&member_layer("python3")),
        keep_written(&member_layer("golang")),
    );
    let base = written_config(&[&upstream_id, &core], &["FROM x", "RUN core"], salt);
    let python = written_config(
        &[&upstream_id, &core, &py],
        &["FROM x", "RUN core", PY],
        salt,
    );
    let go_id = written_config(
        &[&upstream_id, &core, &go],
        &["FROM x", "RUN core", GO],
        salt,
    );
    let images: Vec<(String, String)> = [("base", &base), ("python", &python), ("go", &go_id)]
        .iter()
        .map(|(v, id)| (v.to_string(), id.to_string()))
        .collect();
    let ids: Vec<String> = images.iter().map(|(_, id)| id.clone()).collect();

    let read = read_written(&images, &ids).expect("everything is this run's");
    assert_eq!(read[0].0, format!("base ({})", &base[7..19]));
    assert!(
        read[0].1.layers[0].1.paths.is_empty(),
        "the upstream's layer is not read"
    );
    assert!(!read[0].1.blobs.contains_key(&upstream_id));
    let plan = plan(&recipe_py_go(), &scripts(), read).unwrap();
    assert_eq!(plan.parent_layers, [upstream_id.clone(), core.clone()]);
    let fragments: Vec<&String> = plan.fragment_layers.iter().map(|l| &l.diff_id).collect();
    assert_eq!(fragments, [&py, &go]);
    assert!(plan.blobs.contains_key(&py) && plan.blobs.contains_key(&go));
    let status = plan.state.iter().find(|s| s.path == STATUS).unwrap();
    assert_eq!(
        status.stanzas, 4,
        "base-files, the salt, python3 and golang"
    );

    // An image of an earlier run (its config not written here) and a
    // parent whose kept layers lack a state file both go to the save.
    let mut earlier = ids.clone();
    earlier[2] = format!("sha256:{}", "e".repeat(64));
    assert!(read_written(&images, &earlier).is_none());
    let no_ext = keep_written(&layer(&[file(
        STATUS,
        &[stanza("base-files"), stanza(salt), stanza("no-ext")].join("\n"),
    )]));
    let bare = written_config(&[&upstream_id, &no_ext], &["FROM x", "RUN core"], salt);
    let mut bare_images = images.clone();
    bare_images[0].1 = bare.clone();
    assert!(read_written(&bare_images, &[bare, ids[1].clone(), ids[2].clone()]).is_none());
}
