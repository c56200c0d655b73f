//! Points in time as images and records write them: RFC 3339, UTC, whole
//! seconds. The build stamps `created` with it and the normaliser rewrites
//! an image's dates to it, so both read it from here, below them.

use std::time::{Duration, UNIX_EPOCH};

/// RFC 3339 (UTC, seconds) of a Unix time (`SOURCE_DATE_EPOCH`).
pub(crate) fn rfc3339(epoch: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(epoch)).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_epoch_is_written_in_utc_to_the_second() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
