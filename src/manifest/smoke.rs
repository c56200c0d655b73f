//! The smoke suites of `images.toml` (`[smoke.NAME]`): sample projects and
//! the commands the server runs on them, each with the outcome it must have
//! on each project. Validated like the rest of the manifest: every problem
//! with its line, key and a hint.

use super::problems::{Problems, known, valid_name};
use super::raw::{RawExpect, RawSmokeCommand, RawSuite};
use super::{Manifest, Tool};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use toml::Spanned;

/// The suite every variant runs (the language-neutral verbs).
pub const NEUTRAL: &str = "neutral";
/// Where a suite's projects live unless it names a `dir`.
pub const DEFAULT_DIR: &str = "tests/smoke";
/// A project's files overlaid on its git copy after the commit (`git = true`),
/// so `git status`/`git diff` have a change to show: `<project>.dirty/`.
pub const DIRTY_SUFFIX: &str = ".dirty";

/// One smoke suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmokeSuite {
    pub name: String,
    /// The languages whose smoke this is; empty for [`NEUTRAL`], which every
    /// variant runs.
    pub languages: Vec<String>,
    /// Project-relative directory holding one directory per project.
    pub dir: PathBuf,
    /// Each project's copy is a git repository with everything committed.
    pub git: bool,
    pub commands: Vec<SmokeCommand>,
}

/// A command the server runs, and what it must do on each project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmokeCommand {
    pub name: String,
    /// argv, run without a shell in the project's directory.
    pub run: Vec<String>,
    /// The tools it exercises: it runs on a variant that owes all of them.
    pub tools: Vec<String>,
    /// It may change the workspace (otherwise any change fails it).
    pub writes: bool,
    /// Project name (a directory of the suite's `dir`) -> expected outcome.
    pub expect: BTreeMap<String, SmokeExpect>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmokeExpect {
    pub exit: i32,
    /// A regular expression the combined output must match.
    pub output: Option<String>,
    /// The command must print nothing at all.
    pub no_output: bool,
}

impl SmokeExpect {
    /// Whether a tool that does nothing and exits 0 would fail this.
    pub fn proves_the_tool_ran(&self) -> bool {
        self.exit != 0 || self.output.is_some()
    }
}

impl Manifest {
    /// The suites `variant` runs: the neutral one, then those of the
    /// languages it serves, in name order.
    pub fn smoke_suites(&self, variant: &str) -> Vec<&SmokeSuite> {
        let serves = self
            .variants
            .get(variant)
            .map(|v| v.serves.clone())
            .unwrap_or_default();
        let mut suites: Vec<&SmokeSuite> = self.smoke.get(NEUTRAL).into_iter().collect();
        suites.extend(
            self.smoke
                .values()
                .filter(|s| s.name != NEUTRAL && s.languages.iter().any(|l| serves.contains(l))),
        );
        suites
    }
}

