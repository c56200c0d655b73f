//! `new fragment`: the files and images.toml entries of a new toolchain, as
//! proposals a maintainer then checks (the version patterns against what
//! the probes print, the size budget after a build). Nothing existing is
//! overwritten: every file is new, and images.toml gains one appended block
//! (comments and layout of the rest kept byte for byte) plus, for a
//! language, the default variant's `fragments` and `serves` (edited with
//! `toml_edit`). The block and the install script are rendered from
//! `templates/scaffold/` (compiled in), values encoded as TOML and shell
//! words by the templates' helpers. The result is validated as a whole before anything is
//! written; a problem writes nothing.
//!
//! Without a probe the proposals are guesses: the version pattern is the
//! common `NAME X.Y.Z` shape and the budget the parent's plus 500 MiB. With
//! one ([`probe_script`], run in a throw-away container of the upstream
//! with the apt packages installed) a package apt cannot find is refused,
//! each tool's pattern and `min` come from what its `--version` printed
//! (and are checked against it), and the budget adds the packages' size.
//! The probe runs on the upstream, not on the built parent: a tool the
//! parent provides is absent there.

use crate::fsutil::atomic_write;
use crate::manifest::{Manifest, ManifestError, parse_size};
use crate::process::sh_quote;
use handlebars::{
    Handlebars, Helper, HelperResult, Output, RenderContext, RenderError, RenderErrorReason,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use toml_edit::DocumentMut;

/// What to scaffold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    /// The fragment (and, unless `variant` says otherwise, the variant).
    pub name: String,
    /// The tools it provides (default: one named like the fragment).
    pub tools: Vec<String>,
    /// Debian packages the script installs.
    pub apt: Vec<String>,
    pub variant: Option<String>,
    /// Default: the default variant's parent.
    pub parent: Option<String>,
    /// A language verify dispatches to (running the first tool): its entry,
    /// a smoke suite stub and sample projects; the fragment joins the
    /// default variant.
    pub language: Option<String>,
    pub markers: Vec<String>,
    pub extensions: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ScaffoldError {
    #[error("invalid {what} name `{name}`: use lowercase letters, digits, `-` and `_`")]
    BadName { what: &'static str, name: String },
    #[error(
        "{what} `{name}` already exists in images.toml; pick another name (nothing is overwritten)"
    )]
    Declared { what: &'static str, name: String },
    #[error("{path} already exists; pick another name or move it away (nothing is overwritten)", path = path.display())]
    FileExists { path: PathBuf },
    #[error("parent `{name}` is not a variant of images.toml (variants: {known})")]
    UnknownParent { name: String, known: String },
    #[error("images.toml cannot be edited")]
    Edit(#[source] toml_edit::TomlError),
    #[error("images.toml cannot be edited: it has no [variants.{variant}] table")]
    NoVariantTable { variant: String },
    #[error("the scaffold's template {template} does not compile")]
    Template {
        template: &'static str,
        source: Box<handlebars::TemplateError>,
    },
    #[error("the scaffold's template {template} does not render")]
    Render {
        template: &'static str,
        source: Box<handlebars::RenderError>,
    },
    #[error("the scaffolded images.toml would not be valid, so nothing was written")]
    Invalid(#[source] ManifestError),
    #[error(
        "apt cannot find {} in the upstream's suites: check the name(s) (`apt-cache search`)",
        packages.join(", ")
    )]
    AptMissing { packages: Vec<String> },
    #[error("the probe container failed: {0}")]
    ProbeFailed(String),
    #[error("writing {path}: {source}", path = path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a probe container saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Probe {
    /// Tool -> the first line its `--version` printed (empty: nothing).
    pub versions: std::collections::BTreeMap<String, String>,
    /// Bytes the packages added to the file system.
    pub size: u64,
}

/// The shell script of a probe container: refuse missing packages, install
/// them, measure what they added, print each tool's `--version`.
pub(crate) fn probe_script(apt: &[String], tools: &[String]) -> String {
    let quote = |items: &[String]| {
        items
            .iter()
            .map(|i| format!("'{}'", i.replace('\'', "")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "set -u\n\
         export DEBIAN_FRONTEND=noninteractive\n\
         apt-get update -qq >/dev/null 2>&1 || {{ echo SUNABA-FAILED apt-get update; exit 0; }}\n\
         missing=0\n\
         for p in {pkgs}; do apt-cache show --no-all-versions \"$p\" >/dev/null 2>&1 || \
         {{ echo \"SUNABA-MISSING $p\"; missing=1; }}; done\n\
         [ \"$missing\" = 0 ] || exit 0\n\
         before=$(du -sxk / 2>/dev/null | cut -f1)\n\
         apt-get install -y -qq --no-install-recommends {pkgs} >/dev/null 2>&1 || \
         {{ echo SUNABA-FAILED apt-get install; exit 0; }}\n\
         after=$(du -sxk / 2>/dev/null | cut -f1)\n\
         echo \"SUNABA-SIZE $((after - before))\"\n\
         for t in {tools}; do printf 'SUNABA-PROBE %s ' \"$t\"; \
         \"$t\" --version 2>&1 | head -n 1 | tr -d '\\r'; echo; done\n",
        pkgs = quote(apt),
        tools = quote(tools),
    )
}

/// `text` as a literal in a POSIX ERE that is also a Rust regex (the
/// healthcheck greps with the one, validation compiles the other): only
/// the characters special to both are escaped (`-` must stay bare in ERE).
pub(crate) fn ere_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if ".[]()*+?{}|^$\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What a probe container printed.
pub(crate) fn parse_probe(stdout: &str) -> Result<Probe, ScaffoldError> {
    let mut probe = Probe::default();
    let mut missing = Vec::new();
    for line in stdout.lines() {
        if let Some(p) = line.strip_prefix("SUNABA-MISSING ") {
            missing.push(p.trim().to_string());
        } else if let Some(what) = line.strip_prefix("SUNABA-FAILED ") {
            return Err(ScaffoldError::ProbeFailed(format!("{what} failed")));
        } else if let Some(kib) = line.strip_prefix("SUNABA-SIZE ") {
            probe.size = kib.trim().parse::<u64>().unwrap_or_default() * 1024;
        } else if let Some(rest) = line.strip_prefix("SUNABA-PROBE ") {
            let (tool, printed) = rest.split_once(' ').unwrap_or((rest, ""));
            probe
                .versions
                .insert(tool.to_string(), printed.trim().to_string());
        }
    }
    if !missing.is_empty() {
        return Err(ScaffoldError::AptMissing { packages: missing });
    }
    Ok(probe)
}

/// A version pattern for what a probe printed, and the version it finds:
/// the text before the first `X.Y[.Z]` kept literally (from its last word
/// on), the version captured; checked against `printed`.
pub(crate) fn proposed_pattern(printed: &str) -> Option<(String, String)> {
    let version = regex::Regex::new(r"[0-9]+\.[0-9]+(\.[0-9]+)?").ok()?;
    let m = version.find(printed)?;
    let before = &printed[..m.start()];
    let word_start = before
        .trim_end()
        .rfind(char::is_whitespace)
        .map_or(0, |i| i + 1);
    let prefix = &before[word_start..];
    let group = if m.as_str().matches('.').count() == 2 {
        r"([0-9]+\.[0-9]+\.[0-9]+)"
    } else {
        r"([0-9]+\.[0-9]+)"
    };
    let pattern = format!("{}{group}", ere_escape(prefix));
    let captured = regex::Regex::new(&pattern)
        .ok()?
        .captures(printed)?
        .get(1)?
        .as_str()
        .to_string();
    (captured == m.as_str()).then_some((pattern, captured))
}

/// A planned scaffold: new files (project-relative) and the new images.toml.
#[derive(Debug)]
pub(crate) struct Scaffold {
    pub files: Vec<(PathBuf, String)>,
    pub manifest_text: String,
    /// The variants the fragment is in (its own, the default when joined).
    pub variants: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The block `new fragment` appends to images.toml and the install script
/// of the new fragment: Handlebars, compiled in. Every value that enters
/// TOML goes through the `toml` helper (a TOML encoder), every shell word
/// through `sh`.
const FRAGMENT_TOML: &str = include_str!("../templates/scaffold/fragment.toml.hbs");
const INSTALL_SCRIPT: &str = include_str!("../templates/scaffold/install.sh.hbs");
/// Their names in the registry (and in errors).
const FRAGMENT: &str = "scaffold/fragment.toml.hbs";
const INSTALL: &str = "scaffold/install.sh.hbs";

/// The names a request declares: the fragment, its variant and its tools.
struct Names {
    fragment: String,
    variant: String,
    tools: Vec<String>,
}

impl Names {
    fn of(req: &Request) -> Names {
        let fragment = req.name.clone();
        Names {
            variant: req.variant.clone().unwrap_or_else(|| fragment.clone()),
            tools: if req.tools.is_empty() {
                vec![fragment.clone()]
            } else {
                req.tools.clone()
            },
            fragment,
        }
    }

    /// Refuses a name that is not one, or one images.toml already declares.
    fn check(&self, manifest: &Manifest, language: Option<&String>) -> Result<(), ScaffoldError> {
        let checks = [("fragment", &self.fragment), ("variant", &self.variant)]
            .into_iter()
            .chain(self.tools.iter().map(|t| ("tool", t)))
            .chain(language.map(|l| ("language", l)));
        for (what, name) in checks {
            if !valid_name(name) {
                return Err(ScaffoldError::BadName {
                    what,
                    name: name.to_string(),
                });
            }
        }
        if manifest.fragments.contains_key(&self.fragment) {
            return Err(declared("fragment", &self.fragment));
        }
        if manifest.variants.contains_key(&self.variant) {
            return Err(declared("variant", &self.variant));
        }
        if let Some(l) = language {
            if manifest.languages.contains_key(l) {
                return Err(declared("language", l));
            }
            if manifest.smoke.contains_key(l) {
                return Err(declared("smoke suite", l));
            }
        }
        Ok(())
    }
}

/// The new variant's parent: the one asked for, else the default variant's.
fn parent(manifest: &Manifest, asked: Option<&String>) -> Result<Option<String>, ScaffoldError> {
    match asked {
        Some(p) if manifest.variants.contains_key(p) => Ok(Some(p.clone())),
        Some(p) => Err(ScaffoldError::UnknownParent {
            name: p.clone(),
            known: manifest
                .variants
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        }),
        None => Ok(manifest
            .variants
            .get(&manifest.default)
            .and_then(|d| d.parent.clone())),
    }
}

/// The proposed size budget (bytes) and how it was estimated.
fn budget(
    manifest: &Manifest,
    parent: Option<&String>,
    probe: Option<&Probe>,
) -> (u64, &'static str) {
    let parent_budget = parent
        .and_then(|p| manifest.variants.get(p))
        .map_or(0, |v| v.size_budget);
    match probe {
        Some(p) => (
            parent_budget + p.size + p.size / 4 + parse_size("50MiB").unwrap_or_default(),
            "the parent's, plus what the probed packages added and a quarter more, plus 50 MiB",
        ),
        None => (
            parent_budget + parse_size("500MiB").unwrap_or_default(),
            "the parent's plus 500 MiB",
        ),
    }
}

/// What `templates/scaffold/fragment.toml.hbs` renders.
#[derive(Serialize)]
struct Block<'a> {
    name: &'a str,
    /// The tools images.toml does not declare yet.
    tools: Vec<ToolBlock<'a>>,
    script: String,
    provides: &'a [String],
    apt: &'a [String],
    variant: &'a str,
    parent: Option<&'a str>,
    fragments: [&'a str; 1],
    aliases: [&'a str; 1],
    serves: Vec<&'a str>,
    budget_why: &'static str,
    size_budget: String,
    language: Option<LanguageBlock<'a>>,
}

#[derive(Serialize)]
struct ToolBlock<'a> {
    name: &'a str,
    probe: [&'a str; 2],
    /// The probe ran the tool; `printed` is the first line it printed.
    probed: bool,
    printed: &'a str,
    /// The version pattern found in `printed`, and the version it captures.
    proposal: Option<Proposal>,
    /// The pattern to start from when there is no proposal.
    guess: String,
}

#[derive(Serialize)]
struct Proposal {
    pattern: String,
    version: String,
}

#[derive(Serialize)]
struct LanguageBlock<'a> {
    name: &'a str,
    /// What verify runs: the first tool (add others with their smoke).
    tool: &'a str,
    tools: [&'a str; 1],
    markers: &'a [String],
    extensions: &'a [String],
    run: [&'a str; 3],
}

impl<'a> Block<'a> {
    fn new(
        manifest: &Manifest,
        req: &'a Request,
        names: &'a Names,
        script: &Path,
        parent: Option<&'a String>,
        probe: Option<&'a Probe>,
    ) -> Block<'a> {
        let (budget, budget_why) = budget(manifest, parent, probe);
        let first_tool = names.tools[0].as_str();
        Block {
            name: &names.fragment,
            tools: names
                .tools
                .iter()
                .filter(|t| !manifest.tools.contains_key(*t))
                .map(|t| ToolBlock::of(t, probe))
                .collect(),
            script: script.display().to_string(),
            provides: &names.tools,
            apt: &req.apt,
            variant: &names.variant,
            parent: parent.map(String::as_str),
            fragments: [&names.fragment],
            aliases: [&names.variant],
            serves: req.language.iter().map(String::as_str).collect(),
            budget_why,
            size_budget: format!("{}MiB", budget.div_ceil(1024 * 1024)),
            language: req.language.as_deref().map(|l| LanguageBlock {
                name: l,
                tool: first_tool,
                tools: [first_tool],
                markers: &req.markers,
                extensions: &req.extensions,
                run: [first_tool, "check", "."],
            }),
        }
    }
}

impl<'a> ToolBlock<'a> {
    fn of(tool: &'a str, probe: Option<&'a Probe>) -> ToolBlock<'a> {
        let printed = probe.and_then(|p| p.versions.get(tool));
        ToolBlock {
            name: tool,
            probe: [tool, "--version"],
            probed: printed.is_some(),
            printed: printed.map_or("", String::as_str),
            proposal: printed
                .and_then(|line| proposed_pattern(line))
                .map(|(pattern, version)| Proposal { pattern, version }),
            guess: format!("{} ([0-9]+\\.[0-9]+\\.[0-9]+)", ere_escape(tool)),
        }
    }
}

/// Plans the scaffold of `req` in `manifest` (whose text is `text`).
pub(crate) fn plan(
    manifest: &Manifest,
    text: &str,
    req: &Request,
    probe: Option<&Probe>,
) -> Result<Scaffold, ScaffoldError> {
    let names = Names::of(req);
    names.check(manifest, req.language.as_ref())?;
    let parent = parent(manifest, req.parent.as_ref())?;
    let script = PathBuf::from(format!("docker/install-{}.sh", names.fragment));
    let block = Block::new(manifest, req, &names, &script, parent.as_ref(), probe);
    let templates = templates()?;
    let install = install_script(&templates, &names.fragment, &names.tools, &req.apt)?;
    let mut files = vec![(script, install)];
    let mut variants = vec![names.variant.clone()];
    let mut text = text.to_string();
    if let Some(l) = &req.language {
        files.extend(smoke_stubs(l));
        // Coverage: the default variant owes every language's tools.
        if let Some(d) = manifest.variants.get(&manifest.default) {
            let edits = [
                ("fragments", names.fragment.as_str()),
                ("serves", l.as_str()),
            ];
            text = push_to_lists(&text, &d.name, &edits)?;
            variants.push(d.name.clone());
        }
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&render(&templates, FRAGMENT, &block)?);
    Ok(Scaffold {
        files,
        manifest_text: text,
        variants,
    })
}

/// A language's sample projects, to be replaced by real ones.
fn smoke_stubs(language: &str) -> Vec<(PathBuf, String)> {
    [
        ("pass", "a small project every tool of the language passes"),
        (
            "defect",
            "the same project with a seeded defect: a lint error, a type error or a failing test printing a marker",
        ),
    ]
    .into_iter()
    .map(|(project, what)| {
        (
            PathBuf::from(format!("tests/smoke/{language}/{project}/README.md")),
            format!("TODO: {what} (replace this file).\n"),
        )
    })
    .collect()
}

/// What `templates/scaffold/install.sh.hbs` renders.
#[derive(Serialize)]
struct InstallScript<'a> {
    name: &'a str,
    provides: String,
    apt: &'a [String],
}

/// The new fragment's install script: the apt packages, or what to do.
fn install_script(
    templates: &Handlebars<'_>,
    name: &str,
    tools: &[String],
    apt: &[String],
) -> Result<String, ScaffoldError> {
    let data = InstallScript {
        name,
        provides: tools.join(", "),
        apt,
    };
    render(templates, INSTALL, &data)
}

/// The scaffold's templates, with their `toml` and `sh` helpers.
fn templates() -> Result<Handlebars<'static>, ScaffoldError> {
    let mut hb = crate::render::handlebars();
    hb.register_helper("toml", Box::new(toml_helper));
    hb.register_helper("toml_key", Box::new(toml_key_helper));
    hb.register_helper("sh", Box::new(sh_helper));
    for (name, text) in [(FRAGMENT, FRAGMENT_TOML), (INSTALL, INSTALL_SCRIPT)] {
        hb.register_template_string(name, text)
            .map_err(|e| ScaffoldError::Template {
                template: name,
                source: Box::new(e),
            })?;
    }
    Ok(hb)
}

fn render(
    hb: &Handlebars<'_>,
    name: &'static str,
    data: &impl Serialize,
) -> Result<String, ScaffoldError> {
    hb.render(name, data).map_err(|e| ScaffoldError::Render {
        template: name,
        source: Box::new(e),
    })
}

/// The helper's one parameter.
fn param<'a>(
    h: &'a Helper<'_>,
    helper: &'static str,
) -> Result<&'a serde_json::Value, RenderError> {
    Ok(h.param(0)
        .ok_or(RenderErrorReason::ParamNotFoundForIndex(helper, 0))?
        .value())
}

