//! Durations as the command line and images.toml write them: with a unit
//! (docs/cli.md, "Values").

use std::time::Duration;

/// Parses a duration with its unit (`30s`, `10m`, `1h30m`); a bare number
/// is refused, since it would not say which unit it means.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{text}` has no unit: write `{text}s` or `{text}m`"
        ));
    }
    humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e} (write e.g. `30s`, `10m`)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_unit_is_needed_and_compound_durations_are_read() {
        assert_eq!(super::parse("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(super::parse("90s").unwrap().as_secs(), 90);
        assert_eq!(
            super::parse("30").unwrap_err(),
            "`30` has no unit: write `30s` or `30m`"
        );
        assert!(super::parse("soon").unwrap_err().starts_with("`soon`: "));
    }
}
