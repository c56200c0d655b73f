//! The one OCI test pusher: blobs, images, indexes, manifest reads and
//! deletes through the distribution HTTP API, over plain http or over TLS
//! (trusting a given CA) with basic auth. Async; `wait` runs a call to
//! completion for tests that have no runtime of their own.

use super::sha256;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::OnceLock;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// Pretty-printed with extra indentation and a trailing newline, so any
/// client that re-serializes before hashing gets a different digest.
pub fn pretty(v: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    serde::Serialize::serialize(v, &mut ser).unwrap();
    buf.extend_from_slice(b"\n");
    buf
}

/// An image to push: its platform, its config labels, its one layer (an
/// empty tar unless given) and whether its manifest is Docker's schema 2
/// instead of OCI's.
#[derive(Debug, Clone)]
pub struct Image {
    pub os: String,
    pub arch: String,
    pub variant: Option<String>,
    pub labels: Value,
    pub layer: Vec<u8>,
    pub docker: bool,
}

impl Image {
    /// A linux image for `arch` without labels.
    pub fn linux(arch: &str) -> Image {
        Image {
            os: "linux".into(),
            arch: arch.into(),
            variant: None,
            labels: json!({}),
            // An empty tar archive: two zero blocks.
            layer: vec![0u8; 1024],
            docker: false,
        }
    }
    pub fn variant(mut self, variant: &str) -> Image {
        self.variant = Some(variant.into());
        self
    }
    pub fn labels(mut self, labels: impl serde::Serialize) -> Image {
        self.labels = serde_json::to_value(labels).unwrap();
        self
    }
    /// Bytes of its own for the layer, so that images with the same
    /// config still differ: a tar holding one file of them (the layer must
    /// read as one: an SBOM is made from it).
    pub fn layer(mut self, bytes: impl Into<Vec<u8>>) -> Image {
        let bytes = bytes.into();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "layer", bytes.as_slice()).unwrap();
        self.layer = b.into_inner().unwrap();
        self
    }
    pub fn docker(mut self) -> Image {
        self.docker = true;
        self
    }
}

/// A pushed manifest: its digest, exact bytes and media type (and the
/// config's digest, for images).
#[derive(Debug, Clone)]
pub struct Pushed {
    pub digest: String,
    pub bytes: Vec<u8>,
    pub media_type: &'static str,
    pub config_digest: Option<String>,
}

impl Pushed {
    /// Its descriptor in an index, for `platform` (`{"os": …, …}`).
    pub fn descriptor(&self, platform: Value) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.bytes.len(),
            "platform": platform,
        })
    }
}

/// Pushes to one registry. See the module docs.
pub struct Pusher {
    http: reqwest::Client,
    /// `http://host:port` or `https://host:port`.
    base: String,
    basic: Option<(String, String)>,
    rt: OnceLock<tokio::runtime::Runtime>,
}

impl Clone for Pusher {
    fn clone(&self) -> Pusher {
        Pusher {
            http: self.http.clone(),
            base: self.base.clone(),
            basic: self.basic.clone(),
            rt: OnceLock::new(),
        }
    }
}

impl Pusher {
    /// A registry at `authority` (`host:port`) over plain http, anonymous.
    pub fn plain(authority: &str) -> Pusher {
        Pusher {
            http: reqwest::Client::new(),
            base: format!("http://{authority}"),
            basic: None,
            rt: OnceLock::new(),
        }
    }

    /// A registry at `authority` over TLS whose certificate `ca_pem`
    /// signed, with basic auth.
    pub fn tls(authority: &str, ca_pem: &[u8], user: &str, password: &str) -> Pusher {
        let ca = reqwest::Certificate::from_pem(ca_pem).unwrap();
        Pusher {
            http: reqwest::Client::builder()
                .tls_certs_only([ca])
                .build()
                .unwrap(),
            base: format!("https://{authority}"),
            basic: Some((user.into(), password.into())),
            rt: OnceLock::new(),
        }
    }