fn inside_project(path: &Path) -> bool {
    path.components().next().is_some()
        && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Validates `[smoke.*]` against the declared tools and languages.
pub(super) fn validate(
    raw: BTreeMap<String, RawSuite>,
    root: &Path,
    tools: &BTreeMap<String, Tool>,
    languages: &BTreeSet<String>,
    p: &mut Problems,
) -> BTreeMap<String, SmokeSuite> {
    let mut suites = BTreeMap::new();
    let mut covered: BTreeMap<String, String> = BTreeMap::new();
    for (name, s) in raw {
        let key = format!("smoke.{name}");
        if !valid_name(&name) {
            p.at(
                &s.commands,
                &key,
                format!("invalid suite name `{name}`"),
                "use lowercase letters, digits, `-`, `_`, `.`",
            );
        }
        let suite_languages = suite_languages(&name, &s, &key, languages, &mut covered, p);
        let dir = suite_dir(&name, &s, &key, root, p);
        if s.commands.get_ref().is_empty() {
            p.at(
                &s.commands,
                format!("{key}.commands"),
                "no commands",
                "add [[smoke.NAME.commands]] entries",
            );
        }
        let mut commands = Vec::new();
        let mut names = BTreeSet::new();
        let mut any_defect = false;
        let suite_line = s.commands.span();
        for (i, c) in s.commands.into_inner().into_iter().enumerate() {
            let ckey = format!("{key}.commands[{i}]");
            let (command, defect) = command(c, &ckey, tools, &dir, &mut names, p);
            any_defect |= defect;
            commands.push(command);
        }
        if name != NEUTRAL && !commands.is_empty() && !any_defect {
            p.at_span(
                suite_line,
                &key,
                "no seeded-defect case: no command is expected to fail",
                "add a project with a lint error, a type error or a failing test, and expect a non-zero `exit` on it",
            );
        }
        suites.insert(
            name.clone(),
            SmokeSuite {
                name,
                languages: suite_languages,
                dir: dir.path,
                git: s.git,
                commands,
            },
        );
    }
    suites
}

/// The languages a suite covers (none for the neutral suite; by default
/// the one named like it), each known and covered by one suite only
/// (`covered`: language -> its suite so far).
fn suite_languages(
    name: &str,
    s: &RawSuite,
    key: &str,
    languages: &BTreeSet<String>,
    covered: &mut BTreeMap<String, String>,
    p: &mut Problems,
) -> Vec<String> {
    let suite_languages: Vec<String> = match (&s.languages, name == NEUTRAL) {
        (Some(list), true) => {
            if let Some(first) = list.first() {
                p.at(
                    first,
                    format!("{key}.languages"),
                    "the neutral suite runs on every variant: it has no languages",
                    "drop `languages`, or give the suite another name",
                );
            }
            Vec::new()
        }
        (None, true) => Vec::new(),
        (Some(list), false) => list.iter().map(|l| l.get_ref().clone()).collect(),
        (None, false) => vec![name.to_string()],
    };
    for (i, language) in suite_languages.iter().enumerate() {
        let at = s.languages.as_ref().and_then(|l| l.get(i));
        if !languages.contains(language) {
            let message = format!("unknown language `{language}`");
            let hint = format!(
                "use one of: {} (or set `languages`, or call the suite `{NEUTRAL}`)",
                known(languages)
            );
            match at {
                Some(at) => p.at(at, format!("{key}.languages"), message, hint),
                None => p.at(&s.commands, key, message, hint),
            }
        } else if let Some(other) = covered.insert(language.clone(), name.to_string()) {
            let message = format!("language `{language}` already has the suite `{other}`");
            match at {
                Some(at) => p.at(
                    at,
                    format!("{key}.languages"),
                    message,
                    "one suite per language",
                ),
                None => p.at(&s.commands, key, message, "one suite per language"),
            }
        }
    }
    suite_languages
}

/// A suite's directory of projects, project-relative.
struct SuiteDir<'a> {
    path: PathBuf,
    root: &'a Path,
    /// It is inside the project and exists (its projects can be looked for).
    exists: bool,
}

/// The suite's `dir` (default `tests/smoke/NAME`): inside the project, and
/// there.
fn suite_dir<'a>(
    name: &str,
    s: &RawSuite,
    key: &str,
    root: &'a Path,
    p: &mut Problems,
) -> SuiteDir<'a> {
    let dir = match &s.dir {
        Some(d) => {
            let dir = PathBuf::from(d.get_ref());
            if !inside_project(&dir) {
                p.at(
                    d,
                    format!("{key}.dir"),
                    format!(
                        "`{}` is not a relative path inside the project",
                        dir.display()
                    ),
                    format!("e.g. {DEFAULT_DIR}/{name}"),
                );
            }
            dir
        }
        None => PathBuf::from(DEFAULT_DIR).join(name),
    };
    let exists = inside_project(&dir) && root.join(&dir).is_dir();
    if inside_project(&dir) && !exists {
        let message = format!("the suite's directory `{}` does not exist", dir.display());
        let hint = "create it with one directory per project (e.g. pass/, defect/)";
        match &s.dir {
            Some(d) => p.at(d, format!("{key}.dir"), message, hint),
            None => p.at(&s.commands, key, message, hint),
        }
    }
    SuiteDir {
        path: dir,
        root,
        exists,
    }
}

