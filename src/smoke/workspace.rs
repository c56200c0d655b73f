//! The throw-away workspace the smoke cases run in: one copy of its project
//! per case (so a write is the case's own), owned by a uid other than the
//! sandbox user and writable by anyone (so a stray write lands and is seen),
//! git projects committed; and the tree snapshots that tell what a case
//! changed.

use super::{Case, dirty_overlay};
use crate::process::Cmd;
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The owner of the copy when `check` runs as root: not the sandbox user,
/// like a checkout bind-mounted from a host.
pub(crate) const FOREIGN_UID: u32 = 4242;
/// Every copied file's mtime (2026-01-01): older than the git index written
/// right after, so no entry is "racily clean" and a read-only `git diff`
/// has nothing to refresh.
const FIXED_MTIME: u64 = 1_767_225_600;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkspaceError {
    #[error("preparing the smoke workspace: {context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("preparing the smoke workspace: {0}")]
    Git(#[from] crate::process::ProcessError),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorkspaceError {
    let context = context.into();
    move |source| WorkspaceError::Io { context, source }
}

/// The prepared copies; removed when dropped.
pub(crate) struct Workspace {
    // Held: the copies are removed when it drops.
    _dir: tempfile::TempDir,
    /// What is mounted at /workspace: one directory per case id.
    pub root: PathBuf,
    /// Said to the user (e.g. why the copy is not foreign-owned).
    pub notes: Vec<String>,
}

/// One entry of a tree snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i128,
    /// sha256 of a file's bytes, or a link's target.
    content: String,
}

/// Every entry below a case's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot(BTreeMap<PathBuf, Entry>);

impl Workspace {
    /// Copies each case's project into `<root>/<case id>`.
    pub(crate) fn prepare(cases: &[Case]) -> Result<Workspace, WorkspaceError> {
        let dir = crate::scratch::tempdir("sunaba-smoke-")
            .map_err(|e| io("creating a temporary directory")(e.into()))?;
        let root = dir.path().join("workspace");
        std::fs::create_dir(&root).map_err(io(format!("creating {}", root.display())))?;
        let me = std::fs::metadata(&root)
            .map_err(io(format!("reading {}", root.display())))?
            .uid();
        let mut notes = Vec::new();
        let uid = if me == 0 {
            FOREIGN_UID
        } else {
            if me == crate::run_contract::UID {
                notes.push(format!(
                    "the smoke workspace is owned by uid {me}, the sandbox user itself (check runs \
                     as that uid and cannot chown): a workspace owned by another uid, as a host \
                     checkout is, was not tried; run check as root to try it"
                ));
            }
            me
        };
        // The copies are independent (and git init/add/commit is three
        // programs each): make them side by side.
        let lanes = std::thread::available_parallelism().map_or(2, |n| n.get());
        let chunk = cases.len().div_ceil(lanes).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = cases
                .chunks(chunk)
                .map(|chunk| {
                    scope.spawn(|| chunk.iter().try_for_each(|c| copy_case(c, &root, uid)))
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("a workspace copy panicked"))
        })?;
        own_one(&root, uid)?;
        Ok(Workspace {
            _dir: dir,
            root,
            notes,
        })
    }

    /// Writes `text` at `name` beside the copies (a name no case id has:
    /// it starts with `.`), readable by anyone, and returns where the
    /// sandbox sees it (under /workspace).
    pub(crate) fn add_file(&self, name: &str, text: &str) -> Result<String, WorkspaceError> {
        debug_assert!(name.starts_with('.') && !name.contains('/'));
        let path = self.root.join(name);
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .map_err(io(format!("setting the mode of {}", path.display())))?;
        Ok(format!("{}/{name}", crate::run_contract::WORKSPACE))
    }

    /// The tree of one case's copy.
    pub(crate) fn snapshot(&self, case: &Case) -> Result<Snapshot, WorkspaceError> {
        let mut out = BTreeMap::new();
        let base = self.root.join(&case.id);
        walk(&base, &base, &mut out)?;
        Ok(Snapshot(out))
    }
}

