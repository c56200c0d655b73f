//! The state files two package installs both rewrite whole, merged stanza
//! by stanza: dpkg's database (`var/lib/dpkg/status`) and apt's marks of
//! automatically installed packages (`var/lib/apt/extended_states`). Both
//! are deb822 files of one stanza per package and architecture; each
//! member fragment's layer holds the file as the parent's plus what that
//! fragment's install changed, so the union is a three-way merge against
//! the parent: a stanza no member changed stays, a stanza one member
//! changed takes that change, and two members changing one stanza the same
//! way (a dependency both install, at one version) is one change. Two
//! members changing it differently is refused, naming both fragments.
//!
//! The merged file lists its stanzas sorted by package, then architecture,
//! as dpkg writes its status; a stanza's own lines are kept byte for byte.

use std::collections::BTreeMap;

/// The state files the composer merges, each with why two installs both
/// write it (found by diffing the real family's member layers:
/// `scripts/compose-survey`, docs/lab-notes.md).
pub(crate) const STATE_FILES: &[(&str, &str)] = &[
    (
        STATUS,
        "dpkg's database of installed packages: every install rewrites it whole",
    ),
    (
        EXTENDED_STATES,
        "apt's marks of automatically installed packages: every apt install rewrites it whole",
    ),
];

/// Whether `path` (relative to the image's root, no leading `/`) is a
/// state file the composer merges.
pub(crate) fn is_state_file(path: &str) -> bool {
    STATE_FILES.iter().any(|(p, _)| *p == path)
}

/// Why state files could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateError {
    /// Not a deb822 file of package stanzas.
    #[error("{file} of {whose}: line {line}: {problem}")]
    Malformed {
        file: String,
        /// `the parent` or `fragment NAME`.
        whose: String,
        line: usize,
        problem: String,
    },
    /// Two member fragments changed one package's stanza differently.
    #[error(transparent)]
    Conflict(Box<StanzaConflict>),
}

/// Two member fragments changed one package's stanza differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{file}: fragments `{first}` and `{second}` both change package {package} ({architecture}) \
     and differently ({first}: {first_gives}; {second}: {second_gives}); {advice}"
)]
pub(crate) struct StanzaConflict {
    pub(crate) file: String,
    pub(crate) package: String,
    pub(crate) architecture: String,
    pub(crate) first: String,
    pub(crate) second: String,
    /// What each leaves: its first line the other's lacks
    /// (`` `Version: 1.2-1` ``), or `removed`.
    pub(crate) first_gives: String,
    pub(crate) second_gives: String,
    pub(crate) advice: &'static str,
}

/// A stanza's key: (package, architecture; empty when the stanza has none).
type Key = (String, String);

use crate::image::dpkg::Stanza;

/// The stanzas of a deb822 package file, by key, each its own lines with
/// their newlines.
fn stanzas(file: &str, whose: &str, text: &str) -> Result<Stanzas, StateError> {
    let malformed = |line: usize, problem: String| StateError::Malformed {
        file: file.to_string(),
        whose: whose.to_string(),
        line,
        problem,
    };
    let mut out = BTreeMap::new();
    let read = crate::image::dpkg::stanzas(text).map_err(|m| malformed(m.line, m.problem))?;
    for stanza in read {
        let package = stanza
            .field("package")
            .ok_or_else(|| malformed(stanza.line, "a stanza without a Package field".into()))?;
        let key = (
            package.to_string(),
            stanza.field("architecture").unwrap_or_default().to_string(),
        );
        if out.contains_key(&key) {
            return Err(malformed(
                stanza.line,
                format!("package {} ({}) has a second stanza", key.0, key.1),
            ));
        }
        out.insert(key, stanza);
    }
    Ok(out)
}

/// A file's stanzas by key.
type Stanzas = BTreeMap<Key, Stanza>;

