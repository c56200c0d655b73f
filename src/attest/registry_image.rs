//! The files an SBOM is made from ([`super::sbom::WANTED`]), read from an
//! image's layer blobs in a registry: each blob fetched, checked against
//! its digest, decompressed as a stream through the tar reader (only the
//! followed paths kept; see [`super::image_files`]) and dropped before the
//! next is fetched, so memory holds one compressed layer and the wanted
//! files, never an image's layers together. What a blob said is kept by
//! digest: a family's images share their base layers, and a release reads
//! each distinct blob once. A blob that cannot be read is an error naming
//! its digest and the image.

use super::AttestError;
use super::image_files::{Composed, LayerFiles, Reading};
use crate::registry::{Client, Digest, Repository};
use serde::Deserialize;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// The largest layer blob read.
const MAX_LAYER: usize = crate::registry::MAX_COPIED_BLOB;

/// Reads images' wanted files from their layers, each distinct blob once
/// (again only when another image's links lead where it was not read).
#[derive(Debug, Default)]
pub(crate) struct LayerReader {
    seen: RefCell<BTreeMap<Digest, Rc<LayerFiles>>>,
    fetched: Cell<usize>,
}

impl LayerReader {
    /// How many layer blobs were fetched so far.
    #[cfg(test)]
    pub(crate) fn fetched(&self) -> usize {
        self.fetched.get()
    }

