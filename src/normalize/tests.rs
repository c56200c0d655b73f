//! The normaliser on save streams built here, entry by entry.

use super::*;
use crate::image::fixtures::{
    E, LATE, digest, dir, file, layer, link, raw_name, save_stream, save_stream_of_steps,
};
use serde_json::json;
use std::collections::BTreeMap;

pub(crate) const SDE: u64 = 1_700_000_000;

fn opts() -> Options {
    Options {
        source_date_epoch: SDE,
        base_diff_ids: vec![],
        tags: vec!["r:t".into()],
        fragment_scripts: BTreeMap::new(),
        kept_by_name: false,
        keep_layers: false,
    }
}

pub(crate) fn run(stream: &[u8], opts: &Options) -> Result<(Report, Vec<u8>), NormalizeError> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let report = normalize("r:t", stream, &mut out, opts, dir.path())?;
    Ok((report, out))
}

/// An entry of a written layer, as a reader sees it.
#[derive(Debug, PartialEq, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    pub(crate) kind: tar::EntryType,
    pub(crate) mode: u32,
    pub(crate) uid: u64,
    pub(crate) mtime: u64,
    pub(crate) link: String,
    pub(crate) data: Vec<u8>,
    pub(crate) pax: Vec<(String, Vec<u8>)>,
    pub(crate) uname: String,
}

/// The files of an archive, and of each layer its entries.
pub(crate) fn unpack(archive: &[u8]) -> (BTreeMap<String, Vec<u8>>, Vec<Vec<Seen>>) {
    let mut files = BTreeMap::new();
    for e in tar::Archive::new(archive).entries().unwrap() {
        let mut e = e.unwrap();
        let name = String::from_utf8(e.path_bytes().into_owned()).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut bytes).unwrap();
        files.insert(name, bytes);
    }
    let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    let layers = manifest[0]["Layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| entries(&files[l.as_str().unwrap()]))
        .collect();
    (files, layers)
}

pub(crate) fn entries(layer: &[u8]) -> Vec<Seen> {
    let mut out = Vec::new();
    for e in tar::Archive::new(layer).entries().unwrap() {
        let mut e = e.unwrap();
        let pax = e
            .pax_extensions()
            .unwrap()
            .map(|p| {
                p.map(|x| {
                    let x = x.unwrap();
                    (x.key().unwrap().to_string(), x.value_bytes().to_vec())
                })
                .collect()
            })
            .unwrap_or_default();
        let h = e.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        out.push(Seen {
            path: String::from_utf8(e.path_bytes().into_owned()).unwrap(),
            kind: h.entry_type(),
            mode: h.mode().unwrap(),
            uid: h.uid().unwrap(),
            mtime: h.mtime().unwrap(),
            link: e
                .link_name_bytes()
                .map(|l| String::from_utf8(l.into_owned()).unwrap())
                .unwrap_or_default(),
            data,
            pax,
            uname: h.username().unwrap().unwrap_or("").to_string(),
        });
    }
    out
}

/// A base layer and a fragment's layer with one of everything.
fn sample() -> (Vec<u8>, Vec<u8>) {
    let base = layer(&[
        dir("etc"),
        file("etc/passwd", "root:x:0:0\n"),
        dir("run"),
        dir("var"),
        dir("var/log"),
        file("var/log/dpkg.log", "base log\n"),
        dir("usr"),
        file("usr/old", "gone\n"),
        dir("opq"),
        file("opq/inner", "hidden\n"),
    ]);
    let frag = layer(&[
        // Out of order, as an engine may write them.
        file("usr/bin/tool", "#!/bin/sh\n"),
        dir("usr/bin"),
        dir("usr"),
        E {
            mode: 0o4755,
            ..file("usr/bin/su-ish", "setuid\n")
        },
        E {
            xattrs: vec![("security.capability", b"\x01\x00\x00\x02")],
            ..file("usr/bin/capped", "cap\n")
        },
        // `z` is the file, `a` links to it: sorted, `a` comes first.
        E {
            mode: 0o750,
            uid: 1000,
            ..file("usr/bin/z-real", "linked data\n")
        },
        link("usr/bin/a-link", tar::EntryType::Link, "usr/bin/z-real"),
        link("usr/bin/sym", tar::EntryType::Symlink, "/usr/bin/tool"),
        E {
            mode: 0o666,
            ..link("dev-null", tar::EntryType::Char, "")
        },
        E {
            kind: tar::EntryType::Fifo,
            ..file("fifo", "")
        },
        E {
            mtime: 0,
            ..file("usr/.wh.old", "")
        },
        file("opq/.wh..wh..opq", ""),
        file("opq/new", "new\n"),
        // BuildKit's stubs, new in this layer.
        dir("run/secrets"),
        file("run/secrets/ca_bundle", ""),
        dir("run/sunaba"),
        dir("run/sunaba/lib"),
        file("run/sunaba/install.sh", ""),
        dir("run"),
        // What only the build made.
        file("var/log/dpkg.log", "base log\nmore\n"),
        dir("var/log/apt"),
        file("var/log/apt/history.log", "Start-Date: now\n"),
        file("var/cache/ldconfig/aux-cache", "inodes"),
        file(
            "var/lib/apt/lists/deb.debian.org_dists_trixie_InRelease",
            "x",
        ),
        E {
            uname: "sandbox",
            ..file("home/keep", "kept\n")
        },
    ]);
    (base, frag)
}

