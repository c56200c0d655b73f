//! `pins verify --key PUB…`: each pinned image's signed referrers (issue
//! 19), checked offline against the trusted public keys, trusting the
//! registry for nothing it says about digests.
//!
//! For every pinned subject (a single-platform image; or an index and each
//! of its platform images) the referrers are listed by the registry's API
//! or, where it has none, the `sha256-<hex>` fallback tag (at most the
//! client's manifest size cap). Entries listed twice are one; more than
//! [`MAX_REFERRERS`] distinct ones are refused unread. Each listed
//! Sigstore-bundle referrer (the pinned ones first) is fetched by digest
//! and re-hashed, its `subject` must be the pinned digest, its one layer
//! (the bundle, at most [`MAX_BUNDLE`] bytes, and at most
//! [`MAX_BUNDLE_BYTES`] for all of a subject's) is fetched by digest and
//! re-hashed, the DSSE signature must verify with one of the trusted keys,
//! and the in-toto statement inside must name the pinned digest and the
//! predicate type the manifest's annotation claims.
//!
//! The policy: required, each signed by a trusted key and verified, are a
//! signature, a provenance and (platform images) a test result and an
//! SPDX SBOM; every referrer the pin lists must be among the verified.
//! Anything else the registry lists that does not verify — another
//! signer's, a rotated-out key's, a replay of another image's, junk — is
//! a warning listing it as ignored, never a pass and never a failure by
//! itself, so a second signer cannot fail the gate and a stranger's
//! referrer cannot satisfy it. A statement a trusted key signed about this
//! image that says it failed (a test result not `PASSED`, an owed smoke
//! suite missing) is a problem. Every message is escaped where it holds
//! what the registry wrote ([`escaped`]).

use super::verify::{Finding, Severity};
use super::{Digest, Pin};
use crate::attest::statement::{PROVENANCE, TEST_RESULT};
use crate::attest::{Bundle, PublicKey, dsse, referrer};
use crate::registry::{Client, ErrorKind, Reference, Repository, fallback_reference};
use std::collections::{BTreeMap, BTreeSet};

/// The largest bundle read (an SBOM of a big image is a few MB).
pub const MAX_BUNDLE: usize = 32 << 20;
/// The most bundle bytes read for one subject: a few of the largest.
pub const MAX_BUNDLE_BYTES: u64 = 4 * MAX_BUNDLE as u64;
/// The most distinct referrers one subject may list. A release attaches
/// four per key; a listing of thousands (a 4 MiB index holds about
/// 20,000 entries) would cost a fetch each, so it is refused unread.
pub const MAX_REFERRERS: usize = 64;

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

/// Every finding about `pin`'s attestations. Its subjects' referrers are
/// read at once; the findings come in the order of [`subjects`].
pub async fn verify_pin(
    client: &Client,
    alias: &str,
    pin: &Pin,
    smoke: &[String],
    keys: &[PublicKey],
) -> Vec<Finding> {
    let finding = |severity, message: String| Finding {
        severity,
        alias: alias.to_string(),
        message: escaped(&message),
    };
    let repo = pin.repository.parsed().clone();
    let checks = subjects(pin).into_iter().map(|(subject, is_index)| {
        let repo = &repo;
        async move {
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
            match check_subject(client, repo, &subject, &wanted, keys).await {
                Ok(said) => said
                    .into_iter()
                    .map(|(s, m)| finding(s, format!("attestations of {subject}: {m}")))
                    .collect(),
                Err(e) => vec![finding(
                    Severity::Error,
                    format!("attestations of {subject}: cannot list its referrers: {e}"),
                )],
            }
        }
    });
    futures::future::join_all(checks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// What `verify-attestations REF` checks for an image named by reference
/// (not pinned): its digest (the manifest fetched and hashed) and, for an
/// index, its platform images; no pinned referrers.
pub async fn pin_of_reference(
    client: &Client,
    reference: &Reference,
) -> Result<Pin, crate::registry::Error> {
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
        repository: reference.repo().clone().into(),
        tag: reference.tag().unwrap_or_default().to_string(),
        version: semver::Version::new(0, 0, 0),
        digest: manifest.digest,
        platforms,
        tools: Default::default(),
        referrers: Default::default(),
    })
}

