//! Column tables for people: every cell padded to its column's width,
//! columns separated by a gap, the last column left as it is.
//!
//! The `build` summary, the `check` table, the `pin` plan and `detect` all
//! print through this, so their columns line up by one rule. Widths count
//! bytes and padding counts characters, as `format!` does: the tables hold
//! ASCII names, versions and digests.

/// How a cell sits in its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// One column: its alignment, its width and what stands before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Column {
    align: Align,
    /// `None`: as wide as the widest cell.
    width: Option<usize>,
    /// `None`: two spaces, or nothing before the first column.
    gap: Option<&'static str>,
}

impl Column {
    /// A left-aligned column as wide as its widest cell.
    pub(crate) fn left() -> Column {
        Column {
            align: Align::Left,
            width: None,
            gap: None,
        }
    }

    /// A right-aligned column as wide as its widest cell.
    pub(crate) fn right() -> Column {
        Column {
            align: Align::Right,
            ..Column::left()
        }
    }

    /// Pads every cell to `width` instead of fitting the widest one; a
    /// longer cell overflows its own row only, so one odd value does not
    /// push every other row right.
    pub(crate) fn width(self, width: usize) -> Column {
        Column {
            width: Some(width),
            ..self
        }
    }

    /// What stands before this column (for the first, the row's indent).
    pub(crate) fn gap(self, gap: &'static str) -> Column {
        Column {
            gap: Some(gap),
            ..self
        }
    }
}

/// Rows of cells under a fixed set of columns.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(columns: impl IntoIterator<Item = Column>) -> Table {
        Table {
            columns: columns.into_iter().collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub(crate) fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells
            .into_iter()
            .take(self.columns.len())
            .map(Into::into)
            .collect();
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
    }

    /// Each row as one line, without its newline. A left-aligned last
    /// column is not padded (no trailing blanks from it).
    pub(crate) fn lines(&self) -> Vec<String> {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.width
                    .unwrap_or_else(|| self.rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
            })
            .collect();
        let last = self.columns.len().saturating_sub(1);
        self.rows
            .iter()
            .map(|row| {
                let mut line = String::new();
                for (i, (cell, column)) in row.iter().zip(&self.columns).enumerate() {
                    line.push_str(column.gap.unwrap_or(if i == 0 { "" } else { "  " }));
                    let w = widths[i];
                    match column.align {
                        Align::Left if i == last => line.push_str(cell),
                        Align::Left => line.push_str(&format!("{cell:<w$}")),
                        Align::Right => line.push_str(&format!("{cell:>w$}")),
                    }
                }
                line
            })
            .collect()
    }

    /// Every line followed by a newline.
    pub(crate) fn render(&self) -> String {
        self.lines().into_iter().map(|l| l + "\n").collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitted_and_fixed_columns_with_gaps() {
        let mut t = Table::new([
            Column::left().gap("  "),
            Column::left().width(4).gap(" "),
            Column::right().width(3),
            Column::left(),
        ]);
        t.row(["a", "b", "1", "last"]);
        t.row(["long", "overflow", "22", ""]);
        t.row(["c"]);
        assert_eq!(
            t.lines(),
            [
                "  a    b       1  last",
                "  long overflow   22  ",
                "  c               ",
            ]
        );
        assert_eq!(t.render(), t.lines().join("\n") + "\n");
    }

    #[test]
    fn an_empty_table_has_no_lines() {
        assert!(Table::new([Column::left()]).lines().is_empty());
    }
}