    /// The final contents of the wanted paths of the image whose manifest
    /// (an image manifest's bytes) is `manifest`, in `repo`.
    pub(crate) async fn files(
        &self,
        client: &Client,
        repo: &Repository,
        image: &str,
        manifest: &[u8],
    ) -> Result<BTreeMap<String, Vec<u8>>, AttestError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Layer {
            digest: Digest,
        }
        #[derive(Deserialize)]
        struct Layers {
            layers: Vec<Layer>,
        }
        let parsed: Layers =
            serde_json::from_slice(manifest).map_err(|source| AttestError::Layers {
                image: image.to_string(),
                source,
            })?;
        let count = parsed.layers.len();
        let mut reading = Reading::new(&super::sbom::WANTED);
        loop {
            let mut scanned = Vec::with_capacity(count);
            for (i, l) in parsed.layers.iter().enumerate() {
                let known = self
                    .seen
                    .borrow()
                    .get(&l.digest)
                    .filter(|f| reading.covered_by(f))
                    .cloned();
                let files = match known {
                    Some(f) => f,
                    None => {
                        let bytes = client.fetch_blob(repo, &l.digest, MAX_LAYER).await?;
                        self.fetched.set(self.fetched.get() + 1);
                        let files = reading.scan_blob(bytes.as_slice()).map_err(|fault| {
                            fault.named(image, &format!("{} ({} of {count})", l.digest, i + 1))
                        })?;
                        drop(bytes);
                        let files = Rc::new(files);
                        self.seen
                            .borrow_mut()
                            .insert(l.digest.clone(), files.clone());
                        files
                    }
                };
                scanned.push(files);
            }
            match reading.compose(scanned.iter().map(|f| f.as_ref())) {
                Composed::Files(files) => return Ok(files),
                Composed::Needs(paths) => reading.follow(image, paths)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::tests::{file, layer};
    use crate::registry::fake::FakeRegistry;
    use std::io::Write as _;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    /// A manifest of `layers` (gzip blobs put in `repo`), bottom first.
    fn manifest(fake: &FakeRegistry, repo: &str, layers: &[&[u8]]) -> Vec<u8> {
        let layers: Vec<serde_json::Value> = layers
            .iter()
            .map(|l| {
                let digest = fake.put_blob(repo, l);
                serde_json::json!({
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest,
                    "size": l.len(),
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({"layers": layers})).unwrap()
    }

    #[tokio::test]
    async fn each_distinct_layer_is_fetched_once_and_the_top_layer_wins() {
        let fake = FakeRegistry::start().await;
        let client = fake.client();
        let base = gzip(&layer(&[
            file("var/lib/dpkg/status", "base\n"),
            file("etc/os-release", "ID=debian\n"),
            file("usr/bin/other", "not wanted"),
        ]));
        let go = gzip(&layer(&[file("var/lib/dpkg/status", "go\n")]));
        let node = gzip(&layer(&[file("etc/.wh.os-release", "")]));
        let go = manifest(&fake, "f/sandbox", &[&base, &go]);
        let node = manifest(&fake, "f/sandbox", &[&base, &node]);
        let repo: Repository = format!("{}/f/sandbox", fake.authority).parse().unwrap();
        let reader = LayerReader::default();
        let files = reader.files(&client, &repo, "go", &go).await.unwrap();
        assert_eq!(files["var/lib/dpkg/status"], b"go\n");
        assert_eq!(files["etc/os-release"], b"ID=debian\n");
        assert_eq!(files.len(), 2, "only the wanted paths: {files:?}");
        let files = reader.files(&client, &repo, "node", &node).await.unwrap();
        assert_eq!(files["var/lib/dpkg/status"], b"base\n");
        assert!(!files.contains_key("etc/os-release"), "whited out");
        assert_eq!(reader.fetched(), 3, "the shared base once");
        assert_eq!(fake.state().count("GET", "/blobs/"), 3);
    }

    #[tokio::test]
    async fn a_blob_that_is_not_a_layer_is_an_error_naming_its_digest_and_the_image() {
        let fake = FakeRegistry::start().await;
        let client = fake.client();
        let base = gzip(&layer(&[file("var/lib/dpkg/status", "base\n")]));
        // Gzip that holds no tar: before, "nothing wanted in it", and the
        // SBOM listed the base's packages as if it were not there.
        let bad = gzip(&b"corrupt".repeat(300));
        let m = manifest(&fake, "f/sandbox", &[&base, &bad]);
        let repo: Repository = format!("{}/f/sandbox", fake.authority).parse().unwrap();
        let err = LayerReader::default()
            .files(&client, &repo, "f/sandbox@sha256:12", &m)
            .await
            .unwrap_err();
        let digest = Digest::sha256(&bad);
        assert!(
            format!("{err:#}").starts_with(&format!(
                "f/sandbox@sha256:12: layer {digest} (2 of 2): the tar is corrupt: "
            )),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn a_link_to_a_new_place_reads_the_blobs_again_and_the_wider_reading_is_kept() {
        let fake = FakeRegistry::start().await;
        let client = fake.client();
        let base = gzip(&layer(&[
            file("var/lib/dpkg/status", "base\n"),
            file("opt/dpkg/status", "moved\n"),
        ]));
        let moved = gzip(&layer(&[
            file("var/lib/.wh.dpkg", ""),
            crate::normalize::tests::link(
                "var/lib/dpkg",
                tar::EntryType::Symlink,
                "../../opt/dpkg",
            ),
        ]));
        let plain = gzip(&layer(&[file("etc/os-release", "ID=debian\n")]));
        let moved = manifest(&fake, "f/sandbox", &[&base, &moved]);
        let plain = manifest(&fake, "f/sandbox", &[&base, &plain]);
        let repo: Repository = format!("{}/f/sandbox", fake.authority).parse().unwrap();
        let reader = LayerReader::default();
        let files = reader.files(&client, &repo, "moved", &moved).await.unwrap();
        assert_eq!(files["var/lib/dpkg/status"], b"moved\n");
        assert_eq!(
            reader.fetched(),
            4,
            "both layers again, for opt/dpkg/status"
        );
        // The base was last read for more paths than this image needs:
        // good for it, not fetched again.
        let files = reader.files(&client, &repo, "plain", &plain).await.unwrap();
        assert_eq!(files["var/lib/dpkg/status"], b"base\n");
        assert_eq!(reader.fetched(), 5);
    }
}