#[test]
fn a_fragment_layer_is_rewritten_entry_by_entry() {
    let (base, frag) = sample();
    let stream = save_stream(&[base.clone(), frag.clone()], "2026-12-01T19:00:00.5Z");
    let (report, out) = run(&stream, &opts()).unwrap();
    let (files, layers) = unpack(&out);

    // The config: times, build-host fields, diff_ids, the archive's names.
    let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    assert_eq!(manifest[0]["RepoTags"], json!(["r:t"]));
    let config_name = manifest[0]["Config"].as_str().unwrap();
    let config_bytes = &files[config_name];
    assert_eq!(digest(config_bytes), report.config_digest);
    assert_eq!(config_name, format!("{}.json", &report.config_digest[7..]));
    let config: serde_json::Value = serde_json::from_slice(config_bytes).unwrap();
    assert_eq!(config["created"], "2023-11-14T22:13:20Z");
    assert_eq!(config["history"][1]["created"], "2023-11-14T22:13:20Z");
    assert!(config.get("container").is_none() && config.get("docker_version").is_none());
    assert!(config["config"].get("Hostname").is_none());
    let written: Vec<String> = manifest[0]["Layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| digest(&files[l.as_str().unwrap()]))
        .collect();
    assert_eq!(config["rootfs"]["diff_ids"], json!(written));
    assert_eq!(report.layers[1].diff_id_after, written[1]);
    assert_eq!(report.layers[1].diff_id_before, digest(&frag));

    // The fragment's layer, in order, every field.
    let frag_out = &layers[1];
    let paths: Vec<&str> = frag_out.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "dev-null",
            "fifo",
            "home/keep",
            "opq/.wh..wh..opq",
            "opq/new",
            "run/",
            "usr/",
            "usr/.wh.old",
            "usr/bin/",
            "usr/bin/a-link",
            "usr/bin/capped",
            "usr/bin/su-ish",
            "usr/bin/sym",
            "usr/bin/tool",
            "usr/bin/z-real",
            "var/log/apt/",
        ]
    );
    let by: BTreeMap<&str, &Seen> = frag_out.iter().map(|e| (e.path.as_str(), e)).collect();
    assert!(
        frag_out
            .iter()
            .all(|e| e.mtime <= SDE && e.uname.is_empty())
    );
    assert_eq!(by["usr/.wh.old"].mtime, 0, "an older time stays");
    assert_eq!(by["usr/bin/su-ish"].mode, 0o4755);
    assert_eq!(
        by["usr/bin/capped"].pax,
        [(
            "SCHILY.xattr.security.capability".to_string(),
            b"\x01\x00\x00\x02".to_vec()
        )]
    );
    assert_eq!(by["usr/bin/sym"].kind, tar::EntryType::Symlink);
    assert_eq!(by["usr/bin/sym"].link, "/usr/bin/tool");
    assert_eq!(by["dev-null"].kind, tar::EntryType::Char);
    assert_eq!(by["dev-null"].mode, 0o666);
    assert_eq!(by["fifo"].kind, tar::EntryType::Fifo);
    // The hardlink group: the first name carries the data and the file's
    // metadata, the other links to it.
    let a = by["usr/bin/a-link"];
    assert_eq!(
        (a.kind, a.mode, a.uid, a.data.as_slice()),
        (tar::EntryType::Regular, 0o750, 1000, &b"linked data\n"[..])
    );
    let z = by["usr/bin/z-real"];
    assert_eq!(
        (z.kind, z.link.as_str()),
        (tar::EntryType::Link, "usr/bin/a-link")
    );
    // Dropped, each with its rule.
    let dropped: Vec<(&str, &str)> = report.layers[1]
        .dropped
        .iter()
        .map(|(p, r)| (p.as_str(), *r))
        .collect();
    assert_eq!(
        dropped,
        [
            ("run/secrets", "a BuildKit mount stub"),
            ("run/secrets/ca_bundle", "a BuildKit mount stub"),
            ("run/sunaba", "a BuildKit mount stub"),
            ("run/sunaba/install.sh", "a BuildKit mount stub"),
            ("run/sunaba/lib", "a BuildKit mount stub"),
            ("var/cache/ldconfig/aux-cache", "ldconfig's aux-cache"),
            (
                "var/lib/apt/lists/deb.debian.org_dists_trixie_InRelease",
                "apt's lists and caches"
            ),
            ("var/log/apt/history.log", "a build log (var/log)"),
            ("var/log/dpkg.log", "a build log (var/log)"),
        ]
    );
    // The written layer is one fixed format: ustar headers, PAX only where
    // needed, no GNU extensions.
    let frag_bytes = &files[manifest[0]["Layers"][1].as_str().unwrap()];
    for block in frag_bytes.chunks(512) {
        if &block[257..263] == b"ustar " {
            panic!("a GNU header in the written layer");
        }
    }
}