/// `{{toml VALUE}}`: a string or a list of strings as a TOML value.
fn toml_helper(
    h: &Helper<'_>,
    _: &Handlebars<'_>,
    _: &handlebars::Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let value: toml_edit::Value = match param(h, "toml")? {
        serde_json::Value::String(s) => s.as_str().into(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .ok_or(RenderErrorReason::InvalidParamType("a list of strings"))
            })
            .collect::<Result<toml_edit::Array, _>>()?
            .into(),
        _ => {
            return Err(
                RenderErrorReason::InvalidParamType("a string or a list of strings").into(),
            );
        }
    };
    out.write(&value.to_string())?;
    Ok(())
}

/// `{{toml_key KEY}}`: a string as a TOML key (bare where it can be).
fn toml_key_helper(
    h: &Helper<'_>,
    _: &Handlebars<'_>,
    _: &handlebars::Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let key = param(h, "toml_key")?
        .as_str()
        .ok_or(RenderErrorReason::InvalidParamType("a string"))?;
    out.write(&toml_edit::Key::new(key).display_repr())?;
    Ok(())
}

/// `{{sh WORDS}}`: a list of strings as shell words, quoted where needed.
fn sh_helper(
    h: &Helper<'_>,
    _: &Handlebars<'_>,
    _: &handlebars::Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let words = param(h, "sh")?
        .as_array()
        .ok_or(RenderErrorReason::InvalidParamType("a list of strings"))?
        .iter()
        .map(|w| {
            w.as_str()
                .map(sh_quote)
                .ok_or(RenderErrorReason::InvalidParamType("a list of strings"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    out.write(&words.join(" "))?;
    Ok(())
}

fn declared(what: &'static str, name: &str) -> ScaffoldError {
    ScaffoldError::Declared {
        what,
        name: name.to_string(),
    }
}

/// `text` with `value` appended to the string lists of `[variants.VARIANT]`
/// (a missing list is created), everything else kept.
fn push_to_lists(
    text: &str,
    variant: &str,
    edits: &[(&str, &str)],
) -> Result<String, ScaffoldError> {
    let mut doc: DocumentMut = text.parse().map_err(ScaffoldError::Edit)?;
    let table = doc["variants"][variant]
        .as_table_like_mut()
        .ok_or_else(|| ScaffoldError::NoVariantTable {
            variant: variant.to_string(),
        })?;
    for (key, value) in edits {
        match table.get_mut(key).and_then(|i| i.as_array_mut()) {
            Some(array) => array.push(*value),
            None => {
                let mut array = toml_edit::Array::new();
                array.push(*value);
                table.insert(key, toml_edit::value(array));
            }
        }
    }
    Ok(doc.to_string())
}

/// Writes `scaffold` under `root` (the manifest at `manifest_path`): the new
/// files first (each refused if it exists), then the whole is validated,
/// and only then images.toml is replaced. On any problem the files written
/// are removed again. Returns the files written, images.toml last.
pub(crate) fn write(
    root: &Path,
    manifest_path: &Path,
    scaffold: &Scaffold,
) -> Result<Vec<PathBuf>, ScaffoldError> {
    for (rel, _) in &scaffold.files {
        let path = root.join(rel);
        if path.exists() {
            return Err(ScaffoldError::FileExists { path: rel.clone() });
        }
    }
    let mut written: Vec<PathBuf> = Vec::new();
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let undo = |written: &[PathBuf], dirs: &[PathBuf]| {
        for p in written {
            let _ = std::fs::remove_file(p);
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    };
    for (rel, content) in &scaffold.files {
        let path = root.join(rel);
        let result = (|| {
            if let Some(parent) = path.parent() {
                let mut missing: Vec<PathBuf> = parent
                    .ancestors()
                    .take_while(|a| !a.exists())
                    .map(Path::to_path_buf)
                    .collect();
                std::fs::create_dir_all(parent)?;
                missing.reverse();
                created_dirs.extend(missing);
            }
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            written.push(path.clone());
            file.write_all(content.as_bytes())?;
            if rel.extension().is_some_and(|e| e == "sh") {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            }
            Ok(())
        })();
        if let Err(source) = result {
            undo(&written, &created_dirs);
            return Err(ScaffoldError::Write {
                path: rel.clone(),
                source,
            });
        }
    }
    if let Err(e) = Manifest::from_str_at(&scaffold.manifest_text, manifest_path) {
        undo(&written, &created_dirs);
        return Err(ScaffoldError::Invalid(e));
    }
    if let Err(e) = atomic_write(manifest_path, scaffold.manifest_text.as_bytes()) {
        undo(&written, &created_dirs);
        return Err(ScaffoldError::Write {
            path: manifest_path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        });
    }
    let mut out: Vec<PathBuf> = scaffold.files.iter().map(|(p, _)| p.clone()).collect();
    out.push(PathBuf::from("images.toml"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_read_and_its_versions_become_checked_patterns() {
        let out = "SUNABA-SIZE 2048\nSUNABA-PROBE bc bc 1.07.1\nSUNABA-PROBE jq jq-1.7.1\n\
                   SUNABA-PROBE cargo cargo 1.85.0 (d73d2caf9 2024-12-31)\nSUNABA-PROBE x \n";
        let p = parse_probe(out).unwrap();
        assert_eq!(p.size, 2048 * 1024);
        assert_eq!(p.versions["x"], "");
        for (printed, pattern, version) in [
            ("bc 1.07.1", r"bc ([0-9]+\.[0-9]+\.[0-9]+)", "1.07.1"),
            ("jq-1.7.1", r"jq-([0-9]+\.[0-9]+\.[0-9]+)", "1.7.1"),
            (
                "cargo 1.85.0 (d73d2caf9 2024-12-31)",
                r"cargo ([0-9]+\.[0-9]+\.[0-9]+)",
                "1.85.0",
            ),
            ("Python 3.13", r"Python ([0-9]+\.[0-9]+)", "3.13"),
            ("v26.12.1", r"v([0-9]+\.[0-9]+\.[0-9]+)", "26.12.1"),
            ("tool (c++) 2.1", r"\(c\+\+\) ([0-9]+\.[0-9]+)", "2.1"),
        ] {
            let got = proposed_pattern(printed);
            assert_eq!(
                got,
                Some((pattern.to_string(), version.to_string())),
                "{printed}"
            );
        }
        assert_eq!(proposed_pattern("sh: x: not found"), None);
        assert!(matches!(
            parse_probe("SUNABA-MISSING a\nSUNABA-MISSING b\n"),
            Err(ScaffoldError::AptMissing { packages }) if packages == ["a", "b"]
        ));
        assert!(matches!(
            parse_probe("SUNABA-FAILED apt-get update\n"),
            Err(ScaffoldError::ProbeFailed(_))
        ));
        assert_eq!(ere_escape("ast-grep"), "ast-grep");
        assert_eq!(ere_escape("a.b+"), r"a\.b\+");
    }

    /// A family of one variant (the default, without a parent) in `dir`.
    fn tiny_family(dir: &Path) -> (String, Manifest) {
        let text = "schema = 1\n\
            repository = \"example.test/sandbox\"\n\
            upstream = \"debian:trixie-slim@sha256:d7e12182ce18b85b93007c1dedf31f2d29e01ccf3182cc4017c709b6259bc132\"\n\
            platforms = [\"linux/amd64\"]\n\
            default = \"base\"\n\
            source = \"https://example.test/images\"\n\
            licenses = \"Apache-2.0\"\n\
            \n\
            [tools.git]\n\
            probe = [\"git\", \"--version\"]\n\
            version = 'git version ([0-9]+\\.[0-9]+\\.[0-9]+)'\n\
            \n\
            [fragments.core]\n\
            script = \"docker/install-core.sh\"\n\
            provides = [\"git\"]\n\
            \n\
            # The one variant.\n\
            [variants.base]\n\
            fragments = [\"core\"]  # kept\n\
            aliases = [\"neutral\"]\n\
            size_budget = \"500MiB\"";
        std::fs::create_dir_all(dir.join("docker")).unwrap();
        std::fs::write(dir.join("docker/install-core.sh"), "#!/bin/sh\n").unwrap();
        let manifest = Manifest::from_str_at(text, &dir.join("images.toml")).unwrap();
        (text.to_string(), manifest)
    }

    /// What `new fragment` writes, byte for byte: a language with Debian
    /// packages on the default variant (no parent; its lists edited in
    /// place), and a probed toolchain on an explicit parent (a declared tool
    /// skipped, a tool with a version, one that printed nothing, one without
    /// a version, one the probe did not run).
    #[test]
    fn the_scaffold_writes_exactly_these_files() {
        let dir = tempfile::tempdir().unwrap();
        let (text, manifest) = tiny_family(dir.path());
        let language = Request {
            name: "quux".into(),
            tools: vec!["quuxc".into(), "quuxfmt".into()],
            apt: vec!["quux-tools".into(), "lib+x".into()],
            language: Some("quuxlang".into()),
            markers: vec!["quux.toml".into(), "Quuxfile".into()],
            extensions: vec!["qx".into()],
            ..Request::default()
        };
        let s = plan(&manifest, &text, &language, None).unwrap();
        assert_eq!(
            s.manifest_text,
            r#"schema = 1
repository = "example.test/sandbox"
upstream = "debian:trixie-slim@sha256:d7e12182ce18b85b93007c1dedf31f2d29e01ccf3182cc4017c709b6259bc132"
platforms = ["linux/amd64"]
default = "base"
source = "https://example.test/images"
licenses = "Apache-2.0"

[tools.git]
probe = ["git", "--version"]
version = 'git version ([0-9]+\.[0-9]+\.[0-9]+)'

[fragments.core]
script = "docker/install-core.sh"
provides = ["git"]

# The one variant.
[variants.base]
fragments = ["core", "quux"]  # kept
aliases = ["neutral"]
size_budget = "500MiB"
serves = ["quuxlang"]

# ------------------------------------------------------------ quux ----
# Written by `sunaba-images new fragment quux`: proposals to check (the
# version patterns against what the probes print, the size budget after a
# build: `check` says by how much an image is over).

[tools.quuxc]
probe = ["quuxc", "--version"]
version = 'quuxc ([0-9]+\.[0-9]+\.[0-9]+)'

[tools.quuxfmt]
probe = ["quuxfmt", "--version"]
version = 'quuxfmt ([0-9]+\.[0-9]+\.[0-9]+)'

[fragments.quux]
script = "docker/install-quux.sh"
provides = ["quuxc", "quuxfmt"]
# Caches and build directories go under ${HOME} or ${XDG_CACHE_HOME} in
# [fragments.quux.env] (e.g. CARGO_TARGET_DIR): the workspace stays untouched.
# Debian packages: apt cannot pin a version (no *_VERSION argument); `outdated` reports them.
[fragments.quux.packages]
quux-tools = { from = "debian" }
"lib+x" = { from = "debian" }

[variants.quux]
fragments = ["quux"]
aliases = ["quux"]
serves = ["quuxlang"]
# An estimate (the parent's plus 500 MiB).
size_budget = "500MiB"

[languages.quuxlang]
tools = ["quuxc"]
markers = ["quux.toml", "Quuxfile"]
extensions = ["qx"]

# Run by `check` on tests/smoke/quuxlang/pass and .../defect: the command verify
# runs, and what it prints (the defect's `output` is required).
[smoke.quuxlang]
[[smoke.quuxlang.commands]]
run = ["quuxc", "check", "."]
expect.pass = { exit = 0, output = "TODO: what quuxc prints on a clean project" }
expect.defect = { exit = 1, output = "TODO: the finding quuxc reports on the seeded defect" }
"#
        );
        let files: Vec<(&str, &str)> = s
            .files
            .iter()
            .map(|(p, t)| (p.to_str().unwrap(), t.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                (
                    "docker/install-quux.sh",
                    "#!/bin/sh\n\
                     # Fragment `quux`: quuxc, quuxfmt. Runs on its parent, alone or next to the other\n\
                     # fragments of a variant.\n\
                     set -eu\n\
                     # shellcheck source=docker/lib/common.sh\n\
                     . /run/sunaba/lib/common.sh\n\
                     apt_install quux-tools lib+x\n\
                     sunaba_cleanup\n"
                ),
                (
                    "tests/smoke/quuxlang/pass/README.md",
                    "TODO: a small project every tool of the language passes (replace this file).\n"
                ),
                (
                    "tests/smoke/quuxlang/defect/README.md",
                    "TODO: the same project with a seeded defect: a lint error, a type error or a \
                     failing test printing a marker (replace this file).\n"
                ),
            ]
        );
        assert_eq!(s.variants, ["quux", "base"]);

        let probed = Request {
            name: "calc".into(),
            tools: ["bc", "git", "jq", "weird", "gone"]
                .map(String::from)
                .to_vec(),
            variant: Some("calc-v".into()),
            parent: Some("base".into()),
            ..Request::default()
        };
        let probe = Probe {
            versions: [
                ("bc", "bc 1.07.1"),
                ("jq", ""),
                ("weird", "no version here"),
            ]
            .into_iter()
            .map(|(t, p)| (t.to_string(), p.to_string()))
            .collect(),
            size: 10 << 20,
        };
        let s = plan(&manifest, &text, &probed, Some(&probe)).unwrap();
        assert_eq!(
            s.manifest_text,
            format!(
                "{text}\n{}",
                r#"
# ------------------------------------------------------------ calc ----
# Written by `sunaba-images new fragment calc`: proposals to check (the
# version patterns against what the probes print, the size budget after a
# build: `check` says by how much an image is over).

[tools.bc]
probe = ["bc", "--version"]
# the probe printed: bc 1.07.1
version = 'bc ([0-9]+\.[0-9]+\.[0-9]+)'
min = "1.07.1"

[tools.jq]
probe = ["jq", "--version"]
# the probe printed nothing: no version in it; write the pattern by hand
version = 'jq ([0-9]+\.[0-9]+\.[0-9]+)'

[tools.weird]
probe = ["weird", "--version"]
# the probe printed `no version here`: no version in it; write the pattern by hand
version = 'weird ([0-9]+\.[0-9]+\.[0-9]+)'

[tools.gone]
probe = ["gone", "--version"]
version = 'gone ([0-9]+\.[0-9]+\.[0-9]+)'

[fragments.calc]
script = "docker/install-calc.sh"
provides = ["bc", "git", "jq", "weird", "gone"]
# Caches and build directories go under ${HOME} or ${XDG_CACHE_HOME} in
# [fragments.calc.env] (e.g. CARGO_TARGET_DIR): the workspace stays untouched.

[variants.calc-v]
parent = "base"
fragments = ["calc"]
aliases = ["calc-v"]
# An estimate (the parent's, plus what the probed packages added and a quarter more, plus 50 MiB).
size_budget = "563MiB"
"#
            )
        );
        assert_eq!(s.files.len(), 1);
        assert_eq!(
            s.files[0].1,
            "#!/bin/sh\n\
             # Fragment `calc`: bc, git, jq, weird, gone. Runs on its parent, alone or next to the other\n\
             # fragments of a variant.\n\
             set -eu\n\
             # shellcheck source=docker/lib/common.sh\n\
             . /run/sunaba/lib/common.sh\n\
             # TODO: install bc, git, jq, weird, gone (apt_install PKG…, or a locked download: \
             docs/dependencies.md \"Locks\").\n\
             sunaba_cleanup\n"
        );
        assert_eq!(s.variants, ["calc-v"]);
    }

    /// Values are encoded, not pasted: a quote in a marker or in what a
    /// tool printed stays inside its TOML string.
    #[test]
    fn values_with_quotes_stay_toml_strings() {
        let dir = tempfile::tempdir().unwrap();
        let (text, manifest) = tiny_family(dir.path());
        let req = Request {
            name: "odd".into(),
            language: Some("oddlang".into()),
            markers: vec!["we\"ird\\".into(), "it's".into()],
            extensions: vec!["o'd".into()],
            ..Request::default()
        };
        let probe = Probe {
            versions: [("odd".to_string(), "it's 1.2.3".to_string())].into(),
            size: 0,
        };
        let s = plan(&manifest, &text, &req, Some(&probe)).unwrap();
        let doc: toml::Table =
            toml::from_str(&s.manifest_text).unwrap_or_else(|e| panic!("{e}\n{}", s.manifest_text));
        let language = &doc["languages"]["oddlang"];
        assert_eq!(
            language["markers"],
            toml::Value::from(vec!["we\"ird\\", "it's"])
        );
        assert_eq!(language["extensions"], toml::Value::from(vec!["o'd"]));
        let pattern = doc["tools"]["odd"]["version"].as_str().unwrap();
        assert_eq!(pattern, r"it's ([0-9]+\.[0-9]+\.[0-9]+)");
        assert_eq!(doc["tools"]["odd"]["min"].as_str(), Some("1.2.3"));
    }

    #[test]
    fn lists_gain_an_entry_and_everything_else_is_kept() {
        let text = "# head\n[variants.full]\n# why\nfragments = [\"a\", \"b\"]  # keep\nsize_budget = \"1GiB\"\n";
        let out = push_to_lists(text, "full", &[("fragments", "c"), ("serves", "x")]).unwrap();
        assert_eq!(
            out,
            "# head\n[variants.full]\n# why\nfragments = [\"a\", \"b\", \"c\"]  # keep\n\
             size_budget = \"1GiB\"\nserves = [\"x\"]\n"
        );
        assert!(matches!(
            push_to_lists(text, "nope", &[("fragments", "c")]),
            Err(ScaffoldError::NoVariantTable { variant }) if variant == "nope"
        ));
        assert!(matches!(
            push_to_lists("[variants", "full", &[("fragments", "c")]),
            Err(ScaffoldError::Edit(_))
        ));
    }

    #[test]
    fn the_script_installs_the_packages_or_says_what_to_do() {
        let hb = templates().unwrap();
        let s = install_script(
            &hb,
            "rust",
            &["cargo".into()],
            &["cargo".into(), "rustc".into()],
        )
        .unwrap();
        assert!(s.starts_with("#!/bin/sh\n# Fragment `rust`: cargo."), "{s}");
        assert!(
            s.contains("set -eu\n") && s.contains("\napt_install cargo rustc\nsunaba_cleanup\n")
        );
        let s = install_script(&hb, "toy", &["toyc".into()], &[]).unwrap();
        assert!(s.contains("# TODO: install toyc (apt_install PKG"), "{s}");
        // A package name is one shell word, whatever it holds.
        let s = install_script(&hb, "toy", &["toyc".into()], &["a b;c".into()]).unwrap();
        assert!(s.contains("\napt_install 'a b;c'\n"), "{s}");
        assert!(valid_name("rust-nightly_2") && !valid_name("Rust") && !valid_name("a b"));
    }
}
