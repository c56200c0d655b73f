//! `sunaba-images verify-attestations ALIAS|REF --key PUB…`: the signed
//! referrers of one pinned alias (or any image by reference) checked with
//! the trusted public keys, as `pins verify --key` checks every pin
//! (`crate::pins::attestations`). Exit 2 naming what is missing or wrong;
//! referrers no trusted key signed are listed as ignored (warnings).

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::exit;
use crate::pins::PinsFile;
use crate::pins::attestations;
use crate::pins::verify::Severity;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images verify-attestations python --key keys/release.pub\n  sunaba-images verify-attestations python --key keys/release.pub --key keys/release-2027.pub\n  sunaba-images verify-attestations 127.0.0.1:5000/sunaba/sandbox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef --key keys/release.pub"
)]
pub(crate) struct Args {
    /// A pinned alias, or an image reference (`REPO:TAG`, `REPO@sha256:…`).
    #[arg(value_name = "ALIAS|REF")]
    pub target: String,
    /// An SPKI PEM public key the attestations may be signed with; give
    /// it again for each trusted key (a key being rotated in or out).
    #[arg(long, value_name = "PUB", required = true)]
    pub key: Vec<PathBuf>,
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
    let keys = args
        .key
        .iter()
        .map(|path| crate::attest::PublicKey::load(path))
        .collect::<Result<Vec<_>, _>>()?;
    let path = ctx.pins_path(&args.file);
    let loaded = PinsFile::load(&path)?;
    let pinned = (loaded.as_ref()).and_then(|(f, _)| f.images.get(&args.target).cloned());
    // A pinned alias is held to what images.toml says its variant owes
    // (its smoke suites); without the file that policy cannot be read, and
    // checking less than it says would pass what it forbids.
    let smoke = match &pinned {
        Some(_) => {
            let specs = ctx.alias_specs().with_context(|| {
                format!(
                    "cannot read the smoke suites {} owes from {}",
                    args.target,
                    ctx.manifest_path().display()
                )
            })?;
            let spec = specs.into_iter().find(|s| s.alias == args.target);
            spec.map(|s| s.smoke).unwrap_or_default()
        }
        None => Vec::new(),
    };
    let client = ctx.registry(&args.registry)?;
    let target = match pinned {
        Some(pin) => Target::Pinned(pin),
        None => Target::Named(args.target.parse()?),
    };
    let (pin, findings) = ctx.block_on(async {
        let pin = match target {
            Target::Pinned(pin) => pin,
            Target::Named(reference) => attestations::pin_of_reference(&client, &reference).await?,
        };
        let findings = attestations::verify_pin(&client, &args.target, &pin, &smoke, &keys).await;
        anyhow::Ok((pin, findings))
    })??;
    let count = |severity| findings.iter().filter(|f| f.severity == severity).count();
    let (problems, errors) = (count(Severity::Problem), count(Severity::Error));
    let ok = problems + errors == 0;
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
            "target": args.target, "ok": ok, "subjects": subjects,
            "findings": findings,
        }))?;
    } else {
        for f in &findings {
            outln!("{f}")?;
        }
    }
    if ok {
        if !args.json {
            let hints: Vec<String> = keys.iter().map(|k| k.hint()).collect();
            let keys = match hints.as_slice() {
                [one] => format!("the key {one}"),
                many => format!("one of the keys {}", many.join(", ")),
            };
            outln!(
                "ok: {}: the attestations of {subjects} image(s) verified with {keys}",
                args.target
            )?;
        }
        return Ok(());
    }
    if errors == 0 {
        eprintln!("verify-attestations: {problems} problem(s)");
    }
    Ok(exit::Reported::verdict(problems, errors)?)
}

/// What `verify-attestations` checks: a pinned alias, or an image named by
/// reference.
enum Target {
    Pinned(crate::pins::Pin),
    Named(crate::registry::Reference),
}