#[test]
fn under_a_mount_root_only_new_empty_entries_are_stubs() {
    let base = layer(&[
        dir("run"),
        dir("run/sunaba"),
        file("run/sunaba/state", "1\n"),
    ]);
    let frag = layer(&[
        dir("run/sunaba"),
        // A deletion of the base's file is empty too, but no stub.
        file("run/sunaba/.wh.state", ""),
        file("run/sunaba/install.sh", ""),
        dir("run/secrets"),
        file("run/secrets/written", "a fragment wrote this\n"),
    ]);
    let (report, out) = run(&save_stream(&[base, frag], "2026-12-01T19:00:00Z"), &opts()).unwrap();
    let (_, layers) = unpack(&out);
    let paths: Vec<&str> = layers[1].iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "run/secrets/",
            "run/secrets/written",
            "run/sunaba/",
            "run/sunaba/.wh.state"
        ]
    );
    assert_eq!(
        report.layers[1].dropped,
        [("run/sunaba/install.sh".to_string(), "a BuildKit mount stub")]
    );
}

#[test]
fn two_builds_that_differ_in_times_order_and_names_give_the_same_bytes() {
    let (base, frag) = sample();
    let one = run(
        &save_stream(&[base.clone(), frag], "2026-12-01T19:00:00Z"),
        &opts(),
    )
    .unwrap();
    // The same files, written later, in another order, by another user name.
    let (_, frag) = sample();
    let mut reordered = entries(&frag);
    reordered.reverse();
    let again: Vec<E> = reordered
        .iter()
        .map(|s| E {
            path: Box::leak(s.path.clone().into_boxed_str()),
            kind: s.kind,
            mode: s.mode,
            uid: s.uid,
            mtime: if s.mtime > SDE {
                s.mtime + 3600
            } else {
                s.mtime
            },
            link: Box::leak(s.link.clone().into_boxed_str()),
            data: s.data.clone(),
            xattrs: s
                .pax
                .iter()
                .map(|(k, v)| {
                    (
                        &*Box::leak(k["SCHILY.xattr.".len()..].to_string().into_boxed_str()),
                        &*Box::leak(v.clone().into_boxed_slice()),
                    )
                })
                .collect(),
            uname: "builder",
        })
        .collect();
    // A hardlink must name a file before it: the reversed layer's `a-link`
    // would come first, so its file moves ahead of it.
    let mut again = again;
    let z = again
        .iter()
        .position(|e| e.path == "usr/bin/z-real")
        .unwrap();
    let z = again.remove(z);
    again.insert(0, z);
    let two = run(
        &save_stream(&[base, layer(&again)], "2026-12-02T08:00:00Z"),
        &opts(),
    )
    .unwrap();
    assert_ne!(
        one.0.layers[1].diff_id_before,
        two.0.layers[1].diff_id_before
    );
    assert_eq!(one.0.layers[1].diff_id_after, two.0.layers[1].diff_id_after);
    assert_eq!(one.0.config_digest, two.0.config_digest);
    assert_eq!(one.1, two.1, "the archives are byte for byte the same");
}

