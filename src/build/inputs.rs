//! Staging a variant's build context and hashing its inputs.
//!
//! The context directory holds exactly the files the render says a variant's
//! build reads, so the inputs hash covers precisely what the engine sees.

use super::{BuildError, VariantPlan};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file of a staged context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub executable: bool,
}

/// Collects the bytes of every file a variant's build reads. Rendered files
/// come from the render and must match what is committed (a build never uses a
/// stale Dockerfile silently); other files (fragments) come from disk.
pub(crate) fn collect(
    root: &Path,
    plan: &VariantPlan,
    generated: &BTreeMap<PathBuf, String>,
) -> Result<Vec<StagedFile>, BuildError> {
    let mut paths: Vec<&PathBuf> = plan.context_files.iter().collect();
    if !paths.contains(&&plan.dockerfile) {
        paths.push(&plan.dockerfile);
    }
    paths.sort();
    paths.dedup();
    let mut files = Vec::with_capacity(paths.len());
    for rel in paths {
        let abs = root.join(rel);
        let on_disk = std::fs::read(&abs);
        let bytes = match (generated.get(rel), on_disk) {
            (Some(rendered), Ok(disk)) if disk == rendered.as_bytes() => disk,
            (Some(_), _) => {
                return Err(BuildError::Stale {
                    path: rel.clone(),
                    variant: plan.name.clone(),
                });
            }
            (None, Ok(disk)) => disk,
            (None, Err(source)) => {
                return Err(BuildError::ReadInput {
                    path: abs,
                    variant: plan.name.clone(),
                    source,
                });
            }
        };
        let executable = std::fs::metadata(&abs)
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        files.push(StagedFile {
            path: rel.clone(),
            bytes,
            executable,
        });
    }
    Ok(files)
}

/// Writes the staged files under `dir` (a fresh directory), each with the
/// modification time `epoch` (seconds): what a `COPY` puts in a layer is
/// then the same on every build of the same inputs.
pub(crate) fn stage(dir: &Path, files: &[StagedFile], epoch: u64) -> Result<(), std::io::Error> {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    for f in files {
        let dest = dir.join(&f.path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&dest, &f.bytes)?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode))?;
        std::fs::File::options()
            .write(true)
            .open(&dest)?
            .set_modified(time)?;
    }
    Ok(())
}

/// Everything that determines a variant's image besides the staged files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HashMeta<'a> {
    pub platform: &'a str,
    pub dockerfile: &'a Path,
    /// Every build argument hashed: a root variant's FROM argument (the
    /// pinned upstream) among them, a child's not (its parent is
    /// `from_image_id`; see `Family::inputs`).
    pub build_args: &'a BTreeMap<String, String>,
    /// The image ID the FROM argument resolves to (parent or upstream).
    pub from_image_id: &'a str,
    /// Labels that do not change from build to build (title, source, variant).
    pub static_labels: &'a BTreeMap<String, String>,
}

