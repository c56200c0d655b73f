//! Platforms (`os/arch[/variant]`) and choosing the best child of an index.

use super::Invalid;
use std::fmt;
use std::str::FromStr;

/// An image platform. Architecture names are normalised to the OCI/Go names
/// (`x86_64` -> `amd64`, `aarch64` -> `arm64`).
///
/// Platforms order as their text does (`linux/arm` < `linux/arm/v7` <
/// `linux/arm64`), so a map keyed by them lists its keys as the map keyed
/// by strings did, in files and output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    pub fn new(os: &str, architecture: &str, variant: Option<&str>) -> Platform {
        Platform {
            os: os.to_ascii_lowercase(),
            architecture: normalize_arch(architecture),
            variant: variant
                .filter(|v| !v.is_empty())
                .map(str::to_ascii_lowercase),
        }
    }

    /// The platform of this machine, as a Linux container platform.
    /// A platform from the parts a registry's index or image config gives,
    /// checked as a written one is: text from outside never becomes a
    /// platform that a message prints raw, or that a pins file or journal
    /// keeps and can no longer read back. An empty variant is none.
    pub fn from_parts(
        os: &str,
        architecture: &str,
        variant: Option<&str>,
    ) -> Result<Platform, Invalid> {
        let variant = variant.filter(|v| !v.is_empty());
        let mut parts = vec![os, architecture];
        parts.extend(variant);
        match parts_problem(&parts) {
            None => Ok(Platform::new(os, architecture, variant)),
            Some(reason) => Err(Invalid::platform(&parts.join("/"), reason)),
        }
    }

    pub fn host() -> Platform {
        let (arch, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            other => (other, None),
        };
        Platform::new("linux", arch, variant)
    }

    /// Entries that describe attestations or other non-runnable content
    /// (`unknown/unknown`), never to be chosen as an image to run.
    pub fn is_unknown(&self) -> bool {
        self.os == "unknown" || self.architecture == "unknown"
    }

    /// The variant implied when none is written (`arm64` -> `v8`, `arm` -> `v7`).
    fn default_variant(&self) -> Option<&'static str> {
        match self.architecture.as_str() {
            "arm64" => Some("v8"),
            "arm" => Some("v7"),
            _ => None,
        }
    }

    fn effective_variant(&self) -> Option<&str> {
        self.variant.as_deref().or(self.default_variant())
    }

    /// Text the project reads a platform from (images.toml, a flag, a file
    /// it wrote), parsed and [`normalized`](Platform::normalized) there, so
    /// every later comparison is `==`.
    pub fn parse_normalized(s: &str) -> Result<Platform, Invalid> {
        s.parse::<Platform>().map(|p| p.normalized())
    }

    /// The platform as a tag fragment: its architecture and variant,
    /// normalised (`linux/arm64/v8` → `arm64`, `linux/arm/v7` → `armv7`).
    pub fn slug(&self) -> String {
        let p = self.normalized();
        format!("{}{}", p.architecture, p.variant.as_deref().unwrap_or(""))
    }

    /// The bytes of the text form, without building it.
    fn text_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let variant = self
            .variant
            .as_deref()
            .map(|v| std::iter::once(b'/').chain(v.bytes()));
        self.os
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(self.architecture.bytes())
            .chain(variant.into_iter().flatten())
    }

    /// The platform as pins and `resolve` name it: an `arm64` variant `v8`
    /// (the only arm64 there is in practice, and what the architecture
    /// implies) is dropped, so `linux/arm64/v8` and `linux/arm64` are one
    /// key. Other variants are kept as written (`linux/arm/v6` stays, and
    /// `linux/arm` is not given its default `v7`).
    pub fn normalized(&self) -> Platform {
        let mut p = self.clone();
        if p.architecture == "arm64" && p.variant.as_deref() == Some("v8") {
            p.variant = None;
        }
        p
    }
}

