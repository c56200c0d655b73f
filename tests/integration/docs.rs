//! The documents cannot rot: every fenced code block in README.md and
//! docs/*.md is run, parsed, or marked as not runnable here, and the README's
//! verb table and every relative link are checked (the convention is in
//! docs/testing.md, "Code blocks in the docs").
//!
//! - `sh` blocks: each line is a `sunaba-images ARGS` (or `cargo run -q --
//!   ARGS`) command, run in a fresh copy of the shipped family; it must exit 0.
//! - `console` blocks: `$ sunaba-images ARGS` lines, each followed by the
//!   stdout it prints (`[..]`: any text within a line; `...` alone on a line:
//!   any number of lines); status 0 and that stdout.
//! - `toml` blocks parse, and their top-level keys are keys of the images.toml
//!   reference; `json` blocks parse.
//! - `<!-- not run: REASON -->` on the line before a block: not run (any
//!   language; the only way to have a `text` or `rust` block).
//!   `<!-- run: registry -->` / `<!-- run: engine -->`: its commands run when
//!   that tier's services are there (skipped as every such test is, failing
//!   under CI).

use crate::support::{self, Cli, Project, repo_root};
use std::collections::BTreeSet;
use std::path::Path;

/// When a block's commands run.
#[derive(Debug, Clone, PartialEq)]
enum Mark {
    /// Nothing said: run, or parse, by its language.
    Default,
    NotRun(String),
    /// `run: registry` / `run: engine`.
    Services(String),
}

#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    mark: Mark,
    body: String,
}

/// The fenced blocks of a markdown text. A fence may be indented (inside a
/// list); its lines lose that indentation. The marker is the last non-blank
/// line before the fence, when it is an HTML comment.
fn blocks(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let Some(c) = fence_char else {
            i += 1;
            continue;
        };
        let fence_len = trimmed.chars().take_while(|x| *x == c).count();
        if fence_len < 3 {
            i += 1;
            continue;
        }
        let info = trimmed[fence_len..].trim();
        let lang = info
            .split(|x: char| x.is_whitespace() || x == ',')
            .next()
            .unwrap_or("")
            .to_string();
        let mark = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map_or(Ok(Mark::Default), |l| marker(l.trim()))
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        let mut body = String::new();
        let open = i;
        i += 1;
        loop {
            let Some(l) = lines.get(i) else {
                return Err(format!("line {}: a fence that is never closed", open + 1));
            };
            let t = l.trim_start();
            if t.starts_with(&c.to_string().repeat(fence_len))
                && t.trim_start_matches(c).trim().is_empty()
            {
                break;
            }
            let strip = l.len() - l.trim_start().len();
            body.push_str(&l[strip.min(indent)..]);
            body.push('\n');
            i += 1;
        }
        i += 1;
        out.push(Block {
            line: open + 1,
            lang,
            mark,
            body,
        });
    }
    Ok(out)
}

/// The mark an HTML comment line gives the block after it.
fn marker(line: &str) -> Result<Mark, String> {
    let Some(inner) = line
        .strip_prefix("<!--")
        .and_then(|l| l.strip_suffix("-->"))
    else {
        return Ok(Mark::Default);
    };
    let inner = inner.trim();
    if let Some(reason) = inner.strip_prefix("not run") {
        let reason = reason.trim_start_matches(':').trim();
        if reason.is_empty() {
            return Err("`<!-- not run -->` needs a reason: `<!-- not run: why -->`".into());
        }
        return Ok(Mark::NotRun(reason.to_string()));
    }
    if let Some(tier) = inner.strip_prefix("run:") {
        let tier = tier.trim();
        if tier != "registry" && tier != "engine" {
            return Err(format!(
                "`<!-- run: {tier} -->`: the tiers are registry, engine"
            ));
        }
        return Ok(Mark::Services(tier.to_string()));
    }
    Ok(Mark::Default)
}

/// `line` split as sh would split a plain command: quotes and backslashes,
/// `#` comments. Anything else the shell would interpret (`$`, pipes,
/// redirections, `;`, `&`, globs, `~`, `VAR=value`) is refused: such a line
/// is not a plain command and its block must be marked.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    out.push(w);
                }
            }
            '#' if word.is_none() => break,
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => w.push(x),
                        None => return Err("an unclosed '".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => w.push(x),
                            Some(x) => {
                                w.push('\\');
                                w.push(x);
                            }
                            None => return Err("an unclosed \"".into()),
                        },
                        Some(x @ ('$' | '`')) => {
                            return Err(format!("`{x}` in double quotes: not a plain command"));
                        }
                        Some(x) => w.push(x),
                        None => return Err("an unclosed \"".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(x) => word.get_or_insert_with(String::new).push(x),
                None => return Err("a trailing backslash".into()),
            },
            '$' | '`' | '|' | '&' | ';' | '<' | '>' | '(' | ')' | '*' | '?' | '[' | '~' => {
                return Err(format!("`{c}`: not a plain command"));
            }
            '=' if out.is_empty() && word.is_some() => {
                return Err("an environment assignment: not a plain command".into());
            }
            x => word.get_or_insert_with(String::new).push(x),
        }
    }
    if let Some(w) = word {
        out.push(w);
    }
    if let Some(abs) = out.iter().find(|w| w.starts_with('/') || w.contains("=/")) {
        return Err(format!(
            "`{abs}`: an absolute path reaches outside the copy the block runs in"
        ));
    }
    Ok(out)
}

