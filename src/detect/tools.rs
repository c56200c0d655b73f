//! Where each tool of a language comes from: a project-local
//! `node_modules/.bin/<tool>` for the Node languages, else the image's PATH.

use super::lossy;
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// Languages whose tools resolve local-before-global from
/// `<scope>/node_modules/.bin/<tool>`.
pub(crate) const NODE_LANGUAGES: &[&str] = &["js", "ts"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ResolvedTool {
    pub tool: String,
    #[serde(flatten)]
    pub resolution: Resolution,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "resolution", rename_all = "lowercase")]
pub(crate) enum Resolution {
    /// An executable `node_modules/.bin/<tool>` (workdir-relative path).
    Local {
        #[serde(serialize_with = "lossy")]
        path: PathBuf,
    },
    /// The image's tool on PATH.
    Global,
}

impl fmt::Display for ResolvedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resolution {
            Resolution::Local { .. } => write!(f, "{} (local)", self.tool),
            Resolution::Global => write!(f, "{} (global)", self.tool),
        }
    }
}

/// Resolves `tools` of `language` for a verify run in `run_dir`; local
/// paths are shown through `rel` (workdir-relative).
pub(super) fn resolve(
    language: &str,
    tools: &[String],
    run_dir: &Path,
    rel: impl Fn(&Path) -> PathBuf,
) -> Vec<ResolvedTool> {
    let local = NODE_LANGUAGES.contains(&language);
    tools
        .iter()
        .map(|tool| ResolvedTool {
            tool: tool.clone(),
            resolution: match local.then(|| local_tool(run_dir, tool)).flatten() {
                Some(path) => Resolution::Local { path: rel(&path) },
                None => Resolution::Global,
            },
        })
        .collect()
}

/// `<dir>/node_modules/.bin/<tool>` when it is an executable file (symlinks
/// followed, as npm makes them), the same test as the server's `test -x`.
pub(crate) fn local_tool(dir: &Path, tool: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("node_modules").join(".bin").join(tool);
    let meta = std::fs::metadata(&path).ok()?;
    (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(path)
}