/// The merged file's text: its stanzas in key order, a blank line between.
fn text_of(stanzas: &Stanzas) -> String {
    stanzas
        .values()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a member leaves of one stanza, for an error: its version, or that
/// it removed it.
fn gives(stanza: Option<&Stanza>, other: Option<&Stanza>) -> String {
    match stanza.map(|s| &s.text) {
        None => "removed".to_string(),
        Some(text) => {
            // Against a removal, what it keeps: its version.
            let theirs: Vec<&str> = other.map(|o| o.text.lines().collect()).unwrap_or_else(|| {
                text.lines()
                    .filter(|l| !l.starts_with("Version:"))
                    .collect()
            });
            text.lines()
                .find(|l| !theirs.contains(l))
                .map(|l| format!("`{}`", crate::image::entries::shown(l.trim())))
                .unwrap_or_else(|| "its fields in another order".to_string())
        }
    }
}

/// What to change when two fragments change one stanza differently.
fn advice(file: &str) -> &'static str {
    if file == EXTENDED_STATES {
        "install it the same way in both fragments (by name in both, or in the parent)"
    } else {
        "install one version of it in both fragments (pin it in both, or install it in the parent)"
    }
}

/// The state file `file` of the union: `parent`'s (None: the parent has
/// none) merged with each member's, given as (fragment, its file; None
/// when the member's layers leave it as the parent's). The plan merges
/// files already read ([`merge_all`]); the tests merge texts.
#[cfg(test)]
fn merge(
    file: &str,
    parent: Option<&str>,
    members: &[(&str, Option<&str>)],
) -> Result<String, StateError> {
    let base = stanzas(file, "the parent", parent.unwrap_or(""))?;
    let mut theirs = Vec::new();
    for (fragment, text) in members {
        let read = text
            .map(|t| stanzas(file, &format!("fragment `{fragment}`"), t))
            .transpose()?;
        theirs.push((*fragment, read));
    }
    let refs: Vec<(&str, Option<&Stanzas>)> =
        theirs.iter().map(|(f, s)| (*f, s.as_ref())).collect();
    merge_stanzas(file, &base, &refs).map(|m| text_of(&m))
}

/// [`merge`] of files already read. Stanzas are compared by their text
/// (where each sits in its file does not matter).
fn merge_stanzas(
    file: &str,
    base: &Stanzas,
    members: &[(&str, Option<&Stanzas>)],
) -> Result<Stanzas, StateError> {
    let mut merged = base.clone();
    // Key -> (the fragment that changed it, what it left).
    let mut changed: BTreeMap<&Key, (&str, Option<&Stanza>)> = BTreeMap::new();
    for (fragment, theirs) in members {
        let Some(theirs) = theirs else { continue };
        let keys: std::collections::BTreeSet<&Key> = base.keys().chain(theirs.keys()).collect();
        for key in keys {
            let now = theirs.get(key);
            if base.get(key).map(|s| &s.text) == now.map(|s| &s.text) {
                continue;
            }
            if let Some((first, left)) = changed.get(key) {
                if left.map(|s| &s.text) != now.map(|s| &s.text) {
                    return Err(StateError::Conflict(Box::new(StanzaConflict {
                        file: file.to_string(),
                        package: crate::image::entries::shown(&key.0),
                        architecture: crate::image::entries::shown(&key.1),
                        first: first.to_string(),
                        second: fragment.to_string(),
                        first_gives: gives(*left, now),
                        second_gives: gives(now, *left),
                        advice: advice(file),
                    })));
                }
                continue;
            }
            changed.insert(key, (fragment, now));
            match now {
                Some(stanza) => merged.insert(key.clone(), stanza.clone()),
                None => merged.remove(key),
            };
        }
    }
    Ok(merged)
}

/// dpkg's status and apt's marks, as merged above.
const STATUS: &str = "var/lib/dpkg/status";
const EXTENDED_STATES: &str = "var/lib/apt/extended_states";