/// The arguments of a `sunaba-images` command line (`cargo run -q -- ARGS`
/// counts as one), or why the line is not one.
fn command(line: &str) -> Result<Vec<String>, String> {
    let w = words(line)?;
    if w.first().map(String::as_str) == Some("sunaba-images") {
        return Ok(w[1..].to_vec());
    }
    if w.len() >= 4 && w[..4] == ["cargo", "run", "-q", "--"] {
        return Ok(w[4..].to_vec());
    }
    Err(format!(
        "`{}` is not a sunaba-images command",
        w.first().map_or("", String::as_str)
    ))
}

/// Logical lines: `\`-continued lines joined, blank lines dropped.
fn logical_lines(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in body.lines() {
        if let Some(head) = l.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(l);
        if !cur.trim().is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.clear();
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

/// One command of a block and the stdout it shows (console blocks).
struct Step {
    args: Vec<String>,
    shown: Option<String>,
}

/// The commands of a shell block, or why it cannot run.
fn steps(block: &Block) -> Result<Vec<Step>, String> {
    let mut out = Vec::new();
    if block.lang == "console" {
        let mut current: Option<Step> = None;
        for l in block.body.lines() {
            if let Some(cmd) = l.strip_prefix("$ ") {
                out.extend(current.take());
                current = Some(Step {
                    args: command(cmd)?,
                    shown: Some(String::new()),
                });
            } else if let Some(step) = current.as_mut() {
                let shown = step.shown.as_mut().unwrap();
                shown.push_str(l);
                shown.push('\n');
            } else {
                return Err("a console block starts with `$ COMMAND`".into());
            }
        }
        out.extend(current);
    } else {
        for l in logical_lines(&block.body) {
            if l.trim_start().starts_with('#') {
                continue;
            }
            out.push(Step {
                args: command(&l).map_err(|e| format!("{e} (`{}`)", l.trim()))?,
                shown: None,
            });
        }
    }
    Ok(out)
}

/// Whether `actual` is what a console block shows: line by line, `[..]`
/// standing for any text within a line and a `...` line for any lines.
fn matches_shown(shown: &str, actual: &str) -> bool {
    fn line_matches(pattern: &str, line: &str) -> bool {
        let parts: Vec<&str> = pattern.split("[..]").collect();
        let re = parts
            .iter()
            .map(|p| regex::escape(p))
            .collect::<Vec<_>>()
            .join(".*");
        regex::Regex::new(&format!("^{re}$"))
            .unwrap()
            .is_match(line)
    }
    fn go(p: &[&str], a: &[&str]) -> bool {
        match p.split_first() {
            None => a.is_empty(),
            Some((&"...", rest)) => (0..=a.len()).any(|k| go(rest, &a[k..])),
            Some((first, rest)) => {
                a.first().is_some_and(|l| line_matches(first, l)) && go(rest, &a[1..])
            }
        }
    }
    let p: Vec<&str> = shown.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    go(&p, &a)
}

/// The top-level keys images.toml has: the rows of the reference's key table.
fn reference_keys() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("docs/images-toml.md")).unwrap();
    let keys: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|k| {
            k.trim_start_matches('[')
                .trim_end_matches(']')
                .trim_end_matches(".NAME")
                .to_string()
        })
        .filter(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert!(
        keys.contains("variants") && keys.contains("schema"),
        "docs/images-toml.md has no key table: {keys:?}"
    );
    keys
}

/// Where an unmarked block's commands would publish: nothing listens there.
const NOWHERE: &str = "127.0.0.1:1/docs-test/sandbox";

/// A copy of the shipped family for an unmarked block: every repository of
/// images.toml (the top-level one and each profile's) is [`NOWHERE`], so a
/// command that should have been marked cannot publish anything.
fn unpublishable_copy() -> Project {
    let p = Project::shipped();
    p.edit("images.toml", |text| {
        let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
        doc["repository"] = toml_edit::value(NOWHERE);
        if let Some(profiles) = doc.get_mut("profiles").and_then(|p| p.as_table_like_mut()) {
            for (_, profile) in profiles.iter_mut() {
                if let Some(repository) = profile.get_mut("repository") {
                    *repository = toml_edit::value(NOWHERE);
                }
            }
        }
        doc.to_string()
    });
    p
}

