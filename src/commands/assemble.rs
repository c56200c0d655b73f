//! `sunaba-images assemble TARGET CHILD…`: the index of platform images
//! already in TARGET's repository, assembled by this client (see
//! `crate::registry::assemble`: entries from each child's config, fixed
//! order and serialisation, OCI when any child is) and put at TARGET.
//! Re-assembling the same children gives the same bytes, so an index that
//! is already there is not put again.

use super::ArgsError;
use super::context::{Context, RegistryOptions};
use crate::exit;
use crate::registry::{ChildRef, Digest, IndexReport, Reference, Repository};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images assemble 127.0.0.1:5000/sunaba/sandbox:python 127.0.0.1:5000/sunaba/sandbox:python-amd64 127.0.0.1:5000/sunaba/sandbox:python-arm64\n  sunaba-images assemble 127.0.0.1:5000/sunaba/sandbox:python 127.0.0.1:5000/sunaba/sandbox:python-amd64 127.0.0.1:5000/sunaba/sandbox:python-arm64 --write"
)]
pub(crate) struct Args {
    /// Where the index goes: `REGISTRY/REPO:TAG`, or `REGISTRY/REPO` to put it
    /// by its digest only.
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// The platform images, in TARGET's repository: `sha256:…`, or a
    /// reference there (`REPO@sha256:…`, `REPO:TAG`).
    #[arg(value_name = "CHILD", required = true)]
    pub children: Vec<String>,
    /// Put the index at TARGET (default: assemble it and print its digest,
    /// putting nothing).
    #[arg(long)]
    pub write: bool,
    /// Print JSON (digest, media type, platforms).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let target: Reference = args.target.parse()?;
    if target.digest().is_some() {
        return Err(ArgsError::DigestTarget(target).into());
    }
    let repo = target.repo().clone();
    let children = children(&args.children, &repo)?;
    let client = ctx.registry(&args.registry)?;
    let (index, put) = ctx.block_on(client.assemble_at(&target, children, !args.write))??;
    if args.json {
        super::write_json(&IndexReport::new(&target, &index, put))?;
    } else {
        outln!("{}", index.digest)?;
        let platforms: Vec<String> = index.platforms.iter().map(|(p, _)| p.to_string()).collect();
        eprintln!(
            "assemble: {target}: {} of {} platform image(s) ({}){}",
            index.media_type,
            platforms.len(),
            platforms.join(", "),
            if put {
                ""
            } else if !args.write {
                ", a plan: nothing put (--write puts it)"
            } else {
                ", already there"
            }
        );
    }
    Ok(())
}

/// The children as named: a digest or a reference in the target's own
/// repository (an index lists manifests of the repository it lives in).
fn children(texts: &[String], repo: &Repository) -> Result<Vec<ChildRef>, ArgsError> {
    texts
        .iter()
        .map(|c| {
            if let Ok(d) = c.parse::<Digest>() {
                return Ok(ChildRef::Digest(d));
            }
            let r: Reference = c.parse()?;
            if r.repo() != repo {
                return Err(ArgsError::ChildElsewhere {
                    child: c.clone(),
                    repo: repo.clone(),
                });
            }
            Ok(match r.digest() {
                Some(d) => ChildRef::Digest(d.clone()),
                None => ChildRef::Tag(r),
            })
        })
        .collect()
}
