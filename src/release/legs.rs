//! A family built for several platforms, one leg per platform: each leg's
//! checked images pushed by digest to a repository ([`push`]), written down
//! in a legs file ([`LegsFile`]) that `release --legs` assembles the
//! indexes from. The legs may run on one machine (`build --platform all`)
//! or one per machine (a CI matrix leg per platform); the indexes are the
//! same either way, because an index is assembled from its children's
//! digests alone (`registry::assemble`).
//!
//! The same variant must report the same tool versions on every platform:
//! a fragment that installed another version on arm64 is a defect of the
//! image, not of the platform ([`tool_mismatches`]).

use super::publish::PublishError;
use crate::build::{Outcome, Summary};
use crate::engine::Engine;
use crate::fsutil::FsError;
use crate::name::Platform;
use crate::registry::{Client, Digest, Reference, Repository};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) const SCHEMA: u32 = 1;

/// Why legs could not be pushed, read, written or merged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LegsError {
    #[error("reading {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: not a legs file (written by `build --push-by-digest --metadata-file`)",
        .path.display()
    )]
    NotALegsFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: legs file schema {found} (this version reads {SCHEMA})", .path.display())]
    Schema { path: PathBuf, found: u32 },
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: FsError,
    },
    #[error("no legs file given")]
    NoFiles,
    /// Legs files of several repositories.
    #[error(
        "{file}: its legs are in {repo}, the first file's in {first}; give legs of one repository"
    )]
    OtherRepository {
        file: String,
        repo: Repository,
        first: Repository,
    },
    /// Two files disagree on the image of a variant and platform.
    #[error("{file}: {variant} {platform} is {digest}, another legs file says {other}")]
    Disagree {
        file: String,
        variant: String,
        platform: String,
        digest: String,
        other: String,
    },
    #[error("{variant} {platform}: not built, nothing pushed")]
    NotBuilt { variant: String, platform: Platform },
    #[error(transparent)]
    Tag(#[from] crate::name::Invalid),
    #[error(transparent)]
    Push(#[from] PublishError),
}

/// Legs that cannot be read, merged or pushed are an operational failure,
/// but for the errors they carry that say their own.
impl crate::exit::HasStatus for LegsError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            LegsError::Read { .. }
            | LegsError::NotALegsFile { .. }
            | LegsError::Schema { .. }
            | LegsError::Write { .. }
            | LegsError::NoFiles
            | LegsError::OtherRepository { .. }
            | LegsError::Disagree { .. }
            | LegsError::NotBuilt { .. } => Status::Failure,
            LegsError::Tag(e) => e.exit_status(),
            LegsError::Push(e) => e.exit_status(),
        }
    }
}

/// One platform image of one variant, pushed by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Leg {
    pub variant: String,
    /// Normalised (`linux/arm64`), also when read.
    pub platform: Platform,
    pub digest: Digest,
    /// `dev.sunaba.inputs` of the image.
    pub inputs: String,
    /// The local image ID the leg checked (its config's digest).
    pub image_id: String,
}

/// What `build --push-by-digest --metadata-file` writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LegsFile {
    pub schema: u32,
    /// Where the legs' images are (`REGISTRY/REPO`).
    pub repository: Repository,
    pub legs: Vec<Leg>,
}

impl LegsFile {
    /// The legs pushed to `repository`, in this schema.
    pub(crate) fn new(repository: &Repository, legs: Vec<Leg>) -> LegsFile {
        LegsFile {
            schema: SCHEMA,
            repository: repository.clone(),
            legs,
        }
    }

