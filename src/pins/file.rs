//! The pins file on disk. It is reviewed in pull requests, so it is written
//! in one canonical form (fixed key order, 2-space indent, trailing newline)
//! and read strictly (errors name line, column and key).

use super::{Pin, SCHEMA};
use crate::fsutil::{self, FsError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole file. Unknown top-level fields are kept and written back after
/// the known ones, in their original order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PinsFile {
    pub images: BTreeMap<String, Pin>,
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The file as read: each pin's repository still text, parsed after
/// (`PinsFile::parse`) so its error can name the alias and the line.
#[derive(Deserialize)]
struct Raw {
    schema: Schema,
    images: BTreeMap<String, Pin<String>>,
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

struct Schema;

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Schema, D::Error> {
        let n = u64::deserialize(d)?;
        if n == SCHEMA {
            Ok(Schema)
        } else {
            Err(serde::de::Error::custom(format!(
                "unsupported schema {n}: this sunaba-images reads schema {SCHEMA}"
            )))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PinsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {}{message}; fix the file (nothing was written)",
        if key.is_empty() { String::new() } else { format!("at `{key}`: ") })]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        key: String,
        message: String,
    },
    /// A pin whose `repository` is not a repository (`-v=/:/host`): the
    /// reason, with the text, is the source.
    #[error(
        "{path}:{line}:{column}: at `images.{alias}.repository` (fix the file; nothing was written)"
    )]
    Repository {
        path: PathBuf,
        line: usize,
        column: usize,
        alias: String,
        #[source]
        source: crate::name::Invalid,
    },
    #[error(transparent)]
    Write(#[from] FsError),
}

/// A file that cannot be read or written is an operational failure; a pin
/// whose repository is no name is bad input, as the name's own error says.
impl crate::exit::HasStatus for PinsError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            PinsError::Read { .. } | PinsError::Parse { .. } | PinsError::Write(_) => {
                Status::Failure
            }
            PinsError::Repository { source, .. } => source.exit_status(),
        }
    }
}

impl PinsFile {
    /// The pin of `alias`; `path` (where the file was read) is for the
    /// error, which lists what is pinned.
    pub fn pin(&self, alias: &str, path: &Path) -> Result<&Pin, crate::name::Unknown> {
        self.images.get(alias).ok_or_else(|| {
            crate::name::Unknown::new(
                "pinned alias",
                alias,
                path.display().to_string(),
                self.images.keys(),
            )
        })
    }

    /// Parses the file's text; `path` is only for messages.
    pub fn parse(text: &str, path: &Path) -> Result<PinsFile, PinsError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: Raw = serde_path_to_error::deserialize(de).map_err(|e| {
            let segments: Vec<String> = e
                .path()
                .iter()
                .map_while(|s| match s {
                    serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                    _ => None,
                })
                .collect();
            let key = e.path().to_string();
            let inner = e.into_inner();
            // serde_json places a data error where it noticed it (often the
            // end of the enclosing object); the key itself is more useful.
            let (line, column) = match inner.classify() {
                serde_json::error::Category::Data => locate_path(text, &segments),
                _ => None,
            }
            .unwrap_or((inner.line(), inner.column()));
            // serde_json appends " at line L column C"; we lead with it instead.
            let mut message = inner.to_string();
            if let Some(i) = message.rfind(" at line ") {
                message.truncate(i);
            }
            PinsError::Parse {
                path: path.to_path_buf(),
                line,
                column,
                key: if key == "." { String::new() } else { key },
                message,
            }
        })?;
        let _ = raw.schema;
        let mut images = BTreeMap::new();
        for (alias, pin) in raw.images {
            let pin = pin.parse_repository().map_err(|source| {
                let keys = ["images", alias.as_str(), "repository"].map(String::from);
                let (line, column) = locate_path(text, &keys).unwrap_or((1, 1));
                PinsError::Repository {
                    path: path.to_path_buf(),
                    line,
                    column,
                    alias: alias.clone(),
                    source,
                }
            })?;
            images.insert(alias, pin);
        }
        Ok(PinsFile {
            images,
            extra: raw.extra,
        })
    }

    /// Reads and parses `path`; a missing file is `None`.
    pub fn load(path: &Path) -> Result<Option<(PinsFile, String)>, PinsError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some((PinsFile::parse(&text, path)?, text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PinsError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The canonical text: `schema`, `images` (aliases sorted), then unknown
    /// fields; 2-space indent; trailing newline.
    pub fn to_text(&self) -> String {
        let mut top = serde_json::Map::new();
        top.insert("schema".into(), SCHEMA.into());
        top.insert(
            "images".into(),
            serde_json::to_value(&self.images).expect("pins serialize"),
        );
        for (k, v) in &self.extra {
            top.insert(k.clone(), v.clone());
        }
        let mut text = serde_json::to_string_pretty(&top).expect("pins serialize");
        text.push('\n');
        text
    }

    /// Writes atomically (temp file, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<(), PinsError> {
        fsutil::atomic_write(path, self.to_text().as_bytes())?;
        Ok(())
    }
}

