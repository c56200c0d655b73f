//! The one sandbox a check runs, started through the run contract (the same
//! argv as `run`: read-only root, tmpfs HOME and /tmp, no network, no
//! capabilities, the image's own user): the image's HEALTHCHECK and the
//! variant's smoke cases side by side, on a throw-away workspace owned by
//! another uid, with a tree snapshot of each case's copy before and after.

use super::healthcheck::{evaluate, healthcheck_argv};
use super::report::{CheckReport, EMULATION_TIMEOUT_FACTOR, ToolStatus, human_bytes};
use super::{CheckError, Expectation, Healthcheck, LABEL_INPUTS};
use crate::engine::ImageInfo;
use crate::engine::{Engine, EngineError};
use crate::run_contract::{self as rc, Sandbox};
use crate::smoke::{self, driver, workspace::Workspace};
use std::time::{Duration, Instant};

/// Where the project's rendered healthcheck is put beside the smoke copies
/// for a custom image (the sandbox sees it under /workspace).
const RENDERED_HEALTHCHECK: &str = ".sunaba-healthcheck.sh";

/// Runs the check of the local image `reference` with `healthcheck` and
/// judges it.
pub(crate) fn check_image(
    engine: &dyn Engine,
    reference: &str,
    expect: &Expectation,
    timeout: Duration,
    healthcheck: Healthcheck<'_>,
) -> Result<CheckReport, CheckError> {
    let started = Instant::now();
    let info = engine
        .inspect(reference)?
        .ok_or_else(|| CheckError::NoImage {
            reference: reference.to_string(),
            variant: expect.variant.clone(),
        })?;
    let custom = matches!(healthcheck, Healthcheck::Rendered(_));
    if !custom {
        // Before anything is prepared: an image that cannot be checked.
        healthcheck_argv(reference, info.healthcheck.as_deref().unwrap_or_default())?;
    }
    let cases = &expect.smoke.cases;
    let digest =
        expect
            .smoke
            .digest()
            .map_err(|source| crate::smoke::workspace::WorkspaceError::Io {
                context: "reading the smoke projects".into(),
                source,
            })?;
    let workspace = Workspace::prepare(cases)?;
    let mut notes = workspace.notes.clone();
    let healthcheck = match healthcheck {
        Healthcheck::Image => {
            healthcheck_argv(reference, info.healthcheck.as_deref().unwrap_or_default())?
        }
        Healthcheck::Rendered(script) => {
            notes.push(own_healthcheck_note(&info, &expect.variant));
            notes.extend(posture_env(&info));
            let at = workspace.add_file(RENDERED_HEALTHCHECK, script)?;
            vec!["/bin/sh".into(), at]
        }
    };
    let before = cases
        .iter()
        .map(|c| workspace.snapshot(c))
        .collect::<Result<Vec<_>, _>>()?;

    let (mut sandbox, emulated, timeout) = check_sandbox(
        engine,
        reference,
        &info,
        &expect.variant,
        &workspace.root,
        timeout,
    )?;
    let script = driver::script(&healthcheck, cases);
    sandbox.entrypoint = Some("/bin/sh".into());
    sandbox.command = script.sh_args();
    let out = sandbox
        .run(engine, timeout)
        .map_err(|source| CheckError::Run {
            reference: reference.to_string(),
            source,
        })?;
    let report = driver::parse(&out.stdout, &script.nonce, cases);

    let mut problems = script_problems(&report, &out, &info, custom);
    let (hc_exit, hc_out, hc_err) = match &report.healthcheck {
        Some((ran, stderr)) => (ran.exit, ran.output.as_str(), stderr.as_str()),
        None => (None, "", out.stderr.as_str()),
    };
    let held_to_budget = (!custom).then_some(info.size);
    let (tools, hc_problems) = evaluate(expect, hc_exit, hc_out, hc_err, held_to_budget);
    problems.extend(hc_problems);
    if custom && info.size > expect.size_budget {
        notes.push(format!(
            "size {} is over {}'s budget of {} (information: the family's image is held to \
             it, a custom image is not)",
            human_bytes(info.size),
            expect.variant,
            human_bytes(expect.size_budget)
        ));
    }

    let mut results = Vec::new();
    for (case, before) in cases.iter().zip(&before) {
        let changed = before.changes(&workspace.snapshot(case)?);
        results.push(smoke::judge(case, report.cases.get(&case.id), changed));
    }
    let passed = problems.is_empty()
        && tools.iter().all(|t| t.status == ToolStatus::Ok)
        && results.iter().all(|r| r.passed());
    Ok(CheckReport {
        variant: expect.variant.clone(),
        image: reference.to_string(),
        image_id: info.id.clone(),
        inputs: info.labels.get(LABEL_INPUTS).cloned(),
        size: info.size,
        size_budget: expect.size_budget,
        passed,
        tools,
        problems,
        smoke: results,
        smoke_skipped: expect.smoke.skipped.clone(),
        smoke_digest: Some(digest),
        notes,
        seconds: started.elapsed().as_secs_f64(),
        recorded_id: None,
        platform: info.platform.clone(),
        emulated,
        custom,
    })
}