fn normalize_arch(arch: &str) -> String {
    match arch.to_ascii_lowercase().as_str() {
        "x86_64" | "x86-64" => "amd64".to_string(),
        "aarch64" => "arm64".to_string(),
        "i386" | "i686" => "386".to_string(),
        other => other.to_string(),
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

impl FromStr for Platform {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| Invalid::platform(s, reason);
        let parts: Vec<&str> = s.split('/').collect();
        if let Some(reason) = parts_problem(&parts) {
            return Err(bad(reason));
        }
        match parts.as_slice() {
            [os, arch] => Ok(Platform::new(os, arch, None)),
            [os, arch, variant] => Ok(Platform::new(os, arch, Some(variant))),
            _ => Err(bad(EXPECTED)),
        }
    }
}

const EXPECTED: &str = "expected OS/ARCH or OS/ARCH/VARIANT, e.g. linux/amd64 or linux/arm64/v8";

/// Why these parts (OS, architecture and a variant, if any) are no
/// platform, if they are not: the one rule for a written platform and for
/// one a registry gives.
fn parts_problem(parts: &[&str]) -> Option<&'static str> {
    if parts.iter().any(|p| p.is_empty()) {
        return Some(EXPECTED);
    }
    if parts.iter().any(|p| {
        !p.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    }) {
        return Some("platform parts may contain only letters, digits, '_', '-' and '.'");
    }
    // Every real OS, architecture and variant name does; a part that
    // starts with '-' would read as an option where a platform is
    // printed into a command line.
    if parts
        .iter()
        .any(|p| !p.starts_with(|c: char| c.is_ascii_alphanumeric()))
    {
        return Some("each platform part must start with a letter or a digit");
    }
    None
}

impl Ord for Platform {
    /// As the text compares (a derived order on the parts would not: `-`
    /// and `.` sort before `/`).
    fn cmp(&self, other: &Platform) -> std::cmp::Ordering {
        self.text_bytes().cmp(other.text_bytes())
    }
}

