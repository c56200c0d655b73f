//! The files an SBOM is made from ([`super::sbom::WANTED`]), read from an
//! image's layer blobs in a registry: each blob fetched, checked against
//! its digest, decompressed as a stream through the tar reader (only the
//! followed paths kept; see [`crate::image::files`]) and dropped before the
//! next is fetched, so memory holds one compressed layer and the wanted
//! files, never an image's layers together. What a blob said is kept by
//! digest: a family's images share their base layers, and a release reads
//! each distinct blob once. A blob that cannot be read is an error naming
//! its digest and the image.
//!
//! What a blob said can also be kept between releases ([`LayerNotes`]: the
//! release's layer cache, by the blob's digest): a release notes each layer
//! it reads anyway — staging reads every layer of an engine image it
//! compresses ([`note_layer`]), the attach step each blob it fetches — so
//! the attach step after staging, or a later release of the same layers,
//! fetches no blob. A note is what the blob would say (its digest names
//! the compressed bytes, the note what their tar holds at the wanted
//! paths), so the SBOM is the same bytes either way.

use super::AttestError;
use crate::image::files::{Composed, LayerFault, LayerFiles, Reading};
use crate::registry::{Client, Digest, Repository};
use serde::Deserialize;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// The largest layer blob read.
const MAX_LAYER: usize = crate::registry::MAX_COPIED_BLOB;

/// Where what layer blobs said ([`LayerFiles::encode`]) is kept between
/// releases, by the blob's digest. Keeping is best effort: a note that
/// cannot be written is read from the blob next time.
pub(crate) trait LayerNotes: std::fmt::Debug {
    /// The note of `blob`, if one was kept.
    fn noted(&self, blob: &Digest) -> Option<Vec<u8>>;
    /// Whether a note of `blob` is kept (without reading it).
    fn is_noted(&self, blob: &Digest) -> bool;
    fn note(&self, blob: &Digest, bytes: &[u8]);
}

/// The release's layer cache keeps the notes as its layer-files entries.
impl LayerNotes for crate::image::layer_cache::LayerCache {
    fn noted(&self, blob: &Digest) -> Option<Vec<u8>> {
        self.layer_files(blob)
    }

    fn is_noted(&self, blob: &Digest) -> bool {
        self.has_layer_files(blob)
    }

    fn note(&self, blob: &Digest, bytes: &[u8]) {
        self.remember_layer_files(blob, bytes);
    }
}

/// Notes what the uncompressed layer `layer`, whose compressed blob is
/// `blob`, holds at the SBOM's wanted paths, unless `notes` has it. A layer
/// that does not read is not noted (the attach step reads its blob then,
/// and says what is wrong with it).
pub(crate) fn note_layer(notes: &dyn LayerNotes, blob: &Digest, layer: impl std::io::Read) {
    if notes.is_noted(blob) {
        return;
    }
    if let Ok(files) = Reading::new(&super::sbom::WANTED).scan_blob(layer) {
        notes.note(blob, &files.encode());
    }
}

/// Reads images' wanted files from their layers, each distinct blob once
/// (again only when another image's links lead where it was not read),
/// none whose note is kept.
#[derive(Debug, Default)]
pub(crate) struct LayerReader {
    seen: RefCell<BTreeMap<Digest, Rc<LayerFiles>>>,
    fetched: Cell<usize>,
    notes: Option<Box<dyn LayerNotes>>,
}

impl LayerReader {
    /// A reader that takes what `notes` kept before fetching a blob, and
    /// notes each blob it fetches.
    pub(crate) fn keeping(notes: Box<dyn LayerNotes>) -> LayerReader {
        LayerReader {
            notes: Some(notes),
            ..LayerReader::default()
        }
    }

    /// Fetches `blob` and reads it for `reading` (noted, when notes are
    /// kept); a blob that does not read is the inner error.
    async fn fetch(
        &self,
        client: &Client,
        repo: &Repository,
        blob: &Digest,
        reading: &Reading,
    ) -> Result<Result<LayerFiles, LayerFault>, AttestError> {
        let bytes = client.fetch_blob(repo, blob, MAX_LAYER).await?;
        self.fetched.set(self.fetched.get() + 1);
        let files = reading.scan_blob(bytes.as_slice());
        if let (Ok(files), Some(notes)) = (&files, &self.notes) {
            notes.note(blob, &files.encode());
        }
        Ok(files)
    }

