//! Reproducible digests on the real engine (issue 18): two `--no-cache`
//! builds of one fixture family give the same image IDs, and what the
//! normaliser rewrites survives entry by entry: modes, setuid bits,
//! symlinks, hardlinks, device nodes, fifos, whiteouts and opaque
//! directories; the image runs; the pushed manifests are the same too, and
//! skopeo, diffoscope, Python's tarfile and umoci agree. A fixture family (tiny fragments) keeps
//! this on the per-commit path; the shipped family is `posture.rs`'s.

use crate::support::{self, Cli, Family, Project, Services, Variant, services};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// The commit time both builds use.
const SDE: u64 = 1_700_000_000;

/// The fixture family: `root` (files of every kind, and alpha) and its
/// child `kid` (changes to them, and beta).
fn family(repository: &str, upstream: &str) -> Family {
    Family::new("kid")
        .repository(repository)
        .upstream(upstream)
        .tool("alpha")
        .tool("beta")
        .fragment("files", &["alpha"])
        .fragment("changes", &["beta"])
        .variant(Variant::new("root").fragments(&["files"]))
        .variant(
            Variant::new("kid")
                .parent("root")
                .fragments(&["changes"])
                .serves_fake(),
        )
}

/// One of each kind of entry, in the parent.
const FILES: &str = r#"d=/opt/fixture
mkdir -p $d/redo $d/keep
printf 'doomed\n' > $d/doomed
printf 'old\n' > $d/redo/old
printf 'setuid\n' > $d/su && chmod 4755 $d/su
printf 'setgid\n' > $d/sg && chown 12:34 $d/sg && chmod 2710 $d/sg
chmod 1777 $d/keep
printf 'shared\n' > $d/z-data && ln $d/z-data $d/a-hardlink
ln -s ../fixture/z-data $d/symlink
mknod $d/null c 1 3
mkfifo $d/fifo
"#;

/// The child: deletes a parent's file (a whiteout), replaces a directory
/// (an opaque one), writes something new.
const CHANGES: &str = r#"d=/opt/fixture
rm $d/doomed
rm -rf $d/redo && mkdir $d/redo && printf 'new\n' > $d/redo/new
printf 'kid\n' > $d/kid
"#;

struct Fixture {
    project: Project,
    repo: String,
    services: Services,
}

impl Fixture {
    fn new(s: Services) -> Fixture {
        let repo = format!("sunaba-fixture/repro-{}", std::process::id());
        // The repository name in the scripts keeps other tests' cache out.
        let project = Project::fixture(&family(&repo, &s.pinned_base()))
            .salt(&repo)
            .env("SUNABA_ENGINE", &s.engine)
            .env("SOURCE_DATE_EPOCH", SDE.to_string())
            .fragment(
                "files",
                &format!("{FILES}{}", support::fake_tool("alpha", "alpha 1.0.0")),
            )
            .fragment(
                "changes",
                &format!("{CHANGES}{}", support::checker_tool("beta", "beta 2.0.0")),
            )
            .render();
        Fixture {
            project,
            repo,
            services: s,
        }
    }

    fn cli<I, S>(&self, args: I) -> Cli
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.project.cli().args(args)
    }

    /// `build --no-cache --json --push-by-digest` (checked: the record is
    /// part of the ID), with a cold layer cache: each variant's image ID and
    /// the digest its manifest was pushed as (this tool compresses).
    fn build(&self) -> BTreeMap<String, (String, String)> {
        let work = tempfile::tempdir().unwrap();
        let legs = work.path().join("legs.json");
        let pushed = format!("{}/{}-pushed", self.services.registry, self.repo);
        let run = self
            .cli([
                "build",
                "--no-cache",
                "--json",
                "--progress",
                "plain",
                "--push-by-digest",
                &pushed,
                "--metadata-file",
            ])
            .arg(&legs)
            .env("SUNABA_CACHE_DIR", work.path().join("cache"))
            .stdout_json()
            .stderr_free("progress of a real build")
            .run();
        let legs: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&legs).unwrap()).unwrap();
        let digests: BTreeMap<String, String> = legs["legs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["variant"].as_str().unwrap().to_string(),
                    l["digest"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        // With --push-by-digest the summary is per platform (one here).
        run.json()["platforms"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["result"], "built", "{r}");
                assert_eq!(r["check"]["passed"], true, "{r}");
                let (build, normalize) =
                    (r["build_seconds"].as_f64(), r["normalize_seconds"].as_f64());
                assert!(build.is_some() && normalize.is_some(), "{r}");
                eprintln!(
                    "{}: build {:.1}s, normalise {:.1}s",
                    r["variant"],
                    build.unwrap(),
                    normalize.unwrap()
                );
                let variant = r["variant"].as_str().unwrap().to_string();
                let id = r["image_id"].as_str().unwrap().to_string();
                (variant.clone(), (id, digests[&variant].clone()))
            })
            .collect()
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new(&self.services.engine)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        support::remove_images(&self.services.engine, &self.repo);
    }
}