#[test]
fn normalising_twice_changes_nothing_and_base_layers_are_kept_byte_for_byte() {
    let (base, frag) = sample();
    let (first, out) = run(
        &save_stream(&[base.clone(), frag], "2026-12-01T19:00:00Z"),
        &opts(),
    )
    .unwrap();
    let (second, out2) = run(&out, &opts()).unwrap();
    assert_eq!(first.config_digest, second.config_digest);
    assert_eq!(out, out2);
    assert!(second.layers.iter().all(|l| l.dropped.is_empty()));

    // With the base's diff_id given, its layer is copied as it was (its
    // var/log file and its mtimes after SOURCE_DATE_EPOCH included).
    let (_, frag) = sample();
    let kept = Options {
        base_diff_ids: vec![digest(&base)],
        ..opts()
    };
    let (report, out) = run(
        &save_stream(&[base.clone(), frag], "2026-12-01T19:00:00Z"),
        &kept,
    )
    .unwrap();
    assert!(report.layers[0].kept && !report.layers[1].kept);
    assert_eq!(report.layers[0].diff_id_after, digest(&base));
    let (files, _) = unpack(&out);
    assert!(files.values().any(|f| f == &base));
}

#[test]
fn long_names_and_large_ids_go_to_pax_and_read_back() {
    let long: &'static str = Box::leak(format!("d/{}", "n".repeat(150)).into_boxed_str());
    let l = layer(&[E {
        uid: 3_000_000,
        ..file("d/short", "s")
    }]);
    // The tar crate writes a long name as a GNU long-name entry.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mtime(LATE);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    b.append_data(&mut h, long, &b"x"[..]).unwrap();
    let long_layer = b.into_inner().unwrap();
    let (_, out) = run(
        &save_stream(&[l, long_layer], "2026-12-01T19:00:00Z"),
        &opts(),
    )
    .unwrap();
    let (_, layers) = unpack(&out);
    assert_eq!(layers[0][0].uid, 3_000_000);
    assert_eq!(
        layers[0][0].pax,
        [
            ("gid".into(), b"3000000".to_vec()),
            ("uid".into(), b"3000000".to_vec())
        ]
    );
    assert_eq!(layers[1][0].path, long);
    assert_eq!(layers[1][0].pax[0].0, "path");
}

mod bad_input {
    use super::*;

    fn err(stream: &[u8]) -> String {
        run(stream, &opts()).unwrap_err().to_string()
    }

    fn layer_with_header(name: &[u8], size: u64, data: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        raw_name(&mut h, name);
        h.set_size(size);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(LATE);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(data);
        bytes.resize(bytes.len().div_ceil(512) * 512 + 1024, 0);
        bytes
    }

    #[test]
    fn a_truncated_stream_names_the_image_and_what_is_missing() {
        let (base, frag) = sample();
        let stream = save_stream(&[base, frag], "2026-12-01T19:00:00Z");
        // Cut inside a layer, at a block boundary and not: each is an error.
        let mut seen = std::collections::BTreeSet::new();
        // Just before manifest.json's header: every layer is whole.
        let manifest_at = (0..stream.len())
            .step_by(512)
            .find(|&at| stream[at..].starts_with(b"manifest.json\0"))
            .unwrap();
        for cut in [700, 1536, 4096, stream.len() / 2, manifest_at] {
            let msg = err(&stream[..cut]);
            assert!(
                msg.starts_with("r:t: the save stream is truncated"),
                "{cut}: {msg}"
            );
            seen.insert(msg);
        }
        assert!(
            seen.iter().any(|m| m.contains("layer.tar ends after")),
            "{seen:#?}"
        );
        assert!(
            seen.iter().any(|m| m.contains("no manifest.json")),
            "{seen:#?}"
        );
    }

