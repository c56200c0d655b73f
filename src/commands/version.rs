use super::Global;
use super::pin::{PinsPath, family};
use crate::pins::registry_source::RegistrySource;
use crate::pins::source::ImageSource;
use crate::pins::{Pin, PinsFile};
use crate::policy::{self, CHECK_LABEL, CheckLabel, INPUTS_LABEL, parse_tag};
use anyhow::Context;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The variant the image was built for.
    pub variant: String,
    /// The newly built image (`host/repo:tag` or `host/repo@sha256:…`).
    #[arg(long, value_name = "REF")]
    pub image: String,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsPath,
}

pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let fam = family(global, &args.file)?;
    fam.manifest.variant(&args.variant)?;
    let source = RegistrySource::connect(&fam.settings)?;
    let (repository, reference) = RegistrySource::split_reference(&args.image)?;

    let image = source.inspect(&repository, &reference)?;
    let labels = image
        .primary()
        .map(|i| i.labels.clone())
        .unwrap_or_default();
    let record: CheckLabel = serde_json::from_str(labels.get(CHECK_LABEL).with_context(|| {
        format!(
            "{}: no {CHECK_LABEL} label, so no tool inventory; run `sunaba-images check` on it first",
            args.image
        )
    })?)
    .with_context(|| format!("{}: unreadable {CHECK_LABEL} label", args.image))?;

    // The variant's current version: the pin of its first alias.
    let pins = PinsFile::load(&fam.pins_path)?.unwrap_or_default().0;
    let current: Option<(&String, &Pin)> = fam
        .specs
        .iter()
        .filter(|s| s.variant == args.variant)
        .find_map(|s| pins.images.get_key_value(&s.alias))
        .filter(|(_, p)| parse_tag(&args.variant, &p.tag).is_some());

    let inputs_changed = match current {
        None => true,
        Some((_, pin)) if pin.digest == image.digest => false,
        Some((_, pin)) => {
            let pinned = source
                .inspect(&pin.repository, pin.digest.as_str())
                .with_context(|| format!("cannot read the pinned image {}", pin.reference()))?;
            let old = pinned
                .primary()
                .and_then(|i| i.labels.get(INPUTS_LABEL).cloned());
            let new = labels.get(INPUTS_LABEL).cloned();
            // Without input hashes on both sides, a different digest is a change.
            old.is_none() || new.is_none() || old != new
        }
    };
    let next = policy::next_version(
        current.map(|(_, p)| (&p.version, &p.tools)),
        &record.tools,
        inputs_changed,
    );

    if args.json {
        let out = serde_json::json!({
            "variant": args.variant,
            "image": args.image,
            "pinned_as": current.map(|(a, _)| a),
            "check_status": record.status,
            "inputs_changed": inputs_changed,
            "current": next.current,
            "next": next.next,
            "bump": next.bump,
            "tools": next.delta.changes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    match (&next.current, &next.next) {
        (None, Some(n)) => println!(
            "{}: {n} (first version: no alias of {} is pinned yet)",
            args.variant, args.variant
        ),
        (Some(c), Some(n)) => println!(
            "{}: {c} -> {n} ({} release; pinned as {})",
            args.variant,
            next.bump,
            current.map(|(a, _)| a.as_str()).unwrap_or("-")
        ),
        (Some(c), None) => println!(
            "{}: no new version: inputs and tools unchanged since {c}",
            args.variant
        ),
        (None, None) => unreachable!("a first image always gets a version"),
    }
    if next.current.is_some() && next.delta.changes.is_empty() && inputs_changed {
        println!("    no tool changed; other inputs did (patch)");
    }
    for t in &next.delta.changes {
        println!("    {t}");
    }
    if record.status != "pass" {
        eprintln!(
            "warning: the image's check status is {:?}: it cannot be pinned until it passes",
            record.status
        );
    }
    Ok(ExitCode::SUCCESS)
}
