//! One module per verb, each with its `Args` and `run()`. Commands depend on
//! the library and on [`context`] (what they share), never on each other nor
//! on the command line above them ([`crate::cli`] parses and dispatches).
//! They print results to stdout through [`outln!`]/[`out!`] (a closed stdout
//! is an error `main` ends quietly on) and return an [`exit::Error`] for
//! every failure; they never print `error:` themselves, and never choose an
//! exit status: the error's kind does ([`ERROR_KINDS`]). A command that
//! printed its own report of what went wrong ends with [`exit::Reported`].

/// Writes a line to stdout; `?` it (a closed stdout is an error).
macro_rules! outln {
    () => {
        $crate::commands::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::commands::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes text to stdout as it is; `?` it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::commands::write_stdout(format_args!($($arg)*))
    };
}

pub(crate) mod assemble;
pub(crate) mod build;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod compose;
pub(crate) mod context;
pub(crate) mod detect;
pub(crate) mod engine;
pub(crate) mod key;
pub(crate) mod lock;
pub(crate) mod man;
pub(crate) mod new;
pub(crate) mod next_version;
pub(crate) mod outdated;
pub(crate) mod pin;
pub(crate) mod pins;
pub(crate) mod plan;
pub(crate) mod release;
pub(crate) mod render;
pub(crate) mod resolve;
pub(crate) mod run;
pub(crate) mod sbom;
pub(crate) mod tags;
pub(crate) mod update_base;
pub(crate) mod verify_attestations;
pub(crate) mod version;

use crate::exit;
use crate::name::{Reference, Repository};
use context::Context;
use std::path::PathBuf;

/// A command line clap accepts but the verb cannot carry out as asked (a
/// combination clap cannot express): a usage error, found before anything
/// is loaded, built or asked of a registry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgsError {
    /// `pin --to` with other than one alias.
    #[error("--to picks one version of one variant: name exactly one alias")]
    ToWithoutOneAlias,
    /// `check --image` with several variants.
    #[error("--image checks one image: name at most one variant")]
    ImageWithVariants,
    /// `assemble` to a digest: the index's digest is what assembling makes.
    #[error(
        "{0}: name a tag (or just the repository), not a digest: the index's digest is known \
         once it is assembled"
    )]
    DigestTarget(Reference),
    /// `assemble` of a child in another repository than the target's.
    #[error(
        "{child}: not in {repo}; push it there first (an index names images of its own \
         repository)"
    )]
    ChildElsewhere { child: String, repo: Repository },
    /// `run --workspace` of something that is not a directory.
    #[error("the workspace {} is not a directory", .0.display())]
    WorkspaceNotADirectory(PathBuf),
    /// Text given as a name that is no name.
    #[error(transparent)]
    Invalid(#[from] crate::name::Invalid),
}

impl exit::HasStatus for ArgsError {
    fn exit_status(&self) -> exit::Status {
        match self {
            ArgsError::ToWithoutOneAlias
            | ArgsError::ImageWithVariants
            | ArgsError::DigestTarget(_)
            | ArgsError::ChildElsewhere { .. }
            | ArgsError::WorkspaceNotADirectory(_) => exit::Status::Usage,
            ArgsError::Invalid(e) => e.exit_status(),
        }
    }
}

/// Every kind of error that says its own exit status ([`exit::HasStatus`]),
/// for [`exit::report`] to recognise in a chain: the outermost cause it
/// recognises decides. The table is here, at the top, because `exit` is
/// below every module that owns one of these types and cannot name them
/// (`every_error_that_says_its_status_is_in_the_table` keeps it whole).
pub(crate) const ERROR_KINDS: &[exit::Recognise] = &[
    exit::recognise::<ArgsError>,
    exit::recognise::<crate::name::Unknown>,
    exit::recognise::<crate::name::Invalid>,
    exit::recognise::<crate::name::InvalidDigest>,
    exit::recognise::<crate::process::ProcessError>,
    exit::recognise::<crate::engine::EngineError>,
    exit::recognise::<crate::registry::Error>,
    exit::recognise::<crate::manifest::UpstreamError>,
    exit::recognise::<crate::run_contract::ContractError>,
    exit::recognise::<crate::pins::PinsError>,
    exit::recognise::<crate::locks::generate::SelectError>,
    exit::recognise::<crate::check::CheckError>,
    exit::recognise::<crate::build::BuildError>,
    exit::recognise::<crate::build::pipeline::PipelineError>,
    exit::recognise::<crate::image::local::LocalError>,
    exit::recognise::<crate::attest::AttestError>,
    exit::recognise::<crate::release::journal::JournalError>,
    exit::recognise::<crate::release::plan::PlanError>,
    exit::recognise::<crate::release::plan::PlanErrors>,
    exit::recognise::<crate::release::pin::PinError>,
    exit::recognise::<crate::release::promote::PromoteError>,
    exit::recognise::<crate::release::publish::PublishError>,
    exit::recognise::<crate::release::stage::StageError>,
    exit::recognise::<crate::release::legs::LegsError>,
    exit::recognise::<crate::release::gather::GatherError>,
    exit::recognise::<crate::release::attach::AttachError>,
    exit::recognise::<crate::release::run::ReleaseError>,
    exit::recognise::<crate::rebuild::RebuildError>,
    exit::recognise::<crate::compose::ComposeError>,
];