/// `sha256:<hex>` over the inputs. Every field is length-prefixed, so no two
/// different input sets can serialize to the same bytes.
pub(crate) fn inputs_hash(meta: &HashMeta, files: &[StagedFile]) -> String {
    let mut h = Sha256::new();
    let mut field = |tag: &str, bytes: &[u8]| {
        h.update(tag.as_bytes());
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    field("sunaba-inputs", b"1");
    field("platform", meta.platform.as_bytes());
    field("dockerfile", meta.dockerfile.to_string_lossy().as_bytes());
    field("from-image", meta.from_image_id.as_bytes());
    for (k, v) in meta.build_args {
        field("arg-key", k.as_bytes());
        field("arg-value", v.as_bytes());
    }
    for (k, v) in meta.static_labels {
        field("label-key", k.as_bytes());
        field("label-value", v.as_bytes());
    }
    let mut sorted: Vec<&StagedFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for f in sorted {
        field("file", f.path.to_string_lossy().as_bytes());
        field("mode", if f.executable { b"x" } else { b"-" });
        field("bytes", &f.bytes);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, bytes: &str, executable: bool) -> StagedFile {
        StagedFile {
            path: path.into(),
            bytes: bytes.as_bytes().to_vec(),
            executable,
        }
    }

    fn hash_with(
        files: &[StagedFile],
        args: &[(&str, &str)],
        from: &str,
        platform: &str,
    ) -> String {
        let args: BTreeMap<String, String> = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let labels = BTreeMap::from([("dev.sunaba.variant".to_string(), "go".to_string())]);
        inputs_hash(
            &HashMeta {
                platform,
                dockerfile: Path::new("docker/Dockerfile.go"),
                build_args: &args,
                from_image_id: from,
                static_labels: &labels,
            },
            files,
        )
    }

    #[test]
    fn every_input_changes_the_hash() {
        let files = vec![
            file("docker/Dockerfile.go", "FROM x", false),
            file("docker/install-go.sh", "echo go", true),
        ];
        let base = hash_with(&files, &[("A", "1")], "sha256:p", "linux/amd64");
        assert!(base.starts_with("sha256:") && base.len() == 71);
        // Same inputs, same hash (order of files does not matter).
        let mut reversed = files.clone();
        reversed.reverse();
        assert_eq!(
            base,
            hash_with(&reversed, &[("A", "1")], "sha256:p", "linux/amd64")
        );

        let mut changed = Vec::new();
        let mut f = files.clone();
        f[1].bytes = b"echo go!".to_vec();
        changed.push(hash_with(&f, &[("A", "1")], "sha256:p", "linux/amd64"));
        let mut f = files.clone();
        f[1].executable = false;
        changed.push(hash_with(&f, &[("A", "1")], "sha256:p", "linux/amd64"));
        let mut f = files.clone();
        f[1].path = "docker/install-go2.sh".into();
        changed.push(hash_with(&f, &[("A", "1")], "sha256:p", "linux/amd64"));
        changed.push(hash_with(&files, &[("A", "2")], "sha256:p", "linux/amd64"));
        changed.push(hash_with(&files, &[("A", "1")], "sha256:q", "linux/amd64"));
        changed.push(hash_with(&files, &[("A", "1")], "sha256:p", "linux/arm64"));
        changed.push(hash_with(
            &files[..1],
            &[("A", "1")],
            "sha256:p",
            "linux/amd64",
        ));
        for c in &changed {
            assert_ne!(&base, c);
        }
    }

    #[test]
    fn field_boundaries_cannot_be_shifted() {
        let a = hash_with(&[], &[("AB", "C")], "x", "p");
        let b = hash_with(&[], &[("A", "BC")], "x", "p");
        assert_ne!(a, b);
    }

    #[test]
    fn stale_rendered_file_is_refused_and_fragments_come_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docker")).unwrap();
        std::fs::write(dir.path().join("docker/Dockerfile.go"), "FROM old\n").unwrap();
        std::fs::write(dir.path().join("docker/install-go.sh"), "echo go\n").unwrap();
        std::fs::set_permissions(
            dir.path().join("docker/install-go.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let plan = VariantPlan {
            name: "go".into(),
            dockerfile: "docker/Dockerfile.go".into(),
            context_files: vec!["docker/install-go.sh".into()],
            ..VariantPlan::default()
        };
        let mut generated = BTreeMap::from([(
            PathBuf::from("docker/Dockerfile.go"),
            "FROM new\n".to_string(),
        )]);
        let err = collect(dir.path(), &plan, &generated).unwrap_err();
        assert!(err.to_string().contains("docker/Dockerfile.go"), "{err}");
        assert!(err.to_string().contains("sunaba-images render"), "{err}");

        generated.insert("docker/Dockerfile.go".into(), "FROM old\n".into());
        let files = collect(dir.path(), &plan, &generated).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[1].path, Path::new("docker/install-go.sh"));
        assert!(files[1].executable);

        let out = tempfile::tempdir().unwrap();
        stage(out.path(), &files, 1_700_000_000).unwrap();
        let meta = std::fs::metadata(out.path().join("docker/install-go.sh")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        let mtime = meta.modified().unwrap();
        assert_eq!(
            mtime
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            1_700_000_000
        );
        assert_eq!(
            std::fs::read_to_string(out.path().join("docker/Dockerfile.go")).unwrap(),
            "FROM old\n"
        );
    }
}
