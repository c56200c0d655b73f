//! Versions as tools print them and images.toml states them: the one
//! lenient reader, shared by manifest validation, check records, the semver
//! rules and `outdated`. Data, not rules: what a version *means* for a
//! release is `semver_rules`'.

use semver::Version;

/// A version as tools print them and images.toml's `min` states them
/// (`1.24`, `v20.1.0`, `1.02.3`, `2.0.0-rc.1`): one to three numeric parts,
/// padded to three, leading zeros dropped, a `-pre`/`+build` suffix kept.
pub(crate) fn lenient_version(text: &str) -> Option<Version> {
    let text = text.trim();
    let body = text.strip_prefix('v').unwrap_or(text);
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (numbers, rest) = body.split_at(split);
    let parts: Vec<&str> = numbers.split('.').collect();
    let numeric = !parts.is_empty()
        && parts.len() <= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if !numeric || !(rest.is_empty() || rest.starts_with('-') || rest.starts_with('+')) {
        return None;
    }
    let mut padded: Vec<String> = parts
        .iter()
        .map(|p| p.trim_start_matches('0'))
        .map(|p| if p.is_empty() { "0" } else { p }.to_string())
        .collect();
    while padded.len() < 3 {
        padded.push("0".into());
    }
    Version::parse(&format!("{}{rest}", padded.join("."))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_versions() {
        // A pre-release suffix is kept (`min` accepts it).
        assert_eq!(lenient_version("1.24").unwrap(), Version::new(1, 24, 0));
        assert_eq!(lenient_version("v20.1.3").unwrap(), Version::new(20, 1, 3));
        assert_eq!(
            lenient_version("6.1.0-rc1").unwrap(),
            Version::parse("6.1.0-rc1").unwrap()
        );
        assert!(lenient_version("present").is_none());
        assert!(lenient_version("1.2.3.4").is_none());
    }
}
