//! `outdated --format github`: an `::error` per pin behind its track and per
//! row that could not be checked, a `::warning` per current pin held back on
//! its track, each titled `outdated: <fragment>/<package>` and at the line
//! of images.toml that pins it (the build argument's value, else the
//! package's entry; the upstream at its `upstream`).

use super::{Row, Status};
use crate::github::{Annotation, toml_key_line, toml_line};
use std::path::Path;

/// The annotations of `rows`; `manifest` is images.toml's path and text,
/// `profile` the profile whose `upstream` may be the one in force.
pub(crate) fn annotations(
    rows: &[Row],
    manifest: (&Path, &str),
    profile: Option<&str>,
) -> Vec<Annotation> {
    let (path, text) = manifest;
    let mut out = Vec::new();
    for r in rows {
        let name = match r.fragment.as_str() {
            "-" => r.package.clone(),
            f => format!("{f}/{}", r.package),
        };
        let pinned = r.pinned.as_deref().unwrap_or("-");
        let note = match r.note.is_empty() {
            true => String::new(),
            false => format!(" ({})", r.note),
        };
        let a = match r.status {
            Status::Behind => Annotation::error(
                0,
                format!(
                    "{name} is behind: pinned {pinned}, the newest on its track is {} \
                     ({} bump; latest {}){note}",
                    r.wanted.as_deref().unwrap_or("-"),
                    r.bump,
                    r.latest.as_deref().unwrap_or("-")
                ),
            ),
            Status::Error => Annotation::error(1, format!("{name}: could not be checked{note}")),
            Status::Current if !r.note.is_empty() => {
                Annotation::warning(0, format!("{name} {pinned}: {}", r.note))
            }
            Status::Current | Status::Info => continue,
        };
        let line = line(text, r, profile);
        out.push(a.at(path, line).title(format!("outdated: {name}")));
    }
    out
}

/// Where `r` is pinned in images.toml.
fn line(text: &str, r: &Row, profile: Option<&str>) -> Option<usize> {
    if r.fragment == "-" {
        let in_profile = profile.and_then(|p| {
            let table = format!("profiles.{p}");
            let key = toml_line(text, &table, Some("upstream"));
            (key != toml_line(text, &table, None))
                .then_some(key)
                .flatten()
        });
        return in_profile.or_else(|| toml_key_line(text, &["upstream"]));
    }
    let args = format!("fragments.{}.args", r.fragment);
    let packages = format!("fragments.{}.packages", r.fragment);
    let exact = |table: &str, key: &str| {
        let at = toml_line(text, table, Some(key));
        (at != toml_line(text, table, None)).then_some(at).flatten()
    };
    r.arg
        .as_deref()
        .and_then(|arg| exact(&args, arg).or_else(|| exact("args", arg)))
        .or_else(|| toml_line(text, &packages, Some(&r.package)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fragment: &str, package: &str, arg: Option<&str>, status: Status, note: &str) -> Row {
        Row {
            fragment: fragment.into(),
            package: package.into(),
            registry: "pypi".into(),
            arg: arg.map(str::to_string),
            pinned: Some("1.0.0".into()),
            wanted: Some("1.1.0".into()),
            latest: Some("2.0.0".into()),
            bump: "minor".into(),
            status,
            note: note.into(),
        }
    }

    #[test]
    fn behind_and_unchecked_are_errors_at_their_pin_held_ones_warnings() {
        let text = "upstream = \"d@sha256:0\"\n[args]\nSHARED = \"1\"\n\
                    [fragments.py.args]\nUV_VERSION = \"1.0.0\"\n\
                    [fragments.py.packages]\nuv = { arg = \"UV_VERSION\" }\n\
                    pytest = { arg = \"SHARED\" }\nnode = { arg = \"NODE\" }\n\
                    [profiles.local]\nupstream = \"e\"\n";
        let rows = [
            row("py", "uv", Some("UV_VERSION"), Status::Behind, ""),
            row("py", "pytest", Some("SHARED"), Status::Error, "HTTP 503"),
            row("py", "node", Some("NODE"), Status::Current, "held on 1.x"),
            row("py", "python3", None, Status::Info, "the archive's"),
            row("-", "upstream", Some("upstream"), Status::Behind, ""),
        ];
        let got = |profile| -> Vec<String> {
            annotations(&rows, (Path::new("images.toml"), text), profile)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let all = got(None);
        assert_eq!(
            all[..3],
            [
                "::error file=images.toml,line=5,title=outdated%3A py/uv::py/uv is behind: pinned 1.0.0, the newest on its track is 1.1.0 (minor bump; latest 2.0.0)",
                "::error file=images.toml,line=3,title=outdated%3A py/pytest::py/pytest: could not be checked (HTTP 503)",
                "::warning file=images.toml,line=9,title=outdated%3A py/node::py/node 1.0.0: held on 1.x",
            ]
        );
        assert_eq!(all.len(), 4, "nothing for an informational row");
        assert!(all[3].starts_with(
            "::error file=images.toml,line=1,title=outdated%3A upstream::upstream is behind"
        ));
        assert!(got(Some("local"))[3].starts_with("::error file=images.toml,line=11,"));
    }
}
