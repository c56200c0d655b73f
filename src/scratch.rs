//! The process's scratch space: every temporary file and directory this
//! tool makes (the normaliser's spill, which is the size of the image; the
//! layers a push compresses; a build's staged context; the smoke workspace)
//! lives under one directory per process, `$TMPDIR/sunaba-images-<pid>-<random>/`
//! (mode 0700), so one `rm -rf` removes all of it and nothing else.
//!
//! It is removed on normal exit and on error (the guard [`Session`] that
//! `main_entry` holds), and on SIGINT / SIGTERM (a handler removes it and
//! exits 130 / 143). `kill -9` cannot be caught, so the directory is also a
//! proof of life: the process holds an exclusive `flock` on it for as long
//! as it runs, and the kernel drops that lock when the process dies however
//! it dies. The next run of any verb reads `$TMPDIR` once and removes every
//! `sunaba-images-<pid>-<random>` directory of this user whose lock it can
//! take: its process is gone (a reused pid does not matter, the lock does).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The start of every process directory's name.
const PREFIX: &str = "sunaba-images-";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ScratchError {
    #[error("cannot create a scratch directory in {root}: {source}")]
    Create { root: PathBuf, source: io::Error },
    #[error("cannot create a temporary {what} in {dir}: {source}")]
    Temp {
        what: &'static str,
        dir: PathBuf,
        source: io::Error,
    },
    #[error("the process is exiting: its scratch directory is gone")]
    Closed,
}

impl From<ScratchError> for io::Error {
    fn from(e: ScratchError) -> io::Error {
        let kind = match &e {
            ScratchError::Create { source, .. } | ScratchError::Temp { source, .. } => {
                source.kind()
            }
            ScratchError::Closed => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// The directory of this process, and the open handle whose `flock` says
/// the process is alive.
struct ProcessDir {
    path: PathBuf,
    _lock: File,
}

enum State {
    /// Not made yet (made on first use: most verbs never need one).
    Unused,
    Open(ProcessDir),
    /// Removed on the way out; nothing is made after that.
    Closed,
}

static STATE: Mutex<State> = Mutex::new(State::Unused);

fn state() -> std::sync::MutexGuard<'static, State> {
    // A panic while the lock was held leaves the state as it was: usable.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where the process directories are made: `$TMPDIR`, else `/tmp`.
pub(crate) fn root() -> PathBuf {
    std::env::temp_dir()
}

/// This process's scratch directory, made (mode 0700, locked) on first use.
pub(crate) fn dir() -> Result<PathBuf, ScratchError> {
    let mut state = state();
    match &*state {
        State::Open(d) => Ok(d.path.clone()),
        State::Closed => Err(ScratchError::Closed),
        State::Unused => {
            let root = root();
            let made = create(&root).map_err(|source| ScratchError::Create { root, source })?;
            let path = made.path.clone();
            *state = State::Open(made);
            Ok(path)
        }
    }
}

/// A new directory in the scratch directory, removed when dropped.
pub(crate) fn tempdir(prefix: &str) -> Result<tempfile::TempDir, ScratchError> {
    let dir = dir()?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&dir)
        .map_err(|source| ScratchError::Temp {
            what: "directory",
            dir,
            source,
        })
}

/// A new file in the scratch directory with no name (gone when closed).
pub(crate) fn tempfile() -> Result<File, ScratchError> {
    let dir = dir()?;
    tempfile::tempfile_in(&dir).map_err(|source| ScratchError::Temp {
        what: "file",
        dir,
        source,
    })
}

/// Makes `sunaba-images-<pid>-<random>` in `root` and locks it. The lock is
/// taken after the directory exists, so a sweeping run can remove it in
/// between: then the locked handle is not the directory at the path any
/// more, and another is made.
fn create(root: &Path) -> io::Result<ProcessDir> {
    let prefix = format!("{PREFIX}{}-", std::process::id());
    let mut last = None;
    for _ in 0..5 {
        // mkdtemp: an unpredictable name, never an existing one; 0700.
        let path = tempfile::Builder::new()
            .prefix(&prefix)
            .rand_bytes(10)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(root)?
            .keep();
        let lock = File::open(&path)?;
        lock.lock()?;
        let held = lock.metadata()?;
        match std::fs::symlink_metadata(&path) {
            Ok(at) if at.dev() == held.dev() && at.ino() == held.ino() => {
                return Ok(ProcessDir { path, _lock: lock });
            }
            Ok(_) => last = Some(io::Error::other("replaced while it was being locked")),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("could not be made")))
}

/// Removes this process's scratch directory (if it made one); nothing is
/// made after this. For the way out: normal exit, error, signal.
pub(crate) fn remove_process_dir() {
    let previous = std::mem::replace(&mut *state(), State::Closed);
    if let State::Open(d) = previous {
        remove_tree(&d.path);
        // The lock goes with the handle, after the directory.
        drop(d);
    }
}

/// `remove_dir_all`, again when another thread was still writing into the
/// tree (a file made after its directory was read leaves it not empty).
fn remove_tree(path: &Path) {
    for _ in 0..3 {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => continue,
            _ => return,
        }
    }
}

/// Whether `name` is a process directory's: `sunaba-images-<pid>-<random>`
/// (never e.g. the old shared `sunaba-images-cache`).
fn is_process_dir_name(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, random)| {
            !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && !random.is_empty()
                && random.bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

/// Removes the process directories in `root` whose process is gone: this
/// user's, not locked. One `readdir` of `root`; a directory whose lock is
/// held (a live run) is left alone. Returns what it removed.
pub(crate) fn sweep_stale(root: &Path) -> Vec<PathBuf> {
    let own = match &*state() {
        State::Open(d) => Some(d.path.clone()),
        _ => None,
    };
    let me = effective_uid();
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_process_dir_name) {
            continue;
        }
        let path = entry.path();
        if own.as_ref() == Some(&path) {
            continue;
        }
        // Not through a symlink, and only this user's: another user's run
        // is theirs to clean.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        let Ok(handle) = File::open(&path) else {
            continue;
        };
        if handle.try_lock().is_ok() {
            remove_tree(&path);
            removed.push(path);
        }
    }
    removed
}

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// What `main_entry` holds while a verb runs: stale directories swept
/// first, the signal handler installed, this process's directory removed
/// when dropped (normal exit, an error, a panic that unwinds).
pub(crate) struct Session(());

