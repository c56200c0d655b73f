//! The layer rules, each on synthetic layers: what the runtime would show
//! at the wanted paths, or why the layer cannot be applied.

use super::*;
use crate::image::fixtures::{E, dir, file, layer, link, save_stream};
use std::io::Write as _;

const STATUS: &str = "var/lib/dpkg/status";
const OS_RELEASE: &str = "etc/os-release";
const USR_OS_RELEASE: &str = "usr/lib/os-release";
/// The paths a reading follows here: the SBOM's (`attest::sbom::WANTED`),
/// what a real image is read for.
const WANTED: [&str; 3] = [STATUS, OS_RELEASE, USR_OS_RELEASE];

/// The wanted files of an image of plain tar `layers`, bottom first, or
/// the error's message.
fn apply(layers: &[Vec<u8>]) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let blobs: Vec<(String, Vec<u8>)> = layers
        .iter()
        .map(|l| {
            (
                "application/vnd.oci.image.layer.v1.tar".to_string(),
                l.clone(),
            )
        })
        .collect();
    read_layers("r/img@sha256:ab", &blobs, &WANTED).map_err(|e| e.to_string())
}

fn text(files: &BTreeMap<String, Vec<u8>>, path: &str) -> Option<String> {
    files
        .get(path)
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

fn symlink(path: &'static str, target: &'static str) -> E {
    link(path, tar::EntryType::Symlink, target)
}

fn hardlink(path: &'static str, target: &'static str) -> E {
    link(path, tar::EntryType::Link, target)
}

/// A Debian base: dpkg's status, os-release where Debian puts it.
fn base() -> Vec<u8> {
    layer(&[
        dir("etc"),
        symlink(OS_RELEASE, "../usr/lib/os-release"),
        dir("usr"),
        dir("usr/lib"),
        file(USR_OS_RELEASE, "ID=debian\nVERSION_ID=\"13\"\n"),
        dir("var"),
        dir("var/lib"),
        dir("var/lib/dpkg"),
        file(STATUS, "Package: bash\n"),
        file("var/lib/dpkg/available", "x"),
    ])
}

#[test]
fn the_last_layer_to_write_a_path_wins_and_a_whiteout_removes_it() {
    let stream = save_stream(
        &[
            layer(&[file(STATUS, "one\n"), file(OS_RELEASE, "ID=debian\n")]),
            layer(&[file(STATUS, "two\n"), file("etc/.wh.os-release", "")]),
        ],
        "2026-12-01T19:00:00Z",
    );
    let reading = Reading::new(&WANTED);
    let saved = read_save_stream("i", &reading, &mut stream.as_slice()).unwrap();
    assert_eq!(saved.config["created"], "2026-12-01T19:00:00Z");
    let Composed::Files(files) = reading.compose(saved.layers.iter().map(|l| l.as_ref())) else {
        panic!("no links to follow");
    };
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[STATUS], b"two\n");
}

#[test]
fn a_whiteout_of_a_directory_deletes_everything_under_it() {
    // `RUN rm -rf /var/lib/dpkg`: one whiteout, in var/lib.
    let files = apply(&[
        base(),
        layer(&[dir("var/lib"), file("var/lib/.wh.dpkg", "")]),
    ])
    .unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
    assert_eq!(
        text(&files, OS_RELEASE).unwrap(),
        "ID=debian\nVERSION_ID=\"13\"\n"
    );
    // A whiteout of `var` itself, too.
    let files = apply(&[base(), layer(&[file(".wh.var", "")])]).unwrap();
    assert_eq!(text(&files, STATUS), None);
}