    #[test]
    fn corrupt_bytes_and_headers_name_the_layer() {
        let (base, frag) = sample();
        let stream = save_stream(&[base, frag.clone()], "2026-12-01T19:00:00Z");
        // A byte of file data changed: the layer no longer hashes to its diff_id.
        let at = find(&stream, b"linked data").unwrap();
        let mut bad = stream.clone();
        bad[at] = b'L';
        let msg = err(&bad);
        assert!(
            msg.starts_with("r:t: layer ")
                && msg.contains("/layer.tar: the tar is corrupt: its bytes hash to"),
            "{msg}"
        );
        // A header byte changed: its checksum fails.
        let at = find(&stream, b"usr/bin/tool").unwrap();
        let mut bad = stream.clone();
        bad[at] = b'U';
        let msg = err(&bad);
        assert!(
            msg.contains("/layer.tar: the tar is corrupt: ") && msg.contains("checksum"),
            "{msg}"
        );
        // Not a tar at all.
        assert!(err(&[7u8; 2048]).starts_with("r:t: the save stream is corrupt"));
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn an_absolute_or_dotdot_path_is_refused_naming_image_layer_and_path() {
        for (name, problem) in [
            (&b"/etc/cron.d/evil"[..], "is an absolute path"),
            (&b"usr/../../etc/evil"[..], "has a `..` component"),
        ] {
            let l = layer_with_header(name, 1, b"x");
            let msg = err(&save_stream(&[l], "2026-12-01T19:00:00Z"));
            assert!(msg.starts_with("r:t: layer "), "{msg}");
            assert!(
                msg.ends_with(&format!(
                    "/layer.tar: entry `{}` {problem}",
                    String::from_utf8_lossy(name)
                )),
                "{msg}"
            );
        }
        // A hardlink out of the root, too.
        let l = layer(&[link("a", tar::EntryType::Link, "../../etc/shadow")]);
        let msg = err(&save_stream(&[l], "2026-12-01T19:00:00Z"));
        assert!(
            msg.contains("entry `a (a hardlink to ../../etc/shadow)` has a `..` component"),
            "{msg}"
        );
    }

    #[test]
    fn a_tar_bomb_is_refused_before_a_byte_of_it_is_written() {
        // A header claiming a terabyte in a layer of a few blocks.
        let l = layer_with_header(b"big", 1 << 40, b"tiny");
        let msg = err(&save_stream(&[l], "2026-12-01T19:00:00Z"));
        assert!(
            msg.contains("/layer.tar: entry `big` claims 1099511627776 bytes but only"),
            "{msg}"
        );
        // A GNU sparse entry of a terabyte holding one block.
        let mut h = tar::Header::new_gnu();
        raw_name(&mut h, b"sparse");
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(LATE);
        h.set_size(512);
        let gnu = h.as_gnu_mut().unwrap();
        gnu.set_real_size(1 << 40);
        // One block of data at the very end: a terabyte of holes before it.
        gnu.sparse[0].set_offset((1 << 40) - 512);
        gnu.sparse[0].set_length(512);
        h.set_cksum();
        let mut l = h.as_bytes().to_vec();
        l.extend_from_slice(&[b's'; 512]);
        l.extend_from_slice(&[0u8; 1024]);
        let msg = err(&save_stream(&[l], "2026-12-01T19:00:00Z"));
        assert!(
            msg.contains("/layer.tar: entry `sparse` is sparse"),
            "{msg}"
        );
    }
}

/// The dpkg status of `packages` (name, version), all installed, amd64.
fn status(packages: &[(&str, &str)]) -> String {
    packages
        .iter()
        .map(|(p, v)| {
            format!(
                "Package: {p}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {v}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_fragments_packages_are_recorded_on_the_image_and_the_parents_are_kept() {
    let status_file = |p: &[(&str, &str)]| -> E {
        file("var/lib/dpkg/status", Box::leak(status(p).into_boxed_str()))
    };
    let label_of = |stream: &[u8], opts: &Options| -> Option<String> {
        let (report, out) = run(stream, opts).unwrap();
        let (files, _) = unpack(&out);
        let config: serde_json::Value =
            serde_json::from_slice(&files[&format!("{}.json", &report.config_digest[7..])])
                .unwrap();
        config["config"]["Labels"][crate::labels::PACKAGES]
            .as_str()
            .map(String::from)
    };
    let upstream = layer(&[status_file(&[("bash", "5.2.37-2")])]);
    let core = layer(&[status_file(&[
        ("bash", "5.2.37-2+deb13u1"),
        ("jq", "1.7.1-6"),
    ])]);
    let posture = layer(&[file("home/sandbox/.keep", "")]);
    let stream = save_stream_of_steps(
        &[upstream.clone(), core.clone(), posture.clone()],
        "2026-12-01T19:00:00Z",
        &[
            "ADD rootfs.tar /",
            "RUN |1 X=1 /bin/sh -c sh /run/sunaba/install-core.sh # buildkit",
            "RUN /bin/sh -c set -eu; useradd sandbox",
        ],
        json!({}),
    );
    let scripts = BTreeMap::from([
        ("install-core.sh".to_string(), "core".to_string()),
        ("install-go.sh".to_string(), "go".to_string()),
    ]);
    let opts = Options {
        base_diff_ids: vec![digest(&upstream)],
        fragment_scripts: scripts,
        ..opts()
    };
    // The upstream's bash is not listed; the bash core changed is, with jq.
    let parent = label_of(&stream, &opts).unwrap();
    assert_eq!(
        parent,
        r#"{"fragments":{"core":{"bash:amd64":"5.2.37-2+deb13u1","jq:amd64":"1.7.1-6"}},"schema":1}"#
    );

    // A child built FROM it inherits the label and adds its own layer's;
    // a layer no fragment's script made is named by its position.
    let go = layer(&[status_file(&[
        ("bash", "5.2.37-2+deb13u1"),
        ("gcc", "4:14.2.0-1"),
        ("jq", "1.7.1-6"),
    ])]);
    let other = layer(&[status_file(&[
        ("bash", "5.2.37-2+deb13u1"),
        ("gcc", "4:14.2.0-1"),
        ("jq", "1.7.1-6"),
        ("make", "4.4.1-2"),
    ])]);
    let child = save_stream_of_steps(
        &[upstream.clone(), core, posture, go, other],
        "2026-12-01T19:00:00Z",
        &[
            "ADD rootfs.tar /",
            "RUN sh /run/sunaba/install-core.sh",
            "RUN useradd",
            "RUN |2 A=1 B=2 /bin/sh -c sh /run/sunaba/install-go.sh # buildkit",
            "RUN apt-get install make",
        ],
        json!({crate::labels::PACKAGES: parent}),
    );
    assert_eq!(
        label_of(&child, &opts).unwrap(),
        r#"{"fragments":{"core":{"bash:amd64":"5.2.37-2+deb13u1","jq:amd64":"1.7.1-6"},"go":{"gcc:amd64":"4:14.2.0-1"},"layer 5":{"make:amd64":"4.4.1-2"}},"schema":1}"#
    );

    // No package changed and none inherited: no label.
    let bare = save_stream_of_steps(
        &[upstream.clone(), layer(&[file("a", "x")])],
        "2026-12-01T19:00:00Z",
        &["ADD", "RUN x"],
        json!({}),
    );
    assert_eq!(label_of(&bare, &opts), None);
}

#[test]
fn the_archive_of_a_known_stream_is_byte_for_byte_what_it_was() {
    // A kept base layer, a rewritten fragment layer with one of everything,
    // and a layer whose packages are recorded: each part of the archive's
    // writing. A change here changes every pinned digest of the family.
    let (base, frag) = sample();
    let packages = layer(&[file(
        "var/lib/dpkg/status",
        Box::leak(status(&[("jq", "1.7.1-6")]).into_boxed_str()),
    )]);
    let stream = save_stream_of_steps(
        &[base.clone(), frag, packages],
        "2026-12-01T19:00:00Z",
        &[
            "ADD rootfs.tar /",
            "RUN sh /run/sunaba/install-tools.sh",
            "RUN sh /run/sunaba/install-core.sh",
        ],
        json!({}),
    );
    let opts = Options {
        base_diff_ids: vec![digest(&base)],
        fragment_scripts: BTreeMap::from([
            ("install-core.sh".to_string(), "core".to_string()),
            ("install-tools.sh".to_string(), "tools".to_string()),
        ]),
        ..opts()
    };
    let (report, out) = run(&stream, &opts).unwrap();
    assert_eq!(report.bytes, out.len() as u64);
    let (files, _) = unpack(&out);
    let config: serde_json::Value =
        serde_json::from_slice(&files[&format!("{}.json", &report.config_digest[7..])]).unwrap();
    assert_eq!(
        config["config"]["Labels"][crate::labels::PACKAGES],
        r#"{"fragments":{"core":{"jq:amd64":"1.7.1-6"}},"schema":1}"#
    );
    assert!(report.layers[0].kept && !report.layers[1].kept);
    assert_eq!(
        (digest(&out).as_str(), report.config_digest.as_str()),
        (
            "sha256:79a7897c5ce164de8a2aad8a3d83a08fdcb8ed01ea680d63360a6c900ab1846b",
            "sha256:04ff2482a89ce59c8843ad547280a48ee5823d6d834705841a46dd1b2452a97b"
        )
    );
}