impl Snapshot {
    /// What changed from `self` to `after`, one item per path
    /// (`added X`, `removed X`, `modified X`), in path order.
    pub(crate) fn changes(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for (path, entry) in &after.0 {
            match self.0.get(path) {
                None => out.push(format!("added {}", path.display())),
                Some(before) if before != entry => out.push(format!("modified {}", path.display())),
                Some(_) => {}
            }
        }
        for path in self.0.keys().filter(|p| !after.0.contains_key(*p)) {
            out.push(format!("removed {}", path.display()));
        }
        out.sort_by(|a, b| {
            a.split_once(' ')
                .map(|x| x.1)
                .cmp(&b.split_once(' ').map(|x| x.1))
        });
        out
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Entry>) -> Result<(), WorkspaceError> {
    let entries = std::fs::read_dir(dir).map_err(io(format!("reading {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("reading {}", dir.display())))?;
        let path = entry.path();
        let meta =
            std::fs::symlink_metadata(&path).map_err(io(format!("reading {}", path.display())))?;
        let (kind, content) = if meta.is_dir() {
            ('d', String::new())
        } else if meta.file_type().is_symlink() {
            let target =
                std::fs::read_link(&path).map_err(io(format!("reading {}", path.display())))?;
            ('l', target.to_string_lossy().into_owned())
        } else {
            let bytes = std::fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
            ('f', hex::encode(sha2::Sha256::digest(&bytes)))
        };
        out.insert(
            path.strip_prefix(base).unwrap_or(&path).to_path_buf(),
            Entry {
                kind,
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                content,
            },
        );
        if kind == 'd' {
            walk(base, &path, out)?;
        }
    }
    Ok(())
}

/// Every regular file below `dir` (relative path, executable, bytes),
/// sorted; an absent directory has none.
pub(crate) fn files(dir: &Path) -> std::io::Result<Vec<(PathBuf, bool, Vec<u8>)>> {
    fn go(base: &Path, dir: &Path, out: &mut Vec<(PathBuf, bool, Vec<u8>)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                go(base, &path, out)?;
            } else if meta.is_file() {
                let rel = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
                out.push((rel, meta.mode() & 0o111 != 0, std::fs::read(&path)?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        go(dir, dir, &mut out)?;
    }
    out.sort();
    Ok(out)
}

/// One case's copy: its project, committed (then the `.dirty` overlay) when
/// the suite is a git one, given to `uid`.
fn copy_case(case: &Case, root: &Path, uid: u32) -> Result<(), WorkspaceError> {
    let to = root.join(&case.id);
    copy_project(&case.source, &to)?;
    if case.git {
        // Owned before the commit: the index records the owner, and a
        // stale index would make a read-only `git diff` rewrite it.
        own(&to, uid)?;
        commit(&to)?;
        let overlay = dirty_overlay(&case.source);
        if overlay.is_dir() {
            copy_project(&overlay, &to)?;
        }
    }
    own(&to, uid)
}

/// Copies the regular files and directories below `from` into `to`, keeping
/// the executable bits; every file gets [`FIXED_MTIME`].
fn copy_project(from: &Path, to: &Path) -> Result<(), WorkspaceError> {
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(FIXED_MTIME);
    for (rel, exec, bytes) in files(from).map_err(io(format!("reading {}", from.display())))? {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        std::fs::write(&dest, &bytes).map_err(io(format!("writing {}", dest.display())))?;
        let file = std::fs::File::options()
            .write(true)
            .open(&dest)
            .map_err(io(format!("opening {}", dest.display())))?;
        file.set_modified(mtime)
            .map_err(io(format!("setting the time of {}", dest.display())))?;
        let mode = if exec { 0o777 } else { 0o666 };
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io(format!("setting the mode of {}", dest.display())))?;
    }
    std::fs::create_dir_all(to).map_err(io(format!("creating {}", to.display())))?;
    Ok(())
}

/// Gives everything below `dir` to `uid` (when that is not us) and makes
/// every directory writable by anyone.
fn own(dir: &Path, uid: u32) -> Result<(), WorkspaceError> {
    own_one(dir, uid)?;
    for entry in std::fs::read_dir(dir).map_err(io(format!("reading {}", dir.display())))? {
        let path = entry
            .map_err(io(format!("reading {}", dir.display())))?
            .path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            own(&path, uid)?;
        } else {
            own_one(&path, uid)?;
        }
    }
    Ok(())
}

fn own_one(path: &Path, uid: u32) -> Result<(), WorkspaceError> {
    let meta =
        std::fs::symlink_metadata(path).map_err(io(format!("reading {}", path.display())))?;
    if meta.uid() != uid {
        std::os::unix::fs::lchown(path, Some(uid), Some(uid))
            .map_err(io(format!("giving {} to uid {uid}", path.display())))?;
    }
    if meta.is_dir() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
            .map_err(io(format!("setting the mode of {}", path.display())))?;
    }
    Ok(())
}

/// `git init` + one commit of everything, with a fixed identity and date
/// and none of this machine's git configuration.
fn commit(dir: &Path) -> Result<(), WorkspaceError> {
    let git = |args: &[&str]| {
        Cmd::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "commit.gpgSign=false",
            ])
            .args(["-c", "init.defaultBranch=main", "-c", "safe.directory=*"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "sunaba smoke")
            .env("GIT_AUTHOR_EMAIL", "smoke@sunaba.invalid")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_NAME", "sunaba smoke")
            .env("GIT_COMMITTER_EMAIL", "smoke@sunaba.invalid")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .run()
    };
    git(&["init", "--quiet"])?;
    git(&["add", "--all"])?;
    git(&["commit", "--quiet", "--message", "smoke: seed"])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_names_what_was_added_modified_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let case = Case {
            id: "c".into(),
            ..crate::smoke::tests::case()
        };
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.py"), "a\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b\n").unwrap();
        let ws = Workspace::prepare(&[Case {
            source: dir.path().to_path_buf(),
            ..case.clone()
        }])
        .unwrap();
        let copy = ws.root.join("c");
        assert_eq!(std::fs::read(copy.join("src/a.py")).unwrap(), b"a\n");
        let before = ws.snapshot(&case).unwrap();
        assert_eq!(
            before.changes(&ws.snapshot(&case).unwrap()),
            Vec::<String>::new()
        );
        std::fs::write(copy.join("src/a.py"), "A\n").unwrap();
        std::fs::remove_file(copy.join("b.txt")).unwrap();
        std::fs::create_dir(copy.join(".pytest_cache")).unwrap();
        assert_eq!(
            before.changes(&ws.snapshot(&case).unwrap()),
            ["added .pytest_cache", "removed b.txt", "modified src/a.py"].map(String::from)
        );
    }
}