/// Where the pin of `alias` starts in the text (1-based line and column), to
/// point a human at an entry that is valid JSON but wrong for the manifest.
pub fn locate_alias(text: &str, alias: &str) -> Option<(usize, usize)> {
    locate_path(text, &["images".to_string(), alias.to_string()])
}

/// Finds the key at the end of a path of object keys: each key is looked
/// for among the members of the object the previous key's value opens (so a
/// key of the same name deeper down, or in an earlier sibling, never
/// matches). Returns its 1-based line and column.
fn locate_path(text: &str, keys: &[String]) -> Option<(usize, usize)> {
    let (mut depth, mut found, mut at) = (0usize, 0usize, None);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                // Left the object the next key had to be in.
                if depth == found + 1 && found < keys.len() {
                    return None;
                }
                depth = depth.saturating_sub(1);
            }
            '"' => {
                let mut key = String::new();
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    match (escaped, c) {
                        (true, _) => escaped = false,
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => {}
                    }
                    key.push(c);
                }
                let rest = &text[i + 1 + key.len()..];
                let is_key = rest
                    .get(1..)
                    .is_some_and(|r| r.trim_start().starts_with(':'));
                if is_key
                    && depth == found + 1
                    && keys.get(found).map(|k| serde_json::to_string(k).ok())
                        == Some(Some(format!("\"{key}\"")))
                {
                    found += 1;
                    at = Some(i);
                    if found == keys.len() {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    if found < keys.len() {
        return None;
    }
    let at = at?;
    let line = text[..at].matches('\n').count() + 1;
    let column = text[..at].rfind('\n').map_or(at, |n| at - n - 1) + 1;
    Some((line, column))
}

#[cfg(test)]
mod tests {
    use super::super::tests::d;
    use super::*;
    use crate::pins::FILE_NAME;
    use semver::Version;

    fn sample() -> PinsFile {
        let pin = Pin {
            repository: "127.0.0.1:5000/sunaba/sandbox".parse().unwrap(),
            tag: "python-1.1.0".into(),
            version: Version::new(1, 1, 0),
            digest: d('a'),
            platforms: [("linux/amd64".parse().unwrap(), d('b'))].into(),
            tools: [
                ("ruff".to_string(), "0.13.2".to_string()),
                ("gofmt".to_string(), "present".to_string()),
            ]
            .into(),
            referrers: Default::default(),
        };
        PinsFile {
            images: [("python".to_string(), pin)].into(),
            extra: Default::default(),
        }
    }

    #[test]
    fn canonical_text_round_trips_with_fixed_order() {
        let pins = sample();
        let text = pins.to_text();
        let expected = format!(
            r#"{{
  "schema": 1,
  "images": {{
    "python": {{
      "repository": "127.0.0.1:5000/sunaba/sandbox",
      "tag": "python-1.1.0",
      "version": "1.1.0",
      "digest": "{a}",
      "platforms": {{
        "linux/amd64": "{b}"
      }},
      "tools": {{
        "gofmt": "present",
        "ruff": "0.13.2"
      }}
    }}
  }}
}}
"#,
            a = d('a'),
            b = d('b')
        );
        assert_eq!(text, expected);
        let back = PinsFile::parse(&text, Path::new("p.json")).unwrap();
        assert_eq!(back, pins);
        assert_eq!(back.to_text(), text);
    }

    #[test]
    fn unknown_top_level_fields_survive_in_order() {
        let text = r#"{"zeta": {"keep": [1, 2]}, "images": {}, "schema": 1, "alpha": "x"}"#;
        let pins = PinsFile::parse(text, Path::new("p.json")).unwrap();
        let out = pins.to_text();
        assert_eq!(
            out,
            "{\n  \"schema\": 1,\n  \"images\": {},\n  \"zeta\": {\n    \"keep\": [\n      1,\n      2\n    ]\n  },\n  \"alpha\": \"x\"\n}\n"
        );
    }

    #[test]
    fn malformed_files_name_line_column_and_key() {
        let good = sample().to_text();
        let bad_digest = good.replacen(&d('b').to_string(), "sha256:1234", 1);
        let wrong_type = good.replacen("\"tag\": \"python-1.1.0\"", "\"tag\": 7", 1);
        let bad_version = good.replacen("\"1.1.0\"", "\"1.1\"", 1);
        let unknown_field = good.replacen("\"tag\"", "\"tga\"", 1);
        let missing_field = good.replacen("\"tag\": \"python-1.1.0\",", "", 1);
        // (text, line, key fragment, message fragment)
        let cases: Vec<(String, usize, &str, &str)> = vec![
            (
                bad_digest,
                10,
                "images.python.platforms.linux/amd64",
                "bad digest",
            ),
            (wrong_type, 6, "images.python.tag", "expected a string"),
            (bad_version, 7, "images.python.version", ""),
            (unknown_field, 6, "images.python.tga", "unknown field `tga`"),
            (missing_field, 4, "images.python", "missing field `tag`"),
            (
                "{\"schema\": 2, \"images\": {}}".into(),
                1,
                "schema",
                "unsupported schema 2",
            ),
            ("{\"images\": {}}".into(), 1, "", "missing field `schema`"),
            (
                "{\"schema\": 1, \"images\": {},}".into(),
                1,
                "",
                "trailing comma",
            ),
            ("{\"schema\": 1,\n \"images\": [}".into(), 2, "images", ""),
            ("".into(), 1, "", "EOF"),
        ];
        for (text, line, key, message) in cases {
            let err = PinsFile::parse(&text, Path::new("dir/image_pins.json")).unwrap_err();
            let PinsError::Parse {
                line: l,
                column,
                key: k,
                message: m,
                ..
            } = &err
            else {
                panic!("{err}")
            };
            assert_eq!(*l, line, "{err}");
            assert!(k.starts_with(key), "{err}");
            assert!(m.contains(message), "{err}");
            let shown = err.to_string();
            assert!(
                shown.starts_with(&format!("dir/image_pins.json:{line}:{column}: ")),
                "{shown}"
            );
        }
    }

    /// A repository that is no repository (what a pull request could put
    /// there to have `run` mount the host) is refused where the file is
    /// read, naming the alias, the line and the text.
    #[test]
    fn a_repository_that_is_no_repository_is_refused_naming_alias_and_line() {
        let good = sample().to_text();
        for bad in ["-v=/:/host", "--privileged", "a b", "x\u{1b}[31m", ""] {
            let text = good.replacen(
                "\"127.0.0.1:5000/sunaba/sandbox\"",
                &serde_json::to_string(bad).unwrap(),
                1,
            );
            let err = PinsFile::parse(&text, Path::new("dir/image_pins.json")).unwrap_err();
            let PinsError::Repository {
                line,
                column,
                alias,
                source,
                ..
            } = &err
            else {
                panic!("{err}")
            };
            assert_eq!((*line, *column, alias.as_str()), (5, 7, "python"), "{err}");
            assert!(
                matches!(source, crate::name::Invalid::Reference { input, .. } if input == bad),
                "{source}"
            );
            use crate::exit::{HasStatus, Status};
            assert_eq!(err.exit_status(), Status::Usage);
            let shown = crate::error_chain::error_chain(&err);
            assert!(
                shown.starts_with(
                    "dir/image_pins.json:5:7: at `images.python.repository` (fix the file; \
                     nothing was written): invalid image reference "
                ),
                "{shown}"
            );
            assert!(shown.contains(&format!("{bad:?}")), "{shown}");
        }
    }

    /// The file keeps its words: a short name is not rewritten to its
    /// canonical `docker.io/…` form, yet it is parsed.
    #[test]
    fn a_repository_is_written_back_as_the_file_had_it() {
        let text =
            sample()
                .to_text()
                .replacen("127.0.0.1:5000/sunaba/sandbox", "sunaba/sandbox", 1);
        let pins = PinsFile::parse(&text, Path::new("p.json")).unwrap();
        let repo = &pins.images["python"].repository;
        assert_eq!(repo.parsed().to_string(), "docker.io/sunaba/sandbox");
        assert_eq!(pins.to_text(), text);
    }

    #[test]
    fn locate_alias_finds_the_key_not_a_value() {
        let text = "{\n  \"schema\": 1,\n  \"note\": \"python\",\n  \"images\": {\n    \"go\": {\"tag\": \"python\"},\n    \"python\" : {}\n  }\n}\n";
        assert_eq!(locate_alias(text, "python"), Some((6, 5)));
        assert_eq!(locate_alias(text, "go"), Some((5, 5)));
        assert_eq!(locate_alias(text, "js"), None);
        // A key of the same name inside an earlier pin is not the alias.
        let nested = "{\n  \"images\": {\n    \"full\": {\"tools\": {\"go\": \"1\"}},\n    \"go\": {}\n  }\n}\n";
        assert_eq!(locate_alias(nested, "go"), Some((4, 5)));
        assert_eq!(
            locate_alias("{\"images\": {\"a\": {\"go\": 1}}}", "go"),
            None
        );
    }

    #[test]
    fn load_missing_file_is_none_and_save_is_canonical() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert!(PinsFile::load(&path).unwrap().is_none());
        sample().save(&path).unwrap();
        let (pins, text) = PinsFile::load(&path).unwrap().unwrap();
        assert_eq!(pins, sample());
        assert_eq!(text, sample().to_text());
    }
}