    /// What was kept of `blob`, if it serves `reading`.
    fn kept(&self, blob: &Digest, reading: &Reading) -> Option<LayerFiles> {
        let bytes = self.notes.as_ref()?.noted(blob)?;
        LayerFiles::decode(&bytes).filter(|f| reading.covered_by(f))
    }

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
                        let files = match self.kept(&l.digest, &reading) {
                            Some(f) => f,
                            None => {
                                let named = || format!("{} ({} of {count})", l.digest, i + 1);
                                (self.fetch(client, repo, &l.digest, &reading).await?)
                                    .map_err(|fault| fault.named(image, &named()))?
                            }
                        };
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
    use crate::image::fixtures::{file, layer};
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

    /// What one release read of a blob is kept: a later reader (the next
    /// release) fetches none, a garbled note is read from the blob again,
    /// and a note read for fewer paths than a link needs is no excuse.
    #[tokio::test]
    async fn a_kept_note_spares_the_fetch_and_the_files_are_the_same() {
        let fake = FakeRegistry::start().await;
        let client = fake.client();
        let base = gzip(&layer(&[
            file("var/lib/dpkg/status", "base\n"),
            file("etc/os-release", "ID=debian\n"),
        ]));
        let go = gzip(&layer(&[file("var/lib/dpkg/status", "go\n")]));
        let go = manifest(&fake, "f/sandbox", &[&base, &go]);
        let repo: Repository = format!("{}/f/sandbox", fake.authority).parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = crate::image::layer_cache::LayerCache::open(dir.path()).unwrap();
        let first = LayerReader::keeping(Box::new(cache.clone()));
        let read = first.files(&client, &repo, "go", &go).await.unwrap();
        assert_eq!(first.fetched(), 2);
        assert!(cache.is_noted(&Digest::sha256(&base)));
        let later = LayerReader::keeping(Box::new(cache.clone()));
        assert_eq!(later.files(&client, &repo, "go", &go).await.unwrap(), read);
        assert_eq!(later.fetched(), 0, "both layers noted");
        assert_eq!(fake.state().count("GET", "/blobs/"), 2);

        cache.note(&Digest::sha256(&base), b"{\"format\":1,");
        let garbled = LayerReader::keeping(Box::new(cache.clone()));
        assert_eq!(
            garbled.files(&client, &repo, "go", &go).await.unwrap(),
            read
        );
        assert_eq!(garbled.fetched(), 1, "the base again, and noted again");
        assert!(LayerFiles::decode(&cache.noted(&Digest::sha256(&base)).unwrap()).is_some());

        // dpkg's directory linked elsewhere on top: the notes were read for
        // the wanted paths only, so the layers are fetched for the link.
        let moved = gzip(&layer(&[
            file("var/lib/.wh.dpkg", ""),
            crate::image::fixtures::link("var/lib/dpkg", tar::EntryType::Symlink, "/opt/dpkg"),
            file("opt/dpkg/status", "moved\n"),
        ]));
        let moved = manifest(&fake, "f/sandbox", &[&base, &moved]);
        let files = later.files(&client, &repo, "moved", &moved).await.unwrap();
        assert_eq!(files["var/lib/dpkg/status"], b"moved\n");
        assert_eq!(later.fetched(), 3, "the new top, then both for opt/dpkg");
        let wider = LayerFiles::decode(&cache.noted(&Digest::sha256(&base)).unwrap()).unwrap();
        let mut reading = Reading::new(&super::super::sbom::WANTED);
        reading
            .follow("moved", ["opt/dpkg/status".to_string()].into())
            .unwrap();
        assert!(reading.covered_by(&wider), "the wider reading is kept");
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
            crate::image::fixtures::link("var/lib/dpkg", tar::EntryType::Symlink, "../../opt/dpkg"),
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