#[test]
fn an_opaque_directory_hides_the_lower_layers_contents_but_not_its_own() {
    // `rm -rf /var/lib/dpkg && mkdir /var/lib/dpkg` + one new file.
    let upper = layer(&[
        dir("var/lib/dpkg"),
        file("var/lib/dpkg/.wh..wh..opq", ""),
        file("var/lib/dpkg/other", "new"),
    ]);
    let files = apply(&[base(), upper]).unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
    // Applied before the layer's own entries, wherever it is in the tar.
    let upper = layer(&[
        dir("var/lib/dpkg"),
        file(STATUS, "Package: own\n"),
        file("var/lib/dpkg/.wh..wh..opq", ""),
    ]);
    let files = apply(&[base(), upper]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "Package: own\n");
    // An opaque directory higher up hides what is deeper.
    let files = apply(&[base(), layer(&[file("var/.wh..wh..opq", "")])]).unwrap();
    assert_eq!(text(&files, STATUS), None);
    // And at the root, everything.
    let files = apply(&[base(), layer(&[file(".wh..wh..opq", "")])]).unwrap();
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn a_whiteout_applies_to_the_lower_layers_only() {
    // The layer writes the file and (after it, in the tar) whites it out:
    // the whiteout is for the lower layers; the layer's own file stays.
    let upper = layer(&[
        file(STATUS, "Package: new\n"),
        file("var/lib/dpkg/.wh.status", ""),
    ]);
    let files = apply(&[base(), upper]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "Package: new\n");
}

#[test]
fn a_directory_replaced_by_a_file_hides_what_was_below() {
    let files = apply(&[base(), layer(&[file("var/lib/dpkg", "not a directory")])]).unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
    // A symlink in its place, to a directory with no status.
    let files = apply(&[
        base(),
        layer(&[dir("opt"), symlink("var/lib/dpkg", "/opt")]),
    ])
    .unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
}

#[test]
fn a_file_replaced_by_a_directory_shows_the_new_directorys_files() {
    let lower = layer(&[file("var/lib/dpkg", "a file")]);
    // The upper layer has the status but no entry for its directories:
    // being in them makes them directories.
    let upper = layer(&[file(STATUS, "Package: bash\n")]);
    let files = apply(&[lower, upper]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "Package: bash\n");
}

#[test]
fn symlinks_are_followed_relative_absolute_and_through_directories() {
    // Debian's os-release: a relative link to usr/lib.
    let files = apply(&[base()]).unwrap();
    assert_eq!(
        text(&files, OS_RELEASE).unwrap(),
        "ID=debian\nVERSION_ID=\"13\"\n"
    );
    // The link's target replaced in an upper layer: the link shows it.
    let files = apply(&[base(), layer(&[file(USR_OS_RELEASE, "ID=ubuntu\n")])]).unwrap();
    assert_eq!(text(&files, OS_RELEASE).unwrap(), "ID=ubuntu\n");
    // The target deleted: the link dangles.
    let files = apply(&[base(), layer(&[file("usr/lib/.wh.os-release", "")])]).unwrap();
    assert_eq!(text(&files, OS_RELEASE), None, "{files:?}");
    // dpkg's directory moved and linked, absolutely, in another layer than
    // the files it leads to: a second reading follows it there.
    let moved = layer(&[
        dir("opt"),
        dir("opt/dpkg"),
        file("opt/dpkg/status", "Package: moved\n"),
    ]);
    let link = layer(&[
        file("var/lib/.wh.dpkg", ""),
        symlink("var/lib/dpkg", "/opt/dpkg"),
    ]);
    let files = apply(&[base(), moved, link]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "Package: moved\n");
    // `..` through a symlinked directory is taken from where the link leads.
    let files = apply(&[
        base(),
        layer(&[
            dir("x/y"),
            file("x/y/os", "ID=alpine\n"),
            symlink("etc/os-release", "/z/../os"),
            symlink("z", "x/y/deeper"),
            dir("x/y/deeper"),
        ]),
    ])
    .unwrap();
    assert_eq!(text(&files, OS_RELEASE).unwrap(), "ID=alpine\n");
}

#[test]
fn a_symlink_loop_reads_as_absent() {
    let files = apply(&[
        base(),
        layer(&[
            symlink("var/lib/dpkg", "loop"),
            symlink("var/lib/loop", "dpkg"),
        ]),
    ])
    .unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
}

#[test]
fn a_hardlink_reads_as_the_file_it_links_to_in_its_layer() {
    // To a path the reading does not keep: a second reading keeps it.
    let upper = layer(&[
        file("var/lib/dpkg/status-new", "Package: linked\n"),
        hardlink(STATUS, "var/lib/dpkg/status-new"),
    ]);
    let files = apply(&[base(), upper]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "Package: linked\n");
    // To a wanted path the layer wrote before it.
    let upper = layer(&[
        file(USR_OS_RELEASE, "ID=fedora\n"),
        hardlink(OS_RELEASE, USR_OS_RELEASE),
    ]);
    let files = apply(&[base(), upper]).unwrap();
    assert_eq!(text(&files, OS_RELEASE).unwrap(), "ID=fedora\n");
}

#[test]
fn a_hardlink_to_a_path_its_layer_has_not_written_is_an_error() {
    // The base has the status, but a layer's hardlink is to what that
    // layer wrote: Docker's applier fails on this one.
    let upper = layer(&[hardlink(OS_RELEASE, "var/lib/dpkg/status")]);
    let blobs = [base(), upper];
    let msg = apply(&blobs).unwrap_err();
    let digest = crate::registry::Digest::sha256(&blobs[1]);
    assert_eq!(
        msg,
        format!(
            "r/img@sha256:ab: layer {digest} (2 of 2, application/vnd.oci.image.layer.v1.tar): \
             entry `etc/os-release` is a hardlink to `var/lib/dpkg/status`, which the layer has \
             not written before it (the runtime cannot apply it)"
        )
    );
}

#[test]
fn a_layer_that_is_not_a_tar_is_an_error_naming_it() {
    let garbage = b"this is not a layer at all".repeat(40);
    for bad in [garbage.clone(), gzip(&garbage)] {
        let msg = apply(&[base(), bad.clone()]).unwrap_err();
        let digest = crate::registry::Digest::sha256(&bad);
        assert!(
            msg.starts_with(&format!("r/img@sha256:ab: layer {digest} (2 of 2, ")),
            "{msg}"
        );
        assert!(msg.contains("the tar is corrupt"), "{msg}");
    }
    // The tar crate's message quotes the header's bytes: escaped.
    let hostile = b"\x1b[2J\x1b]0;owned\x07".repeat(64);
    let msg = apply(&[hostile]).unwrap_err();
    assert!(msg.contains("the tar is corrupt"), "{msg}");
    assert!(!msg.contains('\x1b') && !msg.contains('\x07'), "{msg:?}");
    assert!(msg.contains("\\u{1b}[2J"), "{msg:?}");
    // A gzip layer cut short.
    let whole = gzip(&base());
    let msg = apply(&[whole[..whole.len() / 2].to_vec()]).unwrap_err();
    assert!(msg.contains("layer sha256:"), "{msg}");
    // zstd: refused, not read as nothing.
    let mut zstd = vec![0x28, 0xb5, 0x2f, 0xfd];
    zstd.extend_from_slice(&[0; 64]);
    let msg = apply(&[zstd]).unwrap_err();
    assert!(msg.contains("zstd"), "{msg}");
}

#[test]
fn an_entry_that_climbs_out_of_the_root_is_an_error() {
    let mut h = tar::Header::new_gnu();
    crate::image::fixtures::raw_name(&mut h, b"var/../../etc/os-release");
    h.set_size(0);
    h.set_cksum();
    let mut bad = h.as_bytes().to_vec();
    bad.extend_from_slice(&[0; 1024]);
    let msg = apply(&[base(), bad]).unwrap_err();
    assert!(
        msg.ends_with("entry `var/../../etc/os-release` climbs out of the root"),
        "{msg}"
    );
    // A `..` that stays inside is the path it names.
    let mut h = tar::Header::new_gnu();
    crate::image::fixtures::raw_name(&mut h, b"./usr/../var/lib/dpkg/status");
    h.set_size(4);
    h.set_cksum();
    let mut ok = h.as_bytes().to_vec();
    ok.extend_from_slice(b"new\n");
    ok.resize(2048, 0);
    let files = apply(&[base(), ok]).unwrap();
    assert_eq!(text(&files, STATUS).unwrap(), "new\n");
}

#[test]
fn a_pax_header_over_its_cap_in_a_layer_is_refused_naming_the_layer() {
    // 2 MiB of PAX records before the status: read whole by the tar crate
    // unless refused first.
    let value = "v".repeat(2 << 20);
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("SCHILY.xattr.user.big", value.as_bytes())])
        .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(4);
    h.set_cksum();
    b.append_data(&mut h, STATUS, &b"big\n"[..]).unwrap();
    let upper = b.into_inner().unwrap();
    let msg = apply(&[base(), upper.clone()]).unwrap_err();
    let digest = crate::registry::Digest::sha256(&upper);
    assert_eq!(
        msg,
        format!(
            "r/img@sha256:ab: layer {digest} (2 of 2, application/vnd.oci.image.layer.v1.tar): \
             the PAX extended header at byte 0 (entry 1) declares 2097183 bytes, over the cap \
             of 1048576 bytes"
        )
    );
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

