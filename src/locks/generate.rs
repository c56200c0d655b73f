//! Writing a fragment's locks (`sunaba-images lock`). Downloads are locked
//! here, from the npm registry: each tarball is fetched and hashed, and must
//! agree with the registry's `dist.integrity`. The npm and PyPI trees are
//! resolved by the package managers themselves, in a throw-away container of
//! the image the fragment is installed on (so npm is the image's npm and
//! Python the image's Python), with the CA bundle mounted where
//! docker/lib/common.sh looks for it.

use super::{downloads, npm, pinned, pypi};
use crate::engine::{Engine, ToolRun};
use crate::manifest::{Fragment, LOCK_DIR, Manifest, Source};
use crate::package_indexes::{IndexError, PackageIndexes};
use crate::render::LIB_DIR;
use base64::Engine as _;
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("{name}@{version}: {source}")]
    Feed {
        name: String,
        version: String,
        source: IndexError,
    },
    #[error(
        "{name}@{version}: the tarball's sha512 is {got}, the registry says {want}: refusing to lock it"
    )]
    Mismatch {
        name: String,
        version: String,
        want: String,
        got: String,
    },
    #[error("{name}@{version}: the registry gives no sha512 integrity")]
    NoIntegrity { name: String, version: String },
    #[error("locking `{fragment}` runs {tool} in {image}, which {why}")]
    Image {
        fragment: String,
        tool: &'static str,
        image: String,
        why: String,
    },
    #[error("{tool} failed in {image} (exit {status}):\n{tail}")]
    Tool {
        tool: &'static str,
        image: String,
        status: String,
        tail: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("the new lock of `{0}` still has problems:\n{1}")]
    Unclean(String, String),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

/// What locking one fragment needs.
pub(crate) struct Request<'a> {
    pub manifest: &'a Manifest,
    pub fragment: &'a Fragment,
    pub indexes: &'a PackageIndexes,
    /// For npm and PyPI trees: the engine and the local image the fragment
    /// is installed on.
    pub engine: Option<&'a dyn Engine>,
    pub image: Option<String>,
    pub ca_bundle: Option<PathBuf>,
    /// Compare only: a lock file that would change is listed, not written.
    pub check: bool,
}

/// The lock files written (or, checking, that would change), and what a
/// maintainer should know.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub changed: Vec<PathBuf>,
    pub notes: Vec<String>,
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LockError {
    let context = context.into();
    move |source| LockError::Io { context, source }
}

/// Writes `text` to the lock directory when it changed (checking: notes
/// that it would).
fn put(req: &Request<'_>, rel: &Path, text: &str, report: &mut Report) -> Result<(), LockError> {
    let path = req.manifest.root.join(rel);
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    if req.check {
        report.changed.push(rel.to_path_buf());
        return Ok(());
    }
    crate::fsutil::atomic_write(&path, text.as_bytes()).map_err(|e| LockError::Io {
        context: format!("writing {}", rel.display()),
        source: std::io::Error::other(e.to_string()),
    })?;
    report.changed.push(rel.to_path_buf());
    Ok(())
}

/// Locks every kind of package the fragment installs, then checks the
/// result against images.toml.
pub(crate) async fn lock(req: &Request<'_>) -> Result<Report, LockError> {
    let fragment = req.fragment;
    let root = &req.manifest.root;
    let dir = PathBuf::from(LOCK_DIR).join(&fragment.name);
    let mut report = Report::default();
    if pinned(fragment, Source::NpmTarball).next().is_some() {
        let text = lock_downloads(req).await?;
        put(
            req,
            &dir.join(downloads::DOWNLOADS_LOCK),
            &text,
            &mut report,
        )?;
    }
    if pinned(fragment, Source::Npm).next().is_some() {
        lock_npm(req, &dir, &mut report)?;
    }
    if pinned(fragment, Source::Pypi).next().is_some() {
        lock_pypi(req, &dir, &mut report)?;
    }
    // Checking, stale files on disk are the finding; their own problems
    // would only repeat it.
    if req.check && !report.changed.is_empty() {
        return Ok(report);
    }
    let problems = super::check_fragment(root, fragment);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        return Err(LockError::Unclean(fragment.name.clone(), list.join("\n")));
    }
    Ok(report)
}