/// The one sandbox of a check of the image `info` (`reference`; by its ID,
/// so a tag moved meanwhile cannot change what is checked), on `workspace`;
/// whether it runs emulated, and the time limit, longer when it does.
fn check_sandbox(
    engine: &dyn Engine,
    reference: &str,
    info: &ImageInfo,
    variant: &str,
    workspace: &std::path::Path,
    timeout: Duration,
) -> Result<(Sandbox, bool, Duration), CheckError> {
    let resources = engine.resources()?;
    let native = engine.platform()?;
    let emulated = info.platform.as_ref().is_some_and(|p| *p != native);
    let timeout = if emulated {
        timeout * EMULATION_TIMEOUT_FACTOR
    } else {
        timeout
    };
    let id = info
        .id
        .parse()
        .map_err(|e: crate::name::InvalidDigest| EngineError::Parse {
            command: format!("image inspect {reference}"),
            detail: format!("the image ID {:?} is no digest: {e}", info.id),
        })?;
    let mut sandbox = Sandbox::new(
        crate::name::Image::Id(id),
        workspace,
        rc::memory_cap(resources.memory_bytes, None)?,
    )?;
    sandbox.name = format!("sunaba-check-{variant}-{:08x}", rand::random::<u32>());
    if emulated {
        sandbox.platform = info.platform.clone();
    }
    Ok((sandbox, emulated, timeout))
}

/// What the driver's report says is wrong with the run itself: it gave up,
/// it ran as another user than the contract's, or it did not finish.
fn script_problems(
    report: &driver::Report,
    out: &crate::process::Output,
    info: &ImageInfo,
    custom: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(fatal) = &report.fatal {
        problems.push(format!("the check script gave up: {fatal}"));
    }
    match report.user {
        Some((uid, gid)) if (uid, gid) == (rc::UID, rc::GID) => {}
        Some((uid, gid)) if custom => problems.push(posture_user(info, uid, gid)),
        Some((uid, gid)) => problems.push(format!(
            "the image runs as uid {uid} gid {gid}{}: the run contract runs the image's own \
             USER, which must be {}:{} ({}), the owner of the HOME tmpfs it mounts at {}",
            if uid == 0 { " (root)" } else { "" },
            rc::UID,
            rc::GID,
            rc::USER,
            rc::HOME
        )),
        None => problems.push(format!(
            "the check container did not run its script to the end ({}){}",
            crate::process::describe_status(&out.status),
            match crate::process::tail_lines(&out.stderr, 5).trim() {
                "" => String::new(),
                tail => format!(": {tail}"),
            }
        )),
    }
    problems
}

/// What a custom image's own HEALTHCHECK is (information: the project's
/// rendered one ran instead).
fn own_healthcheck_note(info: &ImageInfo, variant: &str) -> String {
    let own = match info.healthcheck.as_deref() {
        None | Some([]) => {
            "the image has no HEALTHCHECK of its own (a custom image need not)".into()
        }
        Some([none]) if none == "NONE" => "the image's own HEALTHCHECK is disabled (NONE)".into(),
        Some(test) => format!("the image's own HEALTHCHECK {test:?} was not run"),
    };
    format!("{own}; the project's rendered healthcheck of {variant} checked its tools")
}

/// The posture's environment a custom image's ENV lacks (the family's
/// images set it before any fragment; the contract sets only HOME): said as
/// information, the smoke judges what it changes.
fn posture_env(info: &ImageInfo) -> Option<String> {
    let why = |name: &str| match name {
        "XDG_CACHE_HOME" => "caches under the HOME tmpfs",
        "LANG" => "text is UTF-8",
        "GIT_OPTIONAL_LOCKS" => "a read-only `git status` does not rewrite .git/index",
        _ => "",
    };
    let lacking: Vec<String> = rc::image_env()
        .into_iter()
        .filter(|(name, _)| rc::fixed_env().iter().all(|(fixed, _)| fixed != name))
        .filter(|(name, value)| !info.env.contains(&format!("{name}={value}")))
        .map(|(name, value)| format!("{name}={value} ({})", why(name)))
        .collect();
    (!lacking.is_empty()).then(|| {
        format!(
            "the posture's environment is not in the image's ENV: {}; the family's images set \
             it, the run contract sets only HOME",
            lacking.join(", ")
        )
    })
}

/// The posture's user, said plainly for a custom image: what the image's
/// default user is, what the run contract needs and how to give it that.
fn posture_user(info: &ImageInfo, uid: u32, gid: u32) -> String {
    let user = match info.user.as_str() {
        "" => "USER is not set, so it runs as root".to_string(),
        u => format!(
            "USER is {u:?}, uid {uid} gid {gid}{}",
            if uid == 0 { " (root)" } else { "" }
        ),
    };
    format!(
        "the posture needs a non-root default user {uid_want}:{gid_want} and the image lacks \
         one: its {user}. The run contract runs the image's own USER with HOME a tmpfs at \
         {home} owned by {uid_want}:{gid_want}, so any other user cannot write its HOME; add a \
         user {uid_want}:{gid_want} (`useradd --uid {uid_want} --user-group --home-dir {home} \
         --no-create-home {name}`) and `USER {uid_want}:{gid_want}`",
        uid_want = rc::UID,
        gid_want = rc::GID,
        home = rc::HOME,
        name = rc::USER,
    )
}