/// Runs one block's commands, each in a fresh copy of the shipped family;
/// the failures, as text. With `services` the commands get this process's
/// environment (the dev services); without, no engine, no dev registry and
/// no repository anyone reads: a command needing them fails, and its block
/// must be marked.
fn run_block(steps: &[Step], services: bool) -> Vec<String> {
    let mut failures = Vec::new();
    for step in steps {
        let cache = tempfile::tempdir().unwrap();
        let (_project, mut cli) = if services {
            let p = Project::shipped();
            let cli = Cli::new(p.path());
            (p, cli)
        } else {
            let p = unpublishable_copy();
            let cli = Cli::new(p.path())
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
                .env("SUNABA_ENGINE", "/nonexistent/docker")
                .env_remove("SUNABA_BASE_REF")
                .env_remove("SUNABA_REGISTRY");
            (p, cli)
        };
        cli = cli.env("SUNABA_CACHE_DIR", cache.path());
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cli.args(&step.args)
                .stdout_free("a docs example: compared below when the block shows it")
                .stderr_free("a docs example: its stdout and status are what it shows")
                .run()
        }));
        let shown_args = step.args.join(" ");
        match ran {
            Err(e) => {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("`sunaba-images {shown_args}` failed:{why}"));
            }
            Ok(run) => {
                if let Some(shown) = &step.shown
                    && !matches_shown(shown, run.stdout())
                {
                    failures.push(format!(
                        "`sunaba-images {shown_args}` printed\n{}which is not what the block shows:\n{shown}",
                        run.stdout()
                    ));
                }
            }
        }
    }
    failures
}

/// Every problem with the blocks of one markdown text (`name` for messages).
fn check_markdown(name: &str, text: &str) -> Vec<String> {
    let blocks = match blocks(text) {
        Ok(b) => b,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut failures = Vec::new();
    for block in &blocks {
        let at = |e: String| format!("{name}:{}: {e}", block.line);
        if let Mark::NotRun(_) = block.mark {
            continue;
        }
        match block.lang.as_str() {
            "sh" | "console" => {
                let steps = match steps(block) {
                    Ok(s) => s,
                    Err(e) => {
                        failures.push(at(format!(
                            "{e}: not runnable here, so mark the block `<!-- not run: why -->`"
                        )));
                        continue;
                    }
                };
                let services = match &block.mark {
                    Mark::Services(tier) if tier == "registry" => {
                        if support::dev_registry().is_none() {
                            continue;
                        }
                        true
                    }
                    Mark::Services(_) => {
                        if support::services().is_none() {
                            continue;
                        }
                        true
                    }
                    _ => false,
                };
                failures.extend(run_block(&steps, services).into_iter().map(at));
            }
            "toml" => match block.body.parse::<toml::Table>() {
                Err(e) => failures.push(at(format!("not TOML: {e}"))),
                Ok(table) => {
                    let known = reference_keys();
                    for key in table.keys().filter(|k| !known.contains(*k)) {
                        failures.push(at(format!(
                            "`{key}` is not an images.toml key (docs/images-toml.md); \
                             a TOML block of another file needs `<!-- not run: why -->`"
                        )));
                    }
                }
            },
            "json" => {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(&block.body) {
                    failures.push(at(format!(
                        "not JSON: {e}; a shape rather than a document needs `<!-- not run: why -->`"
                    )));
                }
            }
            other => failures.push(at(format!(
                "a `{other}` block is neither run nor parsed: mark it `<!-- not run: why -->`"
            ))),
        }
    }
    failures
}

/// README.md and docs/*.md, repository-relative, sorted.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".into());
    docs
}