    pub(crate) fn load(path: &Path) -> Result<LegsFile, LegsError> {
        let text = std::fs::read_to_string(path).map_err(|source| LegsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: LegsFile =
            serde_json::from_str(&text).map_err(|source| LegsError::NotALegsFile {
                path: path.to_path_buf(),
                source,
            })?;
        if file.schema != SCHEMA {
            return Err(LegsError::Schema {
                path: path.to_path_buf(),
                found: file.schema,
            });
        }
        Ok(file)
    }

    pub(crate) fn save(&self, path: &Path) -> Result<(), LegsError> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a legs file serialises");
        bytes.push(b'\n');
        crate::fsutil::atomic_write(path, &bytes).map_err(|source| LegsError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Legs by variant, then by (normalised) platform.
pub(crate) type LegsByVariant = BTreeMap<String, BTreeMap<Platform, Leg>>;

/// The legs of several files, by variant then platform. Every file must
/// name the same repository; a variant and platform given twice must be
/// the same image.
pub(crate) fn merge(
    files: &[(String, LegsFile)],
) -> Result<(Repository, LegsByVariant), LegsError> {
    let Some((_, first)) = files.first() else {
        return Err(LegsError::NoFiles);
    };
    let mut out: LegsByVariant = BTreeMap::new();
    for (name, file) in files {
        if file.repository != first.repository {
            return Err(LegsError::OtherRepository {
                file: name.clone(),
                repo: file.repository.clone(),
                first: first.repository.clone(),
            });
        }
        for leg in &file.legs {
            let slot = out.entry(leg.variant.clone()).or_default();
            if let Some(seen) = slot.get(&leg.platform)
                && seen.digest != leg.digest
            {
                return Err(LegsError::Disagree {
                    file: name.clone(),
                    variant: leg.variant.clone(),
                    platform: leg.platform.to_string(),
                    digest: leg.digest.to_string(),
                    other: seen.digest.to_string(),
                });
            }
            slot.insert(leg.platform.clone(), leg.clone());
        }
    }
    Ok((first.repository.clone(), out))
}

pub(crate) use crate::build::pipeline::tool_mismatches;

/// Pushes every image `summaries` ended with to `repo` (a tag per
/// variant, platform and inputs, `python-arm64-0123456789ab`: the engine
/// can only push a tag, and this one names exactly one image) and reads
/// each back by the digest the engine reports: it must be an image
/// manifest whose config is the checked image.
pub(crate) async fn push(
    engine: &dyn Engine,
    client: &Client,
    repo: &Repository,
    summaries: &[Summary],
    progress: &dyn Fn(String),
) -> Result<Vec<Leg>, LegsError> {
    let mut legs = Vec::new();
    for summary in summaries {
        let platform = &summary.platform;
        for r in &summary.results {
            let (reference, image_id, inputs) = match &r.outcome {
                Outcome::Built {
                    reference,
                    image_id,
                    inputs,
                    ..
                }
                | Outcome::Skipped {
                    reference,
                    image_id,
                    inputs,
                    ..
                } => (reference, image_id, inputs),
                _ => {
                    return Err(LegsError::NotBuilt {
                        variant: r.variant.clone(),
                        platform: platform.clone(),
                    });
                }
            };
            let tag = format!(
                "{}-{}-{}",
                r.variant,
                platform.slug(),
                crate::family::short_hex(inputs)
            );
            let target = Reference::with_tag(repo, &tag)?;
            let digest = crate::release::publish::push_checked(
                engine,
                client,
                reference,
                crate::release::publish::Target::Tag(&target),
                image_id,
            )
            .await?
            .digest;
            progress(format!("{} {platform}: {repo}@{digest}", r.variant));
            legs.push(Leg {
                variant: r.variant.clone(),
                platform: platform.clone(),
                digest,
                inputs: inputs.clone(),
                image_id: image_id.clone(),
            });
        }
    }
    Ok(legs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(variant: &str, platform: &str, n: u8) -> Leg {
        Leg {
            variant: variant.into(),
            platform: platform.parse().unwrap(),
            digest: Digest::sha256(&[n]),
            inputs: "sha256:i".into(),
            image_id: "sha256:c".into(),
        }
    }

    #[test]
    fn legs_files_merge_by_variant_and_platform_and_disagreements_are_refused() {
        let file = |repo: &str, legs: Vec<Leg>| LegsFile {
            schema: SCHEMA,
            repository: format!("127.0.0.1:5000/{repo}").parse().unwrap(),
            legs,
        };
        let a = file("r/x", vec![leg("base", "linux/amd64", 1)]);
        let b = file(
            "r/x",
            vec![leg("base", "linux/arm64", 2), leg("base", "linux/amd64", 1)],
        );
        let (repo, merged) = merge(&[("a".into(), a.clone()), ("b".into(), b)]).unwrap();
        assert_eq!(repo.to_string(), "127.0.0.1:5000/r/x");
        let platforms: Vec<String> = merged["base"].keys().map(ToString::to_string).collect();
        assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);

        let other = file("r/y", vec![]);
        let err = merge(&[("a".into(), a.clone()), ("c".into(), other)]).unwrap_err();
        assert!(matches!(&err, LegsError::OtherRepository { file, .. } if file == "c"));
        assert_eq!(
            err.to_string(),
            "c: its legs are in 127.0.0.1:5000/r/y, the first file's in 127.0.0.1:5000/r/x; \
             give legs of one repository"
        );
        let clash = file("r/x", vec![leg("base", "linux/amd64", 9)]);
        let err = merge(&[("a".into(), a), ("d".into(), clash)]).unwrap_err();
        assert!(
            matches!(&err, LegsError::Disagree { file, variant, .. } if file == "d" && variant == "base"),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("d: base linux/amd64 is sha256:"),
            "{err}"
        );
        assert!(matches!(merge(&[]), Err(LegsError::NoFiles)));
    }

    #[test]
    fn a_legs_file_round_trips_and_a_foreign_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("legs.json");
        let file = LegsFile {
            schema: SCHEMA,
            repository: "127.0.0.1:5000/r/x".parse().unwrap(),
            legs: vec![leg("base", "linux/arm64", 3)],
        };
        file.save(&path).unwrap();
        assert_eq!(LegsFile::load(&path).unwrap(), file);
        std::fs::write(&path, "{}").unwrap();
        let err = LegsFile::load(&path).unwrap_err();
        assert!(matches!(&err, LegsError::NotALegsFile { .. }), "{err}");
        assert!(err.to_string().contains("not a legs file"), "{err}");
        let mut newer = file.clone();
        newer.schema = SCHEMA + 1;
        std::fs::write(&path, serde_json::to_vec(&newer).unwrap()).unwrap();
        let err = LegsFile::load(&path).unwrap_err();
        assert!(matches!(&err, LegsError::Schema { found, .. } if *found == SCHEMA + 1));
        let err = LegsFile::load(&dir.path().join("none.json")).unwrap_err();
        assert!(matches!(&err, LegsError::Read { .. }), "{err}");
        // Under a file, where no directory can be made.
        let err = file.save(&path.join("legs.json")).unwrap_err();
        assert!(matches!(&err, LegsError::Write { .. }), "{err}");
    }

    #[test]
    fn legs_that_cannot_be_used_are_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let not_built = LegsError::NotBuilt {
            variant: "base".into(),
            platform: "linux/amd64".parse().unwrap(),
        };
        assert_eq!(not_built.exit_status(), Status::Failure);
        assert_eq!(LegsError::NoFiles.exit_status(), Status::Failure);
        let tag = LegsError::Tag("-x".parse::<Repository>().unwrap_err());
        assert_eq!(tag.exit_status(), Status::Usage, "the name's own");
    }
}
