//! GitHub Actions output: workflow-command annotations (`::error
//! file=…,line=…::…`, escaped as the runner decodes them, the most
//! important first since a step shows only a handful), the step summary
//! (`$GITHUB_STEP_SUMMARY`, Markdown appended) and step outputs
//! (`$GITHUB_OUTPUT`).

use std::cmp::Ordering;
use std::fmt;
use std::io::Write as _;
use std::path::Path;

/// How a command reports: for people, or for a GitHub Actions runner as
/// well (annotations, step summary, outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// `github` when `GITHUB_ACTIONS=true` (inside a workflow), else `human`.
    Auto,
    Human,
    Github,
}

impl Format {
    /// Whether to write GitHub's annotations and summary.
    pub(crate) fn github(self) -> bool {
        match self {
            Format::Github => true,
            Format::Human => false,
            Format::Auto => std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Error,
    Warning,
}

impl Level {
    fn command(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
        }
    }
}

/// One annotation. `rank` orders annotations of one level: lower first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Annotation {
    pub level: Level,
    pub rank: u32,
    pub file: Option<String>,
    pub line: Option<usize>,
    pub title: Option<String>,
    pub message: String,
}

impl Annotation {
    pub(crate) fn error(rank: u32, message: impl Into<String>) -> Annotation {
        Annotation {
            level: Level::Error,
            rank,
            file: None,
            line: None,
            title: None,
            message: message.into(),
        }
    }
    pub(crate) fn warning(rank: u32, message: impl Into<String>) -> Annotation {
        Annotation {
            level: Level::Warning,
            ..Annotation::error(rank, message)
        }
    }
    pub(crate) fn at(mut self, file: impl AsRef<Path>, line: Option<usize>) -> Annotation {
        self.file = Some(file.as_ref().display().to_string());
        self.line = line;
        self
    }
    pub(crate) fn title(mut self, title: impl Into<String>) -> Annotation {
        self.title = Some(title.into());
        self
    }
}

/// `::error file=…,line=…,title=…::message`.
impl fmt::Display for Annotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut props = Vec::new();
        if let Some(file) = &self.file {
            props.push(format!("file={}", escape_property(file)));
        }
        if let Some(line) = self.line {
            props.push(format!("line={line}"));
        }
        if let Some(title) = &self.title {
            props.push(format!("title={}", escape_property(title)));
        }
        let props = if props.is_empty() {
            String::new()
        } else {
            format!(" {}", props.join(","))
        };
        write!(
            f,
            "::{}{props}::{}",
            self.level.command(),
            escape_data(&self.message)
        )
    }
}

/// A message as the runner decodes it: `%`, CR and LF escaped.
pub(crate) fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value: also `:` and `,`, which end a property.
pub(crate) fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// The annotations, most important first: errors before warnings, then by
/// rank, keeping the given order among equals.
pub(crate) fn ordered(mut annotations: Vec<Annotation>) -> Vec<Annotation> {
    annotations.sort_by(|a, b| match a.level.cmp(&b.level) {
        Ordering::Equal => a.rank.cmp(&b.rank),
        other => other,
    });
    annotations
}

/// Appends `markdown` to the step summary (nothing outside a workflow).
pub(crate) fn summary(markdown: &str) -> std::io::Result<()> {
    append_env_file("GITHUB_STEP_SUMMARY", markdown)
}

/// Sets the step output `name` (nothing outside a workflow). Values with
/// newlines use the heredoc form with a delimiter the value cannot hold.
pub(crate) fn set_output(name: &str, value: &str) -> std::io::Result<()> {
    let line = if value.contains('\n') {
        let mut delimiter = "SUNABA_EOF".to_string();
        while value.contains(&delimiter) {
            delimiter.push('_');
        }
        format!("{name}<<{delimiter}\n{value}\n{delimiter}\n")
    } else {
        format!("{name}={value}\n")
    };
    append_env_file("GITHUB_OUTPUT", &line)
}

