//! Image references per the distribution grammar
//! (`github.com/distribution/reference`), with Docker Hub defaults.
//!
//! Written here rather than taken from `oci_spec::distribution::Reference`
//! because that parser reports one generic "invalid reference format" for most
//! mistakes; a user pinning images needs to be told *which* part is wrong.

use super::Invalid;
use super::digest::Digest;
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

/// The registry that names without a domain belong to.
pub(crate) const DOCKER_HUB: &str = "docker.io";
/// The host that actually serves Docker Hub's registry API.
pub(crate) const DOCKER_HUB_API_HOST: &str = "registry-1.docker.io";
const NAME_TOTAL_LENGTH_MAX: usize = 255;

static DOMAIN_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$",
    )
    .expect("domain regex")
});
static PATH_COMPONENT_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$").expect("path regex")
});
// The grammar's `\w` is Go's, ASCII only (the regex crate's `\w` is
// Unicode's, which takes letters of every script and the invisible joiners
// U+200C/U+200D).
static TAG_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$").expect("tag regex"));

/// Why a reference was rejected.
fn invalid(input: &str, reason: impl Into<String>) -> Invalid {
    Invalid::reference(input, reason)
}

/// A repository: registry host (with port) and path, e.g.
/// `127.0.0.1:5000` + `library/debian`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Repository {
    registry: String,
    path: String,
}

impl Repository {
    /// The registry as written in references (`docker.io` for Docker Hub).
    pub fn registry(&self) -> &str {
        &self.registry
    }
    /// The repository path inside the registry (`library/debian`).
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

impl FromStr for Repository {
    type Err = Invalid;
    /// Parses `[registry/]path`; a tag or digest is an error here.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (registry, path) = split_name(s, s)?;
        Ok(Repository { registry, path })
    }
}

impl serde::Serialize for Repository {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reads a repository a file names (a legs file's): parsed, with the
/// Docker Hub defaults, as `FromStr` does.
impl<'de> serde::Deserialize<'de> for Repository {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A parsed image reference: `registry/path[:tag][@digest]`. A reference with
/// neither tag nor digest gets the tag `latest`, as the docker CLI does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    repo: Repository,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// The registry host (with port), `docker.io` for Docker Hub.
    pub fn registry(&self) -> &str {
        &self.repo.registry
    }
    /// The repository path inside the registry (`library/debian`).
    pub fn repository(&self) -> &str {
        &self.repo.path
    }
    /// Registry and path together.
    pub fn repo(&self) -> &Repository {
        &self.repo
    }
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }
    /// What to put after `/manifests/` in a registry URL: the digest when
    /// there is one (it is authoritative), else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }
    /// The same repository and tag, pinned to `digest`.
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            repo: self.repo.clone(),
            tag: self.tag.clone(),
            digest: Some(digest),
        }
    }
    /// The same repository, by digest only (no tag).
    pub fn by_digest(&self, digest: Digest) -> Reference {
        Reference {
            repo: self.repo.clone(),
            tag: None,
            digest: Some(digest),
        }
    }
    /// `digest` in `repo`, without a tag.
    pub fn in_repo(repo: &Repository, digest: Digest) -> Reference {
        Reference {
            repo: repo.clone(),
            tag: None,
            digest: Some(digest),
        }
    }
    /// The same repository with another tag (and no digest).
    pub fn with_tag(repo: &Repository, tag: &str) -> Result<Reference, Invalid> {
        if !TAG_RE.is_match(tag) {
            return Err(invalid(tag, tag_reason(tag)));
        }
        Ok(Reference {
            repo: repo.clone(),
            tag: Some(tag.to_string()),
            digest: None,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repo)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl FromStr for Reference {
    type Err = Invalid;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.is_empty() {
            return Err(invalid(input, "the reference is empty"));
        }
        if input.chars().any(char::is_whitespace) {
            return Err(invalid(input, "references cannot contain whitespace"));
        }
        let (rest, digest) = match input.split_once('@') {
            Some((rest, d)) => {
                let digest = d
                    .parse::<Digest>()
                    .map_err(|reason| invalid(input, format!("digest {d:?}: {reason}")))?;
                (rest, Some(digest))
            }
            None => (input, None),
        };
        // A tag is the part after the last ':' that follows the last '/'
        // (a ':' before the last '/' is a registry port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let tag = &rest[last_slash + i + 1..];
                if !TAG_RE.is_match(tag) {
                    return Err(invalid(input, tag_reason(tag)));
                }
                (&rest[..last_slash + i], Some(tag.to_string()))
            }
            None => (rest, None),
        };
        let (registry, path) = split_name(input, name)?;
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            repo: Repository { registry, path },
            tag,
            digest,
        })
    }
}