/// Every tarball, fetched and hashed: its sha512 must be the registry's.
async fn lock_downloads(req: &Request<'_>) -> Result<String, LockError> {
    let mut lines = Vec::new();
    for (name, version) in downloads::wanted(req.fragment) {
        let feed = |source| LockError::Feed {
            name: name.clone(),
            version: version.clone(),
            source,
        };
        let meta = req
            .indexes
            .npm_version(&name, &version)
            .await
            .map_err(feed)?;
        let want = meta
            .dist
            .integrity
            .filter(|i| downloads::valid_integrity(i))
            .ok_or_else(|| LockError::NoIntegrity {
                name: name.clone(),
                version: version.clone(),
            })?;
        let bytes = req
            .indexes
            .download(&meta.dist.tarball)
            .await
            .map_err(feed)?;
        let got = format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&bytes))
        );
        if got != want {
            return Err(LockError::Mismatch {
                name,
                version,
                want,
                got,
            });
        }
        lines.push(downloads::Download {
            name,
            version,
            integrity: got,
        });
    }
    Ok(downloads::render(&req.fragment.name, &lines))
}

/// Runs `script` in the fragment's image with `work` at /lock.
fn run_in_image(
    req: &Request<'_>,
    tool: &'static str,
    work: &Path,
    script: &str,
) -> Result<(), LockError> {
    let image_err = |why: &str| LockError::Image {
        fragment: req.fragment.name.clone(),
        tool,
        image: req.image.clone().unwrap_or_else(|| "(no image)".into()),
        why: why.into(),
    };
    let (Some(engine), Some(image)) = (req.engine, &req.image) else {
        return Err(image_err("is not available (no engine)"));
    };
    let mut mounts = vec![
        (work.to_path_buf(), "/lock".to_string(), false),
        (
            req.manifest.root.join(LIB_DIR),
            "/run/sunaba/lib".to_string(),
            true,
        ),
    ];
    if let Some(ca) = &req.ca_bundle {
        mounts.push((ca.clone(), "/run/secrets/ca_bundle".to_string(), true));
    }
    let run = ToolRun {
        image: image.clone(),
        script: format!("set -eu\n. /run/sunaba/lib/common.sh\ncd /lock\n{script}"),
        mounts,
        env: vec![("HOME".into(), "/tmp".into())],
        timeout: Duration::from_secs(20 * 60),
    };
    // The tool runs for minutes: off the runtime's async threads.
    let out = tokio::task::block_in_place(|| engine.run_tool(&run))?;
    if !out.success() {
        return Err(LockError::Tool {
            tool,
            image: image.clone(),
            status: out.status.to_string(),
            tail: crate::process::tail_lines(&format!("{}{}", out.stdout, out.stderr), 25),
        });
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, LockError> {
    std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))
}

fn lock_npm(req: &Request<'_>, dir: &Path, report: &mut Report) -> Result<(), LockError> {
    let work = tempfile::tempdir().map_err(io("creating a work directory"))?;
    let fragment = req.fragment;
    std::fs::write(
        work.path().join(npm::PACKAGE_JSON),
        npm::package_json(fragment, &[]),
    )
    .map_err(io("writing package.json"))?;
    run_in_image(
        req,
        "npm",
        work.path(),
        "npm install --package-lock-only --ignore-scripts --no-audit --no-fund --no-update-notifier",
    )?;
    let lock_text = read(&work.path().join(npm::PACKAGE_LOCK))?;
    let lock: serde_json::Value = serde_json::from_str(&lock_text).map_err(|e| LockError::Io {
        context: "reading the new package-lock.json".into(),
        source: std::io::Error::other(e),
    })?;
    let scripts = npm::install_scripts(&lock);
    let approved: Vec<String> = scripts
        .iter()
        .filter(|s| {
            let name = s.rsplit_once('@').map_or(s.as_str(), |(n, _)| n);
            fragment.allow_scripts.iter().any(|a| a == name)
        })
        .cloned()
        .collect();
    for s in scripts.iter().filter(|s| !approved.contains(s)) {
        report.notes.push(format!(
            "{s} has install scripts; they do not run (allow them with `allow_scripts` in [fragments.{}])",
            fragment.name
        ));
    }
    report.notes.push(format!(
        "{}: {} packages, every one with its sha512 integrity",
        dir.join(npm::PACKAGE_LOCK).display(),
        npm::tree_size(&lock)
    ));
    put(
        req,
        &dir.join(npm::PACKAGE_JSON),
        &npm::package_json(fragment, &approved),
        report,
    )?;
    put(req, &dir.join(npm::PACKAGE_LOCK), &lock_text, report)
}