#[test]
fn every_member_of_a_multi_member_gzip_layer_is_read() {
    // Go's gzip reader (the engines') reads every member; the first alone
    // holds no status, and the whiteout is in the second.
    let tar = layer(&[
        file(USR_OS_RELEASE, "ID=two-members\n"),
        file("var/lib/.wh.dpkg", ""),
    ]);
    let cut = 1024; // after the first entry
    let mut blob = gzip(&tar[..cut]);
    blob.extend(gzip(&tar[cut..]));
    let files = apply(&[base(), blob]).unwrap();
    assert_eq!(text(&files, STATUS), None, "{files:?}");
    assert_eq!(text(&files, OS_RELEASE).unwrap(), "ID=two-members\n");
}

#[test]
fn a_save_stream_names_a_corrupt_layer_by_its_diff_id_and_skips_json_blobs() {
    let bad = b"not a tar".repeat(100);
    let stream = save_stream(&[base(), bad.clone()], "2026-12-01T19:00:00Z");
    let reading = Reading::new(&WANTED);
    let err = read_save_stream("r:t", &reading, &mut stream.as_slice()).unwrap_err();
    let diff_id = crate::registry::Digest::sha256(&bad);
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("r:t: layer {diff_id} (2 of 2, ")),
        "{msg}"
    );
    assert!(
        msg.contains("/layer.tar in the save stream): the tar is corrupt"),
        "{msg}"
    );
}