#[test]
#[ignore = "tier: registry"]
fn every_code_block_in_the_readme_and_docs_runs_or_says_why_not() {
    let mut failures = Vec::new();
    let mut counted = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(repo_root().join(&doc)).unwrap();
        counted += blocks(&text).map_or(0, |b| b.len());
        failures.extend(check_markdown(&doc, &text));
    }
    assert!(counted > 20, "only {counted} code blocks found");
    assert!(
        failures.is_empty(),
        "{} code block problem(s) (docs/testing.md, \"Code blocks in the docs\"):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_broken_block_an_unmarked_one_and_wrong_output_fail_the_docs_test() {
    let doc = "\
```sh
sunaba-images render --check
sunaba-images no-such-verb
```

```console
$ sunaba-images render --check
render --check: nothing at all
```

```console
$ sunaba-images render --check
render --check: [..] generated file(s) up to date
```

```sh
./scripts/demo   # would provision the machine
```

```text
a format
```

<!-- not run: a format, not a command -->
```text
a format
```

<!-- not run -->
```sh
x
```
";
    let failures = check_markdown("t.md", doc);
    let text = failures.join("\n");
    assert!(
        failures[0].starts_with("t.md: line 30: `<!-- not run -->` needs a reason"),
        "{text}"
    );
    // The marker error stops the file; without it, each block is judged.
    let doc = doc.rsplit_once("<!-- not run -->").unwrap().0;
    let failures = check_markdown("t.md", doc);
    let text = failures.join("\n---\n");
    assert_eq!(failures.len(), 4, "{text}");
    assert!(
        failures[0].starts_with("t.md:1: `sunaba-images no-such-verb` failed:")
            && failures[0].contains("status: expected 0, got 64"),
        "{text}"
    );
    assert!(
        failures[1].starts_with("t.md:6: `sunaba-images render --check` printed")
            && failures[1].contains("render --check: nothing at all"),
        "{text}"
    );
    assert!(
        failures[2].starts_with("t.md:16: `./scripts/demo` is not a sunaba-images command"),
        "{text}"
    );
    assert!(
        failures[3].starts_with("t.md:20: a `text` block is neither run nor parsed"),
        "{text}"
    );
    let toml = "```toml\n[variants.x]\nparent = \n```\n\n```toml\n[package]\nname = \"x\"\n```\n\n```json\n{\"a\", \"b\"}\n```\n";
    let failures = check_markdown("t.md", toml);
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures[0].starts_with("t.md:1: not TOML"), "{failures:#?}");
    assert!(
        failures[1].starts_with("t.md:6: `package` is not an images.toml key"),
        "{failures:#?}"
    );
    assert!(
        failures[2].starts_with("t.md:11: not JSON"),
        "{failures:#?}"
    );
}

#[test]
fn shell_lines_split_as_sh_would_and_refuse_what_only_a_shell_could_run() {
    assert_eq!(
        command(r#"sunaba-images run --env "A B" 'c d' e\ f   # a comment"#).unwrap(),
        ["run", "--env", "A B", "c d", "e f"]
    );
    assert_eq!(
        command("cargo run -q -- render --check").unwrap(),
        ["render", "--check"]
    );
    for line in [
        "sunaba-images pins show | head -1",
        "sunaba-images run --workspace ~/src -- sh",
        "SUNABA_PROFILE=local sunaba-images build",
        "sunaba-images resolve \"$REF\"",
        "docker run x",
        "sunaba-images release --pins /tmp/pins.json --write",
    ] {
        assert!(command(line).is_err(), "{line}");
    }
    assert!(matches_shown(
        "a\n...\nz [..] end\n",
        "a\nb\nc\nz x y end\n"
    ));
    assert!(!matches_shown("a\nz\n", "a\nb\nz\n"));
    assert!(matches_shown("", ""));
    assert_eq!(
        marker("<!-- run: registry -->"),
        Ok(Mark::Services("registry".into()))
    );
    assert_eq!(
        marker("<!-- not run: GitHub-only -->"),
        Ok(Mark::NotRun("GitHub-only".into()))
    );
    assert!(marker("<!-- run: engin -->").is_err());
    assert_eq!(marker("<!-- a remark -->"), Ok(Mark::Default));
}

/// The GitHub anchor of a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown text's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for l in text.lines() {
        let t = l.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced && t.starts_with('#') {
            out.insert(slug(t.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_that_exist() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for doc in documents() {
        let path = repo_root().join(&doc);
        let text = std::fs::read_to_string(&path).unwrap();
        for cap in link.captures_iter(&text) {
            let target = &cap[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file_path = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !file_path.exists() {
                broken.push(format!("{doc}: {target}: no file {}", file_path.display()));
                continue;
            }
            if !anchor.is_empty() {
                let there = std::fs::read_to_string(&file_path).unwrap_or_default();
                if !anchors(&there).contains(anchor) {
                    broken.push(format!("{doc}: {target}: no heading #{anchor} in {file}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_verb_table_has_one_row_per_verb_of_the_help() {
    let help = Cli::new(Path::new(&repo_root()))
        .arg("--help")
        .stdout_free("read below: the Commands section")
        .run();
    let verbs: BTreeSet<String> = help
        .stdout()
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(str::to_string)
        .collect();
    assert!(verbs.contains("build"), "{}", help.stdout());
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let table: BTreeSet<String> = readme
        .lines()
        .skip_while(|l| *l != "| verb | what it does | read on |")
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .map(str::to_string)
        .collect();
    assert_eq!(
        table, verbs,
        "README.md's verb table and `sunaba-images --help` name different verbs"
    );
}
