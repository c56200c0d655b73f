//! The one sandbox a check runs, started through the run contract (the same
//! argv as `run`: read-only root, tmpfs HOME and /tmp, no network, no
//! capabilities, the image's own user): the image's HEALTHCHECK and the
//! variant's smoke cases side by side, on a throw-away workspace owned by
//! another uid, with a tree snapshot of each case's copy before and after.

use super::healthcheck::{evaluate, healthcheck_argv};
use super::report::{CheckReport, EMULATION_TIMEOUT_FACTOR, ToolStatus};
use super::{CheckError, Expectation, LABEL_INPUTS};
use crate::engine::Engine;
use crate::run_contract::{self as rc, Sandbox};
use crate::smoke::{self, driver, workspace::Workspace};
use std::time::{Duration, Instant};

/// Runs the check of the local image `reference` and judges it.
pub(crate) fn check_image(
    engine: &dyn Engine,
    reference: &str,
    expect: &Expectation,
    timeout: Duration,
) -> Result<CheckReport, CheckError> {
    let started = Instant::now();
    let info = engine
        .inspect(reference)?
        .ok_or_else(|| CheckError::NoImage {
            reference: reference.to_string(),
            variant: expect.variant.clone(),
        })?;
    let test = info.healthcheck.clone().unwrap_or_default();
    let healthcheck = healthcheck_argv(reference, &test)?;
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
    let before = cases
        .iter()
        .map(|c| workspace.snapshot(c))
        .collect::<Result<Vec<_>, _>>()?;

    let resources = engine.resources()?;
    let native = engine.platform()?;
    let emulated = info.platform.as_ref().is_some_and(|p| *p != native);
    let timeout = if emulated {
        timeout * EMULATION_TIMEOUT_FACTOR
    } else {
        timeout
    };
    // The ID, so a tag moved meanwhile cannot change what is checked.
    let mut sandbox = Sandbox::new(
        info.id.clone(),
        &workspace.root,
        rc::memory_cap(resources.memory_bytes, None)?,
    )?;
    sandbox.name = format!(
        "sunaba-check-{}-{:08x}",
        expect.variant,
        rand::random::<u32>()
    );
    if emulated {
        sandbox.platform = info.platform.clone();
    }
    let script = driver::script(&healthcheck, cases);
    sandbox.entrypoint = Some("/bin/sh".into());
    sandbox.command = vec!["-c".into(), script.text, "sunaba-check".into()];
    let out = engine
        .run_sandbox(&sandbox, timeout)
        .map_err(|source| CheckError::Run {
            reference: reference.to_string(),
            source,
        })?;
    let report = driver::parse(&out.stdout, &script.nonce, cases);

    let mut problems = Vec::new();
    if let Some(fatal) = &report.fatal {
        problems.push(format!("the check script gave up: {fatal}"));
    }
    match report.user {
        Some((uid, gid)) if (uid, gid) == (rc::UID, rc::GID) => {}
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
    let (hc_exit, hc_out, hc_err) = match &report.healthcheck {
        Some((ran, stderr)) => (ran.exit, ran.output.as_str(), stderr.as_str()),
        None => (None, "", out.stderr.as_str()),
    };
    let (tools, hc_problems) = evaluate(expect, hc_exit, hc_out, hc_err, info.size);
    problems.extend(hc_problems);

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
        notes: workspace.notes.clone(),
        seconds: started.elapsed().as_secs_f64(),
        recorded_id: None,
        platform: info.platform.clone(),
        emulated,
    })
}
