//! Debian candidates for the apt-installed toolchains, asked where the build
//! would install them: a throw-away container of the upstream image (its
//! sources, plus the suites the packages name) running `apt-cache`. A
//! package pinned by a series (`golang-${GO_SERIES}-go`) is compared with
//! the newest series the archive has a candidate for.

use super::{Row, Status};
use crate::engine::{Engine, ToolRun};
use crate::manifest::{Manifest, Package, Source};
use crate::semver_rules::version_step;
use crate::versions::lenient_version;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// `apt-cache policy` output: package -> candidate (`None` for `(none)`).
pub(crate) fn parse_policy(text: &str) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            current = Some(line.trim_end_matches(':').to_string());
            continue;
        }
        if let (Some(name), Some(candidate)) = (&current, line.trim().strip_prefix("Candidate: ")) {
            let c = candidate.trim();
            out.insert(name.clone(), (c != "(none)").then(|| c.to_string()));
        }
    }
    out
}

/// The upstream part of a Debian version: `2:1.27.4-1~bpo13+1` -> `1.27.4`.
pub(crate) fn upstream_version(debian: &str) -> &str {
    let no_epoch = debian.split_once(':').map_or(debian, |(_, v)| v);
    no_epoch.rsplit_once('-').map_or(no_epoch, |(v, _)| v)
}

