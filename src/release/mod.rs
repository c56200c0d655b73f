//! `release`: publishing the whole family as one transaction — either every
//! image the plan names is published, tagged and pinned, or the registry's
//! release tags and image_pins.json are as they were (or, after a crash,
//! `--resume ID` finishes the job without repeating a finished write).
//!
//! # Steps
//!
//! 1. **Plan** (`plan.rs`, pure): each variant's checked image against its
//!    current pin gives the next version (the inventory rule of `version`),
//!    the immutable tag `<variant>-X.Y.Z` and the moving tags (`tags.rs`).
//!    A check that did not pass refuses the whole release.
//! 2. **Stage** (`stage.rs`): every image put in the release repository by
//!    digest, untagged, its version stamped on the config; a local image is pushed by this client, its
//!    layers compressed here (`publish.rs`, with `crate::image::compress`); a multi-platform source (an index) is stamped per
//!    platform and its index assembled anew from the stamped images.
//! 3. **Verify** (`promote.rs`): every staged manifest read back by digest
//!    and gated; every release tag looked at before any moves — an immutable
//!    tag at another digest stops the release with zero tag writes, and the
//!    journal records where each moving tag pointed.
//! 4. **Promote**: immutable tags first, then moving ones, each a manifest
//!    PUT of the exact staged bytes (a tag already there costs its HEAD).
//! 5. **Attach** (`attach.rs`), with `--signing-key FILE` or
//!    `--signing-key-env NAME` only: for every released platform image a
//!    signed signature, SLSA provenance, test result (from its check
//!    record) and SPDX SBOM (from its layers in the registry), and for an
//!    index a signature and provenance, each a Sigstore bundle in an OCI
//!    1.1 referrer manifest whose `subject` is the image; listed in the
//!    `sha256-<hex>` fallback tag where the registry has no referrers API.
//!    No pinned digest changes. Journaled per image: a resume skips what is
//!    attached and redoes the rest with the same bytes (deterministic
//!    statements and signatures), never listing a referrer twice. Without
//!    a key the step does nothing (the plan says so).
//! 6. **Pin** (`pin.rs`): image_pins.json from the staged digests (and
//!    each alias's referrers), under its lock, replaced atomically, only
//!    after every tag was written and every referrer attached.
//! 7. **Notes** (`notes.rs`): Markdown per variant for the GitHub release.
//!
//! Nothing is ever DELETEd: on distribution a manifest DELETE removes every
//! tag of the digest. `--rollback ID` re-points moving tags instead.
//!
//! # The journal and the release id
//!
//! `target/sunaba-release/<id>.json` (`journal.rs`) holds the plan and
//! every step's result, replaced atomically after each. The id is the UTC
//! time the plan was made, to the millisecond, and four random hex digits
//! (`20261201T075300.412Z-3f9a`; releases before had no milliseconds):
//! sortable, and unique on one machine. An id that enters from outside
//! (`--resume`, `--rollback`, a file name in the directory) is parsed
//! ([`parse_id`]) before it names a file. A new
//! release refuses to start while an earlier one has written tags without
//! finishing (resume or roll it back first).
//!
//! # Staging writes no tag
//!
//! A staged image is put by digest (`PUT /v2/<name>/manifests/sha256:…`;
//! a multi-platform index's platform images first, then the index), so
//! the repository's tag list holds only what users pull: the immutable and
//! moving tags of finished releases. A failed, resumed or rolled-back
//! release adds no other tag, and nothing has to be DELETEd to clean up.
//! The journal is what makes staging resumable: it records each staged
//! digest, verify and promote read the staged manifests by that digest, and
//! a resumed release stages the same digest again (the stamp is
//! deterministic) and finds it there. Until a tag names it, a staged
//! manifest is untagged, so a registry garbage collection run with
//! `--delete-untagged` between the stage and a resume removes it: the
//! resume then stops at verify ("the staged image is not there"), and
//! `--rollback` plus a new release starts over with nothing tagged.
//!
//! Releases before this staged at `_staging-<variant>-X.Y.Z` tags; their
//! journals still load (the field is ignored) and resume by digest. The
//! leading `_` of those tags is one no variant name can start with, so
//! neither `pin` nor the moving-tag rules read one as a release.

pub(crate) mod attach;
pub(crate) mod claims;
pub(crate) mod export;
pub(crate) mod gather;
pub(crate) mod journal;
pub(crate) mod legs;
pub(crate) mod notes;
pub(crate) mod pin;
pub(crate) mod plan;
pub(crate) mod promote;
pub(crate) mod publish;
pub(crate) mod run;
pub(crate) mod stage;
pub(crate) mod tags;

/// A new release id: the UTC time to the millisecond and four random hex
/// digits. Two releases made in one second still sort in the order they
/// were made (the journal's `unfinished` list and the tests rely on it).
pub(crate) fn new_id(now: std::time::SystemTime) -> String {
    let stamp = humantime::format_rfc3339_millis(now).to_string();
    let compact: String = stamp.chars().filter(|c| *c != '-' && *c != ':').collect();
    format!("{compact}-{:04x}", rand::random::<u16>())
}

/// A text that is not a release id.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{shown}` is not a release id (ids look like 20261202T051500.123Z-1a2b, or \
     20261202T051500Z-1a2b before milliseconds; the journals in target/sunaba-release/ are \
     named by them)"
)]
pub(crate) struct NotAnId {
    shown: String,
}

/// `text` when it is a release id as [`new_id`] makes them (with or
/// without the milliseconds older releases lack). Checked where an id
/// enters (`--resume`, `--rollback`, a journal's file name): it names a
/// file in the journal directory, so nothing else may pass (no `/`, no
/// `..`, no other directory's `.json`).
pub(crate) fn parse_id(text: &str) -> Result<String, NotAnId> {
    // ASCII digits only (`\d` would take any script's), the whole text.
    static ID: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[0-9]{8}T[0-9]{6}(\.[0-9]{3})?Z-[0-9a-f]{4}$").expect("id regex")
    });
    if ID.is_match(text) {
        Ok(text.to_string())
    } else {
        Err(NotAnId {
            shown: crate::image::entries::shown(text),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn ids_sort_by_time_to_the_millisecond() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let id = super::new_id(t);
        assert!(id.starts_with("20261118T110640.000Z-"), "{id}");
        assert_eq!(id.len(), "20261118T000000.000Z-abcd".len(), "{id}");
        assert!(super::new_id(t + Duration::from_millis(1)) > id);
        assert!(super::new_id(t + Duration::from_secs(60)) > id);
        assert_eq!(super::parse_id(&id).unwrap(), id);
    }

    #[test]
    fn an_id_is_its_shape_and_nothing_else() {
        for good in ["20261202T051500Z-1a2b", "20261202T051500.123Z-00ff"] {
            assert_eq!(super::parse_id(good).unwrap(), good);
        }
        for bad in [
            "",
            "../../etc/passwd",
            "20261202T051500Z-1a2b/../x",
            "20261202T051500Z-1A2B",
            "20261202T051500Z-1a2",
            "20261202T051500.12Z-1a2b",
            "20261202T0515Z-1a2b",
            "2026120T051500Z-1a2b",
            "20261202T051500-1a2b",
            "20261202T051500Z-1a2b.json",
            "20261202T051500Z-1a2b\n",
        ] {
            assert!(super::parse_id(bad).is_err(), "{bad:?} passed");
        }
        let e = super::parse_id("x\u{1b}[2J").unwrap_err().to_string();
        assert!(e.starts_with("`x\\u{1b}[2J` is not a release id"), "{e}");
    }
}
