//! The rules of docs/cli.md, held against clap's command tree. The verbs
//! table there says what each verb is (how it writes, its `--json` schema,
//! whether it is a gate); [`violations`] walks every verb and sub-verb and
//! names each place the command line departs from the page.

use clap::{ArgAction, Command};
use std::collections::BTreeMap;

const BIN: &str = "sunaba-images";

/// The verbs whose `--platform` names one platform (docs/cli.md, "Values"):
/// what they print describes one image.
const ONE_PLATFORM: &[&str] = &["sbom"];

/// How a verb writes (docs/cli.md, "Writing").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    Nothing,
    Plan,
    Generate,
    Create,
    Output,
}

/// One row of docs/cli.md's verbs table.
#[derive(Debug)]
struct Row {
    writes: Writes,
    json: Option<String>,
    gate: bool,
}

/// The verbs table of `page` (docs/cli.md's text), by verb path.
fn rows(page: &str) -> Result<BTreeMap<String, Row>, String> {
    let page = format!("\n{page}");
    let table = page
        .split("\n## Verbs\n")
        .nth(1)
        .ok_or("docs/cli.md has no `## Verbs` section")?;
    let mut rows = BTreeMap::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [verb, writes, json, gate] = cells[..] else {
            return Err(format!("docs/cli.md: `{line}` has not 4 cells"));
        };
        let writes = match writes {
            "" => Writes::Nothing,
            "plan" => Writes::Plan,
            "generate" => Writes::Generate,
            "create" => Writes::Create,
            "output" => Writes::Output,
            other => return Err(format!("docs/cli.md: `{verb}`: unknown writes `{other}`")),
        };
        let json = (!json.is_empty()).then(|| json.trim_matches('`').to_string());
        let row = Row {
            writes,
            json,
            gate: gate == "yes",
        };
        rows.insert(verb.trim_matches('`').to_string(), row);
    }
    Ok(rows)
}

/// Every verb below `cmd`, depth first, with its path (`pins verify`).
fn verbs(cmd: &Command, prefix: &str, out: &mut Vec<(String, Command)>) {
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let path = format!("{prefix}{}", sub.get_name()).trim().to_string();
        out.push((path.clone(), sub.clone()));
        verbs(sub, &format!("{path} "), out);
    }
}

fn long<'a>(cmd: &'a Command, name: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| a.get_long() == Some(name))
}

fn is_flag(arg: &clap::Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue)
}

/// Whether `arg`'s parser takes `value` (split at its delimiter, as clap
/// would split it): the arg's parser alone, on a probe command.
fn parses(arg: &clap::Arg, value: &str) -> bool {
    let mut probe = clap::Arg::new("probe")
        .long("probe")
        .value_parser(arg.get_value_parser().clone())
        .action(ArgAction::Append);
    if let Some(d) = arg.get_value_delimiter() {
        probe = probe.value_delimiter(d);
    }
    Command::new("probe")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from(["--probe", value])
        .is_ok()
}

/// The schema id `--json` of verb `path` prints.
fn schema_of(path: &str) -> String {
    crate::commands::schema_id(path)
}

/// Each place the command line `root` breaks a rule of the page `page`.
pub(crate) fn violations(root: &Command, page: &str) -> Vec<String> {
    let mut root = root.clone();
    root.build();
    let rows = match rows(page) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut all = Vec::new();
    verbs(&root, "", &mut all);
    let mut found = Vec::new();
    for path in rows.keys() {
        if !all.iter().any(|(p, _)| p == path) {
            found.push(format!(
                "`{path}`: in docs/cli.md's verbs table but not a verb"
            ));
        }
    }
    let mut meanings: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (path, cmd) in &all {
        let Some(row) = rows.get(path) else {
            found.push(format!(
                "`{path}`: not in docs/cli.md's verbs table (say how it writes, its --json schema and whether it is a gate)"
            ));
            continue;
        };
        verb_rules(&root, path, cmd, row, &mut found);
        for arg in cmd.get_arguments() {
            option_rules(path, arg, &mut meanings, &mut found);
        }
    }
    found
}

