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
        let l = l.trim_start();
        if l.starts_with('[') {
            break;
        }
        if l.strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
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