/// One command of a suite (`names`: the suite's command names so far), and
/// whether it expects a failure on a project (a seeded defect).
fn command(
    c: RawSmokeCommand,
    ckey: &str,
    tools: &BTreeMap<String, Tool>,
    dir: &SuiteDir,
    names: &mut BTreeSet<String>,
    p: &mut Problems,
) -> (SmokeCommand, bool) {
    if c.run.get_ref().is_empty() || c.run.get_ref()[0].is_empty() {
        p.at(
            &c.run,
            format!("{ckey}.run"),
            "run is empty",
            "give the argv to run, e.g. [\"ruff\", \"check\", \".\"]",
        );
    }
    let cname = match &c.name {
        Some(n) => n.get_ref().clone(),
        None => c.run.get_ref().join(" "),
    };
    if !names.insert(cname.clone()) {
        p.at(
            &c.run,
            format!("{ckey}.name"),
            format!("two commands are called `{cname}`"),
            "give one a `name`",
        );
    }
    let command_tools = command_tools(&c, ckey, tools, p);
    if c.expect.get_ref().is_empty() {
        p.at(
            &c.expect,
            format!("{ckey}.expect"),
            "no expected outcome",
            "add e.g. `expect.pass = { exit = 0 }` and `expect.defect = { exit = 1, output = \"…\" }`",
        );
    }
    let mut any_defect = false;
    let mut expect = BTreeMap::new();
    for (project, e) in c.expect.into_inner() {
        let ekey = format!("{ckey}.expect.{project}");
        if !valid_name(&project) || project.ends_with(DIRTY_SUFFIX) {
            p.at(
                &e,
                &ekey,
                format!("invalid project name `{project}`"),
                "a project is a directory of the suite's `dir`: lowercase letters, digits, `-`, `_`",
            );
        } else if dir.exists && !dir.root.join(&dir.path).join(&project).is_dir() {
            p.at(
                &e,
                &ekey,
                format!("no project `{}`", dir.path.join(&project).display()),
                format!(
                    "create the directory, or use one of: {}",
                    known(projects(&dir.root.join(&dir.path)))
                ),
            );
        }
        let exp = expectation(e, &ekey, c.run.get_ref(), p);
        any_defect |= exp.exit != 0;
        expect.insert(project, exp);
    }
    if !expect.is_empty() && !expect.values().any(SmokeExpect::proves_the_tool_ran) {
        p.at(
            &c.run,
            format!("{ckey}.expect"),
            "a tool that does nothing would pass every expectation",
            "expect a non-zero `exit` on a seeded-defect project, or an `output` the tool must print",
        );
    }
    let command = SmokeCommand {
        name: cname,
        run: c.run.into_inner(),
        tools: command_tools,
        writes: c.writes,
        expect,
    };
    (command, any_defect)
}

/// The tools a command exercises: its `tools`, each declared, or by
/// default its program when that is a declared tool.
fn command_tools(
    c: &RawSmokeCommand,
    ckey: &str,
    tools: &BTreeMap<String, Tool>,
    p: &mut Problems,
) -> Vec<String> {
    let program = c.run.get_ref().first().cloned().unwrap_or_default();
    match &c.tools {
        Some(list) => {
            for t in list {
                if !tools.contains_key(t.get_ref()) {
                    p.at(
                        t,
                        format!("{ckey}.tools"),
                        format!("unknown tool `{}`", t.get_ref()),
                        format!("use one of: {}", known(tools.keys())),
                    );
                }
            }
            list.iter().map(|t| t.get_ref().clone()).collect()
        }
        None if tools.contains_key(&program) => vec![program.clone()],
        None => {
            p.at(
                &c.run,
                format!("{ckey}.tools"),
                format!("`{program}` is not a declared tool"),
                "say which tools the command exercises (`tools = [\"…\"]`; `[]` runs it on every variant)",
            );
            Vec::new()
        }
    }
}

fn expectation(e: Spanned<RawExpect>, key: &str, run: &[String], p: &mut Problems) -> SmokeExpect {
    let e = e.into_inner();
    let exit = match &e.exit {
        Some(x) if (0..=255).contains(x.get_ref()) => *x.get_ref() as i32,
        Some(x) => {
            p.at(
                x,
                format!("{key}.exit"),
                format!("{} is not an exit status", x.get_ref()),
                "use 0 to 255",
            );
            0
        }
        None => 0,
    };
    if let Some(pattern) = &e.output {
        if let Err(err) = regex::Regex::new(pattern.get_ref()) {
            p.at(
                pattern,
                format!("{key}.output"),
                format!("not a valid regular expression: {err}"),
                "a Rust regex searched in the command's output (stdout and stderr)",
            );
        }
        if e.no_output {
            p.at(
                pattern,
                format!("{key}.output"),
                "`output` and `no_output = true` exclude each other",
                "drop one of them",
            );
        }
    }
    if let (Some(x), None) = (&e.exit, &e.output)
        && let Some(why) = not_run_exit(run, exit)
    {
        p.at(
            x,
            format!("{key}.exit"),
            format!(
                "exit {exit} is also what {why}: the case would pass without the tool having run"
            ),
            "add an `output` pattern the tool prints on this project (the finding, e.g. its code)",
        );
    }
    SmokeExpect {
        exit,
        output: e.output.map(Spanned::into_inner),
        no_output: e.no_output,
    }
}

