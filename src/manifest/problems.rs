//! What is wrong with an images.toml, as the validation of every part of it
//! collects it: one [`Problem`] per finding (line, key, message, hint), the
//! [`Problems`] being collected, and the small name rules the parts share.
//! Below every part of `manifest/` (validate and the parts it calls all use
//! it), so none of them imports back from `validate`.

use std::fmt;
use toml::Spanned;

/// One thing wrong with the manifest: where, which key, what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line in images.toml, when the key has a position.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `fragments.python.provides`.
    pub key: String,
    pub message: String,
    pub hint: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.key, self.message)?,
            None => write!(f, "{}: {}", self.key, self.message)?,
        }
        if !self.hint.is_empty() {
            write!(f, " (hint: {})", self.hint)?;
        }
        Ok(())
    }
}

pub(super) struct ProblemList<'a>(pub(super) &'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  - {p}")?;
        }
        Ok(())
    }
}

/// Maps byte offsets to 1-based line numbers.
pub(super) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(super) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }
    pub(super) fn line(&self, offset: usize) -> usize {
        match self.starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }
}

/// The problems found so far, and where their lines are.
pub(super) struct Problems<'a> {
    lines: &'a LineIndex,
    list: Vec<Problem>,
}

impl<'a> Problems<'a> {
    pub(super) fn new(lines: &'a LineIndex) -> Problems<'a> {
        Problems {
            lines,
            list: Vec::new(),
        }
    }

    /// Where the lines are (for a part that records spans of its own).
    pub(super) fn lines(&self) -> &'a LineIndex {
        self.lines
    }

    /// The problems found, in line order (those without a line last).
    pub(super) fn into_sorted(mut self) -> Vec<Problem> {
        self.list.sort_by_key(|pr| pr.line.unwrap_or(usize::MAX));
        self.list
    }

    pub(super) fn at<T>(
        &mut self,
        spanned: &Spanned<T>,
        key: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.at_span(spanned.span(), key, message, hint);
    }
    pub(super) fn at_span(
        &mut self,
        span: std::ops::Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        let line = Some(self.lines.line(span.start));
        self.push(line, key, message, hint);
    }
    pub(super) fn push(
        &mut self,
        line: Option<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.list.push(Problem {
            line,
            key: key.into(),
            message: message.into(),
            hint: hint.into(),
        });
    }
}

pub(super) fn known(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let v: Vec<String> = names.into_iter().map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Names end up in file names, image tags and shell words: keep them plain.
pub(super) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' || c == '.'
        })
}

pub(super) fn valid_arg_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}