fn lock_pypi(req: &Request<'_>, dir: &Path, report: &mut Report) -> Result<(), LockError> {
    let work = tempfile::tempdir().map_err(io("creating a work directory"))?;
    let input = pypi::requirements_in(req.fragment);
    std::fs::write(work.path().join(pypi::REQUIREMENTS_IN), &input)
        .map_err(io("writing requirements.in"))?;
    // uv resolves for every platform at once (--universal) against the
    // image's own Python; the uv that does it is the one the family pins.
    let uv = req
        .manifest
        .fragments
        .values()
        .flat_map(|f| pinned(f, Source::Pypi))
        .find(|p| p.name == "uv")
        .and_then(|p| p.pinned.clone())
        .map_or("uv".to_string(), |v| format!("uv=={v}"));
    let script = format!(
        "command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || \
         apt_install python3 python3-venv\n\
         python3 -m venv /tmp/sunaba-lock-venv\n\
         /tmp/sunaba-lock-venv/bin/pip install --quiet --disable-pip-version-check '{uv}'\n\
         /tmp/sunaba-lock-venv/bin/uv pip compile --quiet --universal --generate-hashes \
         --no-header --emit-index-url --python /usr/bin/python3 \
         {inp} -o {out}",
        inp = pypi::REQUIREMENTS_IN,
        out = pypi::REQUIREMENTS_TXT,
    );
    run_in_image(req, "uv pip compile", work.path(), &script)?;
    let compiled = read(&work.path().join(pypi::REQUIREMENTS_TXT))?;
    let (reqs, _) = pypi::parse(&compiled);
    report.notes.push(format!(
        "{}: {} distributions' hashes for {} requirements",
        dir.join(pypi::REQUIREMENTS_TXT).display(),
        reqs.iter().map(|r| r.hashes.len()).sum::<usize>(),
        reqs.len()
    ));
    put(req, &dir.join(pypi::REQUIREMENTS_IN), &input, report)?;
    put(req, &dir.join(pypi::REQUIREMENTS_TXT), &compiled, report)
}

/// Why `lock` cannot take the fragments it is asked for.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SelectError {
    #[error(transparent)]
    Unknown(#[from] crate::name::Unknown),
    #[error("fragment `{name}` installs nothing from npm or PyPI: there is nothing to lock")]
    NothingToLock { name: String },
}

/// Both are about the fragments named on the command line.
impl crate::exit::HasStatus for SelectError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            SelectError::Unknown(e) => crate::exit::HasStatus::exit_status(e),
            SelectError::NothingToLock { .. } => crate::exit::Status::Usage,
        }
    }
}

/// The fragments named (all that install from npm or PyPI when none are),
/// each declared and with something to lock.
pub(crate) fn select<'a>(
    manifest: &'a Manifest,
    names: &[String],
) -> Result<Vec<&'a Fragment>, SelectError> {
    let names: Vec<String> = if names.is_empty() {
        manifest
            .fragments
            .values()
            .filter(|f| f.lock_dir().is_some())
            .map(|f| f.name.clone())
            .collect()
    } else {
        names.to_vec()
    };
    let mut fragments = Vec::new();
    for name in &names {
        let f = manifest.fragments.get(name).ok_or_else(|| {
            crate::name::Unknown::new("fragment", name, "images.toml", manifest.fragments.keys())
        })?;
        if f.lock_dir().is_none() {
            return Err(SelectError::NothingToLock { name: name.clone() });
        }
        fragments.push(f);
    }
    Ok(fragments)
}

