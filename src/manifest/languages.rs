//! `[languages]`: each language verify can run, as data: the tools verify
//! runs for it, the project marker files that select it for a directory and
//! the file extensions that select it for a single file (the design note's
//! detection rules, S1). `detect` reads nothing else, so a new language is
//! images.toml lines only.
//!
//! ```toml
//! [languages.python]
//! tools = ["ruff", "pyright", "pytest"]
//! markers = ["pyproject.toml", "requirements*.txt"]  # `*`: any characters
//! extensions = ["py"]                                # without the dot
//! ```
//!
//! The older form `python = ["ruff", …]` is still read: tools only, so
//! `detect` finds that language only when it is named (`--language`).

use super::Tool;
use super::problems::{Problems, known};
use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use toml::Spanned;

/// A language: what verify runs for it and what selects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Language {
    pub name: String,
    /// The tools verify runs, in order.
    pub tools: Vec<String>,
    /// File names that mark a project of this language (`*` matches any
    /// characters: `requirements*.txt`).
    pub markers: Vec<String>,
    /// Extensions (without the dot) that select it for a single file.
    pub extensions: Vec<String>,
}

impl Language {
    /// Whether `file_name` is one of its markers.
    pub fn has_marker(&self, file_name: &str) -> bool {
        self.markers.iter().any(|m| glob_match(m, file_name))
    }

    /// Whether `extension` (without the dot) is one of its extensions.
    pub fn has_extension(&self, extension: &str) -> bool {
        self.extensions.iter().any(|e| e == extension)
    }
}

/// `pattern` against `name`, where `*` in the pattern matches any run of
/// characters (none included) and everything else matches itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

const FIELDS: &[&str] = &["tools", "markers", "extensions"];

/// One `[languages]` entry as written: the table form, or the older list
/// of tools.
#[derive(Debug, Default)]
pub(super) struct RawLanguage {
    tools: Vec<Spanned<String>>,
    markers: Vec<Spanned<String>>,
    extensions: Vec<Spanned<String>>,
}

