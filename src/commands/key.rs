//! `sunaba-images key generate`: a signing key pair for release
//! attestations (src/attest).

use super::context::Context;
use crate::attest::PrivateKey;
use crate::exit;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Generate an ECDSA P-256 key pair: the private key (PKCS#8 PEM, mode
    /// 0600, never printed) for CI's secret store, the public key to commit.
    ///
    /// Example: sunaba-images key generate --private-key ~/.config/sunaba/release.key
    Generate(GenerateArgs),
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images key generate --private-key ~/.config/sunaba/release.key"
)]
pub(crate) struct GenerateArgs {
    /// Where to write the private key. Keep it out of the repository: store
    /// its contents as a CI secret and let `release` read it from there.
    #[arg(long, value_name = "FILE")]
    pub private_key: PathBuf,
    /// Where to write the public key (commit it: verifiers read it).
    #[arg(long, value_name = "FILE", default_value = "keys/release.pub")]
    pub public_key: PathBuf,
    /// Replace existing key files (the old private key is lost).
    #[arg(long)]
    pub force: bool,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(_ctx: &Context, args: Args) -> exit::Result {
    let Action::Generate(args) = args.action;
    // Looked at first only so that a run refused for the public key
    // writes no private key; the writes themselves never replace a file
    // without --force, whatever appears meanwhile.
    if args.public_key.exists() && !args.force {
        return Err(anyhow::anyhow!(
            "{} exists already; pass --force to replace it",
            args.public_key.display()
        ));
    }
    let key = PrivateKey::generate();
    let public = key.public();
    // The private key first: a public key without its private one is
    // useless, the other way round it can be derived again.
    key.save(&args.private_key, args.force)?;
    public
        .save(&args.public_key, args.force)
        .with_context(|| format!("writing the public key {}", args.public_key.display()))?;
    if args.json {
        return super::write_json(&serde_json::json!({
            "schema": 1,
            "private_key": args.private_key,
            "public_key": args.public_key,
            "hint": public.hint(),
        }));
    }
    outln!(
        "wrote the private key {} (mode 0600; keep it out of the repository)",
        args.private_key.display()
    )?;
    outln!(
        "wrote the public key {} (commit it); its hint is {}",
        args.public_key.display(),
        public.hint()
    )?;
    Ok(())
}