/// One layer entry as the saved image has it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    link: String,
    data: Vec<u8>,
}

/// The layers of a saved image, each as path -> entry, in image order.
fn saved_layers(engine: &str, image: &str, dir: &Path) -> Vec<Vec<(String, Seen)>> {
    let file = dir.join("save.tar");
    let out = Command::new(engine)
        .args(["save", "--output"])
        .arg(&file)
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut files = BTreeMap::new();
    let mut archive = tar::Archive::new(std::fs::File::open(&file).unwrap());
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).unwrap();
        files.insert(name, bytes);
    }
    let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    manifest[0]["Layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let mut entries = Vec::new();
            for e in tar::Archive::new(files[l.as_str().unwrap()].as_slice())
                .entries()
                .unwrap()
            {
                let mut e = e.unwrap();
                let h = e.header().clone();
                let path = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                let link = e
                    .link_name_bytes()
                    .map(|l| String::from_utf8_lossy(&l).into_owned())
                    .unwrap_or_default();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                entries.push((
                    path,
                    Seen {
                        kind: h.entry_type(),
                        // Go's tar writer keeps the file-type bits here.
                        mode: h.mode().unwrap() & 0o7777,
                        uid: h.uid().unwrap(),
                        gid: h.gid().unwrap(),
                        mtime: h.mtime().unwrap(),
                        link,
                        data,
                    },
                ));
            }
            entries
        })
        .collect()
}

