//! File writes that never leave a half-written file, and an advisory lock for
//! files that two processes could rewrite.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory,
/// fsync, rename over the target, fsync the directory. Readers see either the
/// old content or the new, never a mix; a crash leaves the old file intact.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let err = |source| FsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(
            ".{}.",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ))
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)
        .map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    // Keep the target's permissions (e.g. an executable script stays
    // executable); a new file is 0644 like one `>` makes, not the temp
    // file's private 0600 (a legs file is uploaded by another user's step).
    let permissions = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions(),
        Err(_) => {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::Permissions::from_mode(0o644)
        }
    };
    tmp.as_file().set_permissions(permissions).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    crate::failpoint::hit("atomic-write.before-rename");
    tmp.persist(path).map_err(|e| err(e.error))?;
    crate::failpoint::hit("atomic-write.after-rename");
    if let Ok(d) = File::open(dir) {
        // Makes the rename itself durable; not all filesystems allow it.
        let _ = d.sync_all();
    }
    Ok(())
}

/// How [`atomic_write`]'s temp file for `NAME` is named:
/// `.NAME.<random>.tmp` (the random part has no dot).
const TEMP_SUFFIX: &str = ".tmp";

/// The target a temp file of [`atomic_write`] was for, by its name.
fn temp_target(temp_name: &str) -> Option<&str> {
    let middle = temp_name.strip_prefix('.')?.strip_suffix(TEMP_SUFFIX)?;
    Some(middle.rsplit_once('.')?.0)
}

/// Removes the temp files that killed [`atomic_write`]s left in `dir` for
/// the targets `is_target` names. Only safe while holding the lock the
/// targets' writers hold, when no writer can be mid-write.
pub(crate) fn remove_stale_temps_in(dir: &Path, is_target: impl Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if temp_target(&name.to_string_lossy()).is_some_and(&is_target) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Removes the temp files that killed [`atomic_write`]s of `path` left
/// beside it (see [`remove_stale_temps_in`]).
pub(crate) fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let name = name.to_string_lossy();
    remove_stale_temps_in(dir, |target| target == name);
}

/// An exclusive advisory lock on `<path>.lock`, held until dropped. Used around
/// read-modify-write cycles so concurrent writers cannot lose an update.
pub(crate) struct FileLock {
    file: File,
}

impl FileLock {
    /// Blocks until the lock is acquired.
    pub(crate) fn acquire(target: &Path) -> Result<FileLock, FsError> {
        let mut name = target.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        let path = target.with_file_name(name);
        let err = |source| FsError::Lock {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(err)?;
        file.lock().map_err(err)?;
        Ok(FileLock { file })
    }
}

impl Drop for FileLock {
    /// Unlocks before the descriptor closes. A child forked on another
    /// thread shares the locked open file until its exec closes its copy,
    /// and closing ours alone would leave the lock held until then; an
    /// explicit unlock releases it for every copy at once.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_content_and_keeps_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        atomic_write(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_temp_file_names_its_target() {
        assert_eq!(
            temp_target(".image_pins.json.Ab12Cd.tmp"),
            Some("image_pins.json")
        );
        assert_eq!(temp_target(".r1.json.x.tmp"), Some("r1.json"));
        assert_eq!(temp_target("image_pins.json"), None);
        assert_eq!(temp_target(".image_pins.json.lock"), None);
    }

    #[test]
    fn atomic_write_creates_missing_parent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.txt");
        atomic_write(&path, b"x").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o644,
            "a new file is readable by others, not the temp file's 0600"
        );
    }

    #[test]
    fn lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("pins.json");
        let first = FileLock::acquire(&target).unwrap();
        let other = OpenOptions::new()
            .write(true)
            .open(dir.path().join("pins.json.lock"))
            .unwrap();
        assert!(
            other.try_lock().is_err(),
            "second lock must not be granted while held"
        );
        drop(first);
        assert!(other.try_lock().is_ok());
    }
}
