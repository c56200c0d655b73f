//! What a run leaves behind (src/scratch.rs, the release journal's lock):
//! a build killed with `kill -9` while it normalises leaves its spill (the
//! size of the image), which the next run of any verb removes; one stopped
//! by SIGTERM or SIGINT removes it on its way out and exits 143 / 130; a
//! release killed in a journal write leaves a temp file the next release
//! removes. Each build runs with a TMPDIR of its own, so everything in it
//! is that run's doing.

use crate::release::Rig;
use crate::support::{self, Family, Project, Services, Variant, fake_tool, services};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A one-variant family (`solo`, a fake tool on the dev base) of its own
/// repository, so its layers are nobody else's cache hits.
struct Solo {
    project: Project,
    repo: String,
    engine: String,
    /// The TMPDIR its runs get.
    tmp: tempfile::TempDir,
}

impl Drop for Solo {
    fn drop(&mut self) {
        support::remove_images(&self.engine, &self.repo);
    }
}

impl Solo {
    fn new(name: &str, s: &Services) -> Solo {
        let repo = support::unique(&format!("sunaba-fixture/tidy-{name}"));
        let family = Family::new("solo")
            .repository(&repo)
            .upstream(&s.pinned_base())
            // The fixtures' language `fake` needs beta of the default.
            .tool("beta")
            .fragment("solo", &["beta"])
            .variant(Variant::new("solo").fragments(&["solo"]));
        let project = Project::fixture(&family)
            .salt(&repo)
            .fragment("solo", &fake_tool("beta", "beta 2.0.0"))
            .env("SUNABA_ENGINE", &s.engine)
            .render();
        Solo {
            project,
            repo,
            engine: s.engine.clone(),
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    /// `build solo` started, not waited for; its output in the project.
    fn start_build(&self) -> Child {
        use std::os::unix::process::CommandExt as _;
        let log = |name: &str| std::fs::File::create(self.project.join(name)).unwrap();
        let mut build = self
            .project
            .cli()
            .env("TMPDIR", self.tmp.path())
            .args(["build", "solo", "--progress", "plain"])
            .into_command("stopped midway: its output is read only when the test fails");
        // The build starts with SIGINT and SIGTERM at their defaults, as from
        // a terminal: a test runner started in the background by a
        // non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and
        // an ignored signal stays ignored in the tool (scratch.rs), so the
        // test would see the build run to its end.
        // SAFETY: signal() is async-signal-safe; nothing else runs here.
        unsafe {
            build.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        build
            .stdout(Stdio::from(log("build.out")))
            .stderr(Stdio::from(log("build.err")))
            .spawn()
            .unwrap()
    }

    fn output(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.project.join(name)).unwrap_or_default();
        format!(
            "stdout:\n{}\nstderr:\n{}",
            read("build.out"),
            read("build.err")
        )
    }

    /// Every normaliser spill directory in the TMPDIR: at its top, or one
    /// level down (in a process's scratch directory).
    fn spills(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("sunaba-normalize-")
                {
                    found.push(path);
                } else if depth == 0 && path.is_dir() {
                    walk(&path, 1, found);
                }
            }
        }
        let mut found = Vec::new();
        walk(self.tmp.path(), 0, &mut found);
        found
    }

    /// What is left in the TMPDIR, by name.
    fn left(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Waits until `build` is normalising (its spill exists) and returns
    /// the spill; fails when the build ends first.
    fn wait_for_spill(&self, build: &mut Child) -> PathBuf {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Some(spill) = self.spills().pop() {
                return spill;
            }
            if let Some(status) = build.try_wait().unwrap() {
                panic!(
                    "the build ended ({status}) before it normalised:\n{}",
                    self.output()
                );
            }
            assert!(Instant::now() < deadline, "no spill:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
#[ignore = "tier: engine"]
fn a_build_killed_while_it_normalises_leaves_a_spill_the_next_run_removes() {
    let Some(s) = services() else {
        return;
    };
    let _machine = support::machine_lock();
    let solo = Solo::new("kill", &s);
    let mut build = solo.start_build();
    let spill = solo.wait_for_spill(&mut build);
    build.kill().unwrap(); // SIGKILL: nothing of ours runs
    let status = build.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "{status}:\n{}", solo.output());
    assert!(
        spill.exists(),
        "the kill left the spill: nothing removes it"
    );

    // Any verb, however cheap, sweeps what a dead run left.
    solo.project
        .cli()
        .env("TMPDIR", solo.tmp.path())
        .arg("version")
        .stdout_like(r"sunaba-images \S+")
        .run();
    assert!(!spill.exists(), "{}", spill.display());
    assert_eq!(solo.left(), Vec::<String>::new());
}

#[test]
#[ignore = "tier: engine"]
fn a_build_stopped_by_sigterm_or_sigint_removes_its_spill_and_exits_128_plus_the_signal() {
    let Some(s) = services() else {
        return;
    };
    let _machine = support::machine_lock();
    for (name, signal, status) in [("term", libc::SIGTERM, 143), ("int", libc::SIGINT, 130)] {
        let solo = Solo::new(name, &s);
        let mut build = solo.start_build();
        let spill = solo.wait_for_spill(&mut build);
        let pid = i32::try_from(build.id()).unwrap();
        // SAFETY: a signal to our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let exit = build.wait().unwrap();
        assert_eq!(exit.code(), Some(status), "{exit}:\n{}", solo.output());
        assert!(!spill.exists(), "{}", spill.display());
        assert_eq!(solo.left(), Vec::<String>::new(), "{name}");
    }
}

/// A release killed in its first journal write (the temp file written, not
/// yet renamed) leaves the temp file; the next release, once it holds the
/// releases' lock, removes it.
#[test]
#[ignore = "tier: registry"]
fn a_release_removes_the_journal_temp_file_a_killed_one_left() {
    let Some(rig) = Rig::new("tidy-journal") else {
        return;
    };
    rig.push_family("v1", &[]);
    let journals = rig.project.join("target/sunaba-release");
    let temps = || -> Vec<String> {
        std::fs::read_dir(&journals)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    };
    rig.release(&["--write", "--notes", "notes.md"])
        .env("SUNABA_FAILPOINT", "atomic-write.before-rename")
        .status(134)
        .stdout_free("killed in its first write, so nothing to check")
        .stderr_line("failpoint atomic-write.before-rename#1: dying here")
        .run();
    let left = temps();
    assert!(
        left.len() == 1 && left[0].starts_with('.') && left[0].contains(".json."),
        "{left:?}"
    );
    rig.release(&[])
        .stdout_free("the plan: the family, again")
        .run();
    assert_eq!(temps(), Vec::<String>::new());
}
