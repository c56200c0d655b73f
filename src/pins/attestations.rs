//! `pins verify --key PUB`: each pinned image's signed referrers (issue 19),
//! checked offline against a public key, trusting the registry for
//! nothing it says about digests.
//!
//! For every pinned subject (a single-platform image; or an index and each
//! of its platform images) the referrers are listed by the registry's API
//! or, where it has none, the `sha256-<hex>` fallback tag. Each listed
//! Sigstore-bundle referrer is fetched by digest and re-hashed (the
//! client's manifest size cap applies), its `subject` must be the pinned
//! digest, its one layer (the bundle, at most [`MAX_BUNDLE`] bytes) is
//! fetched by digest and re-hashed, the DSSE signature must verify with
//! the key, and the in-toto statement inside must name the pinned digest
//! and the predicate type the manifest's annotation claims. Required, each
//! signed and verified: a signature, a provenance and (platform images) a
//! test result saying `PASSED` and an SPDX SBOM. Every referrer the pin
//! lists must be among them. Whatever fails is a problem naming the alias,
//! the subject and the referrer.

use super::verify::{Finding, Severity};
use super::{Digest, Pin};
use crate::attest::statement::{PROVENANCE, TEST_RESULT};
use crate::attest::{Bundle, PublicKey, dsse, referrer};
use crate::registry::{Client, ErrorKind, Reference, Repository, fallback_reference};
use std::collections::BTreeSet;

/// The largest bundle read (an SBOM of a big image is a few MB).
pub const MAX_BUNDLE: usize = 32 << 20;

/// What a platform image must carry.
pub const REQUIRED_IMAGE: [&str; 4] = [referrer::SIGN, PROVENANCE, TEST_RESULT, referrer::SPDX];
/// What an index must carry (its platforms carry the rest).
pub const REQUIRED_INDEX: [&str; 2] = [referrer::SIGN, PROVENANCE];

/// A short name of a predicate type, for messages.
fn short(predicate_type: &str) -> &str {
    match predicate_type {
        referrer::SIGN => "signature",
        PROVENANCE => "provenance",
        TEST_RESULT => "test result",
        referrer::SPDX => "SBOM",
        other => other,
    }
}

/// The subjects of a pin: each platform image, then the index if the pin
/// is one (its digest is none of its platforms').
pub fn subjects(pin: &Pin) -> Vec<(Digest, bool)> {
    let mut out: Vec<(Digest, bool)> = Vec::new();
    for d in pin.platforms.values() {
        if !out.iter().any(|(o, _)| o == d) {
            out.push((d.clone(), d == &pin.digest));
        }
    }
    if !out.iter().any(|(d, _)| d == &pin.digest) {
        out.push((pin.digest.clone(), true));
    } else {
        for s in &mut out {
            s.1 = false;
        }
    }
    out
}

/// Every finding about `pin`'s attestations.
pub fn verify_pin(
    client: &Client,
    rt: &tokio::runtime::Runtime,
    alias: &str,
    pin: &Pin,
    smoke: &[String],
    key: &PublicKey,
) -> Vec<Finding> {
    let finding = |severity, message: String| Finding {
        severity,
        alias: alias.to_string(),
        message,
    };
    let repo: Repository = match pin.repository.parse() {
        Ok(r) => r,
        Err(e) => return vec![finding(Severity::Problem, format!("repository: {e}"))],
    };
    let mut out = Vec::new();
    for (subject, is_index) in subjects(pin) {
        let pinned = pin
            .referrers
            .get(&subject)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let wanted = Wanted {
            is_index,
            pinned,
            smoke,
        };
        match rt.block_on(check_subject(client, &repo, &subject, &wanted, key)) {
            Ok(problems) => out.extend(
                problems
                    .into_iter()
                    .map(|p| finding(Severity::Problem, format!("attestations of {subject}: {p}"))),
            ),
            Err(e) => out.push(finding(
                Severity::Error,
                format!("attestations of {subject}: cannot list its referrers: {e}"),
            )),
        }
    }
    out
}

