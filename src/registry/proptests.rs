//! Bad input never panics: arbitrary and mutated `WWW-Authenticate` and
//! `Link` headers, manifests, indexes, configs, token responses, image
//! references, digests and platforms go to their parsers, which give a
//! clean result or an error.

use super::config::{config_descriptor, parse_config};
use super::error::error_detail;
use super::index::Index;
use super::manifest::check_manifest_body;
use super::media_type as mt;
use super::tags::next_link;
use super::transport::bearer::parse_token;
use super::transport::challenge::{RawChallenge, parse_challenge, parse_challenges};
use super::{Digest, Platform, Reference, Repository};
use proptest::prelude::*;

/// One edit of a document: flip, insert or delete a byte, or cut it short.
#[derive(Debug, Clone)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
    ];
    prop::collection::vec(edit, 1..6)
}

/// Syntax bytes are the interesting ones to put in: quotes, brackets,
/// separators, escapes.
fn syntax_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b"\"\\{}[]:,;=<> \t/@.-_0123456789aZ".to_vec()),
        any::<u8>(),
    ]
}

fn mutate(doc: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = doc.to_vec();
    for edit in edits {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match *edit {
            Edit::Set(i, b) if !out.is_empty() => {
                let i = at(i, out.len());
                out[i] = b;
            }
            Edit::Insert(i, b) => {
                let i = at(i, out.len() + 1);
                out.insert(i, b);
            }
            Edit::Delete(i) if !out.is_empty() => {
                let i = at(i, out.len());
                out.remove(i);
            }
            Edit::Truncate(i) => out.truncate(at(i, out.len() + 1)),
            _ => {}
        }
    }
    out
}

fn mutated(docs: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec(
        (any::<usize>(), syntax_byte(), 0..4u8).prop_map(|(i, b, op)| match op {
            0 => Edit::Set(i, b),
            1 => Edit::Insert(i, b),
            2 => Edit::Delete(i),
            _ => Edit::Truncate(i),
        }),
        1..6,
    );
    (
        prop::sample::select(docs),
        prop_oneof![edits, self::edits()],
    )
        .prop_map(|(doc, edits)| mutate(doc.as_bytes(), &edits))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const CHALLENGES: &[&str] = &[
    r#"Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull""#,
    r#"Basic realm="x", Bearer realm="y",service="z""#,
    r#"Negotiate abc==, Basic realm=x , ,Bearer realm="a\"b,c", scope="s""#,
    r#"bearer realm=http://x/t, service="a,b""#,
];

const LINKS: &[&str] = &[
    r#"</v2/a/tags/list?n=2&last=b>; rel="next""#,
    r#"<https://x/prev>; rel="prev", <https://x/next>; rel=next"#,
];

const MANIFESTS: &[&str] = &[
    r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0},"layers":[]}"#,
    r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":2,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":2,"platform":{"os":"unknown","architecture":"unknown"}}]}"#,
    r#"{"schemaVersion":2,"manifests":[]}"#,
];

const CONFIGS: &[&str] = &[
    r#"{"architecture":"amd64","os":"linux","created":"2024-01-01T00:00:00Z","config":{"Labels":{"a":"b"}},"rootfs":{"type":"layers","diff_ids":[]}}"#,
];

const TOKENS: &[&str] = &[
    r#"{"token":"abc","expires_in":300}"#,
    r#"{"access_token":"x","expires_in":18446744073709551615}"#,
];

const NAMES: &[&str] = &[
    "127.0.0.1:5000/library/debian:trixie-slim",
    "docker.io/library/debian@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "[::1]:5000/a/b:c@sha512:cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    "linux/arm64/v8",
];

/// Every manifest-side parser on the same bytes.
fn parse_documents(bytes: &[u8]) {
    for header in [None, Some(mt::OCI_INDEX), Some(mt::OCI_MANIFEST)] {
        let _ = check_manifest_body("r", header, bytes);
    }
    let _ = Index::parse("r", bytes).map(|i| i.platforms());
    let _ = config_descriptor("r", bytes);
    let _ = parse_config("r", &Digest::sha256(b""), Digest::sha256(bytes), bytes);
    let _ = parse_token(bytes);
    let _ = error_detail(bytes);
}

/// Every name parser on the same text; what parses prints back to itself.
fn parse_names(s: &str) {
    if let Ok(r) = s.parse::<Reference>() {
        let again: Reference = r.to_string().parse().expect("a printed reference parses");
        assert_eq!(again, r);
    }
    if let Ok(r) = s.parse::<Repository>() {
        assert_eq!(r.to_string().parse::<Repository>().ok(), Some(r));
    }
    if let Ok(d) = s.parse::<Digest>() {
        assert_eq!(d.to_string(), s, "digests print as given");
    }
    if let Ok(p) = s.parse::<Platform>() {
        assert_eq!(p.to_string().parse::<Platform>().ok(), Some(p));
    }
}

/// Well-formed challenges: a scheme and parameters whose values may hold
/// commas, quotes, backslashes and spaces.
fn challenges() -> impl Strategy<Value = Vec<RawChallenge>> {
    let params = prop::collection::btree_map("[a-z][a-z0-9_]{0,6}", "[ -~]{0,12}", 0..4);
    let challenge =
        ("[A-Za-z][A-Za-z0-9]{0,8}", params).prop_map(|(scheme, params)| RawChallenge {
            scheme: scheme.to_ascii_lowercase(),
            params,
            token68: None,
        });
    prop::collection::vec(challenge, 1..4)
}

/// `challenges` as a registry would write them, quoting every value.
fn written(challenges: &[RawChallenge]) -> String {
    let quoted = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
    challenges
        .iter()
        .map(|c| {
            let params: Vec<String> = c
                .params
                .iter()
                .map(|(k, v)| format!("{k}={}", quoted(v)))
                .collect();
            format!("{} {}", c.scheme, params.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn written_challenges_parse_back(all in challenges()) {
        prop_assert_eq!(parse_challenges(&written(&all)), Ok(all));
    }

    #[test]
    fn challenge_headers(s in prop_oneof![
        any::<String>(),
        "[A-Za-z ,=\"\\\\\t]{0,48}",
        mutated(CHALLENGES).prop_map(|b| text(&b)),
    ]) {
        if let Ok(all) = parse_challenges(&s) {
            prop_assert!(all.iter().all(|c| !c.scheme.is_empty()));
        }
        let _ = parse_challenge(&s);
    }

    #[test]
    fn link_headers(s in prop_oneof![
        any::<String>(),
        "[<>;,= a-z\"/?&]{0,48}",
        mutated(LINKS).prop_map(|b| text(&b)),
    ]) {
        let _ = next_link(&s);
    }

    #[test]
    fn manifests_indexes_configs_and_tokens(bytes in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        mutated(MANIFESTS),
        mutated(CONFIGS),
        mutated(TOKENS),
    ]) {
        parse_documents(&bytes);
    }

    #[test]
    fn references_digests_and_platforms(s in prop_oneof![
        any::<String>(),
        "[a-z0-9:/@.\\-_\\[\\]]{0,40}",
        mutated(NAMES).prop_map(|b| text(&b)),
    ]) {
        parse_names(&s);
    }
}