impl Session {
    pub(crate) fn start() -> Session {
        sweep_stale(&root());
        if let Err(e) = exit_on_signals() {
            // Only the tidying on Ctrl-C is lost; the next run sweeps.
            eprintln!("warning: cannot handle SIGINT/SIGTERM: {e}");
        }
        Session(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        remove_process_dir();
    }
}

/// On SIGINT or SIGTERM: remove the scratch directory and exit 128 + the
/// signal (130, 143), as the default action's status would be. A signal
/// this process was started with ignored (`nohup`, a shell's background
/// job) stays ignored.
fn exit_on_signals() -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let wanted: Vec<i32> = [SIGINT, SIGTERM]
        .into_iter()
        .filter(|&s| !ignored(s))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new(&wanted)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                remove_process_dir();
                std::process::exit(128 + signal);
            }
        })?;
    Ok(())
}

/// Whether `signal` is ignored (SIG_IGN) in this process now.
fn ignored(signal: i32) -> bool {
    // SAFETY: a query only (no new action); `old` is a valid out-pointer.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_process_directory_names_are_swept() {
        assert!(is_process_dir_name("sunaba-images-4242-aB3xYz9QwE"));
        assert!(!is_process_dir_name("sunaba-images-cache"));
        assert!(!is_process_dir_name("sunaba-images-4242-"));
        assert!(!is_process_dir_name("sunaba-images--abc"));
        assert!(!is_process_dir_name("sunaba-images-42x-abc"));
        assert!(!is_process_dir_name("sunaba-images-42-a.b"));
        assert!(!is_process_dir_name("sunaba-normalize-abc"));
    }

    #[test]
    fn a_locked_directory_is_kept_and_an_unlocked_one_removed() {
        let root = tempfile::tempdir().unwrap();
        let live = create(root.path()).unwrap();
        let gone = create(root.path()).unwrap();
        let gone_path = gone.path.clone();
        std::fs::write(gone_path.join("spill"), "x").unwrap();
        drop(gone); // its process died: the lock is released
        let other = root.path().join("sunaba-images-cache");
        std::fs::create_dir(&other).unwrap();
        let unrelated = root.path().join("sunaba-images-1-abc");
        std::fs::write(&unrelated, "a file, not a directory").unwrap();

        assert_eq!(sweep_stale(root.path()), std::slice::from_ref(&gone_path));
        assert!(!gone_path.exists());
        assert!(live.path.is_dir(), "a live run's directory is kept");
        assert!(other.is_dir() && unrelated.is_file());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&live.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let name = live.path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(&format!("sunaba-images-{}-", std::process::id())),
            "{name}"
        );
    }

    #[test]
    fn a_directory_held_by_another_process_is_kept() {
        // flock belongs to the open file, so a lock held by another process
        // (here `flock`, exec'ing `sleep` with the lock held) is as good as
        // a run's, and its death (here a kill -9) releases it.
        let root = tempfile::tempdir().unwrap();
        let held = create(root.path()).unwrap();
        let path = held.path.clone();
        drop(held);
        let mut child = std::process::Command::new("flock")
            .arg("--no-fork")
            .arg(&path)
            .args(["sleep", "30"])
            .spawn()
            .expect("flock(1) from util-linux");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while File::open(&path).unwrap().try_lock().is_ok() {
            assert!(std::time::Instant::now() < deadline, "flock never locked");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(sweep_stale(root.path()).is_empty());
        assert!(path.is_dir());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(sweep_stale(root.path()), std::slice::from_ref(&path));
    }
}
