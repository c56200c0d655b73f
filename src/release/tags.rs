//! The tags a release writes, as pure functions: the immutable
//! `<variant>-X.Y.Z`, the moving `<variant>-X.Y`, `<variant>-X` and
//! `<variant>` (each only when the new version is the highest stable one
//! of its line; no `-0` for 0.x; none for a pre-release), and the
//! check that no tag of one variant lands in another's namespace.

use crate::semver_rules::parse_tag;
use semver::Version;
use std::cmp::Ordering;

/// The one tag a version is published under, never moved afterwards.
pub(crate) fn immutable(variant: &str, version: &Version) -> String {
    format!("{variant}-{version}")
}

/// The moving tags `version` takes, most specific first, given the versions
/// of the variant already present (`present` may include `version`): each
/// moves only when no higher stable version of its line is present, so a
/// 1.3.5 hotfix after 1.4.0 moves `-1.3` and neither `-1` nor `<variant>`.
/// 0.x has no `-0` (0.x minors are not compatible with each other); a
/// pre-release gets only its immutable tag.
pub(crate) fn moving(variant: &str, version: &Version, present: &[Version]) -> Vec<String> {
    if !version.pre.is_empty() {
        return Vec::new();
    }
    let highest_of = |line: &dyn Fn(&Version) -> bool| {
        present
            .iter()
            .filter(|v| v.pre.is_empty() && line(v))
            .all(|v| v.cmp_precedence(version) != Ordering::Greater)
    };
    let (major, minor) = (version.major, version.minor);
    let mut tags = Vec::new();
    if highest_of(&|v| v.major == major && v.minor == minor) {
        tags.push(format!("{variant}-{major}.{minor}"));
    }
    if major > 0 && highest_of(&|v| v.major == major) {
        tags.push(format!("{variant}-{major}"));
    }
    if highest_of(&|_| true) {
        tags.push(variant.to_string());
    }
    tags
}

/// The versions of `variant` among a repository's tags.
pub(crate) fn present(variant: &str, tags: &[String]) -> Vec<Version> {
    tags.iter().filter_map(|t| parse_tag(variant, t)).collect()
}

/// Whether `tag` has the shape of one of `variant`'s release tags:
/// `<variant>`, `<variant>-N`, `<variant>-N.N` or `<variant>-X.Y.Z…`.
pub(crate) fn in_namespace_of(variant: &str, tag: &str) -> bool {
    if tag == variant {
        return true;
    }
    let Some(rest) = tag.strip_prefix(variant).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = rest.split('.').collect();
    parse_tag(variant, tag).is_some() || (parts.len() <= 2 && parts.iter().all(|p| numeric(p)))
}

/// The other variant whose namespace `tag` (one of `variant`'s) falls in,
/// e.g. `python-3` of variant `python-3` against variant `python`.
pub(crate) fn claimed_by_other<'a>(variant: &str, tag: &str, all: &'a [String]) -> Option<&'a str> {
    all.iter()
        .map(String::as_str)
        .find(|other| *other != variant && in_namespace_of(other, tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn moving_tags_only_towards_the_highest_stable_version() {
        // (new, present, moving tags)
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("1.0.0", &[], &["py-1.0", "py-1", "py"]),
            ("1.4.0", &["1.3.4"], &["py-1.4", "py-1", "py"]),
            ("1.3.5", &["1.3.4", "1.4.0"], &["py-1.3"]),
            ("1.3.5", &["1.3.6"], &[]),
            ("1.5.0", &["2.1.0", "1.4.0"], &["py-1.5", "py-1"]),
            ("0.3.1", &["0.3.0"], &["py-0.3", "py"]),
            ("0.3.1", &["0.4.0"], &["py-0.3"]),
            ("2.0.0-rc.1", &["1.0.0"], &[]),
            ("1.2.0", &["2.0.0-rc.1"], &["py-1.2", "py-1", "py"]),
            ("1.2.0", &["1.2.0", "1.1.0"], &["py-1.2", "py-1", "py"]),
            ("1.2.0", &["1.2.1"], &[]),
            (
                "3.0.0",
                &["2.9.9", "10.0.0-alpha"],
                &["py-3.0", "py-3", "py"],
            ),
        ];
        for (new, present, want) in cases {
            let present: Vec<Version> = present.iter().map(|p| v(p)).collect();
            assert_eq!(
                moving("py", &v(new), &present),
                *want,
                "{new} with {present:?}"
            );
        }
    }

    #[test]
    fn immutable_tags_and_the_staging_tags_of_older_releases() {
        assert_eq!(immutable("go", &v("1.2.3")), "go-1.2.3");
        assert_eq!(immutable("go", &v("1.2.3-rc.1")), "go-1.2.3-rc.1");
        // Releases before issue 21 staged at `_staging-<variant>-X.Y.Z`;
        // the tags they left are never read as a release.
        let staging = "_staging-go-1.2.3";
        assert!(parse_tag("go", staging).is_none());
        assert!(!in_namespace_of("go", staging));
    }

    #[test]
    fn present_versions_come_from_release_tags_only() {
        let tags: Vec<String> = [
            "go-1.0.0",
            "go",
            "go-1",
            "go-inputs-0123",
            "_staging-go-1.1.0",
            "gox-2.0.0",
            "go-2.0.0-rc.1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(present("go", &tags), [v("1.0.0"), v("2.0.0-rc.1")]);
    }

    #[test]
    fn namespaces_of_variants() {
        let all: Vec<String> = ["python", "python-3", "go"].map(String::from).to_vec();
        assert_eq!(
            claimed_by_other("python-3", "python-3", &all),
            Some("python")
        );
        assert_eq!(claimed_by_other("python", "python-3.1", &all), None);
        assert_eq!(claimed_by_other("python", "python-1.2.0", &all), None);
        assert_eq!(claimed_by_other("python-3", "python-3-1.0.0", &all), None);
        assert_eq!(claimed_by_other("go", "go-1", &all), None);
        for (tag, yes) in [
            ("python", true),
            ("python-3", true),
            ("python-3.1", true),
            ("python-3.1.4", true),
            ("python-3-1.0.0", false),
            ("python-x", false),
            ("python-3.1.4.1", false),
            ("pythons", false),
        ] {
            assert_eq!(in_namespace_of("python", tag), yes, "{tag}");
        }
    }
}