/// Tools that take a subcommand, and the exit status they give when it does
/// not exist (`cargo clippy` without clippy exits 101).
const SUBCOMMAND_MISSING: &[(&str, i32)] = &[
    ("cargo", 101),
    ("go", 2),
    ("git", 1),
    ("npm", 1),
    ("uv", 2),
    ("pip", 1),
    ("rustup", 1),
    ("dotnet", 1),
];

/// Why an expected `exit` proves nothing by itself: the status a command
/// that never ran what the case means would also give. 126 and 127 (not
/// executable, not found: the driver's exec, or a shell's) for any
/// command; a tool's own "no such subcommand" status when `run` has one.
pub fn not_run_exit(run: &[String], exit: i32) -> Option<String> {
    let program = run.first()?;
    match exit {
        126 => return Some(format!("`{program}` exits with when it is not executable")),
        127 => return Some(format!("`{program}` exits with when it is not installed")),
        _ => {}
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    let (_, code) = SUBCOMMAND_MISSING.iter().find(|(tool, _)| *tool == name)?;
    let sub = run.get(1).filter(|a| !a.starts_with('-'))?;
    (*code == exit).then(|| format!("`{name}` exits with when it has no subcommand `{sub}`"))
}

/// The project directories of a suite's `dir`, sorted.
fn projects(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(DIRTY_SUFFIX))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, project};
    use super::*;
    use crate::manifest::{ManifestError, Problem};

    const SMOKE: &str = r#"
[smoke.neutral]
git = true
[[smoke.neutral.commands]]
run = ["t1", "--list"]
expect.repo = { exit = 0, output = "one" }