fn tag_reason(tag: &str) -> String {
    if tag.is_empty() {
        "the tag after ':' is empty".to_string()
    } else if tag.len() > 128 {
        format!(
            "tag is {} characters long; at most 128 are allowed",
            tag.len()
        )
    } else {
        format!(
            "tag {tag:?} is invalid: it must start with a letter, digit or '_' and contain \
             only letters, digits, '_', '.' and '-'"
        )
    }
}

/// Splits `name` (no tag, no digest) into registry and path, applying the
/// Docker Hub defaults (`docker.io`, `library/` for single-component names).
fn split_name(input: &str, name: &str) -> Result<(String, String), Invalid> {
    if name.is_empty() {
        return Err(invalid(input, "the repository name is empty"));
    }
    if name.contains('@') {
        return Err(invalid(input, "a repository name cannot carry a digest"));
    }
    if name.starts_with('-') {
        return Err(invalid(
            input,
            "a name cannot start with '-' (a command line would read it as an option)",
        ));
    }
    let (mut registry, mut path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.starts_with('[')
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            if !DOMAIN_RE.is_match(first) {
                return Err(invalid(
                    input,
                    format!(
                        "registry {first:?} is not a valid host[:port] (letters, digits, '-' \
                         and '.' with an optional numeric port)"
                    ),
                ));
            }
            (first.to_string(), rest.to_string())
        }
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    if registry == "index.docker.io" || registry == DOCKER_HUB_API_HOST {
        registry = DOCKER_HUB.to_string();
    }
    if registry == DOCKER_HUB && !path.contains('/') {
        path = format!("library/{path}");
    }
    if path.is_empty() {
        return Err(invalid(
            input,
            "the repository path after the registry is empty",
        ));
    }
    for component in path.split('/') {
        if component.is_empty() {
            return Err(invalid(
                input,
                "the repository path has an empty component ('//' or a trailing '/')",
            ));
        }
        if !PATH_COMPONENT_RE.is_match(component) {
            let reason = if component.chars().any(|c| c.is_ascii_uppercase()) {
                format!("repository path component {component:?} must be lowercase")
            } else if name.matches(':').count() > 1 || component.contains(':') {
                format!(
                    "repository path component {component:?} contains ':' (only a registry port or a tag may use ':')"
                )
            } else {
                format!(
                    "repository path component {component:?} is invalid: use lowercase letters \
                     and digits, separated by '.', '_', '__' or '-'"
                )
            };
            return Err(invalid(input, reason));
        }
    }
    let total = registry.len() + 1 + path.len();
    if total > NAME_TOTAL_LENGTH_MAX {
        return Err(invalid(
            input,
            format!(
                "the name is {total} characters long; at most {NAME_TOTAL_LENGTH_MAX} are allowed"
            ),
        ));
    }
    Ok((registry, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Reference {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn reason(s: &str) -> String {
        s.parse::<Reference>().unwrap_err().to_string()
    }
    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn docker_hub_defaults() {
        let r = parse("debian");
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("docker.io", "library/debian", Some("latest"))
        );
        assert_eq!(r.to_string(), "docker.io/library/debian:latest");
        let r = parse("sunaba/sandbox:full-1.2.3");
        assert_eq!(r.to_string(), "docker.io/sunaba/sandbox:full-1.2.3");
        assert_eq!(
            parse("index.docker.io/debian:12").to_string(),
            "docker.io/library/debian:12"
        );
    }

    #[test]
    fn ports_localhost_and_digests() {
        let r = parse("127.0.0.1:5000/library/debian:trixie-slim");
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "library/debian");
        assert_eq!(r.tag(), Some("trixie-slim"));
        let r = parse("localhost/foo");
        assert_eq!((r.registry(), r.repository()), ("localhost", "foo"));
        let r = parse(&format!("ghcr.io/a/b:t@sha256:{HEX}"));
        assert_eq!(r.tag(), Some("t"));
        assert_eq!(r.digest().unwrap().to_string(), format!("sha256:{HEX}"));
        assert_eq!(r.manifest_ref(), format!("sha256:{HEX}"));
        let r = parse(&format!("ghcr.io/a/b@sha256:{HEX}"));
        assert_eq!(r.tag(), None, "a digest reference gets no default tag");
        assert_eq!(r.to_string(), format!("ghcr.io/a/b@sha256:{HEX}"));
        // A first component without '.', ':' is a path, not a registry.
        assert_eq!(parse("foo/bar").registry(), "docker.io");
        assert_eq!(parse("[::1]:5000/x").registry(), "[::1]:5000");
    }

    #[test]
    fn invalid_references_say_why() {
        assert!(reason("").contains("empty"));
        assert!(
            reason("Debian").contains("must be lowercase"),
            "{}",
            reason("Debian")
        );
        assert!(reason("ghcr.io/Org/x").contains("\"Org\""));
        assert!(reason("debian:").contains("tag after ':' is empty"));
        assert!(reason("debian:-x").contains("tag \"-x\" is invalid"));
        assert!(reason(&format!("debian:{}", "a".repeat(129))).contains("at most 128"));
        assert!(
            reason("debian@sha256:abc").contains("64 hex"),
            "{}",
            reason("debian@sha256:abc")
        );
        assert!(reason(&format!("debian@md5:{HEX}")).contains("unsupported digest algorithm"));
        assert!(reason("ghcr.io//x").contains("empty component"));
        assert!(reason("a b").contains("whitespace"));
        assert!(
            reason("bad_host-.io:5000/x").contains("registry"),
            "{}",
            reason("bad_host-.io:5000/x")
        );
        assert!(reason(&format!("x.io/{}", "a".repeat(260))).contains("at most 255"));
        assert!(reason("foo/bar__-baz").contains("invalid"));
        assert!(
            reason("-v=/:/host").contains("cannot start with '-'"),
            "{}",
            reason("-v=/:/host")
        );
    }

    /// Text an engine's argv parser could read as an option, or that a
    /// terminal or shell would show as something else, is no name: refused
    /// by the parser itself, whatever a caller checks.
    #[test]
    fn option_words_whitespace_control_and_foreign_letters_are_no_names() {
        for bad in [
            "--privileged",
            "-v=/:/host",
            "-v=/:/host@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "-it",
            "-",
            "--",
            "ghcr.io/-x",
            "-ghcr.io/x",
            "ghcr.io:-1/x",
            "x:-t",
            "x=y",
            "x/--privileged",
            "a=b/c",
            "x:t=1",
            "x\t",
            "x\n",
            "x\u{0}",
            "x\u{1b}[31m",
            "x\u{7f}",
            "x:t\u{200d}",
            "x:t\u{200c}",
            "x:caf\u{e9}",
            "x:\u{661}",
            "\u{200b}x",
            "x\u{a0}y",
        ] {
            assert!(
                bad.parse::<Reference>().is_err(),
                "{bad:?} parsed as a reference"
            );
            assert!(
                bad.parse::<Repository>().is_err(),
                "{bad:?} parsed as a repository"
            );
        }
    }

    proptest::proptest! {
        /// Whatever parses is printable ASCII without `=` or whitespace and
        /// starts with a letter, a digit or `[`, as written and as printed.
        #[test]
        fn whatever_parses_is_no_option_word(
            text in r"[-=a-z0-9:/@._ \t\x{1b}\x{e9}\x{200d}\[\]]{1,24}"
        ) {
            if let Ok(r) = text.parse::<Reference>() {
                for shown in [text.clone(), r.to_string()] {
                    let first = shown.chars().next().unwrap();
                    proptest::prop_assert!(first.is_ascii_alphanumeric() || first == '[', "{shown:?}");
                    proptest::prop_assert!(
                        shown.chars().all(|c| c.is_ascii_graphic() && c != '='),
                        "{shown:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn repository_parsing() {
        let r: Repository = "127.0.0.1:5000/sunaba/sandbox".parse().unwrap();
        assert_eq!(
            (r.registry(), r.path()),
            ("127.0.0.1:5000", "sunaba/sandbox")
        );
        assert_eq!(r.to_string(), "127.0.0.1:5000/sunaba/sandbox");
        assert!("ubuntu".parse::<Repository>().unwrap().to_string() == "docker.io/library/ubuntu");
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#""127.0.0.1:5000/sunaba/sandbox""#);
        assert_eq!(serde_json::from_str::<Repository>(&json).unwrap(), r);
        let e = serde_json::from_str::<Repository>(r#""a//b""#).unwrap_err();
        assert!(
            e.to_string().contains("invalid image reference \"a//b\""),
            "{e}"
        );
    }
}