/// The verb being run (`pins verify`), whose schema its `--json` names.
static VERB: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The path of the verb being run (`pins verify`).
fn running_verb() -> &'static str {
    VERB.get().map_or("", String::as_str)
}

/// The context of a run of the verb `verb` (its path, `pins verify`), for
/// its command ([`crate::cli::Cli::run`] dispatches).
pub(crate) fn begin(
    verb: String,
    manifest: std::path::PathBuf,
    profile: Option<String>,
) -> Context {
    let _ = VERB.set(verb);
    Context::new(manifest, profile)
}

/// Writes to stdout, flushing line by line. A reader that went away is
/// [`exit::StdoutError::Closed`], which `main` ends quietly on.
pub(crate) fn write_stdout(args: std::fmt::Arguments) -> Result<(), exit::StdoutError> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args)?;
    Ok(stdout.flush()?)
}

/// The schema id the `--json` of verb `path` (`pins verify`) names
/// (docs/cli.md, "Output"): the verb and the version of its shape, which
/// goes up only when a key is removed, renamed or retyped.
pub(crate) fn schema_id(path: &str) -> String {
    format!("sunaba-images/{}/v1", path.replace(' ', "-"))
}

/// The `--json` report `value` (an object) as one pretty JSON document on
/// stdout, its first key the running verb's `schema`.
pub(crate) fn write_json(value: &impl serde::Serialize) -> exit::Result {
    write_json_as(running_verb(), value)
}

