//! A test engine that builds nothing: it records calls, enforces nothing,
//! and remembers "images" by tag, so the build graph and the check record
//! can be tested without Docker or Podman.

use super::{BuildRequest, Engine, EngineError, ImageInfo, LogFormat, Resources};
use crate::labels::VARIANT as LABEL_VARIANT;
use crate::name::Platform;
use crate::process::Cmd;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Builds take no time; a test that needs builds to overlap closes the
/// `gate` (nothing waits on a clock). A variant named in `fail` fails its
/// build with a BuildKit-style error step.
#[derive(Default)]
pub(crate) struct FakeEngine {
    /// Tag -> image.
    pub(crate) images: Mutex<BTreeMap<String, ImageInfo>>,
    /// Builds running now, and the most that ever ran at once.
    pub(crate) running: AtomicUsize,
    pub(crate) max_running: AtomicUsize,
    /// Variants built, in the order their builds finished.
    pub(crate) built: Mutex<Vec<String>>,
    pub(crate) fail: BTreeSet<String>,
    /// Where running builds wait while a test holds them.
    pub(crate) gate: Gate,
}

/// Holds builds once they are running: while it is closed, a build waits
/// in it, so a test can see several running at once and then let them go.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// Builds waiting in the gate now.
    held: usize,
}

impl Gate {
    pub(crate) fn close(&self) {
        self.state.lock().unwrap().closed = true;
    }

    pub(crate) fn open(&self) {
        self.state.lock().unwrap().closed = false;
        self.changed.notify_all();
    }

    /// Waits until `n` builds are held (all running at once), or `limit`
    /// passed (a scheduler that never runs `n` at once must fail its test,
    /// not hang it). Returns how many are held.
    pub(crate) fn wait_until_held(&self, n: usize, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let mut state = self.state.lock().unwrap();
        while state.held < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self.changed.wait_timeout(state, left).unwrap().0;
        }
        state.held
    }

    /// A running build: waits while the gate is closed.
    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        state.held += 1;
        self.changed.notify_all();
        while state.closed {
            state = self.changed.wait(state).unwrap();
        }
        state.held -= 1;
    }
}

impl Engine for FakeEngine {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn program(&self) -> &Path {
        Path::new("/bin/false")
    }
    fn log_format(&self) -> LogFormat {
        LogFormat::BuildKit
    }
    fn platform(&self) -> Result<Platform, EngineError> {
        Ok("linux/amd64".parse().expect("a platform"))
    }
    fn resources(&self) -> Result<Resources, EngineError> {
        Ok(Resources {
            memory_bytes: 8 << 30,
            cpus: 2,
            gpus: false,
        })
    }
    fn build_cmd(&self, _req: &BuildRequest) -> Cmd {
        Cmd::new("true")
    }
    fn build(
        &self,
        req: &BuildRequest,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<String, EngineError> {
        use std::sync::atomic::Ordering::SeqCst;
        let variant = req.labels[LABEL_VARIANT].clone();
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.max_running.fetch_max(now, SeqCst);
        on_line("#5 [1/2] FROM x");
        self.gate.pass();
        self.running.fetch_sub(1, SeqCst);
        if self.fail.contains(&variant) {
            on_line("#6 [2/2] RUN sh /run/sunaba/install.sh");
            on_line("#6 ERROR: process did not complete successfully: exit code: 3");
            return Err(EngineError::BuildFailed {
                command: "fake build".into(),
                status: "exit status: 1".into(),
            });
        }
        let mut built = self.built.lock().unwrap();
        built.push(variant);
        let id = format!("sha256:{:064}", built.len());
        let info = ImageInfo {
            id: id.clone(),
            size: 1,
            labels: req.labels.clone(),
            healthcheck: None,
            user: String::new(),
            env: Vec::new(),
            layers: vec![],
            repo_tags: req.tags.clone(),
            repo_digests: vec![],
            platform: Some(req.platform.clone().unwrap_or(self.platform()?)),
        };
        let mut images = self.images.lock().unwrap();
        for t in &req.tags {
            images.insert(t.clone(), info.clone());
        }
        Ok(id)
    }
    fn runs_on(&self, _image: &str, _platform: &Platform) -> Result<(), String> {
        Ok(())
    }
    fn inspect(&self, reference: &str) -> Result<Option<ImageInfo>, EngineError> {
        Ok(self.images.lock().unwrap().get(reference).cloned())
    }
    fn tag(&self, source: &str, target: &str) -> Result<(), EngineError> {
        let mut images = self.images.lock().unwrap();
        let info = images[source].clone();
        images.insert(target.to_string(), info);
        Ok(())
    }
}