/// Why there is no image to lock a fragment in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageError {
    #[error(
        "locking `{fragment}` runs its package manager in the `{variant}` image, which is \
         not built for the current inputs: run `sunaba-images build {variant}` first"
    )]
    NotBuilt { fragment: String, variant: String },
    #[error(transparent)]
    Build(#[from] crate::build::BuildError),
    #[error(transparent)]
    Upstream(#[from] crate::manifest::UpstreamError),
}

/// The image `fragment`'s package managers run in ([`base_of`]): the
/// parent variant's image of exactly the current inputs (a plain variant
/// tag may be another checkout's build), else the pinned upstream, pulled
/// when missing.
pub(crate) fn image_for(
    manifest: &Manifest,
    family: &crate::family::Family,
    engine: &dyn Engine,
    fragment: &str,
) -> Result<String, ImageError> {
    Ok(match base_of(manifest, fragment) {
        Some(Base::Variant(v)) => match family.current_image(engine, &v)? {
            Some((tag, _)) => tag,
            None => {
                return Err(ImageError::NotBuilt {
                    fragment: fragment.to_string(),
                    variant: v,
                });
            }
        },
        Some(Base::Upstream) | None => {
            let pinned = family.upstream.pinned()?;
            crate::build::resolve_upstream(engine, &pinned, None)?;
            pinned.to_string()
        }
    })
}

/// Which image a fragment's package managers run in for locking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Base {
    /// The image of this variant (the parent of the first variant that
    /// installs the fragment first).
    Variant(String),
    /// The upstream (the fragment starts a root variant).
    Upstream,
}

/// The image the fragment is installed on: the parent of a variant that
/// installs it as its first fragment, else of the first that installs it.
pub(crate) fn base_of(manifest: &Manifest, fragment: &str) -> Option<Base> {
    let order = manifest.build_order();
    let variants = order.iter().map(|v| &manifest.variants[v]);
    let pick = variants
        .clone()
        .find(|v| v.fragments.first().is_some_and(|f| f == fragment))
        .or_else(|| {
            variants
                .clone()
                .find(|v| v.fragments.iter().any(|f| f == fragment))
        })?;
    Some(match &pick.parent {
        Some(parent) => Base::Variant(parent.clone()),
        None => Base::Upstream,
    })
}

/// Whether locking the fragment needs a container (npm or PyPI trees).
pub(crate) fn needs_image(fragment: &Fragment) -> bool {
    fragment
        .packages
        .iter()
        .any(|p| matches!(p.source, Source::Npm | Source::Pypi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fragments_locked_are_those_named_each_with_something_to_lock() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let manifest = Manifest::load(&root.join("images.toml")).unwrap();
        let all = select(&manifest, &[]).unwrap();
        assert!(!all.is_empty());
        assert!(all.iter().all(|f| f.lock_dir().is_some()));
        let one = all[0].name.clone();
        let named = select(&manifest, std::slice::from_ref(&one)).unwrap();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].name, one);
        let unknown = select(&manifest, &["nope".into()]).unwrap_err();
        assert!(matches!(unknown, SelectError::Unknown(_)), "{unknown}");
        use crate::exit::{HasStatus, Status};
        assert_eq!(unknown.exit_status(), Status::Usage);
        if let Some(bare) = manifest.fragments.values().find(|f| f.lock_dir().is_none()) {
            let err = select(&manifest, std::slice::from_ref(&bare.name)).unwrap_err();
            assert_eq!(err.exit_status(), Status::Usage);
            assert_eq!(
                err.to_string(),
                format!(
                    "fragment `{}` installs nothing from npm or PyPI: there is nothing to lock",
                    bare.name
                )
            );
        }
    }
}