/// [`write_json`] of a report whose schema is `verb`'s, not the running
/// verb's (a mode of a verb with a shape of its own: `compose compare`).
pub(crate) fn write_json_as(verb: &str, value: &impl serde::Serialize) -> exit::Result {
    let doc = stamped(verb, serde_json::to_value(value)?)?;
    outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

/// `report` with `schema` as its first key.
fn stamped(verb: &str, report: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let serde_json::Value::Object(fields) = report else {
        anyhow::bail!("internal error: the --json report of `{verb}` is not a JSON object");
    };
    let mut doc = serde_json::Map::new();
    doc.insert("schema".into(), schema_id(verb).into());
    doc.extend(fields.into_iter().filter(|(k, _)| k != "schema"));
    Ok(doc.into())
}

/// Prints GitHub annotations where the runner reads them: stdout, or stderr
/// when stdout holds JSON (workflow commands are read from both streams).
pub(crate) fn annotate(annotations: Vec<crate::github::Annotation>, json: bool) -> exit::Result {
    for a in annotations {
        if json {
            eprintln!("{a}");
        } else {
            outln!("{a}")?;
        }
    }
    Ok(())
}

/// A gate verb's report to a GitHub Actions runner (`--format github`): its
/// annotations, most important first (on stderr when stdout holds JSON),
/// and its step summary appended to `$GITHUB_STEP_SUMMARY`.
pub(crate) fn report_gate(
    annotations: Vec<crate::github::Annotation>,
    summary: &str,
    json: bool,
) -> exit::Result {
    use anyhow::Context as _;
    annotate(crate::github::ordered(annotations), json)?;
    crate::github::summary(summary).context("writing the step summary")?;
    Ok(())
}

/// A gate's findings to a GitHub Actions runner: [`report_gate`] with the
/// step summary headed by the running verb (`ok` when nothing was found).
pub(crate) fn report_findings(
    annotations: Vec<crate::github::Annotation>,
    ok: &str,
    json: bool,
) -> exit::Result {
    let summary = crate::github::gate_summary(running_verb(), &annotations, ok);
    report_gate(annotations, &summary, json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{HasStatus, Status};

    /// The types `impl … HasStatus for T` names in the sources under `src`
    /// (`exit`'s own excepted), as written there.
    fn errors_with_a_status(src: &std::path::Path) -> Vec<String> {
        let mut files = Vec::new();
        crate::structure_tests::sources(src, &mut files);
        let mut found = Vec::new();
        for path in files.iter().filter(|p| !p.ends_with("exit.rs")) {
            let text = std::fs::read_to_string(path).unwrap();
            for line in text.lines().map(str::trim_start) {
                if let Some(rest) = line.strip_prefix("impl ")
                    && let Some((_, ty)) = rest.split_once("HasStatus for ")
                {
                    let ty = ty.trim_end_matches(" {").trim();
                    found.push(format!(
                        "{}: {ty}",
                        path.strip_prefix(src).unwrap().display()
                    ));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn every_error_that_says_its_status_is_in_the_table() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let table = std::fs::read_to_string(src.join("commands/mod.rs")).unwrap();
        let table = table
            .split_once("ERROR_KINDS")
            .and_then(|(_, rest)| rest.split_once("];"))
            .map(|(entries, _)| entries)
            .unwrap();
        let all = errors_with_a_status(&src);
        assert!(all.len() >= ERROR_KINDS.len(), "{all:?}");
        let missing: Vec<&String> = (all.iter())
            .filter(|found| {
                let ty = found.rsplit(' ').next().unwrap();
                !table.contains(&format!("::{ty}>")) && !table.contains(&format!("<{ty}>"))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "say their status but exit::report would not recognise them (add each to \
             ERROR_KINDS):\n{missing:#?}"
        );
        assert_eq!(all.len(), ERROR_KINDS.len(), "one entry per type: {all:#?}");
    }

    #[test]
    fn a_kind_in_the_table_decides_through_any_context_and_its_wrapper_delegates() {
        use exit::Status;
        let unknown = crate::name::Unknown::new("variant", "rust", "images.toml", ["base"]);
        let e = anyhow::Error::new(unknown).context("building the image family");
        assert_eq!(exit::status_of(&e, ERROR_KINDS), Status::Usage);
        assert_eq!(
            format!("{e:#}"),
            "building the image family: unknown variant `rust` (images.toml declares: base)"
        );
        let invalid = "-v=/:/host".parse::<crate::name::Repository>().unwrap_err();
        let e = anyhow::Error::new(invalid).context("reading image_pins.json");
        assert_eq!(exit::status_of(&e, ERROR_KINDS), Status::Usage);
        let e = anyhow::Error::new(std::io::Error::other("disk on fire"));
        assert_eq!(exit::status_of(&e, ERROR_KINDS), Status::Failure);
        let refused =
            crate::check::CheckError::Contract(crate::run_contract::ContractError::NoCpus);
        let e = anyhow::Error::new(refused);
        assert_eq!(exit::status_of(&e, ERROR_KINDS), Status::Failure);
    }

    #[test]
    fn a_report_gets_its_verbs_schema_first_and_a_list_is_refused() {
        let doc = stamped("pins verify", serde_json::json!({"ok": true, "schema": 7})).unwrap();
        assert_eq!(
            serde_json::to_string(&doc).unwrap(),
            r#"{"schema":"sunaba-images/pins-verify/v1","ok":true}"#
        );
        let err = stamped("tags", serde_json::json!(["a"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "internal error: the --json report of `tags` is not a JSON object"
        );
    }

    #[test]
    fn every_refusal_of_a_command_line_is_a_usage_error() {
        let repo: Repository = "r.io/a/b".parse().unwrap();
        let invalid = "-v".parse::<Reference>().unwrap_err();
        for e in [
            ArgsError::ToWithoutOneAlias,
            ArgsError::ImageWithVariants,
            ArgsError::DigestTarget(Reference::in_repo(&repo, crate::name::Digest::sha256(b""))),
            ArgsError::ChildElsewhere {
                child: "r.io/c/d:x".into(),
                repo,
            },
            ArgsError::WorkspaceNotADirectory("/etc/hosts".into()),
            ArgsError::Invalid(invalid),
        ] {
            assert_eq!(e.exit_status(), Status::Usage, "{e}");
        }
    }
}