#[test]
fn links_that_lead_to_ever_new_places_stop_at_the_cap() {
    // Each link leads to a directory holding the next link.
    let names: Vec<&'static str> = (0..=MAX_FOLLOWED + 1)
        .map(|i| &*Box::leak(format!("d{i}").into_boxed_str()))
        .collect();
    let mut entries = vec![symlink("var/lib/dpkg", names[0])];
    for pair in names.windows(2) {
        let path: &'static str = Box::leak(format!("var/lib/{}", pair[0]).into_boxed_str());
        entries.push(symlink(path, pair[1]));
    }
    let layers: Vec<Vec<u8>> = entries
        .iter()
        .map(|e| layer(std::slice::from_ref(e)))
        .collect();
    let msg = apply(&layers).unwrap_err();
    assert_eq!(
        msg,
        format!(
            "r/img@sha256:ab: the links of var/lib/d{}/status lead to more than {MAX_FOLLOWED} \
             other paths; a real image's need one or two",
            MAX_FOLLOWED
        )
    );
}

/// Notes kept between releases compose as the layers they were read from:
/// every kind of node, whiteouts, opaque directories and what the reading
/// was for survive; bytes that are not notes of this format are none.
#[test]
fn a_layers_notes_decode_to_what_it_said() {
    let layers = [
        base(),
        layer(&[
            file("var/lib/dpkg/.wh..wh..opq", ""),
            file("var/lib/dpkg/status", "Package: top\n\u{0}\u{ff}"),
            hardlink("var/lib/dpkg/status-old", "var/lib/dpkg/status"),
            file("usr/lib/.wh.os-release", ""),
            symlink("usr/lib/os-release", "../share/os-release"),
        ]),
    ];
    let reading = Reading::new(&WANTED);
    let scanned: Vec<LayerFiles> = (layers.iter())
        .map(|l| reading.scan_blob(l.as_slice()).unwrap())
        .collect();
    let decoded: Vec<LayerFiles> = (scanned.iter())
        .map(|f| LayerFiles::decode(&f.encode()).expect("notes of this format"))
        .collect();
    for (s, d) in scanned.iter().zip(&decoded) {
        assert_eq!(format!("{s:?}"), format!("{d:?}"));
        assert!(reading.covered_by(d));
    }
    // The link leads where the first reading did not look: both say so.
    let needs = |layers: &[LayerFiles]| match reading.compose(layers) {
        Composed::Needs(paths) => paths,
        Composed::Files(files) => panic!("{files:?}"),
    };
    assert_eq!(needs(&decoded), needs(&scanned));
    let mut wider = reading.clone();
    wider.follow("i", needs(&scanned)).unwrap();
    assert!(!wider.covered_by(&decoded[0]), "read for fewer paths");
    let files = |layers: &[LayerFiles]| match wider.compose(layers) {
        Composed::Files(files) => files,
        Composed::Needs(paths) => panic!("{paths:?}"),
    };
    let again: Vec<LayerFiles> = (layers.iter())
        .map(|l| wider.scan_blob(l.as_slice()).unwrap())
        .map(|f| LayerFiles::decode(&f.encode()).unwrap())
        .collect();
    let files = files(&again);
    assert_eq!(
        files[STATUS],
        b"Package: top\n\0\xc3\xbf".to_vec(),
        "bytes as written"
    );
    assert!(!files.contains_key(OS_RELEASE), "{files:?}");

    let mut other = serde_json::from_slice::<serde_json::Value>(&scanned[0].encode()).unwrap();
    other["format"] = 2.into();
    assert!(LayerFiles::decode(&serde_json::to_vec(&other).unwrap()).is_none());
    assert!(LayerFiles::decode(b"{\"format\":1").is_none());
}