/// What `verify-attestations REF` checks for an image named by reference
/// (not pinned): its digest (the manifest fetched and hashed) and, for an
/// index, its platform images; no pinned referrers.
pub async fn pin_of_reference(client: &Client, reference: &Reference) -> anyhow::Result<Pin> {
    let manifest = client.fetch_manifest(reference).await?;
    let mut platforms = std::collections::BTreeMap::new();
    if crate::registry::media_type::is_index(&manifest.media_type) {
        let index = crate::registry::Index::parse(&reference.to_string(), &manifest.bytes)?;
        for (p, d) in index.platforms() {
            platforms.insert(p.normalized(), d);
        }
    } else {
        platforms.insert(crate::name::Platform::host(), manifest.digest.clone());
    }
    Ok(Pin {
        repository: reference.repo().to_string(),
        tag: reference.tag().unwrap_or_default().to_string(),
        version: semver::Version::new(0, 0, 0),
        digest: manifest.digest,
        platforms,
        tools: Default::default(),
        referrers: Default::default(),
    })
}

/// What one subject's attestations must show.
pub struct Wanted<'a> {
    /// An index (a signature and a provenance) or a platform image (all four).
    pub is_index: bool,
    /// The referrers the pin lists for it: each must be listed and sound.
    pub pinned: &'a [Digest],
    /// The smoke suites the variant owes: each a passed test of its test result.
    pub smoke: &'a [String],
}

/// The problems of one subject's attestations; `Err` when its referrers
/// could not be listed at all.
pub async fn check_subject(
    client: &Client,
    repo: &Repository,
    subject: &Digest,
    wanted: &Wanted<'_>,
    key: &PublicKey,
) -> Result<Vec<String>, crate::registry::Error> {
    let (is_index, pinned) = (wanted.is_index, wanted.pinned);
    let listing = match client.referrers_api(repo, subject).await? {
        Some(index) => Some(index),
        None => match client
            .fetch_manifest(&fallback_reference(repo, subject))
            .await
        {
            Ok(m) => Some(m.bytes),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => None,
            Err(e) => return Err(e),
        },
    };
    let mut problems = Vec::new();
    let entries = match listing
        .as_deref()
        .map(|b| referrer::entries("the referrers index", b))
    {
        None => Vec::new(),
        Some(Ok(e)) => e,
        Some(Err(e)) => {
            problems.push(e.to_string());
            Vec::new()
        }
    };
    let mut verified: BTreeSet<String> = BTreeSet::new();
    let mut good: BTreeSet<String> = BTreeSet::new();
    for e in entries
        .iter()
        .filter(|e| e.artifact_type.as_deref() == Some(crate::attest::bundle::MEDIA_TYPE))
    {
        match check_referrer(client, repo, subject, e, wanted.smoke, key).await {
            Ok(predicate_type) => {
                verified.insert(predicate_type);
                good.insert(e.digest.clone());
            }
            Err(p) => problems.push(format!("referrer {}: {p}", e.digest)),
        }
    }
    let required: &[&str] = if is_index {
        &REQUIRED_INDEX
    } else {
        &REQUIRED_IMAGE
    };
    for r in required {
        if !verified.contains(*r) {
            problems.push(format!(
                "no verified {} ({r}) among {} referrer(s)",
                short(r),
                entries.len()
            ));
        }
    }
    for p in pinned {
        if !good.contains(&p.to_string()) {
            problems.push(format!(
                "the pinned referrer {p} is not listed and verified"
            ));
        }
    }
    Ok(problems)
}