/// `text` with every character that a terminal, a log viewer or an editor
/// would act on instead of showing — C0 and C1 controls (ESC starts a
/// terminal's escape sequences), DEL, and the bidirectional overrides
/// that reorder what is read — written as `\u{..}`, so a digest, media
/// type or annotation the registry wrote is shown as the characters it
/// holds. The rest, backslashes included, is kept as it is.
pub(crate) fn escaped(text: &str) -> String {
    let acts = |c: char| {
        c.is_control()
            || matches!(
                c,
                '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if acts(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
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

/// What became of one listed referrer.
enum Outcome {
    /// Signed by a trusted key, about this image, sound: its predicate type.
    Verified(String),
    /// It cannot count (no trusted key signed it, or it is not about this
    /// image, or not a bundle to read): ignored, unless the pin lists it.
    Ignored(String),
    /// A trusted key signed that this image failed: a problem.
    Failed(String),
    /// The registry could not be asked (not an answer about the referrer).
    Unreachable(String),
}

/// The findings about one subject's attestations (severity, message);
/// `Err` when its referrers could not be listed at all.
pub async fn check_subject(
    client: &Client,
    repo: &Repository,
    subject: &Digest,
    wanted: &Wanted<'_>,
    keys: &[PublicKey],
) -> Result<Vec<(Severity, String)>, crate::registry::Error> {
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
    let mut said = Vec::new();
    let listed = match listing
        .as_deref()
        .map(|b| referrer::entries("the referrers index", b))
    {
        None => Vec::new(),
        Some(Ok(e)) => e,
        Some(Err(e)) => {
            said.push((Severity::Problem, e.to_string()));
            Vec::new()
        }
    };
    // One entry per digest, whatever else the copies say.
    let mut seen = BTreeSet::new();
    let mut entries: Vec<referrer::Descriptor> = listed
        .into_iter()
        .filter(|e| seen.insert(e.digest.clone()))
        .collect();
    if entries.len() > MAX_REFERRERS {
        said.push((
            Severity::Problem,
            format!(
                "the registry lists {} referrers of it, over the limit of {MAX_REFERRERS}: \
                 none was read",
                entries.len()
            ),
        ));
        return Ok(said);
    }
    let is_pinned = |digest: &str| pinned.iter().any(|p| p.to_string() == digest);
    // The pinned first: what others list cannot use up the bytes they need.
    entries.sort_by_key(|e| !is_pinned(&e.digest));
    let mut verified: BTreeSet<String> = BTreeSet::new();
    let mut good: BTreeSet<String> = BTreeSet::new();
    // Pinned referrers that did not verify, and why (said once, below).
    let mut unverified: BTreeMap<String, String> = BTreeMap::new();
    let mut said_of: BTreeSet<String> = BTreeSet::new();
    let mut budget = MAX_BUNDLE_BYTES;
    for e in entries
        .iter()
        .filter(|e| e.artifact_type.as_deref() == Some(crate::attest::bundle::MEDIA_TYPE))
    {
        let check = Check {
            client,
            repo,
            subject,
            smoke: wanted.smoke,
            keys,
        };
        match check.referrer(e, &mut budget).await {
            Outcome::Verified(predicate_type) => {
                verified.insert(predicate_type);
                good.insert(e.digest.clone());
            }
            Outcome::Ignored(why) if is_pinned(&e.digest) => {
                unverified.insert(e.digest.clone(), why);
            }
            Outcome::Ignored(why) => said.push((
                Severity::Warning,
                format!("referrer {} ignored: {why}", e.digest),
            )),
            Outcome::Failed(why) => {
                said.push((Severity::Problem, format!("referrer {}: {why}", e.digest)));
                said_of.insert(e.digest.clone());
            }
            Outcome::Unreachable(why) => {
                said.push((Severity::Error, format!("referrer {}: {why}", e.digest)));
                said_of.insert(e.digest.clone());
            }
        }
    }
    let required: &[&str] = if is_index {
        &REQUIRED_INDEX
    } else {
        &REQUIRED_IMAGE
    };
    for r in required {
        if !verified.contains(*r) {
            said.push((
                Severity::Problem,
                format!(
                    "no verified {} ({r}) among {} referrer(s)",
                    short(r),
                    entries.len()
                ),
            ));
        }
    }
    for p in pinned.iter().map(ToString::to_string) {
        if good.contains(&p) || said_of.contains(&p) {
            continue;
        }
        let message = match unverified.get(&p) {
            Some(why) => format!("the pinned referrer {p} does not verify: {why}"),
            None => format!("the pinned referrer {p} is not listed and verified"),
        };
        said.push((Severity::Problem, message));
    }
    Ok(said)
}

/// What checking a subject's referrers reads from.
struct Check<'a> {
    client: &'a Client,
    repo: &'a Repository,
    subject: &'a Digest,
    smoke: &'a [String],
    keys: &'a [PublicKey],
}

/// A registry error about a referrer or its bundle: its answer about the
/// content (not there, not what the digest names, too large, malformed)
/// means the referrer cannot count; any other (unreachable, refused) means
/// it could not be checked.
fn outcome_of(e: &crate::registry::Error, what: &str) -> Outcome {
    let message = format!("{what}{}", e.without_context());
    match e.kind() {
        ErrorKind::NotFound { .. }
        | ErrorKind::DigestMismatch { .. }
        | ErrorKind::TooLarge { .. }
        | ErrorKind::Malformed { .. }
        | ErrorKind::MediaTypeMismatch { .. } => Outcome::Ignored(message),
        _ => Outcome::Unreachable(message),
    }
}

impl Check<'_> {
    /// Checks one listed referrer, reading at most `budget` bundle bytes
    /// (what it reads is taken off).
    async fn referrer(&self, entry: &referrer::Descriptor, budget: &mut u64) -> Outcome {
        let (client, repo, subject) = (self.client, self.repo, self.subject);
        let digest: Digest = match entry.digest.parse() {
            Ok(d) => d,
            Err(e) => return Outcome::Ignored(format!("{e}")),
        };
        let manifest = match client
            .fetch_manifest(&Reference::in_repo(repo, digest.clone()))
            .await
        {
            Ok(m) => m,
            Err(e) => return outcome_of(&e, ""),
        };
        let what = format!("referrer {digest}");
        let parsed = match referrer::Referrer::parse(&what, &manifest.bytes) {
            Ok(p) => p,
            Err(e) => return Outcome::Ignored(e.to_string()),
        };
        let about = parsed.subject.as_ref().map(|s| s.digest.as_str());
        if about != Some(subject.to_string().as_str()) {
            return Outcome::Ignored(format!(
                "its subject is {}, not the pinned image",
                about.unwrap_or("missing")
            ));
        }
        let Some(layer) = parsed.bundle() else {
            return Outcome::Ignored("it does not hold exactly one Sigstore bundle layer".into());
        };
        if layer.size > MAX_BUNDLE as u64 {
            return Outcome::Ignored(format!(
                "its bundle is {} bytes, over the limit of {MAX_BUNDLE}: not read",
                layer.size
            ));
        }
        if layer.size > *budget {
            return Outcome::Ignored(format!(
                "its bundle of {} bytes is not read: the bundles of this image read \
                 before it reached the limit of {MAX_BUNDLE_BYTES} bytes",
                layer.size
            ));
        }
        let bundle_digest: Digest = match layer.digest.parse() {
            Ok(d) => d,
            Err(e) => return Outcome::Ignored(format!("its bundle: {e}")),
        };
        // Read no more than the layer says: its size is what was budgeted.
        let limit = usize::try_from(layer.size).unwrap_or(MAX_BUNDLE);
        *budget -= layer.size;
        let bytes = match client.fetch_blob(repo, &bundle_digest, limit).await {
            Ok(b) => b,
            Err(e) => return outcome_of(&e, "its bundle: "),
        };
        if bytes.len() as u64 != layer.size {
            return Outcome::Ignored(format!(
                "its bundle is {} bytes, not the {} its manifest says",
                bytes.len(),
                layer.size
            ));
        }
        let bundle = match Bundle::parse(&what, &bytes) {
            Ok(b) => b,
            Err(e) => return Outcome::Ignored(e.to_string()),
        };
        let payload_type = &bundle.dsse_envelope.payload_type;
        if payload_type != dsse::IN_TOTO {
            return Outcome::Ignored(format!(
                "payload type {payload_type}, not an in-toto statement"
            ));
        }
        let payload = match bundle.verify_any(self.keys, &what) {
            Ok((payload, _)) => payload,
            Err(crate::attest::AttestError::BadSignature { .. }) => {
                let claimed = bundle.claimed_hint();
                let names_ours = self.keys.iter().any(|k| k.hint() == claimed);
                return Outcome::Ignored(if names_ours {
                    format!("it names the trusted key {claimed}, but its signature does not verify")
                } else {
                    format!("signed by no trusted key (it names the key {claimed})")
                });
            }
            Err(e) => return Outcome::Ignored(e.to_string()),
        };
        self.statement(&payload, &parsed)
    }

    /// Judges the statement a trusted key signed.
    fn statement(&self, payload: &[u8], parsed: &referrer::Referrer) -> Outcome {
        let statement: serde_json::Value = match serde_json::from_slice(payload) {
            Ok(s) => s,
            Err(e) => return Outcome::Failed(format!("the signed statement: {e}")),
        };
        let names_subject = statement["subject"].as_array().is_some_and(|s| {
            s.iter()
                .any(|r| r["digest"]["sha256"].as_str() == Some(self.subject.hex()))
        });
        if !names_subject {
            // A statement of ours about another image, listed here.
            return Outcome::Ignored("the signed statement is about another image".into());
        }
        let predicate_type = statement["predicateType"].as_str().unwrap_or_default();
        let claimed = parsed.annotations.get(referrer::PREDICATE_TYPE);
        if claimed.map(String::as_str) != Some(predicate_type) {
            return Outcome::Ignored(format!(
                "the annotation says {:?}, the signed statement {predicate_type:?}",
                claimed
            ));
        }
        if predicate_type == TEST_RESULT {
            let result = statement["predicate"]["result"].as_str().unwrap_or("none");
            if result != "PASSED" {
                return Outcome::Failed(format!(
                    "the signed test result says {result}, not PASSED"
                ));
            }
            let passed: Vec<&str> = statement["predicate"]["passedTests"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
                .unwrap_or_default();
            let missing: Vec<&str> = self
                .smoke
                .iter()
                .filter(|s| {
                    let prefix = format!("smoke:{s} (");
                    !passed.iter().any(|t| t.starts_with(&prefix))
                })
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Outcome::Failed(format!(
                    "the signed test result lacks the owed smoke suite(s) {}",
                    missing.join(", ")
                ));
            }
        }
        Outcome::Verified(predicate_type.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> Digest {
        super::super::tests::d(c)
    }

    use crate::attest::PrivateKey;
    use crate::attest::statement::{self, Resource};
    use crate::registry::fake::FakeRegistry;
    use crate::registry::media_type::{OCI_INDEX, OCI_MANIFEST};
    use serde_json::{Value, json};

    const REPO: &str = "f/sandbox";

    /// An image in a fake registry, and the referrers made about it.
    struct Subject {
        fake: FakeRegistry,
        repo: Repository,
        digest: Digest,
        descriptor: referrer::Descriptor,
    }

    fn passed() -> Value {
        json!({"result": "PASSED", "configuration": [], "passedTests": ["check"],
               "warnedTests": [], "failedTests": []})
    }

    impl Subject {
        async fn new() -> Subject {
            let fake = FakeRegistry::start().await;
            let config = json!({"architecture": "amd64", "os": "linux"});
            let digest = fake.put_image(REPO, &config, OCI_MANIFEST);
            let bytes = fake.state().manifests[&(REPO.to_string(), digest.to_string())]
                .1
                .clone();
            Subject {
                repo: format!("{}/{REPO}", fake.authority).parse().unwrap(),
                descriptor: referrer::Descriptor::of(OCI_MANIFEST, &bytes),
                fake,
                digest,
            }
        }

        /// A referrer of `bundle` (its bytes) claiming `predicate_type`, put
        /// in the registry; its index entry.
        fn put(&self, bundle: &[u8], predicate_type: &str) -> referrer::Descriptor {
            self.fake.put_blob(REPO, bundle);
            self.fake.put_blob(REPO, referrer::EMPTY_JSON);
            let m = referrer::manifest(&self.descriptor, bundle, predicate_type);
            self.fake.put_manifest(REPO, None, OCI_MANIFEST, &m);
            referrer::entry(&m).unwrap()
        }

        /// A referrer of a statement about this image signed by `signer`.
        fn signed(
            &self,
            predicate_type: &str,
            predicate: Value,
            signer: &PrivateKey,
        ) -> referrer::Descriptor {
            let about = [Resource::sha256("x", self.digest.hex())];
            let payload = statement::statement(&about, predicate_type, &predicate);
            self.put(
                &Bundle::sign(dsse::IN_TOTO, &payload, signer).to_json(),
                predicate_type,
            )
        }

        /// The four referrers a release attaches to a platform image.
        fn released(&self, signer: &PrivateKey) -> Vec<referrer::Descriptor> {
            vec![
                self.signed(referrer::SIGN, json!({}), signer),
                self.signed(PROVENANCE, json!({}), signer),
                self.signed(TEST_RESULT, passed(), signer),
                self.signed(referrer::SPDX, json!({}), signer),
            ]
        }

        /// Lists `entries` in the fallback tag (distribution has no API).
        fn list(&self, entries: &[Value]) {
            let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries});
            let tag = crate::registry::fallback_tag(&self.digest);
            let bytes = serde_json::to_vec(&index).unwrap();
            self.fake.put_manifest(REPO, Some(&tag), OCI_INDEX, &bytes);
        }

        fn list_entries(&self, entries: &[referrer::Descriptor]) {
            let values: Vec<Value> = entries
                .iter()
                .map(|e| serde_json::to_value(e).unwrap())
                .collect();
            self.list(&values);
        }

        async fn check(&self, keys: &[PublicKey], pinned: &[Digest]) -> Vec<(Severity, String)> {
            let wanted = Wanted {
                is_index: false,
                pinned,
                smoke: &[],
            };
            let client = self.fake.client();
            check_subject(&client, &self.repo, &self.digest, &wanted, keys)
                .await
                .unwrap()
        }
    }

    fn digests(entries: &[referrer::Descriptor]) -> Vec<Digest> {
        entries.iter().map(|e| e.digest.parse().unwrap()).collect()
    }

    #[tokio::test]
    async fn a_referrer_another_key_signed_beside_valid_ones_is_ignored_and_listed() {
        let s = Subject::new().await;
        let (ours, theirs) = (PrivateKey::generate(), PrivateKey::generate());
        let mut entries = s.released(&ours);
        let pinned = digests(&entries);
        let stranger = s.signed(TEST_RESULT, passed(), &theirs);
        entries.insert(1, stranger.clone());
        s.list_entries(&entries);
        let said = s.check(&[ours.public()], &pinned).await;
        assert_eq!(
            said,
            [(
                Severity::Warning,
                format!(
                    "referrer {} ignored: signed by no trusted key (it names the key {})",
                    stranger.digest,
                    theirs.public().hint()
                )
            )]
        );
        // A stranger's referrers alone satisfy nothing.
        let alone = s.released(&theirs);
        s.list_entries(&alone);
        let said = s.check(&[ours.public()], &[]).await;
        let problems: Vec<&str> = said
            .iter()
            .filter(|(sev, _)| *sev == Severity::Problem)
            .map(|(_, m)| m.as_str())
            .collect();
        assert_eq!(problems.len(), 4, "{said:?}");
        assert!(problems[0].starts_with("no verified signature"), "{said:?}");
        assert_eq!(said.len(), 8, "four ignored, four missing: {said:?}");
    }

    #[tokio::test]
    async fn several_trusted_keys_verify_across_a_rotation() {
        let s = Subject::new().await;
        let (old, new) = (PrivateKey::generate(), PrivateKey::generate());
        // Released under the old key, then again under the new one.
        let mut entries = s.released(&old);
        entries.extend(s.released(&new));
        s.list_entries(&entries);
        let both = [new.public(), old.public()];
        assert_eq!(s.check(&both, &digests(&entries[..4])).await, []);
        assert_eq!(s.check(&both, &digests(&entries[4..])).await, []);
        // The old key retired: its referrers are ignored, the new ones hold.
        let said = s.check(&[new.public()], &digests(&entries[4..])).await;
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(
            said.iter().all(|(sev, m)| *sev == Severity::Warning
                && m.contains(&format!("(it names the key {})", old.public().hint()))),
            "{said:?}"
        );
        // A pinned referrer the old key signed, once the old key is dropped:
        // a problem naming why, not a pass.
        let said = s.check(&[new.public()], &digests(&entries[..1])).await;
        assert!(
            said.contains(&(
                Severity::Problem,
                format!(
                    "the pinned referrer {} does not verify: signed by no trusted key (it names the key {})",
                    entries[0].digest,
                    old.public().hint()
                )
            )),
            "{said:?}"
        );
    }

    #[tokio::test]
    async fn a_referrer_listed_twice_is_read_once() {
        let s = Subject::new().await;
        let key = PrivateKey::generate();
        let entries = s.released(&key);
        let mut twice = entries.clone();
        twice.extend(entries.clone());
        twice.push(entries[2].clone());
        s.list_entries(&twice);
        assert_eq!(s.check(&[key.public()], &digests(&entries)).await, []);
        let state = s.fake.state();
        for e in &entries {
            assert_eq!(state.count("GET", &format!("/manifests/{}", e.digest)), 1);
        }
    }

    #[tokio::test]
    async fn a_flood_of_referrers_is_refused_unread_and_quickly() {
        let s = Subject::new().await;
        let key = PrivateKey::generate();
        let mut entries: Vec<Value> = s
            .released(&key)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        for n in 0..10_000u32 {
            let mut e = entries[0].clone();
            e["digest"] = Value::from(Digest::sha256(&n.to_be_bytes()).to_string());
            entries.push(e);
        }
        s.list(&entries);
        let started = std::time::Instant::now();
        let said = s.check(&[key.public()], &[]).await;
        let took = started.elapsed();
        assert_eq!(
            said,
            [(
                Severity::Problem,
                "the registry lists 10004 referrers of it, over the limit of 64: none was read"
                    .to_string()
            )]
        );
        // The listing and nothing else: no referrer was fetched.
        let gets: Vec<String> = (s.fake.state().log.iter())
            .filter(|l| l.starts_with("GET ") && !l.contains("/referrers/"))
            .cloned()
            .collect();
        assert_eq!(gets.len(), 1, "{gets:?}");
        eprintln!("a listing of 10,004 referrers refused in {took:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        // At the limit, every one is read.
        let at_limit: Vec<Value> = entries[..MAX_REFERRERS].to_vec();
        s.list(&at_limit);
        let said = s.check(&[key.public()], &[]).await;
        assert!(
            !said.iter().any(|(_, m)| m.contains("over the limit of 64")),
            "{said:?}"
        );
    }

    #[tokio::test]
    async fn the_bundle_bytes_read_for_one_image_are_bounded() {
        let s = Subject::new().await;
        let key = PrivateKey::generate();
        let real = s.released(&key);
        // Referrers whose bundle layers claim 30 MiB each (under the
        // per-bundle limit): four of them use up the budget.
        let big = 30u64 << 20;
        let mut claimed = Vec::new();
        for n in 0..5 {
            let bundle = format!("{{\"n\":{n}}}");
            s.fake.put_blob(REPO, bundle.as_bytes());
            let mut m: Value = serde_json::from_slice(&referrer::manifest(
                &s.descriptor,
                bundle.as_bytes(),
                referrer::SIGN,
            ))
            .unwrap();
            m["layers"][0]["size"] = Value::from(big);
            let bytes = serde_json::to_vec(&m).unwrap();
            s.fake.put_manifest(REPO, None, OCI_MANIFEST, &bytes);
            claimed.push(referrer::entry(&bytes).unwrap());
        }
        let mut entries = claimed.clone();
        entries.extend(real.clone());
        s.list_entries(&entries);
        // The pinned are read first, whatever the others claim.
        let said = s.check(&[key.public()], &digests(&real)).await;
        let why: Vec<&str> = said.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(said.len(), 5, "{why:#?}");
        assert!(said.iter().all(|(s, _)| *s == Severity::Warning));
        for w in &why[..4] {
            assert!(w.ends_with("not the 31457280 its manifest says"), "{w}");
        }
        assert!(
            why[4].ends_with(
                "ignored: its bundle of 31457280 bytes is not read: the bundles of this \
                 image read before it reached the limit of 134217728 bytes"
            ),
            "{}",
            why[4]
        );
    }

    #[tokio::test]
    async fn what_the_registry_cannot_serve_is_an_error_not_an_ignored_referrer() {
        let s = Subject::new().await;
        let key = PrivateKey::generate();
        let entries = s.released(&key);
        s.list_entries(&entries);
        let target = format!("/manifests/{}", entries[3].digest);
        for _ in 0..3 {
            s.fake.state().faults.push(("GET", target.clone(), 503));
        }
        let said = s.check(&[key.public()], &[]).await;
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(said[0].0, Severity::Error, "{said:?}");
        assert!(
            said[0]
                .1
                .starts_with(&format!("referrer {}: ", entries[3].digest))
        );
        assert_eq!(said[1].0, Severity::Problem, "the SBOM is then unverified");
    }

    #[test]
    fn what_a_terminal_would_act_on_is_escaped() {
        assert_eq!(
            escaped("sha256:\x1b]0;pwned\x07 \u{9b}2J \r\n\t\u{7f}"),
            r"sha256:\u{1b}]0;pwned\u{7} \u{9b}2J \u{d}\u{a}\u{9}\u{7f}"
        );
        assert_eq!(escaped("a\u{202e}b\u{2066}c"), r"a\u{202e}b\u{2066}c");
        let plain = r"sha256:00 application/vnd.in-toto+json ünïcode \u{1b} ok";
        assert_eq!(escaped(plain), plain);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registry_strings_in_messages_are_escaped() {
        let s = Subject::new().await;
        let key = PrivateKey::generate();
        let mut entries: Vec<Value> = s
            .released(&key)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        let mut evil = entries[0].clone();
        evil["digest"] = Value::from("sha256:\x1b]0;pwned\x07");
        entries.push(evil);
        let mut envelope = crate::attest::Envelope::sign("x", b"{}", &key);
        envelope.payload_type = "\x1b[2Jtext/plain".into();
        let mut bundle = Bundle::sign(dsse::IN_TOTO, b"{}", &key);
        bundle.dsse_envelope = envelope;
        let odd = s.put(&bundle.to_json(), referrer::SIGN);
        entries.push(serde_json::to_value(&odd).unwrap());
        s.list(&entries);
        let pin = Pin {
            repository: s.repo.clone().into(),
            tag: "x-1.0.0".into(),
            version: semver::Version::new(1, 0, 0),
            digest: s.digest.clone(),
            platforms: [("linux/amd64".parse().unwrap(), s.digest.clone())].into(),
            tools: Default::default(),
            referrers: Default::default(),
        };
        let client = s.fake.client();
        let findings = verify_pin(&client, "a", &pin, &[], &[key.public()]).await;
        let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(messages.len(), 2, "{messages:#?}");
        assert!(
            messages[0].ends_with(
                r#"referrer sha256:\u{1b}]0;pwned\u{7} ignored: sha256 digests have exactly 64 hex digits, got "\u{1b}]0;pwned\u{7}""#
            ),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].ends_with(r"payload type \u{1b}[2Jtext/plain, not an in-toto statement"),
            "{}",
            messages[1]
        );
        assert!(!messages.iter().any(|m| m.contains('\x1b')));
    }

    #[test]
    fn an_index_pin_has_its_platforms_then_itself_a_single_image_itself() {
        let mut pin = Pin {
            repository: "r/x".parse().unwrap(),
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