/// The state files of the union, each merged ([`merge`]) from `parent`'s
/// (path -> text, the files as the parent leaves them) and each member's
/// (fragment, the files its layer writes), in [`STATE_FILES`] order; a
/// file none of them has is left out.
///
/// apt's marks need one rule more than a three-way merge: a package with
/// no mark is a package installed by hand, so a member that installed a
/// package by name says so by leaving it unmarked, and the merge cannot
/// see that as a change. apt keeps a package by-hand once any install
/// names it, whatever came before or after, so the union's marks drop the
/// automatic mark of every package a member newly installed without one —
/// as the Dockerfile's fragments, run one after the other, would leave it.
pub(crate) fn merge_all(
    parent: &BTreeMap<String, String>,
    members: &[(&str, BTreeMap<String, String>)],
) -> Result<Vec<MergedState>, StateError> {
    // Each file is read once; the marks' rule uses the statuses read.
    let read = |whose: &str, files: &BTreeMap<String, String>| {
        let mut out: BTreeMap<&str, Stanzas> = BTreeMap::new();
        for (path, _) in STATE_FILES {
            if let Some(text) = files.get(*path) {
                out.insert(path, stanzas(path, whose, text)?);
            }
        }
        Ok::<_, StateError>(out)
    };
    let below = read("the parent", parent)?;
    let mut theirs = Vec::new();
    for (fragment, files) in members {
        theirs.push((*fragment, read(&format!("fragment `{fragment}`"), files)?));
    }
    let none = Stanzas::new();
    let mut out = Vec::new();
    for (path, _why) in STATE_FILES {
        let of: Vec<(&str, Option<&Stanzas>)> = theirs
            .iter()
            .map(|(f, files)| (*f, files.get(path)))
            .collect();
        if !below.contains_key(path) && of.iter().all(|(_, s)| s.is_none()) {
            continue;
        }
        let mut merged = merge_stanzas(path, below.get(path).unwrap_or(&none), &of)?;
        if *path == EXTENDED_STATES {
            let by_hand = installed_by_hand(&below, &theirs);
            merged.retain(|key, _| {
                !by_hand.contains(key) && !by_hand.contains(&(key.0.clone(), "all".to_string()))
            });
        }
        out.push(MergedState {
            path: path.to_string(),
            stanzas: merged.len(),
            bytes: text_of(&merged).into_bytes(),
            mode: 0o644,
            uid: 0,
            gid: 0,
        });
    }
    Ok(out)
}

/// A merged state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergedState {
    pub(crate) path: String,
    pub(crate) stanzas: usize,
    pub(crate) bytes: Vec<u8>,
    /// Mode and owner: the topmost member layer's that writes it (dpkg and
    /// apt write these files 0644 root:root).
    pub(crate) mode: u32,
    pub(crate) uid: u64,
    pub(crate) gid: u64,
}

