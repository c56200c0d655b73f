//! Where a rebuilt image differs from the pinned one: the config's labels
//! (the package record and the check record read as such), then the first
//! layer whose diff_id differs, entry by entry (what differs: content,
//! mtime, mode, owner, link target, presence).

use crate::image::compress::Hashing;
use crate::labels::{self, CheckRecord, PackageRecord};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;

/// How many differing entries a verdict lists (then "… and N more").
pub(crate) const ENTRIES_SHOWN: usize = 10;

/// One entry of a layer, as compared: everything but the bytes, which are
/// hashed as they stream past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub kind: char,
    pub mode: u32,
    pub owner: (u64, u64),
    pub mtime: u64,
    pub size: u64,
    pub link: String,
    pub content: String,
}

/// The entries of a layer tar by path (a path written twice: its last).
/// The tar's extension headers are bounded (see [`crate::image::entries`]).
pub(crate) fn index_layer(input: impl Read) -> std::io::Result<BTreeMap<String, Facts>> {
    let mut out = BTreeMap::new();
    let mut archive = crate::image::entries::BoundedTar::new(input);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let h = entry.header();
        let kind = match h.entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => 'f',
            tar::EntryType::Directory => 'd',
            tar::EntryType::Symlink => 'l',
            tar::EntryType::Link => 'h',
            tar::EntryType::Char => 'c',
            tar::EntryType::Block => 'b',
            tar::EntryType::Fifo => 'p',
            _ => continue,
        };
        let path = String::from_utf8_lossy(&entry.path_bytes())
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        let facts_head = (
            h.mode().unwrap_or(0),
            (h.uid().unwrap_or(0), h.gid().unwrap_or(0)),
            h.mtime().unwrap_or(0),
            entry.size(),
            entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default(),
        );
        let mut hash = Hashing::new(std::io::sink());
        std::io::copy(&mut entry, &mut hash)?;
        let (mode, owner, mtime, size, link) = facts_head;
        out.insert(
            path,
            Facts {
                kind,
                mode,
                owner,
                mtime,
                size,
                link,
                content: hash.finish().0.trim_start_matches("sha256:").to_string(),
            },
        );
    }
    Ok(out)
}

/// One line per entry that differs between the pinned layer and the
/// rebuilt one, sorted by path: `opt/stamp: content sha256:12ab…(11 B) →
/// sha256:34cd…(11 B)`, `etc/x: mtime 1700000000 → 1700000050`.
pub(crate) fn entry_changes(
    pinned: &BTreeMap<String, Facts>,
    rebuilt: &BTreeMap<String, Facts>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, was) in pinned {
        let Some(now) = rebuilt.get(path) else {
            out.push(format!("{path}: only in the pinned image"));
            continue;
        };
        let mut what = Vec::new();
        if was.kind != now.kind {
            what.push(format!("type {} → {}", was.kind, now.kind));
        }
        if was.content != now.content || was.size != now.size {
            what.push(format!(
                "content sha256:{}…({} B) → sha256:{}…({} B)",
                &was.content[..12],
                was.size,
                &now.content[..12],
                now.size
            ));
        }
        if was.mtime != now.mtime {
            what.push(format!("mtime {} → {}", was.mtime, now.mtime));
        }
        if was.mode != now.mode {
            what.push(format!("mode {:04o} → {:04o}", was.mode, now.mode));
        }
        if was.owner != now.owner {
            let (a, b) = (was.owner, now.owner);
            what.push(format!("owner {}:{} → {}:{}", a.0, a.1, b.0, b.1));
        }
        if was.link != now.link {
            what.push(format!("link {:?} → {:?}", was.link, now.link));
        }
        if !what.is_empty() {
            out.push(format!("{path}: {}", what.join(", ")));
        }
    }
    for path in rebuilt.keys().filter(|p| !pinned.contains_key(*p)) {
        out.push(format!("{path}: only in the rebuild"));
    }
    out.sort();
    out
}