fn append_env_file(var: &str, text: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// The step summary of a gate verb: `### VERB`, then each of its
/// annotations (most important first) as a list item, or `ok` when it found
/// nothing. Verbs with a richer report of their own (`check`) write theirs.
pub(crate) fn gate_summary(verb: &str, annotations: &[Annotation], ok: &str) -> String {
    let mut out = format!("### {verb}\n\n");
    if annotations.is_empty() {
        out.push_str(&format!("{ok}\n\n"));
        return out;
    }
    let count = |level| annotations.iter().filter(|a| a.level == level).count();
    out.push_str(&format!(
        "{} error(s), {} warning(s):\n\n",
        count(Level::Error),
        count(Level::Warning)
    ));
    for a in ordered(annotations.to_vec()) {
        let level = match a.level {
            Level::Error => "**error**",
            Level::Warning => "warning",
        };
        let title = a
            .title
            .as_deref()
            .map(|t| format!(" {t}:"))
            .unwrap_or_default();
        let at = match (&a.file, a.line) {
            (Some(f), Some(l)) => format!(" (`{f}:{l}`)"),
            (Some(f), None) => format!(" (`{f}`)"),
            _ => String::new(),
        };
        let message = a.message.replace('\n', " ");
        out.push_str(&format!("- {level}{title} {message}{at}\n"));
    }
    out.push('\n');
    out
}

/// The line of the key at `path` (`["upstream"]`, `["profiles", "local",
/// "upstream"]`) in a TOML text: a top-level key before the first table,
/// else `key = …` in its table (the table's header when the key is not
/// written there).
pub(crate) fn toml_key_line(text: &str, path: &[&str]) -> Option<usize> {
    match path {
        [] => None,
        [key] => text
            .lines()
            .take_while(|l| !l.trim_start().starts_with('['))
            .position(|l| is_key(l, key))
            .map(|i| i + 1),
        [table @ .., key] => toml_line(text, &table.join("."), Some(key)),
    }
}

fn is_key(line: &str, key: &str) -> bool {
    line.trim_start()
        .strip_prefix(key)
        .is_some_and(|rest| rest.trim_start().starts_with('='))
}

/// The 1-based line of table `[name]` in a TOML text, or of `key = …`
/// inside it: where an annotation about images.toml points.
pub(crate) fn toml_line(text: &str, table: &str, key: Option<&str>) -> Option<usize> {
    let header = format!("[{table}]");
    let mut lines = text.lines().enumerate();
    let (start, _) = lines.find(|(_, l)| l.trim() == header)?;
    let Some(key) = key else {
        return Some(start + 1);
    };
    for (i, l) in lines {
        if l.trim_start().starts_with('[') {
            break;
        }
        if is_key(l, key) {
            return Some(i + 1);
        }
    }
    Some(start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_escape_data_and_properties() {
        let a = Annotation::error(0, "100% off\r\nnext: line, too")
            .at("docker/a,b:c.sh", Some(7))
            .title("drift: x");
        assert_eq!(
            a.to_string(),
            "::error file=docker/a%2Cb%3Ac.sh,line=7,title=drift%3A x::100%25 off%0D%0Anext: line, too"
        );
        assert_eq!(Annotation::warning(0, "w").to_string(), "::warning::w");
        assert_eq!(
            escape_property("a%b"),
            "a%25b",
            "% first, so escapes are not escaped again"
        );
    }

    #[test]
    fn errors_first_then_by_rank_stable() {
        let got = ordered(vec![
            Annotation::warning(0, "stray"),
            Annotation::error(2, "size"),
            Annotation::error(0, "missing a"),
            Annotation::error(0, "missing b"),
        ]);
        let messages: Vec<&str> = got.iter().map(|a| a.message.as_str()).collect();
        assert_eq!(messages, ["missing a", "missing b", "size", "stray"]);
    }

    #[test]
    fn lines_of_tables_and_keys() {
        let text = "schema = 1\n\n[tools.rg]\nprobe = []\n\n[variants.go]\nparent = \"base\"\n  size_budget = \"1GiB\"\n[variants.js]\nsize_budget = \"2GiB\"\n";
        assert_eq!(toml_line(text, "tools.rg", None), Some(3));
        assert_eq!(toml_line(text, "variants.go", Some("size_budget")), Some(8));
        assert_eq!(
            toml_line(text, "variants.js", Some("size_budget")),
            Some(10)
        );
        assert_eq!(
            toml_line(text, "variants.go", Some("aliases")),
            Some(6),
            "the table, then"
        );
        assert_eq!(toml_line(text, "tools.fd", None), None);
    }

    #[test]
    fn key_lines_top_level_and_in_tables() {
        let text = "schema = 1\nupstream = \"a\"\n\n[profiles.local]\nupstream = \"b\"\n[args]\nupstream = \"c\"\n";
        assert_eq!(toml_key_line(text, &["upstream"]), Some(2));
        assert_eq!(
            toml_key_line(text, &["profiles", "local", "upstream"]),
            Some(5)
        );
        assert_eq!(toml_key_line(text, &["args", "upstream"]), Some(7));
        assert_eq!(toml_key_line("[a]\nupstream = 1\n", &["upstream"]), None);
        assert_eq!(toml_key_line(text, &[]), None);
    }

    #[test]
    fn a_gate_summary_lists_errors_first_or_says_ok() {
        let found = [
            Annotation::warning(0, "moved").title("pins verify: go"),
            Annotation::error(0, "gone\nreally")
                .at("image_pins.json", Some(4))
                .title("pins verify: js"),
        ];
        assert_eq!(
            gate_summary("pins verify", &found, "unused"),
            "### pins verify\n\n1 error(s), 1 warning(s):\n\n\
             - **error** pins verify: js: gone really (`image_pins.json:4`)\n\
             - warning pins verify: go: moved\n\n"
        );
        assert_eq!(
            gate_summary("outdated", &[], "Every pin is current."),
            "### outdated\n\nEvery pin is current.\n\n"
        );
    }

    #[test]
    fn outputs_and_summaries_go_to_the_runners_files() {
        // One test touches the environment, so no other sees it change.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("output");
        let sum = dir.path().join("summary");
        // SAFETY: no other test reads or writes these variables.
        unsafe {
            std::env::set_var("GITHUB_OUTPUT", &out);
            std::env::set_var("GITHUB_STEP_SUMMARY", &sum);
        }
        set_output("has_work", "true").unwrap();
        set_output("notes", "a\nSUNABA_EOF\nb").unwrap();
        summary("### x\n").unwrap();
        summary("more\n").unwrap();
        unsafe {
            std::env::remove_var("GITHUB_OUTPUT");
            std::env::remove_var("GITHUB_STEP_SUMMARY");
        }
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "has_work=true\nnotes<<SUNABA_EOF_\na\nSUNABA_EOF\nb\nSUNABA_EOF_\n"
        );
        assert_eq!(std::fs::read_to_string(&sum).unwrap(), "### x\nmore\n");
        summary("nowhere\n").unwrap();
    }
}
