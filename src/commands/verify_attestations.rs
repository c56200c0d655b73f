//! `sunaba-images verify-attestations ALIAS|REF --key PUB`: the signed
//! referrers of one pinned alias (or any image by reference) checked with a
//! public key, as `pins verify --key` checks every pin
//! (`crate::pins::attestations`). Exit 2 naming what is missing or wrong.

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::exit;
use crate::pins::PinsFile;
use crate::pins::attestations;
use crate::pins::verify::Severity;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images verify-attestations python --key keys/release.pub\n  sunaba-images verify-attestations 127.0.0.1:5000/sunaba/sandbox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef --key keys/release.pub"
)]
pub(crate) struct Args {
    /// A pinned alias, or an image reference (`REPO:TAG`, `REPO@sha256:…`).
    #[arg(value_name = "ALIAS|REF")]
    pub target: String,
    /// The SPKI PEM public key the attestations must be signed with.
    #[arg(long, value_name = "PUB")]
    pub key: PathBuf,
    /// Print `{"schema", "target", "ok", "subjects", "findings": […]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let key = crate::attest::PublicKey::load(&args.key)?;
    let (client, rt) = (ctx.registry(&args.registry)?, super::context::runtime()?);
    let path = ctx.pins_path(&args.file);
    let loaded = PinsFile::load(&path)?;
    let pinned = (loaded.as_ref()).and_then(|(f, _)| f.images.get(&args.target).cloned());
    let pin = match pinned {
        Some(pin) => pin,
        None => {
            let reference = args.target.parse()?;
            rt.block_on(attestations::pin_of_reference(&client, &reference))?
        }
    };
    // The suites the alias's variant owes, where images.toml declares it.
    let specs = ctx.alias_specs().unwrap_or_default();
    let smoke = specs.iter().find(|s| s.alias == args.target);
    let smoke = smoke.map(|s| s.smoke.as_slice()).unwrap_or_default();
    let findings = attestations::verify_pin(&client, &rt, &args.target, &pin, smoke, &key);
    if args.output.github() {
        let text = loaded.as_ref().map_or("", |(_, text)| text.as_str());
        let files = crate::pins::github::Files {
            pins: (&path, text),
            manifest: None,
        };
        let verb = "verify-attestations";
        let found = crate::pins::github::annotations(verb, &findings, &files);
        let ok = format!("The attestations of {} verified.", args.target);
        super::report_findings(found, &ok, args.json)?;
    }
    let subjects = attestations::subjects(&pin).len();
    if args.json {
        super::write_json(&serde_json::json!({
            "target": args.target, "ok": findings.is_empty(), "subjects": subjects,
            "findings": findings,
        }))?;
    } else {
        for f in &findings {
            outln!("{f}")?;
        }
    }
    if findings.is_empty() && !args.json {
        outln!(
            "ok: {}: the attestations of {subjects} image(s) verified with the key {}",
            args.target,
            key.hint()
        )?;
        return Ok(());
    }
    if findings.is_empty() {
        return Ok(());
    }
    if findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(exit::Error::reported(exit::Status::Failure));
    }
    eprintln!("verify-attestations: {} problem(s)", findings.len());
    Err(exit::Error::gate())
}