/// The rules about one verb as a whole: `--json`, `--format`, writing and
/// its examples.
fn verb_rules(root: &Command, path: &str, cmd: &Command, row: &Row, found: &mut Vec<String>) {
    let leaf = !cmd.has_subcommands();
    match (long(cmd, "json"), &row.json) {
        (Some(arg), Some(schema)) => {
            if !is_flag(arg) {
                found.push(format!("`{path} --json`: must be a flag"));
            }
            if *schema != schema_of(path) {
                found.push(format!(
                    "`{path} --json`: docs/cli.md says schema `{schema}`, the code prints `{}`",
                    schema_of(path)
                ));
            }
        }
        (Some(_), None) => found.push(format!(
            "`{path} --json`: the verbs table gives it no schema"
        )),
        (None, Some(_)) => found.push(format!(
            "`{path}`: reports (docs/cli.md gives a schema) but has no --json"
        )),
        (None, None) => {}
    }
    if row.gate {
        let values: Vec<String> = long(cmd, "format")
            .map(|a| {
                a.get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let default = long(cmd, "format").map(|a| a.get_default_values().to_vec());
        if values != ["auto", "human", "github"] || default != Some(vec!["auto".into()]) {
            found.push(format!(
                "`{path}`: a gate needs --format auto|human|github (default auto)"
            ));
        }
    }
    let has = |name| long(cmd, name).is_some_and(is_flag);
    let (write, check) = (has("write"), has("check"));
    let expected = match row.writes {
        Writes::Plan => (true, false),
        Writes::Generate => (false, true),
        _ => (false, false),
    };
    if (write, check) != expected {
        found.push(format!(
            "`{path}`: writes as `{:?}`, so --write {} and --check {}",
            row.writes,
            if expected.0 {
                "is needed"
            } else {
                "must not exist"
            },
            if expected.1 {
                "is needed"
            } else {
                "must not exist"
            },
        ));
    }
    if long(cmd, "dry-run").is_some() {
        found.push(format!(
            "`{path} --dry-run`: no verb has it (a plan verb without --write is the dry run)"
        ));
    }
    if leaf || cmd.get_after_help().is_some() {
        example_rules(root, path, cmd, found);
    }
}

/// The verb's help ends with examples, each of which parses and runs this
/// verb.
fn example_rules(root: &Command, path: &str, cmd: &Command, found: &mut Vec<String>) {
    let help = cmd
        .get_after_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let Some((_, examples)) = help.split_once("Examples:\n") else {
        found.push(format!("`{path}`: its help has no `Examples:`"));
        return;
    };
    let lines: Vec<&str> = examples
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(BIN))
        .collect();
    if lines.is_empty() {
        found.push(format!("`{path}`: `Examples:` lists no `{BIN} …` line"));
    }
    for line in lines {
        let Some(words) = shlex::split(line) else {
            found.push(format!("`{path}`: example `{line}` is not shell words"));
            continue;
        };
        let words: Vec<String> = words
            .into_iter()
            .take_while(|w| !matches!(w.as_str(), "|" | ">" | "&&" | ";" | ">>"))
            .collect();
        if !words[1..].join(" ").starts_with(path) {
            found.push(format!("`{path}`: example `{line}` runs another verb"));
        }
        if let Err(e) = root.clone().try_get_matches_from(&words) {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            found.push(format!(
                "`{path}`: example `{line}` does not parse: {first}"
            ));
        }
    }
}

/// The rules about one option: durations, platforms, one name one meaning.
fn option_rules(
    path: &str,
    arg: &clap::Arg,
    meanings: &mut BTreeMap<String, (String, String)>,
    found: &mut Vec<String>,
) {
    let Some(name) = arg.get_long() else { return };
    let value_name = arg
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if name.ends_with("timeout") || value_name == "DURATION" {
        let ok = value_name == "DURATION"
            && ["30s", "10m", "1h30m"].iter().all(|v| parses(arg, v))
            && !parses(arg, "30");
        if !ok {
            found.push(format!(
                "`{path} --{name}`: a duration: value name DURATION, `30s`/`10m`/`1h30m` taken, a bare `30` refused"
            ));
        }
    }
    if name == "platform" && ONE_PLATFORM.contains(&path) {
        if value_name != "PLATFORM" {
            found.push(format!(
                "`{path} --platform`: names one platform: value name PLATFORM"
            ));
        }
        return;
    }
    if name == "platform" {
        let ok = value_name == "LIST|all"
            && parses(arg, "linux/amd64,linux/arm64")
            && parses(arg, "all");
        if !ok {
            found.push(format!(
                "`{path} --platform`: value name LIST|all, takes a comma-separated list or `all`"
            ));
        }
    }
    if name == "dry-run" {
        return;
    }
    // `--format`'s values are the verb's output forms (docs/cli.md, 4).
    let defaults = if name == "format" {
        String::new()
    } else {
        format!("{:?}", arg.get_default_values())
    };
    let shape = format!(
        "value {value_name:?}, {:?}, default {defaults}, env {:?}",
        arg.get_action(),
        arg.get_env()
    );
    match meanings.get(name) {
        Some((first, seen)) if *seen != shape => found.push(format!(
            "`{path} --{name}`: one name, one meaning: here {shape}, on `{first}` {seen}"
        )),
        Some(_) => {}
        None => {
            meanings.insert(name.to_string(), (path.to_string(), shape));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, CommandFactory};

    fn page() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
        std::fs::read_to_string(path).expect("docs/cli.md")
    }

    #[test]
    fn the_command_line_follows_docs_cli_md() {
        let found = violations(&crate::cli::Cli::command(), &page());
        assert!(found.is_empty(), "{}", found.join("\n"));
    }

    /// A one-verb command line and its table, to break one rule at a time.
    fn lone(verb: Command, row: &str) -> Vec<String> {
        let page =
            format!("## Verbs\n\n| verb | writes | json | gate |\n|---|---|---|---|\n{row}\n");
        violations(&Command::new(BIN).subcommand(verb), &page)
    }

    fn example(verb: &str) -> String {
        format!("Examples:\n  {BIN} {verb}")
    }

    #[test]
    fn a_timeout_in_bare_seconds_breaks_the_duration_rule() {
        let verb = Command::new("engine").after_help(example("engine")).arg(
            Arg::new("timeout")
                .long("timeout")
                .value_parser(clap::value_parser!(u64)),
        );
        let found = lone(verb, "| `engine` | | | |");
        assert_eq!(
            found,
            [
                "`engine --timeout`: a duration: value name DURATION, `30s`/`10m`/`1h30m` taken, a bare `30` refused"
            ]
        );
    }

    #[test]
    fn a_gate_without_format_and_a_verb_without_its_table_row_are_named() {
        let gate = Command::new("engine").after_help(example("engine"));
        let found = lone(gate.clone(), "| `engine` | | | yes |");
        assert_eq!(
            found,
            ["`engine`: a gate needs --format auto|human|github (default auto)"]
        );
        let found = lone(gate, "| `tags` | | | |");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("`tags`: in docs/cli.md's verbs table but not a verb"));
        assert!(found[1].contains("`engine`: not in docs/cli.md's verbs table"));
    }

    #[test]
    fn a_dry_run_flag_and_a_plan_verb_without_write_are_named() {
        let verb = Command::new("engine").after_help(example("engine")).arg(
            Arg::new("dry_run")
                .long("dry-run")
                .action(ArgAction::SetTrue),
        );
        let found = lone(verb, "| `engine` | plan | | |");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("--write is needed"), "{found:?}");
        assert!(found[1].contains("`engine --dry-run`: no verb has it"));
    }

    #[test]
    fn a_missing_or_unparsable_example_is_named() {
        let found = lone(Command::new("engine"), "| `engine` | | | |");
        assert_eq!(found, ["`engine`: its help has no `Examples:`"]);
        let verb = Command::new("engine").after_help(example("engine --nope"));
        let found = lone(verb, "| `engine` | | | |");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("`engine`: example `sunaba-images engine --nope` does not parse"),
            "{found:?}"
        );
    }

    #[test]
    fn one_name_with_two_meanings_is_named() {
        let verb = |name: &'static str, default: &'static str| {
            Command::new(name)
                .after_help(example(name))
                .arg(Arg::new("jobs").long("jobs").default_value(default))
        };
        let root = Command::new(BIN)
            .subcommand(verb("build", "4"))
            .subcommand(verb("engine", "8"));
        let page = "## Verbs\n\n| `build` | | | |\n| `engine` | | | |\n";
        let found = violations(&root, page);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("`engine --jobs`: one name, one meaning"),
            "{found:?}"
        );
    }

    #[test]
    fn a_json_flag_the_table_does_not_know_and_a_missing_one_are_named() {
        let verb = Command::new("engine")
            .after_help(example("engine"))
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue));
        assert_eq!(
            lone(verb, "| `engine` | | | |"),
            ["`engine --json`: the verbs table gives it no schema"]
        );
        let bare = Command::new("engine").after_help(example("engine"));
        assert_eq!(
            lone(bare, "| `engine` | | `sunaba-images/engine/v1` | |"),
            ["`engine`: reports (docs/cli.md gives a schema) but has no --json"]
        );
    }
}