/// The other names a series template matches: `golang-${GO_SERIES}-go`
/// with `golang-1.28-go` gives `1.28`.
pub(crate) fn series_of(template: &str, arg: &str, name: &str) -> Option<String> {
    let (prefix, suffix) = template.split_once(&format!("${{{arg}}}"))?;
    let middle = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (!middle.is_empty() && middle.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .then(|| middle.to_string())
}

fn packages(manifest: &Manifest) -> Vec<(&str, &Package)> {
    manifest
        .fragments
        .values()
        .flat_map(|f| f.packages.iter().map(move |p| (f.name.as_str(), p)))
        .filter(|(_, p)| p.source == Source::Debian)
        .collect()
}

/// The script the container runs: extra suites, one update, the names a
/// template can match, and the policy of each.
fn script(list: &[(&str, &Package)]) -> String {
    let mut s = String::from("set -eu\n. /run/sunaba/lib/common.sh\n");
    if list.iter().any(|(_, p)| {
        p.suite
            .as_deref()
            .is_some_and(|x| x.ends_with("-backports"))
    }) {
        s.push_str("apt_add_backports\n");
    }
    s.push_str("apt-get update -qq >/dev/null\nnames=''\n");
    for (_, p) in list {
        let marker = p.arg.as_ref().map(|a| format!("${{{a}}}"));
        match marker.and_then(|m| {
            p.name_template
                .split_once(&m)
                .map(|(a, b)| (a.to_string(), b.to_string()))
        }) {
            Some((prefix, suffix)) => {
                let re = format!(
                    "^{}[0-9.]+{}$",
                    regex::escape(&prefix),
                    regex::escape(&suffix)
                );
                s.push_str(&format!(
                    "names=\"$names $(apt-cache pkgnames {} | grep -E {} | tr '\\n' ' ')\"\n",
                    crate::process::sh_quote(&prefix),
                    crate::process::sh_quote(&re)
                ));
            }
            None => s.push_str(&format!(
                "names=\"$names {}\"\n",
                crate::process::sh_quote(&p.name)
            )),
        }
    }
    s.push_str("# shellcheck disable=SC2086\napt-cache policy $names\n");
    s
}

/// One row per Debian package, from one container run.
pub(crate) fn rows(manifest: &Manifest, engine: &dyn Engine, image: &str, lib: &Path) -> Vec<Row> {
    let list = packages(manifest);
    if list.is_empty() {
        return Vec::new();
    }
    let run = ToolRun {
        image: image.to_string(),
        script: script(&list),
        mounts: vec![(lib.to_path_buf(), "/run/sunaba/lib".into(), true)],
        env: Vec::new(),
        timeout: Duration::from_secs(300),
    };
    let policy = match engine.run_tool(&run) {
        Ok(out) if out.success() => Ok(parse_policy(&out.stdout)),
        Ok(out) => Err(format!(
            "apt-cache in {image} failed: {}",
            crate::process::tail_lines(&out.stderr, 3).replace('\n', " ")
        )),
        Err(e) => Err(e.to_string()),
    };
    match policy {
        Ok(policy) => list.into_iter().map(|(f, p)| row(f, p, &policy)).collect(),
        Err(e) => rows_failed(manifest, &e),
    }
}

/// The rows when the archive could not be asked, each saying why.
pub(crate) fn rows_failed(manifest: &Manifest, why: &str) -> Vec<Row> {
    packages(manifest)
        .into_iter()
        .map(|(fragment, p)| Row {
            note: why.to_string(),
            ..blank(fragment, p)
        })
        .collect()
}

fn blank(fragment: &str, p: &Package) -> Row {
    Row::blank(fragment, p, "debian")
}

fn row(fragment: &str, p: &Package, policy: &BTreeMap<String, Option<String>>) -> Row {
    let mut r = blank(fragment, p);
    let candidate = policy.get(&p.name).cloned().flatten();
    let Some(candidate) = candidate else {
        r.note = format!("{} has no candidate in the archive", p.name);
        return r;
    };
    let (Some(arg), Some(series)) = (&p.arg, &p.pinned) else {
        // Not pinned: the archive decides; report what it serves.
        r.latest = Some(upstream_version(&candidate).to_string());
        r.wanted = r.latest.clone();
        r.status = Status::Info;
        r.note = format!("{} {candidate}", p.name);
        return r;
    };
    // The newest series the archive has a candidate for.
    let mut newest = (lenient_version(series), series.clone());
    for (name, c) in policy {
        let (Some(s), Some(_)) = (series_of(&p.name_template, arg, name), c) else {
            continue;
        };
        if let Some(v) = lenient_version(&s)
            && newest.0.as_ref().is_none_or(|n| v > *n)
        {
            newest = (Some(v), s);
        }
    }
    r.wanted = Some(newest.1.clone());
    r.latest = Some(newest.1.clone());
    r.note = format!("{} {candidate}", p.name);
    match (lenient_version(series), newest.0) {
        (Some(pin), Some(best)) if best > pin => {
            r.bump = version_step(&pin, &best).to_string();
            r.status = Status::Behind;
        }
        _ => r.status = Status::Current,
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_versions_and_series() {
        let text = "golang-1.27-go:\n  Installed: (none)\n  Candidate: 1.27.4-1~bpo13+1\n  Version table:\n     1.27.4-1~bpo13+1 100\n        100 http://deb.debian.org/debian trixie-backports/main amd64 Packages\ngolang-1.28-go:\n  Installed: (none)\n  Candidate: (none)\npython3:\n  Installed: (none)\n  Candidate: 3.13.5-1\n";
        let p = parse_policy(text);
        assert_eq!(p["golang-1.27-go"].as_deref(), Some("1.27.4-1~bpo13+1"));
        assert_eq!(p["golang-1.28-go"], None);
        assert_eq!(p["python3"].as_deref(), Some("3.13.5-1"));
        assert_eq!(upstream_version("2:1.27.4-1~bpo13+1"), "1.27.4");
        assert_eq!(upstream_version("3.13.5-1"), "3.13.5");
        let t = "golang-${GO_SERIES}-go";
        assert_eq!(
            series_of(t, "GO_SERIES", "golang-1.28-go").as_deref(),
            Some("1.28")
        );
        assert_eq!(series_of(t, "GO_SERIES", "golang-1.28-src"), None);
        assert_eq!(series_of(t, "GO_SERIES", "golang-go"), None);
    }
}