/// Checks one listed referrer; its predicate type when it is sound.
async fn check_referrer(
    client: &Client,
    repo: &Repository,
    subject: &Digest,
    entry: &referrer::Descriptor,
    smoke: &[String],
    key: &PublicKey,
) -> Result<String, String> {
    let digest: Digest = entry.digest.parse().map_err(|e| format!("{e}"))?;
    let manifest = client
        .fetch_manifest(&Reference::in_repo(repo, digest.clone()))
        .await
        .map_err(|e| e.without_context())?;
    let what = format!("referrer {digest}");
    let parsed = referrer::Referrer::parse(&what, &manifest.bytes).map_err(|e| e.to_string())?;
    let about = parsed.subject.as_ref().map(|s| s.digest.as_str());
    if about != Some(subject.to_string().as_str()) {
        return Err(format!(
            "its subject is {}, not the pinned image",
            about.unwrap_or("missing")
        ));
    }
    let layer = parsed
        .bundle()
        .ok_or("it does not hold exactly one Sigstore bundle layer")?;
    if layer.size > MAX_BUNDLE as u64 {
        return Err(format!(
            "its bundle is {} bytes, over the limit of {MAX_BUNDLE}",
            layer.size
        ));
    }
    let bundle_digest: Digest = layer.digest.parse().map_err(|e| format!("{e}"))?;
    let bytes = client
        .fetch_blob(repo, &bundle_digest, MAX_BUNDLE)
        .await
        .map_err(|e| format!("its bundle: {}", e.without_context()))?;
    let bundle = Bundle::parse(&what, &bytes).map_err(|e| e.to_string())?;
    if bundle.dsse_envelope.payload_type != dsse::IN_TOTO {
        return Err(format!(
            "payload type {}, not an in-toto statement",
            bundle.dsse_envelope.payload_type
        ));
    }
    let payload = bundle.verify(key, &what).map_err(|e| {
        format!(
            "the signature does not verify with the key {} ({e})",
            key.hint()
        )
    })?;
    let statement: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|e| format!("the statement: {e}"))?;
    let names_subject = statement["subject"].as_array().is_some_and(|s| {
        s.iter()
            .any(|r| r["digest"]["sha256"].as_str() == Some(subject.hex()))
    });
    if !names_subject {
        return Err("the signed statement is about another image".into());
    }
    let predicate_type = statement["predicateType"].as_str().unwrap_or_default();
    let claimed = parsed.annotations.get(referrer::PREDICATE_TYPE);
    if claimed.map(String::as_str) != Some(predicate_type) {
        return Err(format!(
            "the annotation says {:?}, the signed statement {predicate_type:?}",
            claimed
        ));
    }
    if predicate_type == TEST_RESULT {
        let result = statement["predicate"]["result"].as_str().unwrap_or("none");
        if result != "PASSED" {
            return Err(format!("the signed test result says {result}, not PASSED"));
        }
        let passed: Vec<&str> = statement["predicate"]["passedTests"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
            .unwrap_or_default();
        let missing: Vec<&str> = smoke
            .iter()
            .filter(|s| {
                let prefix = format!("smoke:{s} (");
                !passed.iter().any(|t| t.starts_with(&prefix))
            })
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the signed test result lacks the owed smoke suite(s) {}",
                missing.join(", ")
            ));
        }
    }
    Ok(predicate_type.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> Digest {
        super::super::tests::d(c)
    }

    #[test]
    fn an_index_pin_has_its_platforms_then_itself_a_single_image_itself() {
        let mut pin = Pin {
            repository: "r/x".into(),
            tag: "x-1.0.0".into(),
            version: semver::Version::new(1, 0, 0),
            digest: d('f'),
            platforms: [
                ("linux/amd64".parse().unwrap(), d('a')),
                ("linux/arm64".parse().unwrap(), d('b')),
            ]
            .into(),
            tools: Default::default(),
            referrers: Default::default(),
        };
        assert_eq!(
            subjects(&pin),
            [(d('a'), false), (d('b'), false), (d('f'), true)]
        );
        pin.platforms = [("linux/amd64".parse().unwrap(), d('f'))].into();
        assert_eq!(subjects(&pin), [(d('f'), false)]);
    }
}
