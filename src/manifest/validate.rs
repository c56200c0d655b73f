//! Validation of a parsed `images.toml`: every cross-reference, name and
//! pattern checked, and every problem collected with its line, key and hint.

use super::problems::{LineIndex, Problem, Problems, known, valid_arg_name, valid_name};
use super::raw::{RawFragment, RawManifest, RawTool, RawVariant};
use super::{FRAGMENT_DIR, Fragment, Manifest, SCHEMA, Tool, Variant, packages, parse_size};
use super::{profile, upstream};
use crate::registry::Platform;
use crate::versions::lenient_version;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use toml::Spanned;

/// The platforms of a `platforms` list at `key`, each parsed once: a
/// repeat, an unparsable one, or (when `within` is not empty) one outside
/// `within` is a problem at its line.
fn platform_list<'a>(
    items: impl IntoIterator<Item = &'a Spanned<String>>,
    key: impl Into<String>,
    within: &[Platform],
    p: &mut Problems,
) -> Vec<Platform> {
    let key = key.into();
    let mut out: Vec<Platform> = Vec::new();
    for pl in items {
        match Platform::parse_normalized(pl.get_ref()) {
            Ok(parsed) if out.contains(&parsed) => p.at(
                pl,
                &key,
                format!("`{parsed}` is listed twice"),
                "remove the repeat",
            ),
            Ok(parsed) if !within.is_empty() && !within.contains(&parsed) => p.at(
                pl,
                &key,
                format!("`{parsed}` is not one of the family's platforms"),
                format!(
                    "use some of: {}",
                    within
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Ok(parsed) => out.push(parsed),
            Err(e) => p.at(pl, &key, format!("{e}"), "write os/arch, e.g. linux/amd64"),
        }
    }
    out
}

/// Checks that a version pattern works both in Rust and in the POSIX ERE
/// engines (grep -E, sed -E) that the generated healthcheck uses.
fn check_version_pattern(pattern: &str) -> Result<(), String> {
    let re = Regex::new(pattern).map_err(|e| format!("not a valid regular expression: {e}"))?;
    if re.captures_len() < 2 {
        return Err("has no capture group; group 1 must capture the version".into());
    }
    for (bad, why) in [
        ("\\d", "`\\d` is not POSIX ERE; use [0-9]"),
        ("\\w", "`\\w` is not POSIX ERE; use [A-Za-z0-9_]"),
        ("\\s", "`\\s` is not POSIX ERE; use [[:space:]]"),
        ("\\b", "`\\b` is not POSIX ERE"),
        ("(?", "`(?...)` groups are not POSIX ERE"),
        ("#", "`#` is the healthcheck's sed delimiter"),
        ("'", "single quotes are not allowed"),
    ] {
        if pattern.contains(bad) {
            return Err(format!("uses {why}"));
        }
    }
    if pattern.contains('\n') {
        return Err("must be a single line".into());
    }
    Ok(())
}

/// Whether `path` (project-relative) stays strictly inside `docker/`.
fn inside_fragment_dir(path: &Path) -> bool {
    let mut comps = path.components();
    if comps.next() != Some(Component::Normal(FRAGMENT_DIR.as_ref())) {
        return false;
    }
    let rest: Vec<_> = comps.collect();
    !rest.is_empty() && rest.iter().all(|c| matches!(c, Component::Normal(_)))
}

pub(super) fn validate(
    mut raw: RawManifest,
    path: &Path,
    root: &Path,
    lines: &LineIndex,
) -> (Manifest, Vec<Problem>) {
    let mut p = Problems::new(lines);
    let platforms = top_level(&raw, &mut p);
    let tools = tools(std::mem::take(&mut raw.tools), &mut p);
    let fragments = fragments(
        std::mem::take(&mut raw.fragments),
        &raw.args,
        root,
        &tools,
        &platforms,
        &mut p,
    );
    let variants = variants(&raw, &fragments, &platforms, &mut p);
    let cycles = parent_cycles(&raw.variants, &mut p);

    // Default and languages.
    if !raw.variants.contains_key(raw.default.get_ref()) {
        p.at(
            &raw.default,
            "default",
            format!("unknown variant `{}`", raw.default.get_ref()),
            format!("use one of: {}", known(raw.variants.keys())),
        );
    }
    let languages = super::languages::validate(raw.languages, &tools, &mut p);
    let language_names = languages.keys().cloned().collect();
    let smoke = super::smoke::validate(raw.smoke, root, &tools, &language_names, &mut p);

    let manifest = Manifest {
        path: path.to_path_buf(),
        root: root.to_path_buf(),
        repository: raw.repository,
        upstream: raw.upstream.into_inner(),
        platforms,
        default: raw.default.into_inner(),
        source: raw.source,
        licenses: raw.licenses,
        languages,
        tools,
        fragments,
        variants,
        profiles: profile::validate(raw.profiles, &mut p),
        smoke,
    };

    // A variant that owes nothing would pass any check: refuse it. Only
    // meaningful once the chain is sound.
    if !cycles {
        for (name, v) in &raw.variants {
            if manifest.owed_tools(name).is_empty() {
                p.at(
                    &v.size_budget,
                    format!("variants.{name}"),
                    "owes no tools",
                    "add a fragment that provides tools, or a parent that has them",
                );
            }
        }
    }
    (manifest, p.into_sorted())
}

/// The top-level keys: schema, upstream, platforms. Returns the family's
/// platforms.
fn top_level(raw: &RawManifest, p: &mut Problems) -> Vec<Platform> {
    if *raw.schema.get_ref() != SCHEMA {
        p.at(
            &raw.schema,
            "schema",
            format!("unsupported schema {}", raw.schema.get_ref()),
            format!("this sunaba-images reads schema {SCHEMA}"),
        );
    }

    if let Err(why) = upstream::parse_pinned(raw.upstream.get_ref()) {
        p.at(
            &raw.upstream,
            "upstream",
            format!("`{}` {why}", raw.upstream.get_ref()),
            "pin it as name:tag@sha256:<index digest>: `sunaba-images update-base --write` \
             resolves the tag and writes the line",
        );
    }
    let platforms = platform_list(
        raw.platforms.iter().flat_map(|list| list.get_ref()),
        "platforms",
        &[],
        p,
    );
    if let Some(list) = &raw.platforms
        && list.get_ref().is_empty()
    {
        p.at(
            list,
            "platforms",
            "is empty",
            "list the platforms the family is built for, or drop the key (the engine's own)",
        );
    }
    platforms
}

/// `[tools.*]`: each tool's probe, version pattern, `min` and `series`.
fn tools(raw: BTreeMap<String, RawTool>, p: &mut Problems) -> BTreeMap<String, Tool> {
    let mut tools = BTreeMap::new();
    for (name, t) in raw {
        let key = format!("tools.{name}");
        if !valid_name(&name) {
            p.at(
                &t.probe,
                &key,
                format!("invalid tool name `{name}`"),
                "use lowercase letters, digits, `-`, `_`, `.`",
            );
        }
        if t.probe.get_ref().is_empty() || t.probe.get_ref()[0].is_empty() {
            p.at(
                &t.probe,
                format!("{key}.probe"),
                "probe is empty",
                "give the argv to run, e.g. [\"rg\", \"--version\"]",
            );
        }
        match (&t.version, t.presence_only) {
            (Some(v), true) => p.at(v, format!("{key}.version"), "`version` and `presence_only = true` exclude each other", "drop one of them"),
            (None, false) => p.at(
                &t.probe,
                &key,
                "no `version` pattern",
                "add `version = '<ERE with a capture group>'`, or say `presence_only = true` if the probe only has to succeed",
            ),
            (Some(v), false) => {
                if let Err(why) = check_version_pattern(v.get_ref()) {
                    p.at(v, format!("{key}.version"), format!("pattern {why}"), "patterns are POSIX ERE (also valid Rust regex) with group 1 = version");
                }
            }
            (None, true) => {}
        }
        if let Some(min) = &t.min {
            if t.version.is_none() {
                p.at(
                    min,
                    format!("{key}.min"),
                    "`min` needs a `version` pattern",
                    "add `version`, or drop `min`",
                );
            } else if lenient_version(min.get_ref()).is_none() {
                p.at(
                    min,
                    format!("{key}.min"),
                    format!("`{}` is not a version", min.get_ref()),
                    "write it as MAJOR.MINOR[.PATCH]",
                );
            }
        }
        if let Some(series) = &t.series {
            if t.version.is_none() {
                p.at(
                    series,
                    format!("{key}.series"),
                    "`series` needs a `version` pattern",
                    "add `version`, or drop `series`",
                );
            } else if lenient_version(series.get_ref()).is_none()
                || series.get_ref().contains(['-', '+', 'v'])
            {
                p.at(
                    series,
                    format!("{key}.series"),
                    format!("`{}` is not a version series", series.get_ref()),
                    "write a version prefix: \"3.13\" accepts 3.13.x only",
                );
            }
        }
        tools.insert(
            name.clone(),
            Tool {
                name,
                probe: t.probe.into_inner(),
                version: t.version.map(Spanned::into_inner),
                min: t.min.map(Spanned::into_inner),
                series: t.series.map(Spanned::into_inner),
            },
        );
    }
    tools
}

/// `[args]` and `[fragments.*]`: scripts, what they provide, their build
/// arguments (each declared once), environment and packages.
fn fragments(
    raw: BTreeMap<String, RawFragment>,
    declared_args: &BTreeMap<String, String>,
    root: &Path,
    tools: &BTreeMap<String, Tool>,
    platforms: &[Platform],
    p: &mut Problems,
) -> BTreeMap<String, Fragment> {
    let mut fragments = BTreeMap::new();
    let mut arg_owner: BTreeMap<String, String> = BTreeMap::new();
    for arg in declared_args.keys() {
        if !valid_arg_name(arg) {
            p.push(
                None,
                format!("args.{arg}"),
                format!("invalid build argument name `{arg}`"),
                "use UPPER_CASE letters, digits and `_`",
            );
        }
    }
    for (name, f) in raw {
        let key = format!("fragments.{name}");
        if !valid_name(&name) {
            p.at(
                &f.script,
                &key,
                format!("invalid fragment name `{name}`"),
                "use lowercase letters, digits, `-`, `_`, `.`",
            );
        }
        let script = fragment_script(&name, &key, &f.script, root, p);
        let provides = fragment_provides(&key, &f, tools, p);
        let args = fragment_args(&name, &key, &f, declared_args, &mut arg_owner, p);
        super::env::check(&f.env, &key, &f.script, p);
        let packages = packages::validate(&name, f.packages, &args, platforms, p);
        let has_npm = packages.iter().any(|pk| pk.source == packages::Source::Npm);
        for a in &f.allow_scripts {
            if !has_npm {
                p.at(
                    a,
                    format!("{key}.allow_scripts"),
                    "the fragment installs no npm packages",
                    "drop allow_scripts",
                );
            }
        }
        fragments.insert(
            name.clone(),
            Fragment {
                name,
                script,
                provides,
                args,
                env: f.env,
                packages,
                allow_scripts: f
                    .allow_scripts
                    .into_iter()
                    .map(Spanned::into_inner)
                    .collect(),
            },
        );
    }
    fragments
}

/// A fragment's script: under the fragment directory, and there.
fn fragment_script(
    name: &str,
    key: &str,
    script: &Spanned<String>,
    root: &Path,
    p: &mut Problems,
) -> PathBuf {
    let path = PathBuf::from(script.get_ref());
    if !inside_fragment_dir(&path) {
        p.at(
            script,
            format!("{key}.script"),
            format!("`{}` is outside {FRAGMENT_DIR}/", path.display()),
            format!(
                "fragment scripts live under {FRAGMENT_DIR}/, e.g. {FRAGMENT_DIR}/install-{name}.sh"
            ),
        );
    } else if !root.join(&path).is_file() {
        p.at(
            script,
            format!("{key}.script"),
            format!("`{}` does not exist", path.display()),
            format!("create {} or fix the path", root.join(&path).display()),
        );
    }
    path
}

/// The tools a fragment provides: at least one, each declared, none twice.
fn fragment_provides(
    key: &str,
    f: &RawFragment,
    tools: &BTreeMap<String, Tool>,
    p: &mut Problems,
) -> Vec<String> {
    if f.provides.is_empty() {
        p.push(
            lines_of(&f.script, p.lines()),
            format!("{key}.provides"),
            "provides no tools",
            "list the tools this fragment installs; each must be a [tools.*] entry",
        );
    }
    let mut provides = Vec::new();
    for t in &f.provides {
        if !tools.contains_key(t.get_ref()) {
            p.at(
                t,
                format!("{key}.provides"),
                format!("unknown tool `{}`", t.get_ref()),
                format!(
                    "declare [tools.{}] or use one of: {}",
                    t.get_ref(),
                    known(tools.keys())
                ),
            );
        } else if provides.contains(t.get_ref()) {
            p.at(
                t,
                format!("{key}.provides"),
                format!("tool `{}` listed twice", t.get_ref()),
                "remove the repeat",
            );
        } else {
            provides.push(t.get_ref().clone());
        }
    }
    provides
}

/// A fragment's build arguments: its own (each declared by one fragment
/// only, `arg_owner`: argument -> fragment so far) and the shared ones it
/// lists, with their values from [args].
fn fragment_args(
    name: &str,
    key: &str,
    f: &RawFragment,
    declared_args: &BTreeMap<String, String>,
    arg_owner: &mut BTreeMap<String, String>,
    p: &mut Problems,
) -> BTreeMap<String, String> {
    for arg in f.args.keys() {
        if !valid_arg_name(arg) {
            p.at(
                &f.script,
                format!("{key}.args.{arg}"),
                format!("invalid build argument name `{arg}`"),
                "use UPPER_CASE letters, digits and `_`",
            );
        }
        if declared_args.contains_key(arg) {
            p.at(
                &f.script,
                format!("{key}.args.{arg}"),
                format!("`{arg}` is also a shared argument in [args]"),
                format!("drop it here and list it in {key}.shared_args"),
            );
        }
        if let Some(other) = arg_owner.insert(arg.clone(), name.to_string()) {
            p.at(&f.script, format!("{key}.args.{arg}"), format!("build argument `{arg}` is also declared by fragment `{other}`"), "declare it once under [args] and list it in both fragments' `shared_args`, so a bump is one line");
        }
    }
    let mut args = f.args.clone();
    for shared in &f.shared_args {
        match declared_args.get(shared.get_ref()) {
            Some(value) => {
                args.insert(shared.get_ref().clone(), value.clone());
            }
            None => p.at(
                shared,
                format!("{key}.shared_args"),
                format!("unknown shared argument `{}`", shared.get_ref()),
                format!(
                    "declare it under [args] (declared: {})",
                    known(declared_args.keys())
                ),
            ),
        }
    }
    args
}

/// `[variants.*]`: parents, fragments, aliases (each naming one variant),
/// languages served, size budgets and platforms (within the family's and
/// the parent's).
fn variants(
    raw: &RawManifest,
    fragments: &BTreeMap<String, Fragment>,
    platforms: &[Platform],
    p: &mut Problems,
) -> BTreeMap<String, Variant> {
    let mut variants = BTreeMap::new();
    let mut alias_uses: BTreeMap<String, Vec<(String, &Spanned<String>)>> = BTreeMap::new();
    for (name, v) in &raw.variants {
        let key = format!("variants.{name}");
        if !valid_name(name) {
            p.at(
                &v.size_budget,
                &key,
                format!("invalid variant name `{name}`"),
                "use lowercase letters, digits, `-`, `_`, `.`",
            );
        }
        if let Some(parent) = &v.parent
            && !raw.variants.contains_key(parent.get_ref())
        {
            p.at(
                parent,
                format!("{key}.parent"),
                format!("unknown variant `{}`", parent.get_ref()),
                format!("use one of: {}", known(raw.variants.keys())),
            );
        }
        for f in &v.fragments {
            if !fragments.contains_key(f.get_ref()) {
                p.at(
                    f,
                    format!("{key}.fragments"),
                    format!("unknown fragment `{}`", f.get_ref()),
                    format!(
                        "declare [fragments.{}] or use one of: {}",
                        f.get_ref(),
                        known(fragments.keys())
                    ),
                );
            }
        }
        for a in &v.aliases {
            if !valid_name(a.get_ref()) {
                p.at(
                    a,
                    format!("{key}.aliases"),
                    format!("invalid alias `{}`", a.get_ref()),
                    "use lowercase letters, digits, `-`, `_`, `.`",
                );
            }
            alias_uses
                .entry(a.get_ref().clone())
                .or_default()
                .push((name.clone(), a));
        }
        for s in &v.serves {
            if !raw.languages.contains_key(s.get_ref()) {
                p.at(
                    s,
                    format!("{key}.serves"),
                    format!("unknown language `{}`", s.get_ref()),
                    format!("use one of: {}", known(raw.languages.keys())),
                );
            }
        }
        let size_budget = size_budget(&v.size_budget, &key, p);
        let narrowed = narrowed_platforms(v.platforms.as_ref(), &key, platforms, p);
        variants.insert(
            name.clone(),
            Variant {
                name: name.clone(),
                parent: v.parent.as_ref().map(|s| s.get_ref().clone()),
                fragments: v.fragments.iter().map(|s| s.get_ref().clone()).collect(),
                aliases: v.aliases.iter().map(|s| s.get_ref().clone()).collect(),
                serves: v.serves.iter().map(|s| s.get_ref().clone()).collect(),
                size_budget,
                platforms: narrowed,
            },
        );
    }

    children_within_parents(raw, &variants, platforms, p);
    duplicate_aliases(alias_uses, p);
    variants
}

/// A variant's size budget (0 when it is not a size).
fn size_budget(budget: &Spanned<String>, key: &str, p: &mut Problems) -> u64 {
    match parse_size(budget.get_ref()) {
        Some(b) => b,
        None => {
            p.at(
                budget,
                format!("{key}.size_budget"),
                format!("`{}` is not a size", budget.get_ref()),
                "write e.g. \"900MiB\" or \"1.5GiB\"",
            );
            0
        }
    }
}

/// The platforms a variant narrows the family's to (none: the family's).
fn narrowed_platforms(
    platforms_key: Option<&Spanned<Vec<Spanned<String>>>>,
    key: &str,
    platforms: &[Platform],
    p: &mut Problems,
) -> Vec<Platform> {
    match platforms_key {
        None => Vec::new(),
        Some(list) => {
            if platforms.is_empty() {
                p.at(
                    list,
                    format!("{key}.platforms"),
                    "narrows the family's `platforms`, which images.toml does not declare",
                    "declare the family's `platforms` at the top, or drop this key",
                );
            }
            if list.get_ref().is_empty() {
                p.at(
                    list,
                    format!("{key}.platforms"),
                    "is empty",
                    "list the platforms this variant is built for, or drop the key (the family's)",
                );
            }
            platform_list(list.get_ref(), format!("{key}.platforms"), platforms, p)
        }
    }
}

/// A child is built FROM its parent: it cannot be built where the parent
/// (by its own list or one it inherits) is not.
fn children_within_parents(
    raw: &RawManifest,
    variants: &BTreeMap<String, Variant>,
    platforms: &[Platform],
    p: &mut Problems,
) {
    for (name, v) in &raw.variants {
        let (Some(parent), Some(list)) = (&v.parent, &v.platforms) else {
            continue;
        };
        let up = super::inherited_platforms(variants, platforms, parent.get_ref());
        let own = super::inherited_platforms(variants, platforms, name);
        if let Some(extra) = own.iter().find(|p| !up.contains(p)) {
            p.at(
                list,
                format!("variants.{name}.platforms"),
                format!(
                    "`{extra}` is not a platform of its parent `{}`",
                    parent.get_ref()
                ),
                "a child is built FROM its parent: narrow to the parent's platforms",
            );
        }
    }
}

/// A repeated alias is reported where it repeats, in file order.
fn duplicate_aliases(
    alias_uses: BTreeMap<String, Vec<(String, &Spanned<String>)>>,
    p: &mut Problems,
) {
    for (alias, mut uses) in alias_uses {
        uses.sort_by_key(|u| u.1.span().start);
        let first = uses[0].0.clone();
        for (name, span) in &uses[1..] {
            p.at(
                *span,
                format!("variants.{name}.aliases"),
                format!("duplicate alias `{alias}` (also declared by variant `{first}`)"),
                "an alias names exactly one variant; remove one",
            );
        }
    }
}

/// Parent cycles: follow each chain; a chain that returns to a variant it
/// already visited is a cycle. Each cycle is reported once, at its first
/// member. True when there is one.
fn parent_cycles(raw: &BTreeMap<String, RawVariant>, p: &mut Problems) -> bool {
    let mut reported: BTreeSet<String> = BTreeSet::new();
    for (name, v) in raw {
        let mut chain = vec![name.clone()];
        let mut cur = v.parent.as_ref().map(|s| s.get_ref().clone());
        while let Some(next) = cur {
            if let Some(pos) = chain.iter().position(|c| *c == next) {
                let cycle: Vec<String> = chain[pos..].to_vec();
                let first = cycle.iter().min().unwrap().clone();
                if reported.insert(first.clone()) {
                    let mut shown = cycle.clone();
                    shown.push(next.clone());
                    let span = raw[&first].parent.as_ref().unwrap();
                    p.at(
                        span,
                        format!("variants.{first}.parent"),
                        format!("parent cycle: {}", shown.join(" -> ")),
                        "a variant's parent chain must end at a variant without `parent`",
                    );
                }
                break;
            }
            chain.push(next.clone());
            cur = raw
                .get(&next)
                .and_then(|v| v.parent.as_ref().map(|s| s.get_ref().clone()));
        }
    }
    !reported.is_empty()
}

fn lines_of<T>(s: &Spanned<T>, lines: &LineIndex) -> Option<usize> {
    Some(lines.line(s.span().start))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, project};
    use super::*;
    use crate::manifest::ManifestError;

    fn problems(manifest: &str) -> Vec<Problem> {
        let (_dir, path) = project(manifest);
        match Manifest::load(&path) {
            Err(ManifestError::Invalid { problems, .. }) => problems,
            other => panic!("expected validation problems, got {other:?}"),
        }
    }

    #[test]
    fn unknown_tool_reference() {
        let ps = problems(&GOOD.replace("provides = [\"t2\"]", "provides = [\"t3\"]"));
        assert_eq!(ps.len(), 1, "{ps:?}");
        assert_eq!(ps[0].key, "fragments.b.provides");
        assert!(ps[0].message.contains("unknown tool `t3`"));
        assert!(ps[0].hint.contains("t1, t2"));
        assert_eq!(ps[0].line, Some(27));
    }

    #[test]
    fn unknown_fragment_reference() {
        let ps = problems(&GOOD.replace("fragments = [\"b\"]", "fragments = [\"b\", \"zz\"]"));
        assert!(
            ps.iter()
                .any(|p| p.key == "variants.top.fragments" && p.message == "unknown fragment `zz`"),
            "{ps:?}"
        );
    }

    #[test]
    fn parent_cycle() {
        let text = GOOD.replace("[variants.root]\n", "[variants.root]\nparent = \"top\"\n");
        let ps = problems(&text);
        let cycle: Vec<_> = ps
            .iter()
            .filter(|p| p.message.starts_with("parent cycle"))
            .collect();
        assert_eq!(cycle.len(), 1, "{ps:?}");
        assert_eq!(cycle[0].key, "variants.root.parent");
        assert_eq!(cycle[0].message, "parent cycle: root -> top -> root");
    }

    #[test]
    fn fragment_outside_docker_and_missing() {
        let ps = problems(&GOOD.replace("docker/install-a.sh", "../install-a.sh"));
        assert!(
            ps.iter()
                .any(|p| p.key == "fragments.a.script" && p.message.contains("outside docker/")),
            "{ps:?}"
        );
        let ps = problems(&GOOD.replace("docker/install-a.sh", "docker/../../etc/passwd"));
        assert!(
            ps.iter().any(|p| p.message.contains("outside docker/")),
            "{ps:?}"
        );
        let ps = problems(&GOOD.replace("docker/install-a.sh", "docker/install-zz.sh"));
        assert!(
            ps.iter()
                .any(|p| p.key == "fragments.a.script" && p.message.contains("does not exist")),
            "{ps:?}"
        );
    }

    #[test]
    fn duplicate_alias() {
        let ps = problems(&GOOD.replace("aliases = [\"top\"]", "aliases = [\"neutral\"]"));
        assert!(
            ps.iter().any(|p| p.key == "variants.top.aliases"
                && p.message.contains("duplicate alias `neutral`")
                && p.message.contains("`root`")),
            "{ps:?}"
        );
    }

    #[test]
    fn a_variant_narrows_the_family_s_platforms_within_them_and_its_parent_s() {
        let two = GOOD.replace(
            "default = \"top\"",
            "platforms = [\"linux/amd64\", \"linux/arm64\"]\ndefault = \"top\"",
        );
        let narrow = |root: &str, top: &str| {
            let mut text = two.replace(
                "[variants.root]\nfragments = [\"a\"]",
                &format!("[variants.root]\nfragments = [\"a\"]\n{root}"),
            );
            text = text.replace(
                "[variants.top]\nparent = \"root\"",
                &format!("[variants.top]\nparent = \"root\"\n{top}"),
            );
            let (_dir, path) = project(&text);
            match Manifest::load(&path) {
                Ok(m) => {
                    assert_eq!(m.variants["top"].platforms.len(), 1);
                    Vec::new()
                }
                Err(ManifestError::Invalid { problems, .. }) => problems,
                Err(e) => panic!("{e}"),
            }
        };
        assert!(narrow("", "platforms = [\"linux/amd64\"]").is_empty());
        let messages = |ps: Vec<Problem>| -> Vec<(String, String)> {
            ps.into_iter().map(|p| (p.key, p.message)).collect()
        };
        assert_eq!(
            messages(narrow("", "platforms = [\"linux/s390x\"]")),
            [(
                "variants.top.platforms".to_string(),
                "`linux/s390x` is not one of the family's platforms".to_string()
            )]
        );
        assert_eq!(
            messages(narrow(
                "platforms = [\"linux/amd64\"]",
                "platforms = [\"linux/arm64\"]"
            )),
            [(
                "variants.top.platforms".to_string(),
                "`linux/arm64` is not a platform of its parent `root`".to_string()
            )]
        );
        assert_eq!(
            messages(narrow("", "platforms = []")),
            [("variants.top.platforms".to_string(), "is empty".to_string())]
        );
        // What a parent inherits counts: `top` under an unnarrowed `mid`
        // under an amd64 `root` cannot be built for arm64.
        let (_dir, path) = project(
            &two.replace(
                "[variants.root]\nfragments = [\"a\"]",
                "[variants.root]\nfragments = [\"a\"]\nplatforms = [\"linux/amd64\"]",
            )
            .replace(
                "[variants.top]\nparent = \"root\"",
                "[variants.mid]\nparent = \"root\"\nfragments = [\"b\"]\nsize_budget = \"1GiB\"\n\n\
                 [variants.top]\nparent = \"mid\"\nplatforms = [\"linux/arm64\"]",
            ),
        );
        match Manifest::load(&path) {
            Err(ManifestError::Invalid { problems, .. }) => assert_eq!(
                messages(problems),
                [(
                    "variants.top.platforms".to_string(),
                    "`linux/arm64` is not a platform of its parent `mid`".to_string()
                )]
            ),
            other => panic!("{other:?}"),
        }
        // Without the family's platforms there is nothing to narrow.
        let ps = problems(&GOOD.replace(
            "[variants.top]\nparent = \"root\"",
            "[variants.top]\nparent = \"root\"\nplatforms = [\"linux/amd64\"]",
        ));
        assert!(
            ps.iter().any(|p| p.key == "variants.top.platforms"
                && p.message.starts_with("narrows the family's `platforms`")),
            "{ps:?}"
        );
    }

    #[test]
    fn serving_an_undefined_language() {
        let ps = problems(&GOOD.replace("serves = [\"py\"]", "serves = [\"py\", \"cobol\"]"));
        assert!(
            ps.iter()
                .any(|p| p.key == "variants.top.serves" && p.message == "unknown language `cobol`"),
            "{ps:?}"
        );
    }

    #[test]
    fn variant_owing_no_tools() {
        let text = GOOD.replace(
            "[variants.root]\nfragments = [\"a\"]",
            "[variants.root]\nfragments = []",
        );
        let ps = problems(&text);
        assert!(
            ps.iter()
                .any(|p| p.key == "variants.root" && p.message == "owes no tools"),
            "{ps:?}"
        );
        assert!(
            !ps.iter()
                .any(|p| p.key == "variants.top" && p.message == "owes no tools"),
            "{ps:?}"
        );
    }

    #[test]
    fn tool_contract_errors() {
        let ps = problems(&GOOD.replace("version = 't1 ([0-9.]+)'", "version = 't1 (\\d+)'"));
        assert!(
            ps.iter()
                .any(|p| p.key == "tools.t1.version" && p.message.contains("POSIX")),
            "{ps:?}"
        );
        let ps = problems(&GOOD.replace("version = 't1 ([0-9.]+)'", "version = 't1 [0-9.]+'"));
        assert!(
            ps.iter().any(|p| p.message.contains("no capture group")),
            "{ps:?}"
        );
        let ps = problems(&GOOD.replace("presence_only = true", ""));
        assert!(
            ps.iter()
                .any(|p| p.key == "tools.t2" && p.hint.contains("presence_only = true")),
            "{ps:?}"
        );
        let ps = problems(&GOOD.replace("min = \"1.2\"", "min = \"latest\""));
        assert!(ps.iter().any(|p| p.key == "tools.t1.min"), "{ps:?}");
    }

    #[test]
    fn all_problems_reported_at_once_and_sorted_by_line() {
        let text = GOOD
            .replace("provides = [\"t2\"]", "provides = [\"t3\"]")
            .replace("size_budget = \"10MiB\"", "size_budget = \"big\"");
        let ps = problems(&text);
        assert_eq!(ps.len(), 2, "{ps:?}");
        assert!(ps[0].line < ps[1].line);
    }

    #[test]
    fn shared_build_arguments_are_declared_once() {
        // The same argument in two fragments is refused: a bump must be one line.
        let dup = GOOD.replace(
            "[fragments.b]\nscript = \"docker/install-b.sh\"",
            "[fragments.b]\nargs = { A_VERSION = \"2.0\" }\nscript = \"docker/install-b.sh\"",
        );
        let ps = problems(&dup);
        assert!(
            ps.iter().any(|p| p.key == "fragments.b.args.A_VERSION"
                && p.message.contains("also declared by fragment `a`")),
            "{ps:?}"
        );

        // Declared once under [args], listed by both: both fragments get it.
        let shared = GOOD
            .replace("[languages]", "[args]\nSHARED_VERSION = \"3.1\"\n\n[languages]")
            .replace("[fragments.b]\nscript = \"docker/install-b.sh\"", "[fragments.b]\nshared_args = [\"SHARED_VERSION\"]\nscript = \"docker/install-b.sh\"")
            .replace("[fragments.a]\nscript = \"docker/install-a.sh\"", "[fragments.a]\nshared_args = [\"SHARED_VERSION\"]\nscript = \"docker/install-a.sh\"");
        let (_dir, path) = project(&shared);
        let m = Manifest::load(&path).unwrap();
        assert_eq!(
            m.fragments["a"]
                .args
                .get("SHARED_VERSION")
                .map(String::as_str),
            Some("3.1")
        );
        assert_eq!(
            m.fragments["a"].args.get("A_VERSION").map(String::as_str),
            Some("1.0")
        );
        assert_eq!(
            m.fragments["b"]
                .args
                .get("SHARED_VERSION")
                .map(String::as_str),
            Some("3.1")
        );

        let unknown = shared.replace("SHARED_VERSION = \"3.1\"", "OTHER_VERSION = \"3.1\"");
        let ps = problems(&unknown);
        assert!(
            ps.iter().any(|p| p.key == "fragments.a.shared_args"
                && p.message == "unknown shared argument `SHARED_VERSION`"),
            "{ps:?}"
        );
    }

    #[test]
    fn the_upstream_and_profile_upstreams_are_pinned_by_digest() {
        let tag_only = GOOD.replace(
            "@sha256:d4ed136e474e8fc338b3e4d2b27a1a3acdfcb8924481e511b02984a6617e084f",
            "",
        );
        let ps = problems(&tag_only);
        let p = ps.iter().find(|p| p.key == "upstream").expect("a problem");
        assert!(p.message.contains("is a tag only"), "{p:?}");
        assert!(p.hint.contains("update-base --write"), "{p:?}");

        let profile =
            |body: &str| GOOD.replace("[profiles.local]\n", &format!("[profiles.local]\n{body}\n"));
        let ps = problems(&profile("upstream = \"127.0.0.1:5000/b:t\""));
        assert!(
            ps.iter().any(|p| p.key == "profiles.local.upstream"
                && p.hint.contains("--profile local update-base")
                && p.hint.contains("upstream_env")),
            "{ps:?}"
        );
        let ps = problems(&profile(&format!(
            "upstream = \"127.0.0.1:5000/b:t@sha256:{}\"\nupstream_env = \"X\"",
            "1".repeat(64)
        )));
        assert!(
            ps.iter()
                .any(|p| p.message.contains("the digest comes from `upstream_env`")),
            "{ps:?}"
        );
        let ps = problems(&profile("upstream_env = \"NOT A NAME\""));
        assert!(
            ps.iter().any(|p| p.key == "profiles.local.upstream_env"),
            "{ps:?}"
        );
        // A tag to follow plus the variable is what the dev environment uses.
        let (_dir, path) = project(&profile(
            "upstream = \"127.0.0.1:5000/b:t\"\nupstream_env = \"SUNABA_TEST_BASE\"",
        ));
        let m = Manifest::load(&path).unwrap();
        let s = m
            .resolve_profile_with(Some("local"), |_| {
                Some(format!("127.0.0.1:5000/b@sha256:{}", "2".repeat(64)))
            })
            .unwrap();
        assert_eq!(
            s.upstream.pinned().unwrap().to_string(),
            format!("127.0.0.1:5000/b:t@sha256:{}", "2".repeat(64))
        );
    }

    #[test]
    fn platforms_and_series() {
        let with =
            |line: &str| GOOD.replace("default = \"top\"", &format!("default = \"top\"\n{line}"));
        let (_dir, path) = project(&with("platforms = [\"linux/amd64\", \"linux/arm64/v8\"]"));
        let m = Manifest::load(&path).unwrap();
        assert_eq!(m.platforms.len(), 2);
        let ps = problems(&with(
            "platforms = [\"linux/amd64\", \"linux/x86_64\", \"linux\"]",
        ));
        assert!(
            ps.iter().any(|p| p.message.contains("listed twice")),
            "{ps:?}"
        );
        assert!(
            ps.iter()
                .any(|p| p.key == "platforms" && p.message.contains("\"linux\"")),
            "{ps:?}"
        );
        assert!(
            problems(&with("platforms = []"))
                .iter()
                .any(|p| p.message == "is empty")
        );

        let ps = problems(&GOOD.replace("min = \"1.2\"", "min = \"1.2\"\nseries = \"3.x\""));
        assert!(ps.iter().any(|p| p.key == "tools.t1.series"), "{ps:?}");
        let ps = problems(&GOOD.replace(
            "presence_only = true",
            "presence_only = true\nseries = \"1\"",
        ));
        assert!(
            ps.iter().any(|p| p.message.contains("needs a `version`")),
            "{ps:?}"
        );
        let (_dir, path) =
            project(&GOOD.replace("min = \"1.2\"", "min = \"1.2\"\nseries = \"1.2\""));
        assert_eq!(
            Manifest::load(&path).unwrap().tools["t1"].series.as_deref(),
            Some("1.2")
        );
    }

    #[test]
    fn packages_name_their_registry_and_the_argument_that_pins_them() {
        let with = |table: &str| {
            GOOD.replace(
                "[fragments.b]",
                &format!("[fragments.a.packages]\n{table}\n\n[fragments.b]"),
            )
        };
        let (_dir, path) = project(&with(
            "a-tool = { from = \"npm\", arg = \"A_VERSION\", track = \"1\" }\n\
             bin = { from = \"npm-tarball\", arg = \"A_VERSION\", platforms = { \"linux/amd64\" = \"bin-x64\" } }\n\
             golang = { from = \"debian\", name = \"golang-${A_VERSION}-go\", arg = \"A_VERSION\", suite = \"trixie-backports\" }",
        ));
        let m = Manifest::load(&path).unwrap();
        let pk = &m.fragments["a"].packages;
        assert_eq!(pk.len(), 3);
        let golang = pk.iter().find(|p| p.key == "golang").unwrap();
        assert_eq!(golang.name, "golang-1.0-go");
        assert_eq!(golang.name_template, "golang-${A_VERSION}-go");
        assert_eq!(
            m.fragments["a"].lock_dir().unwrap(),
            Path::new("docker/locks/a")
        );
        assert!(m.fragments["b"].lock_dir().is_none());

        let cases = [
            (
                "x = { from = \"cargo\", arg = \"A_VERSION\" }",
                "unknown source `cargo`",
            ),
            ("x = { from = \"npm\" }", "no `arg` pins its version"),
            (
                "x = { from = \"pypi\", arg = \"B_VERSION\" }",
                "not a build argument of this fragment",
            ),
            (
                "x = { from = \"npm\", arg = \"A_VERSION\", name = \"x-${OTHER}\" }",
                "uses a variable other than its `arg`",
            ),
            (
                "x = { from = \"npm\", arg = \"A_VERSION\", suite = \"sid\" }",
                "only for debian",
            ),
            (
                "x = { from = \"npm\", arg = \"A_VERSION\", track = \"latest\" }",
                "not a release line",
            ),
            (
                "x = { from = \"npm\", arg = \"A_VERSION\", platforms = { \"linux/amd64\" = \"y\" } }",
                "only for npm-tarball",
            ),
        ];
        for (table, want) in cases {
            let ps = problems(&with(table));
            assert!(
                ps.iter().any(|p| p.message.contains(want)),
                "{table}: {ps:?}"
            );
        }
        let ranged = with("x = { from = \"npm\", arg = \"A_VERSION\" }")
            .replace("A_VERSION = \"1.0\"", "A_VERSION = \"^1.0\"");
        assert!(
            problems(&ranged)
                .iter()
                .any(|p| p.message.contains("not an exact version"))
        );
        let narrow = with("x = { from = \"npm-tarball\", arg = \"A_VERSION\", platforms = { \"linux/amd64\" = \"y\" } }")
            .replace("default = \"top\"", "default = \"top\"\nplatforms = [\"linux/amd64\", \"linux/arm64\"]");
        assert!(
            problems(&narrow)
                .iter()
                .any(|p| p.message.contains("no package for linux/arm64"))
        );
        // `linux/arm64/v8` is `linux/arm64` in both lists: normalised where read.
        let v8 = with("x = { from = \"npm-tarball\", arg = \"A_VERSION\", platforms = { \"linux/amd64\" = \"y\", \"linux/arm64/v8\" = \"z\" } }")
            .replace("default = \"top\"", "default = \"top\"\nplatforms = [\"linux/amd64\", \"linux/arm64\"]");
        let (_dir, path) = project(&v8);
        let loaded = Manifest::load(&path).expect("no problems");
        let keys: Vec<String> = loaded.fragments["a"].packages[0]
            .platforms
            .keys()
            .map(ToString::to_string)
            .collect();
        assert_eq!(keys, ["linux/amd64", "linux/arm64"]);
        let twice = with("x = { from = \"npm\", arg = \"A_VERSION\" }").replace(
            "default = \"top\"",
            "default = \"top\"\nplatforms = [\"linux/arm64\", \"linux/arm64/v8\"]",
        );
        assert!(
            problems(&twice)
                .iter()
                .any(|p| p.message.contains("`linux/arm64` is listed twice")),
            "{:?}",
            problems(&twice)
        );
        let scripts = GOOD.replace(
            "[fragments.b]\n",
            "[fragments.b]\nallow_scripts = [\"x\"]\n",
        );
        assert!(
            problems(&scripts)
                .iter()
                .any(|p| p.key == "fragments.b.allow_scripts")
        );
    }
}