/// The packages a member newly installed without an automatic mark (see
/// [`merge_all`]), keyed as dpkg's status keys them.
fn installed_by_hand(
    parent: &BTreeMap<&str, Stanzas>,
    members: &[(&str, BTreeMap<&str, Stanzas>)],
) -> std::collections::BTreeSet<Key> {
    let none = Stanzas::new();
    let installed_below = parent.get(STATUS).unwrap_or(&none);
    let mut by_hand = std::collections::BTreeSet::new();
    for (_, files) in members {
        let Some(installed) = files.get(STATUS) else {
            continue;
        };
        // A member that left apt's marks as they were has the parent's.
        let own_marks = files
            .get(EXTENDED_STATES)
            .or(parent.get(EXTENDED_STATES))
            .unwrap_or(&none);
        let marked_auto = |(name, arch): &Key| {
            own_marks.iter().any(|((n, a), mark)| {
                n == name
                    && (a == arch || arch == "all")
                    && mark.field("auto-installed") == Some("1")
            })
        };
        for (key, stanza) in installed {
            let is_installed = stanza
                .field("status")
                .is_some_and(|s| s.ends_with(" installed"));
            if is_installed && !installed_below.contains_key(key) && !marked_auto(key) {
                by_hand.insert(key.clone());
            }
        }
    }
    by_hand
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stanza(package: &str, version: &str) -> String {
        format!(
            "Package: {package}\nStatus: install ok installed\nArchitecture: amd64\n\
             Version: {version}\nDescription: {package}\n a long description\n"
        )
    }

    fn file(stanzas: &[String]) -> String {
        stanzas.join("\n")
    }

    #[test]
    fn each_members_new_packages_join_the_parents_sorted_and_a_shared_dependency_is_listed_once() {
        let parent = file(&[stanza("base-files", "13"), stanza("zlib1g", "1.3")]);
        let python = file(&[
            stanza("base-files", "13"),
            stanza("python3", "3.13"),
            stanza("libffi8", "3.4"),
            stanza("zlib1g", "1.3"),
        ]);
        let go = file(&[
            stanza("golang-go", "1.27"),
            stanza("base-files", "13"),
            stanza("libffi8", "3.4"),
            stanza("zlib1g", "1.3"),
        ]);
        let merged = merge(
            STATUS,
            Some(&parent),
            &[("python", Some(&python)), ("go", Some(&go)), ("js", None)],
        )
        .unwrap();
        assert_eq!(
            merged,
            file(&[
                stanza("base-files", "13"),
                stanza("golang-go", "1.27"),
                stanza("libffi8", "3.4"),
                stanza("python3", "3.13"),
                stanza("zlib1g", "1.3"),
            ])
        );
    }

    #[test]
    fn one_members_upgrade_and_removal_are_kept() {
        let parent = file(&[stanza("a", "1"), stanza("b", "1"), stanza("c", "1")]);
        let one = file(&[stanza("a", "2"), stanza("c", "1")]);
        let other = file(&[
            stanza("a", "1"),
            stanza("b", "1"),
            stanza("c", "1"),
            stanza("d", "1"),
        ]);
        let merged = merge(
            STATUS,
            Some(&parent),
            &[("one", Some(&one)), ("other", Some(&other))],
        )
        .unwrap();
        assert_eq!(
            merged,
            file(&[stanza("a", "2"), stanza("c", "1"), stanza("d", "1")])
        );
    }

    #[test]
    fn two_members_installing_one_package_at_two_versions_are_refused_naming_both() {
        let parent = file(&[stanza("base-files", "13")]);
        let python = file(&[stanza("base-files", "13"), stanza("libssl3", "3.0.1")]);
        let go = file(&[stanza("base-files", "13"), stanza("libssl3", "3.0.2")]);
        let err = merge(
            STATUS,
            Some(&parent),
            &[("python", Some(&python)), ("go", Some(&go))],
        )
        .unwrap_err();
        assert_eq!(
            err,
            StateError::Conflict(Box::new(StanzaConflict {
                file: STATUS.into(),
                package: "libssl3".into(),
                architecture: "amd64".into(),
                first: "python".into(),
                second: "go".into(),
                first_gives: "`Version: 3.0.1`".into(),
                second_gives: "`Version: 3.0.2`".into(),
                advice: advice(STATUS),
            }))
        );
        let shown = err.to_string();
        assert!(shown.contains("fragments `python` and `go`"), "{shown}");
        // One removing what the other upgrades is a conflict too.
        let removes = file(&[]);
        let upgrades = file(&[stanza("base-files", "14")]);
        let err = merge(
            STATUS,
            Some(&parent),
            &[("a", Some(&removes)), ("b", Some(&upgrades))],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("(a: removed; b: `Version: 14`)"),
            "{err}"
        );
    }

    #[test]
    fn the_same_package_for_two_architectures_is_two_stanzas() {
        let amd = stanza("libc6", "2.41");
        let arm = amd.replace("amd64", "arm64");
        let merged = merge(STATUS, None, &[("a", Some(&amd)), ("b", Some(&arm))]).unwrap();
        assert_eq!(merged, file(&[amd, arm]));
    }

    #[test]
    fn apt_extended_states_merge_the_same_way() {
        let mark = |p: &str| format!("Package: {p}\nArchitecture: amd64\nAuto-Installed: 1\n");
        let parent = file(&[mark("libz")]);
        let merged = merge(
            "var/lib/apt/extended_states",
            Some(&parent),
            &[
                ("python", Some(&file(&[mark("libz"), mark("libpython")]))),
                ("go", Some(&file(&[mark("libgo"), mark("libz")]))),
            ],
        )
        .unwrap();
        assert_eq!(
            merged,
            file(&[mark("libgo"), mark("libpython"), mark("libz")])
        );
    }

    #[test]
    fn a_package_one_member_installs_by_name_stays_by_hand_though_another_pulled_it_in() {
        // python installs libfoo by name (no mark); go's tool depends on it
        // (an automatic mark). Run one after the other, in either order,
        // apt leaves libfoo by hand: the union has no mark for it.
        let mark = |p: &str| format!("Package: {p}\nArchitecture: amd64\nAuto-Installed: 1\n");
        let files = |status: &[String], marks: &[String]| {
            BTreeMap::from([
                (STATUS.to_string(), file(status)),
                (EXTENDED_STATES.to_string(), file(marks)),
            ])
        };
        let parent = files(&[stanza("base-files", "13")], &[]);
        let python = files(&[stanza("base-files", "13"), stanza("libfoo", "1")], &[]);
        let go = files(
            &[
                stanza("base-files", "13"),
                stanza("golang", "1"),
                stanza("libfoo", "1"),
                stanza("libdep", "1"),
            ],
            &[mark("libdep"), mark("libfoo")],
        );
        let merged = merge_all(&parent, &[("python", python), ("go", go)]).unwrap();
        assert_eq!(merged[0].path, STATUS);
        assert_eq!(
            (
                merged[1].path.as_str(),
                String::from_utf8_lossy(&merged[1].bytes)
            ),
            (EXTENDED_STATES, file(&[mark("libdep")]).into())
        );
        // An arch-all package is marked under the native architecture.
        let all = stanza("tzdata", "1").replace("amd64", "all");
        let by_name = files(&[stanza("base-files", "13"), all.clone()], &[]);
        let pulled = files(&[stanza("base-files", "13"), all], &[mark("tzdata")]);
        let merged = merge_all(&parent, &[("a", by_name), ("b", pulled)]).unwrap();
        assert_eq!(String::from_utf8_lossy(&merged[1].bytes), "");
    }

    #[test]
    fn a_member_that_left_apts_marks_alone_has_the_parents_and_removed_packages_are_no_install() {
        let mark = |p: &str| format!("Package: {p}\nArchitecture: amd64\nAuto-Installed: 1\n");
        let parent = BTreeMap::from([
            (STATUS.to_string(), file(&[stanza("base-files", "13")])),
            (EXTENDED_STATES.to_string(), file(&[mark("libdep")])),
        ]);
        // `a` installs libdep, which the parent already marks automatic
        // (a mark left from an earlier removal), and writes no marks; it
        // leaves a removed package's config behind: not an install.
        let leftover =
            stanza("oldtool", "1").replace("install ok installed", "deinstall ok config-files");
        let a = BTreeMap::from([(
            STATUS.to_string(),
            file(&[
                stanza("base-files", "13"),
                stanza("libdep", "1"),
                leftover.clone(),
            ]),
        )]);
        // `b` marks oldtool automatic.
        let b = BTreeMap::from([
            (
                STATUS.to_string(),
                file(&[stanza("base-files", "13"), leftover]),
            ),
            (
                EXTENDED_STATES.to_string(),
                file(&[mark("libdep"), mark("oldtool")]),
            ),
        ]);
        let merged = merge_all(&parent, &[("a", a), ("b", b)]).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&merged[1].bytes),
            file(&[mark("libdep"), mark("oldtool")])
        );
    }

    #[test]
    fn two_members_marking_one_package_differently_are_told_how_to_agree() {
        let auto = "Package: libz\nArchitecture: amd64\nAuto-Installed: 1\n";
        let manual = "Package: libz\nArchitecture: amd64\nAuto-Installed: 0\n";
        let err = merge(
            EXTENDED_STATES,
            None,
            &[("a", Some(auto)), ("b", Some(manual))],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with(
                "(a: `Auto-Installed: 1`; b: `Auto-Installed: 0`); install it the same way in \
                 both fragments (by name in both, or in the parent)"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_file_that_is_not_stanzas_is_refused_naming_the_file_whose_and_the_line() {
        let bad = "Package: a\nno colon here\n";
        let err = merge(STATUS, None, &[("python", Some(bad))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "var/lib/dpkg/status of fragment `python`: line 2: `no colon here` is neither \
             `Field: value` nor a continuation"
        );
        let twice = file(&[stanza("a", "1"), stanza("a", "2")]);
        let err = merge(STATUS, Some(&twice), &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("the parent: line 8: package a (amd64) has a second stanza"),
            "{err}"
        );
        let nameless = "Status: install ok installed\n";
        let err = merge(STATUS, None, &[("js", Some(nameless))]).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("line 1: a stanza without a Package field"),
            "{err}"
        );
    }
}