/// How each image was made, when the two differ: one composed from its
/// members' layers (`build`'s default, whose config has the state layer's
/// step), the other built from its Dockerfile; a rebuild made the other
/// way cannot be the pinned image.
pub(crate) fn composition_change(pinned: &Value, rebuilt: &Value) -> Option<String> {
    match (was_composed(pinned), was_composed(rebuilt)) {
        (true, false) => Some(
            "made: the pinned image was composed from its members' layers, the rebuild built from \
             its Dockerfile: verify without `--from-dockerfile`"
                .to_string(),
        ),
        (false, true) => Some(
            "made: the pinned image was built from its Dockerfile, the rebuild composed \
             (the default): verify with `pins verify --rebuild --from-dockerfile`"
                .to_string(),
        ),
        _ => None,
    }
}

/// Whether the image of `config` was composed from its members' layers:
/// its history has the state layer's step.
pub(crate) fn was_composed(config: &Value) -> bool {
    crate::image::config::layer_steps(config)
        .iter()
        .any(|s| s == crate::compose::assemble::STATE_STEP)
}

/// What differs between the pinned config and the rebuilt (stamped) one,
/// besides the layers: packages by fragment, tools of the check record,
/// other labels and settings, one line each.
pub(crate) fn config_changes(pinned: &Value, rebuilt: &Value) -> Vec<String> {
    let labels_of = |c: &Value| -> BTreeMap<String, String> {
        c.pointer("/config/Labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default()
    };
    let (a, b) = (labels_of(pinned), labels_of(rebuilt));
    let mut out = Vec::new();
    let packages = |l: &BTreeMap<String, String>| {
        l.get(labels::PACKAGES)
            .and_then(|v| PackageRecord::parse(v))
            .unwrap_or_default()
    };
    if a.get(labels::PACKAGES) != b.get(labels::PACKAGES) {
        let changes = packages(&a).changes(&packages(&b));
        if changes.is_empty() {
            out.push(format!("label {}: differs", labels::PACKAGES));
        }
        out.extend(changes.into_iter().map(|c| format!("package {c}")));
    }
    if a.get(labels::CHECK) != b.get(labels::CHECK) {
        let record = |l: &BTreeMap<String, String>| {
            l.get(labels::CHECK)
                .and_then(|v| serde_json::from_str::<CheckRecord>(v).ok())
        };
        match (record(&a), record(&b)) {
            (Some(x), Some(y)) if x.tools != y.tools => {
                for (tool, was) in &x.tools {
                    match y.tools.get(tool) {
                        Some(now) if now != was => out.push(format!("tool {tool}: {was} → {now}")),
                        None => out.push(format!("tool {tool}: {was} (gone)")),
                        _ => {}
                    }
                }
                for (tool, now) in y.tools.iter().filter(|(t, _)| !x.tools.contains_key(*t)) {
                    out.push(format!("tool {tool}: {now} (new)"));
                }
            }
            _ => out.push(format!("label {}: the check record differs", labels::CHECK)),
        }
    }
    for key in a
        .keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        if key == labels::PACKAGES || key == labels::CHECK || a.get(key) == b.get(key) {
            continue;
        }
        let show = |v: Option<&String>| match v {
            Some(v) if v.chars().count() > 72 => {
                format!("{:?}…", v.chars().take(72).collect::<String>())
            }
            Some(v) => format!("{v:?}"),
            None => "(none)".into(),
        };
        out.push(format!(
            "label {key}: {} → {}",
            show(a.get(key)),
            show(b.get(key))
        ));
    }
    let settings = |c: &Value| -> BTreeMap<String, Value> {
        c.get("config")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| k.as_str() != "Labels")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (x, y) = (settings(pinned), settings(rebuilt));
    for key in x
        .keys()
        .chain(y.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        if x.get(key) != y.get(key) {
            out.push(format!("config.{key} differs"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn layer(files: &[(&str, &str, u64, u32)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data, mtime, mode) in files {
            let mut h = tar::Header::new_ustar();
            h.set_path(path).unwrap();
            h.set_size(data.len() as u64);
            h.set_mtime(*mtime);
            h.set_mode(*mode);
            h.set_cksum();
            b.append(&h, data.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn entries_that_differ_say_in_what() {
        let pinned = index_layer(
            layer(&[
                ("opt/stamp", "1700000000\n", 1, 0o644),
                ("usr/bin/tool", "x", 1, 0o755),
                ("etc/gone", "", 1, 0o644),
                ("etc/same", "s", 1, 0o644),
            ])
            .as_slice(),
        )
        .unwrap();
        let rebuilt = index_layer(
            layer(&[
                ("opt/stamp", "1700000099\n", 1, 0o644),
                ("usr/bin/tool", "x", 5, 0o700),
                ("etc/same", "s", 1, 0o644),
                ("etc/new", "", 1, 0o644),
            ])
            .as_slice(),
        )
        .unwrap();
        let stamp_was = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"1700000000\n"));
        let stamp_now = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"1700000099\n"));
        assert_eq!(
            entry_changes(&pinned, &rebuilt),
            [
                "etc/gone: only in the pinned image".to_string(),
                "etc/new: only in the rebuild".to_string(),
                format!(
                    "opt/stamp: content sha256:{}…(11 B) → sha256:{}…(11 B)",
                    &stamp_was[..12],
                    &stamp_now[..12]
                ),
                "usr/bin/tool: mtime 1 → 5, mode 0755 → 0700".to_string(),
            ]
        );
        assert!(entry_changes(&pinned, &pinned).is_empty());
    }

    #[test]
    fn a_pax_header_over_its_cap_is_an_error_not_an_allocation() {
        let value = vec![b'v'; 2 << 20];
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("SCHILY.xattr.user.big", value.as_slice())])
            .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(1);
        h.set_cksum();
        b.append_data(&mut h, "etc/x", &b"x"[..]).unwrap();
        let err = index_layer(b.into_inner().unwrap().as_slice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the PAX extended header at byte 0 (entry 1) declares 2097183 bytes, over the cap \
             of 1048576 bytes"
        );
    }

    #[test]
    fn config_changes_read_the_package_and_check_records() {
        let config = |bash: &str, ruff: &str, env: &str| {
            let packages =
                format!(r#"{{"fragments":{{"core":{{"bash:amd64":"{bash}"}}}},"schema":1}}"#);
            let check = format!(r#"{{"schema":1,"status":"pass","tools":{{"ruff":"{ruff}"}}}}"#);
            json!({"config": {"Env": [env], "Labels": {
                labels::PACKAGES: packages, labels::CHECK: check, "a": "1"}}})
        };
        let pinned = config("5.2.37-2", "0.17.6", "A=1");
        assert!(config_changes(&pinned, &pinned).is_empty());
        assert_eq!(
            config_changes(&pinned, &config("5.2.37-2+deb13u1", "0.17.7", "A=2")),
            [
                "package core: bash:amd64 5.2.37-2 → 5.2.37-2+deb13u1",
                "tool ruff: 0.17.6 → 0.17.7",
                "config.Env differs",
            ]
        );
    }

    #[test]
    fn a_rebuild_made_the_other_way_than_its_pin_says_how_to_verify_it() {
        let steps = |steps: &[&str]| serde_json::json!({"history": steps.iter().map(|s| serde_json::json!({"created_by": s})).collect::<Vec<_>>()});
        let composed = steps(&[
            "core",
            "RUN go",
            crate::compose::assemble::STATE_STEP,
            "posture",
        ]);
        let built = steps(&["core", "RUN go", "posture"]);
        assert_eq!(composition_change(&composed, &composed), None);
        assert_eq!(composition_change(&built, &built), None);
        assert!(
            composition_change(&composed, &built)
                .unwrap()
                .ends_with("verify without `--from-dockerfile`")
        );
        assert!(
            composition_change(&built, &composed)
                .unwrap()
                .ends_with("verify with `pins verify --rebuild --from-dockerfile`")
        );
    }
}
