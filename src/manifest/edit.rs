//! Editing images.toml in place with `toml_edit`: one string value changed,
//! every comment, blank line and the layout of the rest kept byte for byte.
//! Reading here is lenient on purpose: `update-base` must be able to pin a
//! tag-only upstream, which full validation refuses.

use toml_edit::{DocumentMut, Item, Value};

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("images.toml is not valid TOML: {0}")]
    Parse(String),
    #[error("images.toml has no string at `{0}`")]
    Missing(String),
}

/// The document, parsed for editing.
pub struct Editor {
    doc: DocumentMut,
}

impl Editor {
    pub fn parse(text: &str) -> Result<Editor, EditError> {
        let doc = text
            .parse::<DocumentMut>()
            .map_err(|e| EditError::Parse(e.to_string().trim_end().to_string()))?;
        Ok(Editor { doc })
    }

    fn item(&self, path: &[&str]) -> Option<&Item> {
        let (last, tables) = path.split_last()?;
        let mut table = self.doc.as_table() as &dyn toml_edit::TableLike;
        for key in tables {
            table = table.get(key)?.as_table_like()?;
        }
        table.get(last)
    }

    /// The string at a dotted path (`["profiles", "local", "upstream"]`).
    pub fn string(&self, path: &[&str]) -> Option<String> {
        self.item(path)?.as_str().map(str::to_string)
    }

    /// The strings of an array at a path (`["platforms"]`).
    pub fn strings(&self, path: &[&str]) -> Vec<String> {
        self.item(path)
            .and_then(Item::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Replaces the string at `path`, keeping the whitespace and comment
    /// around the value.
    pub fn set_string(&mut self, path: &[&str], value: &str) -> Result<(), EditError> {
        let missing = || EditError::Missing(path.join("."));
        let (last, tables) = path.split_last().ok_or_else(missing)?;
        let mut table = self.doc.as_table_mut() as &mut dyn toml_edit::TableLike;
        for key in tables {
            table = table
                .get_mut(key)
                .and_then(Item::as_table_like_mut)
                .ok_or_else(missing)?;
        }
        let slot = table
            .get_mut(last)
            .and_then(Item::as_value_mut)
            .filter(|v| v.is_str())
            .ok_or_else(missing)?;
        let decor = slot.decor().clone();
        *slot = Value::from(value);
        *slot.decor_mut() = decor;
        Ok(())
    }

    pub fn text(&self) -> String {
        self.doc.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# head comment\nschema = 1\n# the upstream\nupstream = \"debian:trixie-slim\"   # kept\nplatforms = [\"linux/amd64\", \"linux/arm64\"]\n\n[profiles.local]\n# dev\nupstream = \"127.0.0.1:5000/b:t\"\n";

    #[test]
    fn one_value_changes_and_nothing_else() {
        let mut e = Editor::parse(TEXT).unwrap();
        assert_eq!(e.string(&["upstream"]).unwrap(), "debian:trixie-slim");
        assert_eq!(e.strings(&["platforms"]), ["linux/amd64", "linux/arm64"]);
        assert_eq!(
            e.string(&["profiles", "local", "upstream"]).unwrap(),
            "127.0.0.1:5000/b:t"
        );
        e.set_string(&["upstream"], "debian:trixie-slim@sha256:ab")
            .unwrap();
        let want = TEXT.replace("\"debian:trixie-slim\"", "\"debian:trixie-slim@sha256:ab\"");
        assert_eq!(e.text(), want);
        e.set_string(&["profiles", "local", "upstream"], "x:y@sha256:cd")
            .unwrap();
        assert!(e.text().ends_with("# dev\nupstream = \"x:y@sha256:cd\"\n"));
        assert!(e.set_string(&["nope"], "x").is_err());
        assert!(e.set_string(&["platforms"], "x").is_err());
        assert!(Editor::parse("a = ").is_err());
    }
}