[smoke.py]
[[smoke.py.commands]]
run = ["t2", "check"]
expect.pass = { exit = 0, no_output = true }
expect.defect = { exit = 1, output = "E[0-9]+" }
"#;

    /// GOOD plus `smoke`, with the project directories on disk.
    fn load(smoke: &str) -> Result<Manifest, Vec<Problem>> {
        let (dir, path) = project(&format!("{GOOD}{smoke}"));
        for d in ["neutral/repo", "neutral/repo.dirty", "py/pass", "py/defect"] {
            std::fs::create_dir_all(dir.path().join(DEFAULT_DIR).join(d)).unwrap();
        }
        match Manifest::load(&path) {
            Ok(m) => Ok(m),
            Err(ManifestError::Invalid { problems, .. }) => Err(problems),
            Err(other) => panic!("{other}"),
        }
    }

    fn problems(smoke: &str) -> Vec<Problem> {
        load(smoke).expect_err("problems")
    }

    #[test]
    fn an_exit_a_missing_command_also_gives_needs_an_output_pattern() {
        let cases = [
            (
                "expect.defect = { exit = 1, output = \"E[0-9]+\" }",
                "expect.defect = { exit = 127 }",
                "exit 127 is also what `t2` exits with when it is not installed",
            ),
            (
                "run = [\"t2\", \"check\"]\nexpect.pass = { exit = 0, no_output = true }\nexpect.defect = { exit = 1, output = \"E[0-9]+\" }",
                "run = [\"cargo\", \"clippy\"]\ntools = [\"t2\"]\nexpect.pass = { exit = 0 }\nexpect.defect = { exit = 101, no_output = true }",
                "exit 101 is also what `cargo` exits with when it has no subcommand `clippy`",
            ),
        ];
        for (from, to, message) in cases {
            let text = SMOKE.replace(from, to);
            assert_ne!(text, SMOKE, "{to}");
            let ps = problems(&text);
            assert!(
                ps.iter()
                    .any(|p| p.key == "smoke.py.commands[0].expect.defect.exit"
                        && p.message
                            == format!(
                                "{message}: the case would pass without the tool having run"
                            )
                        && p.hint.starts_with("add an `output` pattern")
                        && p.line.is_some()),
                "{to}: {ps:?}"
            );
        }
        // With an output pattern the exit is fine; so is 101 from another tool.
        load(&SMOKE.replace(
            "expect.defect = { exit = 1, output = \"E[0-9]+\" }",
            "expect.defect = { exit = 127, output = \"E[0-9]+\" }",
        ))
        .unwrap();
        load(&SMOKE.replace(
            "expect.defect = { exit = 1, output = \"E[0-9]+\" }",
            "expect.defect = { exit = 101 }",
        ))
        .unwrap();
        assert_eq!(not_run_exit(&["go".into(), "--version".into()], 2), None);
        assert_eq!(not_run_exit(&["/usr/bin/go".into(), "vet".into()], 1), None);
        assert!(not_run_exit(&["/usr/bin/go".into(), "vet".into()], 2).is_some());
    }

    #[test]
    fn suites_load_with_their_defaults() {
        let m = load(SMOKE).unwrap();
        let py = &m.smoke["py"];
        assert_eq!(py.languages, ["py"]);
        assert_eq!(py.dir, Path::new("tests/smoke/py"));
        assert_eq!(py.commands[0].name, "t2 check");
        assert_eq!(py.commands[0].tools, ["t2"]);
        assert!(py.commands[0].expect["pass"].no_output);
        assert_eq!(py.commands[0].expect["defect"].exit, 1);
        assert!(m.smoke["neutral"].git && m.smoke["neutral"].languages.is_empty());
        let names =
            |v: &str| -> Vec<String> { m.smoke_suites(v).iter().map(|s| s.name.clone()).collect() };
        assert_eq!(names("top"), ["neutral", "py"]);
        assert_eq!(names("root"), ["neutral"]);
    }

    #[test]
    fn the_shipped_suites_cover_js_and_ts_with_one_suite() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let m = Manifest::load(&root.join("images.toml")).unwrap();
        assert_eq!(m.smoke["js"].languages, ["js", "ts"]);
        // Every language in exactly one suite (read from images.toml: a new
        // language brings its own).
        for language in m.languages.keys() {
            let suites: Vec<&str> = m
                .smoke
                .values()
                .filter(|s| s.languages.contains(language))
                .map(|s| s.name.as_str())
                .collect();
            assert_eq!(suites.len(), 1, "{language}: {suites:?}");
        }
    }

    #[test]
    fn every_mistake_is_named_with_line_key_and_hint() {
        let bad = SMOKE
            .replace("run = [\"t1\", \"--list\"]", "run = [\"ls\"]")
            .replace(
                "expect.defect = { exit = 1, output = \"E[0-9]+\" }",
                "expect.defcet = { exit = 1, output = \"E[0-9\" }",
            );
        let ps = problems(&bad);
        let keys: Vec<(&str, &str)> = ps
            .iter()
            .map(|p| (p.key.as_str(), p.message.as_str()))
            .collect();
        assert!(
            keys.contains(&(
                "smoke.neutral.commands[0].tools",
                "`ls` is not a declared tool"
            )),
            "{keys:?}"
        );
        assert!(
            keys.contains(&(
                "smoke.py.commands[0].expect.defcet",
                "no project `tests/smoke/py/defcet`"
            )),
            "{keys:?}"
        );
        assert!(
            ps.iter()
                .any(|p| p.key == "smoke.py.commands[0].expect.defcet.output"
                    && p.message.starts_with("not a valid regular expression")),
            "{ps:?}"
        );
        let hint = &ps
            .iter()
            .find(|p| p.key.ends_with("expect.defcet"))
            .unwrap()
            .hint;
        assert!(hint.contains("defect, pass"), "{hint}");
        assert!(ps.iter().all(|p| p.line.is_some()), "{ps:?}");
    }

    #[test]
    fn a_language_suite_needs_a_seeded_defect_and_every_command_must_prove_it_ran() {
        let ps = problems(&SMOKE.replace("expect.defect = { exit = 1, output = \"E[0-9]+\" }", ""));
        let messages: Vec<&str> = ps.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages.contains(&"a tool that does nothing would pass every expectation"),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"no seeded-defect case: no command is expected to fail"),
            "{messages:?}"
        );
    }

    #[test]
    fn suites_name_known_languages_once_and_neutral_none() {
        let two = format!(
            "{SMOKE}\n[smoke.other]\nlanguages = [\"py\", \"cobol\"]\n[[smoke.other.commands]]\nrun = [\"t2\"]\nexpect.pass = {{ exit = 1 }}\n"
        );
        let ps = problems(&two);
        let messages: Vec<&str> = ps.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages.contains(&"language `py` already has the suite `other`"),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"unknown language `cobol`"),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`tests/smoke/other` does not exist")),
            "{messages:?}"
        );
        let neutral = SMOKE.replace("git = true", "git = true\nlanguages = [\"py\"]");
        assert!(
            problems(&neutral)
                .iter()
                .any(|p| p.key == "smoke.neutral.languages")
        );
        let outside = SMOKE.replace("[smoke.py]\n", "[smoke.py]\ndir = \"../elsewhere\"\n");
        assert!(problems(&outside).iter().any(|p| p.key == "smoke.py.dir"
            && p.message.contains("not a relative path inside the project")));
        let status = SMOKE.replace("exit = 1, output", "exit = 300, output");
        assert!(
            problems(&status)
                .iter()
                .any(|p| p.key.ends_with("defect.exit"))
        );
    }
}
