//! The package registries behind the locks and `outdated`: the npm registry
//! (packuments, version metadata, tarballs) and PyPI's JSON API, over one
//! HTTPS client with the extra CA roots the profile and `--ca-cert` name.
//!
//! Where: `SUNABA_NPM_REGISTRY`, else npm's own `NPM_CONFIG_REGISTRY`, else
//! <https://registry.npmjs.org>; `SUNABA_PYPI_URL`, else <https://pypi.org>.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FeedError {
    #[error("cannot read the CA file {path}: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: unexpected answer: {reason}")]
    Body { url: String, reason: String },
}

/// One client for both registries.
#[derive(Clone)]
pub(crate) struct Feeds {
    http: reqwest::Client,
    npm: String,
    pypi: String,
}

/// What the npm registry says about one version.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct NpmVersion {
    pub dist: NpmDist,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct NpmDist {
    pub tarball: String,
    pub integrity: Option<String>,
}

/// The parts of a packument `outdated` reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Packument {
    #[serde(default)]
    pub versions: BTreeMap<String, serde_json::Value>,
}

impl Packument {
    /// Published versions that are not deprecated.
    pub(crate) fn live_versions(&self) -> Vec<String> {
        self.versions
            .iter()
            .filter(|(_, v)| {
                v.get("deprecated")
                    .is_none_or(|d| d.is_null() || d == false)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[derive(Deserialize)]
struct PypiProject {
    releases: BTreeMap<String, Vec<PypiFile>>,
}

#[derive(Deserialize)]
struct PypiFile {
    #[serde(default)]
    yanked: bool,
}

fn env(keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

impl Feeds {
    /// A client trusting the system roots plus `ca_files`.
    pub(crate) fn new(ca_files: &[PathBuf], timeout: Duration) -> Result<Feeds, FeedError> {
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("sunaba-images/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(timeout);
        let mut certs = Vec::new();
        for path in ca_files {
            let err = |reason: String| FeedError::Ca {
                path: path.clone(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
            certs.extend(
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?,
            );
        }
        if !certs.is_empty() {
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder.build().map_err(|e| FeedError::Http {
            url: String::new(),
            reason: e.to_string(),
        })?;
        let trim = |s: String| s.trim_end_matches('/').to_string();
        Ok(Feeds {
            http,
            npm: trim(
                env(&[
                    "SUNABA_NPM_REGISTRY",
                    "NPM_CONFIG_REGISTRY",
                    "npm_config_registry",
                ])
                .unwrap_or_else(|| "https://registry.npmjs.org".into()),
            ),
            pypi: trim(env(&["SUNABA_PYPI_URL"]).unwrap_or_else(|| "https://pypi.org".into())),
        })
    }

    /// GET with three tries on connection errors and 5xx/429.
    async fn get(&self, url: &str, accept: &str) -> Result<bytes::Bytes, FeedError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.http.get(url).header("Accept", accept).send().await;
            let retry = match &result {
                Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
                Err(e) => e.is_connect() || e.is_timeout(),
            };
            if retry && attempt < 3 {
                tokio::time::sleep(Duration::from_millis(500 * attempt)).await;
                continue;
            }
            let resp = result.map_err(|e| FeedError::Http {
                url: url.to_string(),
                reason: crate::chain::error_chain(&e),
            })?;
            if !resp.status().is_success() {
                return Err(FeedError::Status {
                    url: url.to_string(),
                    status: resp.status().as_u16(),
                });
            }
            return resp.bytes().await.map_err(|e| FeedError::Http {
                url: url.to_string(),
                reason: e.to_string(),
            });
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        accept: &str,
    ) -> Result<T, FeedError> {
        let bytes = self.get(url, accept).await?;
        serde_json::from_slice(&bytes).map_err(|e| FeedError::Body {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    /// npm names go in the URL with the scope's `/` escaped.
    fn npm_url(&self, name: &str) -> String {
        format!("{}/{}", self.npm, name.replace('/', "%2F"))
    }

    /// Metadata of one published version.
    pub(crate) async fn npm_version(
        &self,
        name: &str,
        version: &str,
    ) -> Result<NpmVersion, FeedError> {
        self.json(
            &format!("{}/{version}", self.npm_url(name)),
            "application/json",
        )
        .await
    }

    /// The abbreviated packument (dist-tags and versions).
    pub(crate) async fn npm_packument(&self, name: &str) -> Result<Packument, FeedError> {
        self.json(&self.npm_url(name), "application/vnd.npm.install-v1+json")
            .await
    }

    /// The bytes at a tarball URL.
    pub(crate) async fn download(&self, url: &str) -> Result<bytes::Bytes, FeedError> {
        self.get(url, "application/octet-stream").await
    }

    /// Every release of a PyPI project that has files and is not yanked.
    pub(crate) async fn pypi_releases(&self, name: &str) -> Result<Vec<String>, FeedError> {
        let project: PypiProject = self
            .json(
                &format!("{}/pypi/{name}/json", self.pypi),
                "application/json",
            )
            .await?;
        Ok(project
            .releases
            .into_iter()
            .filter(|(_, files)| !files.is_empty() && files.iter().any(|f| !f.yanked))
            .map(|(v, _)| v)
            .collect())
    }
}