    /// Runs `f` (a call on this pusher) to completion, for a test without
    /// a runtime. Do not mix with calls made on another runtime.
    pub fn wait<T>(&self, f: impl Future<Output = T>) -> T {
        self.rt
            .get_or_init(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
            })
            .block_on(f)
    }

    /// Sends `method url` (with `body` of `content_type`, if any) and
    /// asserts the answer's status is `want`; returns the answer's headers.
    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<(&str, &[u8])>,
        want: u16,
    ) -> reqwest::header::HeaderMap {
        let mut request = self.http.request(method.clone(), url);
        if let Some((user, password)) = &self.basic {
            request = request.basic_auth(user, Some(password));
        }
        if let Some((content_type, bytes)) = body {
            request = request
                .header("Content-Type", content_type)
                .body(bytes.to_vec());
        }
        let resp = request.send().await.unwrap();
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        assert_eq!(
            status,
            want,
            "{method} {url}: {}",
            resp.text().await.unwrap_or_default()
        );
        headers
    }

    fn url(&self, repo: &str, rest: &str) -> String {
        format!("{}/v2/{repo}/{rest}", self.base)
    }

    /// Uploads `bytes` as a blob of `repo`; returns its digest.
    pub async fn blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let started = self
            .send(
                reqwest::Method::POST,
                &self.url(repo, "blobs/uploads/"),
                None,
                202,
            )
            .await;
        let location = started["location"].to_str().unwrap();
        let url = reqwest::Url::parse(&self.base)
            .unwrap()
            .join(location)
            .unwrap();
        let sep = if url.query().is_some() { '&' } else { '?' };
        self.send(
            reqwest::Method::PUT,
            &format!("{url}{sep}digest={digest}"),
            Some(("application/octet-stream", bytes)),
            201,
        )
        .await;
        digest
    }

    /// Puts a manifest under `reference` (a tag, or its own digest); returns
    /// its digest, checked against the registry's.
    pub async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> String {
        let headers = self
            .send(
                reqwest::Method::PUT,
                &self.url(repo, &format!("manifests/{reference}")),
                Some((media_type, bytes)),
                201,
            )
            .await;
        let digest = headers["docker-content-digest"].to_str().unwrap();
        assert_eq!(digest, sha256(bytes), "distribution hashes the exact bytes");
        digest.to_string()
    }

    /// Pushes the image's layer and config (with its labels), then the
    /// manifest, under `tag` or, without one, its digest.
    pub async fn image(&self, repo: &str, tag: Option<&str>, image: &Image) -> Pushed {
        let layer = &image.layer;
        let layer_digest = self.blob(repo, layer).await;
        let mut config = json!({
            "architecture": image.arch,
            "os": image.os,
            "created": "2026-11-30T07:00:00Z",
            "config": {"Labels": image.labels, "Env": ["PATH=/usr/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        });
        if let Some(v) = &image.variant {
            config["variant"] = json!(v);
        }
        let config_bytes = pretty(&config);
        let config_digest = self.blob(repo, &config_bytes).await;
        let (media_type, config_type, layer_type) = if image.docker {
            (
                DOCKER_MANIFEST,
                DOCKER_CONFIG,
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
            )
        } else {
            (
                OCI_MANIFEST,
                OCI_CONFIG,
                "application/vnd.oci.image.layer.v1.tar",
            )
        };
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config_bytes.len()},
            "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": layer.len()}],
        });
        let bytes = pretty(&manifest);
        let reference = tag.map_or_else(|| sha256(&bytes), str::to_string);
        let digest = self.manifest(repo, &reference, media_type, &bytes).await;
        Pushed {
            digest,
            bytes,
            media_type,
            config_digest: Some(config_digest),
        }
    }

    /// Pushes an OCI index of `manifests` (descriptors) under `tag`.
    pub async fn index(&self, repo: &str, tag: &str, manifests: Vec<Value>) -> Pushed {
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        let bytes = pretty(&index);
        let digest = self.manifest(repo, tag, OCI_INDEX, &bytes).await;
        Pushed {
            digest,
            bytes,
            media_type: OCI_INDEX,
            config_digest: None,
        }
    }

    /// The labels of the image `reference` (a tag or digest) of `repo`
    /// names: its manifest, then its config blob.
    pub async fn config_labels(&self, repo: &str, reference: &str) -> Value {
        let get = |url: String| async move {
            let accept = [OCI_MANIFEST, DOCKER_MANIFEST].join(", ");
            let resp = self.http.get(url).header("Accept", accept).send().await;
            resp.unwrap().json::<Value>().await.unwrap()
        };
        let manifest = get(self.url(repo, &format!("manifests/{reference}"))).await;
        let config = manifest["config"]["digest"].as_str().unwrap();
        let config = get(self.url(repo, &format!("blobs/{config}"))).await;
        config["config"]["Labels"].clone()
    }

    /// The bytes at `/v2/<repo>/<rest>` (a manifest, any type, or a blob),
    /// `None` on 404.
    pub async fn get(&self, repo: &str, rest: &str) -> Option<Vec<u8>> {
        let accept = [OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST].join(", ");
        let resp = self
            .http
            .get(self.url(repo, rest))
            .header("Accept", accept)
            .send()
            .await
            .unwrap();
        if resp.status().as_u16() == 404 {
            return None;
        }
        assert!(
            resp.status().is_success(),
            "GET {repo}/{rest}: {}",
            resp.status()
        );
        Some(resp.bytes().await.unwrap().to_vec())
    }

    /// Every tag of `repo` (empty when it does not exist).
    pub async fn tags(&self, repo: &str) -> Vec<String> {
        let resp = self
            .http
            .get(self.url(repo, "tags/list"))
            .send()
            .await
            .unwrap();
        if resp.status().as_u16() == 404 {
            return Vec::new();
        }
        let doc: Value = resp.json().await.unwrap();
        doc["tags"]
            .as_array()
            .map(|t| t.iter().map(|t| t.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    /// The digest `tag` of `repo` points at (one HEAD), `None` when absent.
    pub async fn tag_digest(&self, repo: &str, tag: &str) -> Option<String> {
        let mut request = self
            .http
            .head(self.url(repo, &format!("manifests/{tag}")))
            .header(
                "Accept",
                [OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST].join(", "),
            );
        if let Some((user, password)) = &self.basic {
            request = request.basic_auth(user, Some(password));
        }
        let resp = request.send().await.unwrap();
        if resp.status().as_u16() == 404 {
            return None;
        }
        assert!(
            resp.status().is_success(),
            "HEAD {repo}:{tag}: {}",
            resp.status()
        );
        Some(
            resp.headers()["docker-content-digest"]
                .to_str()
                .unwrap()
                .to_string(),
        )
    }

    /// Deletes the manifest `digest` of `repo`.
    pub async fn delete_manifest(&self, repo: &str, digest: &str) {
        self.send(
            reqwest::Method::DELETE,
            &self.url(repo, &format!("manifests/{digest}")),
            None,
            202,
        )
        .await;
    }
}