impl PartialOrd for Platform {
    fn partial_cmp(&self, other: &Platform) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl serde::Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reads a platform the project wrote (a key of `image_pins.json`, the
/// journal): parsed and normalised, the one way text becomes a platform.
impl<'de> serde::Deserialize<'de> for Platform {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Platform::parse_normalized(&s).map_err(serde::de::Error::custom)
    }
}

/// The index entry that best runs on `wanted`, by position in `candidates`.
///
/// OS and architecture must match. A requested variant must match (an absent
/// variant counts as the architecture's default, so `linux/arm64/v8` matches an
/// entry without a variant); without a requested variant the default or
/// variant-less entry is preferred over others. Entries for `unknown`
/// platforms (attestations) are never chosen.
pub fn best_match(wanted: &Platform, candidates: &[Option<Platform>]) -> Option<usize> {
    let mut best: Option<(u8, usize)> = None;
    for (i, candidate) in candidates.iter().enumerate() {
        let Some(c) = candidate else { continue };
        if c.is_unknown() || c.os != wanted.os || c.architecture != wanted.architecture {
            continue;
        }
        let score = match (&wanted.variant, &c.variant) {
            (Some(w), Some(v)) if w == v => 3,
            (Some(_), _) if wanted.effective_variant() == c.effective_variant() => 2,
            (Some(_), _) => continue,
            (None, None) => 3,
            (None, Some(_)) if c.effective_variant() == wanted.effective_variant() => 2,
            (None, Some(_)) => 1,
        };
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Platform {
        s.parse().unwrap()
    }

    #[test]
    fn parts_from_a_registry_follow_the_written_rule() {
        assert_eq!(
            Platform::from_parts("linux", "aarch64", Some("")).unwrap(),
            p("linux/arm64")
        );
        assert_eq!(
            Platform::from_parts("Linux", "arm", Some("v7")).unwrap(),
            p("linux/arm/v7")
        );
        for (os, arch, variant) in [
            ("linux", "amd64\n", None),
            ("", "amd64", None),
            ("linux", "-v", None),
            ("linux", "arm", Some("v7/x")),
        ] {
            let err = Platform::from_parts(os, arch, variant).unwrap_err();
            assert!(err.to_string().starts_with("invalid platform "), "{err}");
        }
    }

    #[test]
    fn parses_and_normalises() {
        assert_eq!(p("linux/x86_64").to_string(), "linux/amd64");
        assert_eq!(p("Linux/AArch64/V8").to_string(), "linux/arm64/v8");
        assert_eq!(p("linux/arm64/v8").normalized(), p("linux/arm64"));
        assert_eq!(p("linux/aarch64").normalized().to_string(), "linux/arm64");
        assert_eq!(
            p("linux/arm64/v9").normalized().to_string(),
            "linux/arm64/v9"
        );
        assert_eq!(p("linux/arm/v7").normalized().to_string(), "linux/arm/v7");
        assert_eq!(p("linux/arm").normalized().to_string(), "linux/arm");
        for bad in [
            "linux",
            "linux/",
            "linux/amd64/v8/x",
            "linux/am d64",
            "",
            "--privileged/amd64",
            "linux/-v",
            "linux/amd64/-x",
            "linux/.x",
            "_/amd64",
        ] {
            let err = bad.parse::<Platform>().unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn orders_as_the_text_does() {
        let texts = [
            "linux/amd64",
            "linux/arm",
            "linux/arm/v7",
            "linux/arm64",
            "linux/arm64/v9",
            "linux-x/amd64",
            "linux.y/amd64",
            "linux/riscv64",
            "linux/s390x",
            "windows/amd64",
            "linux/amd64/v2",
            "a/b",
            "a-b/c",
        ];
        let by_text: Vec<&str> = texts
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let by_platform: Vec<String> = texts
            .iter()
            .map(|t| p(t))
            .collect::<std::collections::BTreeSet<_>>()
            .iter()
            .map(Platform::to_string)
            .collect();
        assert_eq!(by_platform, by_text);
    }

    #[test]
    fn reads_normalised_and_writes_as_text() {
        let read: std::collections::BTreeMap<Platform, u8> =
            serde_json::from_str(r#"{"linux/arm64/v8": 1, "linux/amd64": 2}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"{"linux/amd64":2,"linux/arm64":1}"#
        );
        let e = serde_json::from_str::<Platform>(r#""linux""#).unwrap_err();
        assert!(e.to_string().contains("invalid platform \"linux\""), "{e}");
        assert_eq!(p("linux/arm64/v8").slug(), "arm64");
        assert_eq!(p("linux/arm/v7").slug(), "armv7");
    }

    #[test]
    fn best_match_rules() {
        let cands = vec![
            Some(p("linux/amd64")),
            Some(p("linux/arm64/v8")),
            Some(p("linux/arm/v6")),
            Some(p("linux/arm/v7")),
            Some(p("unknown/unknown")),
            None,
        ];
        assert_eq!(best_match(&p("linux/amd64"), &cands), Some(0));
        assert_eq!(best_match(&p("linux/arm64"), &cands), Some(1));
        assert_eq!(best_match(&p("linux/arm64/v8"), &cands), Some(1));
        assert_eq!(
            best_match(&p("linux/arm"), &cands),
            Some(3),
            "arm defaults to v7"
        );
        assert_eq!(best_match(&p("linux/arm/v6"), &cands), Some(2));
        assert_eq!(best_match(&p("linux/arm/v5"), &cands), None);
        assert_eq!(best_match(&p("windows/amd64"), &cands), None);
        assert_eq!(
            best_match(&p("unknown/unknown"), &cands),
            None,
            "attestations are never chosen"
        );
        // An arm64 entry without variant matches an explicit v8 request.
        let cands = vec![Some(p("linux/arm64"))];
        assert_eq!(best_match(&p("linux/arm64/v8"), &cands), Some(0));
    }
}
