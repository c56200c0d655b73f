//! Tag listing with `Link` pagination.

use super::client::Client;
use super::host::api_host;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::transport::{NotHere, Request};
use super::{Error, ErrorKind, Repository, Result};
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};
use std::collections::HashSet;
use std::sync::LazyLock;

/// Page size asked for; registries may return less and must not send more
/// than asked (distribution caps `n` at 1000 by default).
pub(super) const PAGE_SIZE: usize = 1000;
/// Cap on one page: 1000 tags of at most 128 characters are ~135 KB.
const PAGE_LIMIT: Limit = Limit {
    bytes: 4 << 20,
    what: "tag list page",
    partial: false,
};
/// Caps on a whole listing, so a registry cannot keep one going (pages
/// without end, or huge ones) or fill memory: far more than any repository
/// we read (the busiest Docker Hub repositories have a few tens of
/// thousands of tags), and a few seconds of requests.
pub(super) const MAX_TAGS: usize = 100_000;
pub(super) const MAX_BYTES: usize = 64 << 20;
pub(super) const MAX_PAGES: usize = 1_000;

static TAG_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[\w][\w.-]{0,127}$").expect("tag regex"));
// cosign and friends store signatures/attestations as `sha256-<hex>[.sig]`.
static DIGEST_TAG_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^(sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})(\..*)?$")
        .expect("digest tag regex")
});

/// Whether a listed tag names an image (not empty, valid, not digest-shaped).
pub(super) fn is_image_tag(tag: &str) -> bool {
    TAG_RE.is_match(tag) && !DIGEST_TAG_RE.is_match(tag)
}

/// The `rel="next"` target of a `Link` header value.
pub(super) fn next_link(value: &str) -> Option<String> {
    for part in value.split(',') {
        let part = part.trim();
        let Some(rest) = part.strip_prefix('<') else {
            continue;
        };
        let Some((target, params)) = rest.split_once('>') else {
            continue;
        };
        let is_next = params.split(';').any(|p| {
            let p = p.trim().to_ascii_lowercase().replace(' ', "");
            p == "rel=\"next\"" || p == "rel=next"
        });
        if is_next {
            return Some(target.trim().to_string());
        }
    }
    None
}

impl Client {
    /// Every tag of `repo`, in the registry's order, each once. Follows
    /// `Link: <…>; rel="next"` (relative targets resolved against the page
    /// URL; other hosts and loops are errors), accepts `"tags": null`, and
    /// drops empty, invalid and digest-shaped (`sha256-…`) tags.
    pub async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>> {
        let context = repo.to_string();
        let registry = repo.registry();
        let fail =
            |reason: String| Error::new(ErrorKind::Pagination { reason }, &context, registry);
        let mut target = format!("/v2/{}/tags/list?n={PAGE_SIZE}", repo.path());
        let mut visited = HashSet::new();
        let mut seen = HashSet::new();
        let mut tags = Vec::new();
        // Every tag the pages listed (kept or not), and their bytes.
        let (mut listed, mut bytes) = (0usize, 0usize);
        let over = |cap: String, pages: usize, listed: usize, bytes: usize| {
            fail(format!(
                "over the cap of {cap} (refused after {pages} pages, {listed} tags, {bytes} bytes)"
            ))
        };
        loop {
            if !visited.insert(target.clone()) {
                return Err(fail(format!(
                    "the registry's Link headers loop back to {target}"
                )));
            }
            if visited.len() > MAX_PAGES {
                let pages = visited.len() - 1;
                return Err(over(format!("{MAX_PAGES} pages"), pages, listed, bytes));
            }
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            let request = Request {
                method: Method::GET,
                target: target.clone(),
                headers,
                body: None,
                scope: Scope::pull(repo.path()),
                context: &context,
                limit: PAGE_LIMIT,
            };
            let resp = self.execute(registry, request).await?;
            if !resp.status.is_success() {
                let status = resp.status.as_u16();
                return Err(Error::status(&context, registry, status, &resp.body));
            }
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                tags: Option<Vec<Option<String>>>,
            }
            let page: Page = serde_json::from_slice(&resp.body)
                .map_err(|e| Error::malformed(&context, "tag list", e.to_string()))?;
            let page = page.tags.unwrap_or_default();
            listed += page.len();
            bytes += resp.body.len();
            if listed > MAX_TAGS {
                let cap = format!("{MAX_TAGS} tags");
                return Err(over(cap, visited.len(), listed, bytes));
            }
            if bytes > MAX_BYTES {
                let cap = format!("{MAX_BYTES} bytes");
                return Err(over(cap, visited.len(), listed, bytes));
            }
            for tag in page.into_iter().flatten() {
                if is_image_tag(&tag) && seen.insert(tag.clone()) {
                    tags.push(tag);
                }
            }
            let link = resp
                .headers
                .get_all(header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(next_link);
            let Some(link) = link else { break };
            target = resp.same_origin_target(&link).map_err(|e| match e {
                NotHere::Invalid(e) => fail(format!("invalid Link target {link:?}: {e}")),
                NotHere::OtherHost(other) => fail(format!(
                    "the next page is on another host ({other}, not {}); refusing to follow",
                    api_host(registry)
                )),
            })?;
        }
        Ok(tags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        assert_eq!(
            next_link(r#"</v2/a/tags/list?n=2&last=b>; rel="next""#).as_deref(),
            Some("/v2/a/tags/list?n=2&last=b")
        );
        assert_eq!(
            next_link(r#"<https://x/prev>; rel="prev", <https://x/next>; rel=next"#).as_deref(),
            Some("https://x/next")
        );
        assert_eq!(next_link(r#"</a>; rel="last""#), None);
    }

    #[test]
    fn tag_filter() {
        assert!(is_image_tag("trixie-slim"));
        assert!(is_image_tag("full-1.2.3"));
        assert!(!is_image_tag(""));
        assert!(!is_image_tag(&format!("sha256-{}.sig", "a".repeat(64))));
        assert!(!is_image_tag(&format!("sha256-{}", "0".repeat(64))));
        assert!(is_image_tag("sha256-short"));
    }
}