#[test]
#[ignore = "tier: engine"]
fn two_no_cache_builds_give_the_same_image_ids_and_every_kind_of_entry_survives() {
    let Some(s) = services() else {
        return;
    };
    let _heavy = support::machine_lock();
    let fx = Fixture::new(s);
    let first = fx.build();
    // Nothing of the first build's cache for the second, and another
    // wall-clock second for every time the engine writes (a sleep for
    // distance, not to wait for anything; scripts/bench-repro builds the
    // real family minutes apart).
    fx.docker(&["builder", "prune", "--all", "--force"]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let second = fx.build();
    assert_eq!(first.keys().collect::<Vec<_>>(), ["kid", "root"]);
    assert_eq!(
        first, second,
        "a --no-cache rebuild gives other images or other pushed manifests"
    );
    independent_checks(&fx, &first["kid"].1, &second["kid"].1);
    let first: BTreeMap<String, String> = first.into_iter().map(|(v, (id, _))| (v, id)).collect();

    let engine = fx.services.engine.clone();
    let work = tempfile::tempdir().unwrap();
    let layers = saved_layers(&engine, &first["kid"], work.path());
    let root_layers = saved_layers(&engine, &first["root"], work.path());
    // The kid starts with its parent's layers, byte for byte shared.
    assert_eq!(layers[..root_layers.len()], root_layers[..]);
    let upstream = fx.docker(&[
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &fx.services.base_ref,
    ]);
    let upstream: usize = String::from_utf8_lossy(&upstream.stdout)
        .trim()
        .parse()
        .unwrap();
    // Every layer the family built: no time after SOURCE_DATE_EPOCH, no
    // BuildKit mount stub, no build log.
    for layer in &layers[upstream..] {
        for (path, e) in layer {
            assert!(e.mtime <= SDE, "{path}: mtime {}", e.mtime);
            assert!(
                !path.starts_with("run/secrets") && !path.starts_with("run/sunaba"),
                "{path}"
            );
            assert!(!path.starts_with("var/log/") || e.kind.is_dir(), "{path}");
        }
    }
    let find = |layer: &[(String, Seen)], path: &str| -> Option<Seen> {
        layer
            .iter()
            .find(|(p, _)| p.trim_end_matches('/') == path)
            .map(|(_, e)| e.clone())
    };
    // The parent's fragment layer: the one with /opt/fixture/su.
    let files = root_layers
        .iter()
        .find(|l| find(l, "opt/fixture/su").is_some())
        .expect("a layer with the fixture's files");
    let e = |p: &str| find(files, &format!("opt/fixture/{p}")).unwrap_or_else(|| panic!("{p}"));
    assert_eq!(
        (e("su").kind, e("su").mode),
        (tar::EntryType::Regular, 0o4755)
    );
    assert_eq!((e("sg").mode, e("sg").uid, e("sg").gid), (0o2710, 12, 34));
    assert_eq!(
        (e("keep").kind, e("keep").mode),
        (tar::EntryType::Directory, 0o1777)
    );
    assert_eq!(
        (e("symlink").kind, e("symlink").link.as_str()),
        (tar::EntryType::Symlink, "../fixture/z-data")
    );
    // Sorted, the link's name comes first: it carries the data now.
    assert_eq!(
        (e("a-hardlink").kind, e("a-hardlink").data.as_slice()),
        (tar::EntryType::Regular, &b"shared\n"[..])
    );
    assert_eq!(
        (e("z-data").kind, e("z-data").link.as_str()),
        (tar::EntryType::Link, "opt/fixture/a-hardlink")
    );
    assert_eq!(e("null").kind, tar::EntryType::Char);
    assert_eq!(e("fifo").kind, tar::EntryType::Fifo);
    // The kid's layer: a whiteout for the deleted file, an opaque marker
    // for the replaced directory.
    let changes = layers[root_layers.len()..]
        .iter()
        .find(|l| find(l, "opt/fixture/kid").is_some())
        .expect("a layer with the kid's changes");
    assert!(
        find(changes, "opt/fixture/.wh.doomed").is_some(),
        "{changes:#?}"
    );
    assert!(
        find(changes, "opt/fixture/redo/.wh..wh..opq").is_some(),
        "{changes:#?}"
    );

    // And the image runs, seeing what the fragments made.
    let out = fx.docker(&[
        "run", "--rm", "--user", "0:0", "--entrypoint", "/bin/sh", &first["kid"], "-c",
        "cd /opt/fixture && ls -A && stat -c '%n %a %u:%g %h %F' su sg keep a-hardlink z-data null fifo && readlink symlink && cat redo/new",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a-hardlink\nfifo\nkeep\nkid\nnull\nredo\nsg\nsu\nsymlink\nz-data\n\
         su 4755 0:0 1 regular file\nsg 2710 12:34 1 regular file\nkeep 1777 0:0 2 directory\n\
         a-hardlink 644 0:0 2 regular file\nz-data 644 0:0 2 regular file\n\
         null 644 0:0 1 character special file\nfifo 644 0:0 1 fifo\n\
         ../fixture/z-data\nnew\n"
    );
}

/// The Python scan of an OCI layout's image: every member of every layer
/// after the first `skip` (the pinned upstream's, kept as pinned), with its
/// mtime and whether it is a BuildKit mount stub. Prints offenders.
const SCAN: &str = r#"
import json, sys, tarfile
layout, skip, sde = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def blob(d): return f"{layout}/blobs/{d.replace(':', '/')}"
index = json.load(open(f"{layout}/index.json"))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
bad, seen = [], 0
for layer in manifest["layers"][skip:]:
    with tarfile.open(blob(layer["digest"]), mode="r:gz") as t:
        for m in t:
            seen += 1
            name = m.name.lstrip("./")
            if m.mtime > sde: bad.append(f"{name}: mtime {m.mtime}")
            if name.startswith("run/secrets"): bad.append(f"{name}: a mount stub")
print(f"scanned {seen} entries")
for b in bad: print(b)
sys.exit(1 if bad else 0)
"#;

/// What the tool did, checked by tools it did not write: `skopeo` copies
/// both builds' pushed images to OCI layouts, `diffoscope` finds no
/// difference between them, Python's `tarfile` finds no time after
/// SOURCE_DATE_EPOCH and no `run/secrets`, `umoci` unpacks the image with
/// every kind of entry as made.
fn independent_checks(fx: &Fixture, first: &str, second: &str) {
    let work = tempfile::tempdir().unwrap();
    let run = |program: &str, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let pushed = format!("{}/{}-pushed", fx.services.registry, fx.repo);
    for (digest, layout) in [(first, "one"), (second, "two")] {
        let (ok, out) = run(
            "skopeo",
            &[
                "copy",
                "--quiet",
                "--src-tls-verify=false",
                &format!("docker://{pushed}@{digest}"),
                &format!("oci:{layout}:kid"),
            ],
        );
        assert!(ok, "skopeo copy {digest}: {out}");
    }
    // The layouts' own file times are skopeo's, not the images'.
    let (ok, out) = run(
        "diffoscope",
        &[
            "--no-progress",
            "--exclude-directory-metadata=recursive",
            "one",
            "two",
        ],
    );
    assert!(ok, "diffoscope finds differences:\n{out}");

    let upstream = fx.docker(&[
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &fx.services.base_ref,
    ]);
    let upstream = String::from_utf8_lossy(&upstream.stdout).trim().to_string();
    let (ok, out) = run("python3", &["-c", SCAN, "one", &upstream, &SDE.to_string()]);
    assert!(ok && out.starts_with("scanned "), "{out}");

    let (ok, out) = run("umoci", &["unpack", "--image", "one:kid", "bundle"]);
    assert!(ok, "umoci unpack: {out}");
    let root = work.path().join("bundle/rootfs/opt/fixture");
    let mode = |p: &str| {
        std::fs::symlink_metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(
        (mode("su"), mode("sg"), mode("keep")),
        (0o4755, 0o2710, 0o1777)
    );
    assert!(
        !root.join("doomed").exists(),
        "the whiteout was not applied"
    );
    assert!(!root.join("redo/old").exists() && root.join("redo/new").is_file());
    assert_eq!(
        std::fs::read_link(root.join("symlink")).unwrap(),
        Path::new("../fixture/z-data")
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(root.join("a-hardlink")).unwrap().ino(),
        std::fs::metadata(root.join("z-data")).unwrap().ino()
    );
}