impl<'de> Deserialize<'de> for RawLanguage {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawLanguage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table with `tools`, `markers` and `extensions`, or a list of tools")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawLanguage, A::Error> {
                let mut tools = Vec::new();
                while let Some(t) = seq.next_element()? {
                    tools.push(t);
                }
                Ok(RawLanguage {
                    tools,
                    ..RawLanguage::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLanguage, A::Error> {
                let mut out = RawLanguage::default();
                let mut tools = None;
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "tools" => {
                            tools = Some(());
                            &mut out.tools
                        }
                        "markers" => &mut out.markers,
                        "extensions" => &mut out.extensions,
                        other => return Err(de::Error::unknown_field(other, FIELDS)),
                    };
                    *slot = map.next_value()?;
                }
                if tools.is_none() {
                    return Err(de::Error::missing_field("tools"));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// Validates `[languages]`: every tool declared, no empty language, each
/// marker and extension well formed and claimed by one language only.
pub(super) fn validate(
    raw: BTreeMap<String, Spanned<RawLanguage>>,
    tools: &BTreeMap<String, Tool>,
    p: &mut Problems,
) -> BTreeMap<String, Language> {
    // Marker pattern / extension -> the language that claimed it first.
    let mut marker_owner: Vec<(String, String)> = Vec::new();
    let mut extension_owner: BTreeMap<String, String> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (lang, entry) in raw {
        let key = format!("languages.{lang}");
        let span = entry.span();
        let entry = entry.into_inner();
        if entry.tools.is_empty() {
            p.at_span(
                span.clone(),
                format!("{key}.tools"),
                "no tools: verify would run nothing for it",
                "list the tools verify runs for the language (declared under [tools])",
            );
        }
        for t in &entry.tools {
            if !tools.contains_key(t.get_ref()) {
                p.at(
                    t,
                    format!("{key}.tools"),
                    format!("unknown tool `{}`", t.get_ref()),
                    format!(
                        "declare [tools.{}] or use one of: {}",
                        t.get_ref(),
                        known(tools.keys())
                    ),
                );
            }
        }
        for m in &entry.markers {
            let marker = m.get_ref();
            if let Some(why) = bad_marker(marker) {
                p.at(
                    m,
                    format!("{key}.markers"),
                    format!("marker `{marker}` {why}"),
                    "a marker is a file name, e.g. `go.mod` or `requirements*.txt` (`*`: any characters)",
                );
                continue;
            }
            let clash = marker_owner
                .iter()
                .find(|(other, _)| glob_match(other, marker) || glob_match(marker, other));
            match clash {
                Some((other, owner)) if *owner == lang => p.at(
                    m,
                    format!("{key}.markers"),
                    format!("marker `{marker}` is listed twice (as `{other}`)"),
                    "list each marker once",
                ),
                Some((other, owner)) => p.at(
                    m,
                    format!("{key}.markers"),
                    format!(
                        "marker `{marker}` is also claimed by language `{owner}` (as `{other}`)"
                    ),
                    "a marker file selects one language: keep it under one of them",
                ),
                None => marker_owner.push((marker.clone(), lang.clone())),
            }
        }
        for e in &entry.extensions {
            let ext = e.get_ref();
            if let Some(why) = bad_extension(ext) {
                let hint = match ext.strip_prefix('.') {
                    Some(bare) if bad_extension(bare).is_none() => format!("write `{bare}`"),
                    _ => "an extension without the dot, e.g. `py`".to_string(),
                };
                p.at(
                    e,
                    format!("{key}.extensions"),
                    format!("extension `{ext}` {why}"),
                    hint,
                );
                continue;
            }
            match extension_owner.get(ext) {
                Some(owner) if *owner == lang => p.at(
                    e,
                    format!("{key}.extensions"),
                    format!("extension `{ext}` is listed twice"),
                    "list each extension once",
                ),
                Some(owner) => p.at(
                    e,
                    format!("{key}.extensions"),
                    format!("extension `{ext}` is also claimed by language `{owner}`"),
                    "a file extension selects one language: keep it under one of them",
                ),
                None => {
                    extension_owner.insert(ext.clone(), lang.clone());
                }
            }
        }
        let strings = |v: Vec<Spanned<String>>| v.into_iter().map(Spanned::into_inner).collect();
        out.insert(
            lang.clone(),
            Language {
                name: lang,
                tools: strings(entry.tools),
                markers: strings(entry.markers),
                extensions: strings(entry.extensions),
            },
        );
    }
    out
}

fn bad_marker(marker: &str) -> Option<&'static str> {
    if marker.is_empty() {
        Some("is empty")
    } else if marker.contains('/') {
        Some("has a `/`: markers are matched against file names, not paths")
    } else if marker == "." || marker == ".." {
        Some("is not a file name")
    } else if marker.chars().all(|c| c == '*') {
        Some("matches every file")
    } else if marker.contains(['?', '[', ']', '{', '}']) {
        Some("uses a pattern character other than `*`")
    } else {
        None
    }
}

fn bad_extension(ext: &str) -> Option<&'static str> {
    if ext.is_empty() {
        Some("is empty")
    } else if ext.starts_with('.') {
        Some("starts with a dot")
    } else if ext.contains(['/', '*', '.']) {
        Some("is not a bare extension")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, project};
    use super::super::{Manifest, ManifestError, Problem};
    use super::*;

    /// GOOD with its `[languages]` replaced by `languages` (t1 and t2 are
    /// its tools; `py` must stay, variant `top` serves it).
    fn with_languages(languages: &str) -> String {
        GOOD.replace("[languages]\npy = [\"t2\"]\n", languages)
    }

    const TWO: &str = r#"[languages.py]
tools = ["t2"]
markers = ["pyproject.toml", "requirements*.txt"]
extensions = ["py"]

[languages.other]
tools = ["t1", "t2"]
markers = ["go.mod"]
extensions = ["go"]
"#;

    fn problems(text: &str) -> Vec<Problem> {
        let (_dir, path) = project(text);
        match Manifest::load(&path) {
            Err(ManifestError::Invalid { problems, .. }) => problems,
            other => panic!("expected validation problems, got {other:?}"),
        }
    }

    /// The line of the first occurrence of `needle` after `after` in `text`.
    fn line_of(text: &str, after: &str, needle: &str) -> usize {
        let start = text.find(after).unwrap();
        let at = start + text[start..].find(needle).unwrap();
        text[..at].matches('\n').count() + 1
    }

    #[test]
    fn the_table_form_loads_and_the_list_form_is_tools_only() {
        let (_dir, path) = project(&with_languages(TWO));
        let m = Manifest::load(&path).unwrap();
        let py = &m.languages["py"];
        assert_eq!(py.tools, ["t2"]);
        assert_eq!(py.markers, ["pyproject.toml", "requirements*.txt"]);
        assert!(py.has_marker("requirements-dev.txt") && !py.has_marker("setup.py"));
        assert!(py.has_extension("py") && !py.has_extension("go"));
        assert_eq!(m.languages["other"].tools, ["t1", "t2"]);

        let (_dir, path) = project(GOOD);
        let m = Manifest::load(&path).unwrap();
        let py = &m.languages["py"];
        assert_eq!(py.tools, ["t2"]);
        assert!(py.markers.is_empty() && py.extensions.is_empty());
    }

    #[test]
    fn a_marker_or_extension_of_two_languages_is_refused_at_its_line() {
        for (from, to, key, message) in [
            (
                "markers = [\"go.mod\"]",
                "markers = [\"go.mod\", \"pyproject.toml\"]",
                "languages.py.markers",
                "marker `pyproject.toml` is also claimed by language `other` (as `pyproject.toml`)",
            ),
            (
                "markers = [\"go.mod\"]",
                "markers = [\"go.mod\", \"requirements.txt\"]",
                "languages.py.markers",
                "marker `requirements*.txt` is also claimed by language `other` (as `requirements.txt`)",
            ),
            (
                "extensions = [\"go\"]",
                "extensions = [\"go\", \"py\"]",
                "languages.py.extensions",
                "extension `py` is also claimed by language `other`",
            ),
            (
                "extensions = [\"py\"]",
                "extensions = [\"py\", \"py\"]",
                "languages.py.extensions",
                "extension `py` is listed twice",
            ),
        ] {
            let text = with_languages(&TWO.replace(from, to));
            let ps = problems(&text);
            assert_eq!(ps.len(), 1, "{to}: {ps:?}");
            assert_eq!(ps[0].key, key, "{to}");
            assert_eq!(ps[0].message, message, "{to}");
            // Languages are checked in name order: `other` claims first, the
            // problem is at py's entry.
            let which = if key.ends_with("markers") {
                "markers"
            } else {
                "extensions"
            };
            assert_eq!(
                ps[0].line,
                Some(line_of(&text, "[languages.py]", which)),
                "{to}"
            );
        }
    }

    #[test]
    fn an_empty_language_an_undeclared_tool_and_bad_names_are_refused() {
        let cases = [
            (
                "tools = [\"t2\"]",
                "tools = []",
                "languages.py.tools",
                "no tools: verify would run nothing for it",
                "",
            ),
            (
                "tools = [\"t2\"]",
                "tools = [\"t9\"]",
                "languages.py.tools",
                "unknown tool `t9`",
                "declare [tools.t9]",
            ),
            (
                "markers = [\"go.mod\"]",
                "markers = [\"cmd/go.mod\"]",
                "languages.other.markers",
                "marker `cmd/go.mod` has a `/`",
                "a marker is a file name",
            ),
            (
                "markers = [\"go.mod\"]",
                "markers = [\"*\"]",
                "languages.other.markers",
                "marker `*` matches every file",
                "",
            ),
            (
                "extensions = [\"go\"]",
                "extensions = [\".go\"]",
                "languages.other.extensions",
                "extension `.go` starts with a dot",
                "write `go`",
            ),
        ];
        for (from, to, key, message, hint) in cases {
            let ps = problems(&with_languages(&TWO.replacen(from, to, 1)));
            assert!(
                ps.iter().any(|p| p.key == key
                    && p.message.starts_with(message)
                    && p.hint.contains(hint)
                    && p.line.is_some()),
                "{to}: {ps:?}"
            );
        }
        // A misspelt field is a parse error naming it.
        let (_dir, path) = project(&with_languages(&TWO.replacen("markers", "marker", 1)));
        let err = Manifest::load(&path).unwrap_err().to_string();
        assert!(err.contains("unknown field `marker`"), "{err}");
        let (_dir, path) = project(&with_languages(&TWO.replacen("tools = [\"t2\"]\n", "", 1)));
        let err = Manifest::load(&path).unwrap_err().to_string();
        assert!(err.contains("missing field `tools`"), "{err}");
    }

    #[test]
    fn glob_matches_star_as_any_run_and_the_rest_literally() {
        for (pattern, name, want) in [
            ("go.mod", "go.mod", true),
            ("go.mod", "go.mod.bak", false),
            ("go.mod", "xgo.mod", false),
            ("requirements*.txt", "requirements.txt", true),
            ("requirements*.txt", "requirements-dev.txt", true),
            ("requirements*.txt", "requirements.txt.orig", false),
            ("requirements*.txt", "requirements", false),
            ("*.csproj", "app.csproj", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob_match(pattern, name), want, "{pattern} vs {name}");
        }
    }
}
