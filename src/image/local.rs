//! A local image as a push would put it: one pass over the engine's
//! `save` stream gives each layer's diff_id (hashed as it is spilled) and,
//! where the caller lacks it, its compressed form ([`super::compress`]);
//! the stream's config is the one whose digest is the image ID; the
//! manifest is Docker's schema 2 of that config and the compressed layers
//! in the image's order. The release's push sends what this reads, and
//! `pins verify --rebuild` holds a rebuild to a pin with the manifest it
//! makes ([`local_manifest`]) without a registry: one reading of a local
//! image, so the rebuild's digest is the push's.

use super::compress::{self, Compressed};
use super::layer_cache::LayerCache;
use super::save_stream::LayerNames;
use crate::engine::{Engine, EngineError};
use crate::name::InvalidDigest;
use crate::process::ProcessError;
use crate::registry::{Digest, media_type};
use std::collections::BTreeMap;
use std::io::{BufReader, Read};

/// Docker's media type for a gzip-compressed layer.
const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Why a local image could not be read from the engine (or its manifest
/// made).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalError {
    #[error("{local} ({image_id}) is not in the engine")]
    NotInEngine { local: String, image_id: String },
    /// A digest the engine or the layer cache gave that is no digest.
    #[error("{text:?} is not a digest: {source}")]
    NotADigest { text: String, source: InvalidDigest },
    #[error("reading {local} from the engine")]
    ReadSave {
        local: String,
        #[source]
        source: Box<LocalError>,
    },
    #[error("the engine's save of {local} has no config whose digest is {image_id}")]
    NoConfig { local: String, image_id: String },
    #[error("layer {layer} of {local} was not in the engine's save")]
    LayerNotSaved { layer: String, local: String },
    #[error("{name} of the save stream is not the layer its name proves: {read}, not {expected}")]
    NotItsLayer {
        name: String,
        expected: String,
        read: String,
    },
    #[error("{name} ({size} bytes) in the save stream is neither a layer nor metadata")]
    NotALayer { name: String, size: u64 },
    /// Reading the save stream, spilling or compressing a layer.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// No temporary file for a layer being spilled or compressed.
    #[error("creating a file for {what}")]
    Scratch {
        what: &'static str,
        #[source]
        source: crate::scratch::ScratchError,
    },
    /// The engine's `save` (the program itself).
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Reading a local image fails operationally, but for the errors it
/// carries that say their own.
impl crate::exit::HasStatus for LocalError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            LocalError::NotInEngine { .. }
            | LocalError::NotADigest { .. }
            | LocalError::NoConfig { .. }
            | LocalError::LayerNotSaved { .. }
            | LocalError::NotALayer { .. }
            | LocalError::NotItsLayer { .. }
            | LocalError::Io { .. }
            | LocalError::Scratch { .. } => Status::Failure,
            LocalError::ReadSave { source, .. } => source.exit_status(),
            LocalError::Process(e) => e.exit_status(),
            LocalError::Engine(e) => e.exit_status(),
        }
    }
}

/// `context` for an I/O error of the save stream.
fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
    let context = context.into();
    move |source| LocalError::Io { context, source }
}

/// `what` for a temporary file that could not be made.
fn scratch(what: &'static str) -> impl FnOnce(crate::scratch::ScratchError) -> LocalError {
    move |source| LocalError::Scratch { what, source }
}

/// The manifest and config a push of the local image `image_id` would
/// put (`local` names it in messages), made without a registry: each
/// layer's compressed digest from the cache, else compressed now from one
/// `save`. A pure function of the image, as the push's is: `pins verify
/// --rebuild` holds a rebuild to a pin with it.
pub(crate) fn local_manifest(
    engine: &dyn Engine,
    local: &str,
    image_id: &str,
    cache: &LayerCache,
) -> Result<(Vec<u8>, Vec<u8>), LocalError> {
    let info = engine
        .inspect(image_id)?
        .ok_or_else(|| not_in_engine(local, image_id))?;
    let mut have: BTreeMap<String, Compressed> = info
        .layers
        .iter()
        .filter_map(|d| cache.compressed(d).map(|c| (d.clone(), c)))
        .collect();
    let mut config = cache.config(image_id);
    if have.len() < info.layers.len() || config.is_none() {
        let (small, compressed) = engine
            .save_cmd(image_id)
            .read_stdout(|out| {
                read_and_compress(
                    out,
                    std::slice::from_ref(&info.layers),
                    &LayerNames::default(),
                    None,
                    |d| have.get(d).cloned(),
                    // It keeps nothing of a layer it has.
                    |_| true,
                    // `pins verify --rebuild` signs nothing.
                    |_, _| {},
                    |handed| {
                        if let Handed::Done(c, _) = handed {
                            cache.remember(c);
                        }
                        Ok(())
                    },
                )
            })
            .map_err(|e| read_save(local, e.into_error()))?;
        for c in compressed {
            have.entry(c.diff_id.clone()).or_insert(c);
        }
        config = Some(config_in(small, local, image_id)?);
    }
    let config = config.expect("read from the cache or the save");
    cache.remember_config(&config);
    let manifest = manifest_of(
        local,
        &info.layers,
        &have,
        &parse_digest(image_id)?,
        config.len(),
    )?;
    Ok((manifest, config))
}

/// The image `image_id` (`local` names it) is not in the engine.
pub(crate) fn not_in_engine(local: &str, image_id: &str) -> LocalError {
    LocalError::NotInEngine {
        local: local.to_string(),
        image_id: image_id.to_string(),
    }
}

fn read_save(local: &str, source: LocalError) -> LocalError {
    LocalError::ReadSave {
        local: local.to_string(),
        source: Box::new(source),
    }
}

/// The config among a save stream's small files: the one whose digest is
/// the image ID.
pub(crate) fn config_in(
    small: Vec<Vec<u8>>,
    local: &str,
    image_id: &str,
) -> Result<Vec<u8>, LocalError> {
    small
        .into_iter()
        .find(|bytes| Digest::sha256(bytes).to_string() == image_id)
        .ok_or_else(|| LocalError::NoConfig {
            local: local.to_string(),
            image_id: image_id.to_string(),
        })
}

/// The manifest of the layers `diff_ids` (in order), each compressed as
/// `have` says.
pub(crate) fn manifest_of(
    local: &str,
    diff_ids: &[String],
    have: &BTreeMap<String, Compressed>,
    config: &Digest,
    config_size: usize,
) -> Result<Vec<u8>, LocalError> {
    let layers = diff_ids
        .iter()
        .map(|d| {
            have.get(d).ok_or_else(|| LocalError::LayerNotSaved {
                layer: d.clone(),
                local: local.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(manifest_bytes(config, config_size, &layers))
}

/// `s` as a digest (one the engine or the layer cache gave).
pub(crate) fn parse_digest(s: &str) -> Result<Digest, LocalError> {
    s.parse().map_err(|source| LocalError::NotADigest {
        text: s.to_string(),
        source,
    })
}

/// The schema-2 manifest of a config and its compressed layers (fixed key
/// order, compact).
fn manifest_bytes(config: &Digest, config_size: usize, layers: &[&Compressed]) -> Vec<u8> {
    let doc = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": media_type::DOCKER_MANIFEST,
        "config": {
            "mediaType": media_type::DOCKER_CONFIG,
            "size": config_size,
            "digest": config.to_string(),
        },
        "layers": layers.iter().map(|c| serde_json::json!({
            "mediaType": DOCKER_LAYER_GZIP,
            "size": c.size,
            "digest": c.digest,
        })).collect::<Vec<_>>(),
    });
    serde_json::to_vec(&doc).expect("a JSON value serialises")
}

/// One pass over a save stream: each layer whose compressed form the
/// caller lacks (`have` gives those it has, by diff_id) compressed into a
/// temporary file and handed to `each` (with the file); the small files
/// (configs, manifest.json) returned with the compressions made. Every
/// layer, compressed now or had, is shown to `spilled` with its
/// uncompressed spill (read from its start): the release notes there what
/// the SBOM needs of it, while it is on disk anyway.
///
/// A layer's diff_id is known only once it has been read (the stream names
/// layers by v1 ids), so each layer is first spilled uncompressed while it
/// is hashed, and compressed from the spill only when `have` lacks it:
/// pushing `full` after `base` compresses none of base's layers again; a
/// disk copy of a layer costs far less than compressing it. Unless `names`
/// knows the layer's name from an earlier save, or from the v1 JSON Docker
/// saved beside it (which proves the layer's place among `images`, the
/// diff_ids of the stream's images: [`LayerNames::learn_from_v1_json`]):
/// then, when `have` has it and `unread` says nothing more is wanted of its
/// bytes, the stream runs past it (neither spilled nor hashed nor shown to
/// `spilled`). Every layer read is learned into `names`.
///
/// A layer known so, that `have` lacks, of at least `stream_from` bytes
/// (when given), is compressed straight from the stream instead (spilled
/// for `spilled` as it passes, its bytes checked against the diff_id its
/// name proved): `each` is handed it as it starts ([`Handed::Started`]),
/// its compressed bytes growing in a file the caller can send as they come,
/// and again once done, without the file.
// The callbacks are the callers' own parts of one pass; a struct of them
// would only name them twice.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_and_compress<E: From<LocalError>>(
    input: &mut dyn Read,
    images: &[Vec<String>],
    names: &LayerNames,
    stream_from: Option<u64>,
    mut have: impl FnMut(&str) -> Option<Compressed>,
    mut unread: impl FnMut(&Compressed) -> bool,
    mut spilled: impl FnMut(&Compressed, &std::fs::File),
    mut each: impl FnMut(Handed<'_>) -> Result<(), E>,
) -> Result<(Vec<Vec<u8>>, Vec<Compressed>), E> {
    use std::io::{Seek as _, Write as _};
    let mut small = Vec::new();
    let mut done = Vec::new();
    let mut outer = crate::image::entries::BoundedTar::new(input);
    for entry in outer
        .entries()
        .map_err(io("the save stream is not a tar archive"))?
    {
        let entry = entry.map_err(io("reading the save stream"))?;
        if !matches!(
            entry.header().entry_type(),
            tar::EntryType::Regular | tar::EntryType::Continuous
        ) {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).to_string();
        let known = names.diff_id(&name);
        let had = known.as_deref().and_then(&mut have);
        if let Some(c) = &had
            && unread(c)
        {
            continue;
        }
        let size = entry.size();
        let reading = || io(format!("reading {name} of the save stream"));
        let mut entry = BufReader::with_capacity(256 << 10, entry);
        let is_layer =
            crate::image::save_stream::is_layer_file(&name, &mut entry).map_err(reading())?;
        if let (true, Some(from), Some(diff_id), None) = (is_layer, stream_from, &known, &had)
            && size >= from
        {
            let c = compress_streaming(&name, diff_id, &mut entry, &mut spilled, &mut each)?;
            done.push(c);
        } else if is_layer {
            let mut spill = crate::scratch::tempfile().map_err(scratch("a layer"))?;
            let mut tee =
                compress::Hashing::new(std::io::BufWriter::with_capacity(256 << 10, &mut spill));
            std::io::copy(&mut entry, &mut tee).map_err(reading())?;
            let (diff_id, mut writer) = tee.finish();
            names.learn(&name, &diff_id);
            let spilling = || io(format!("spilling {name} of the save stream"));
            writer.flush().map_err(spilling())?;
            drop(writer);
            spill.rewind().map_err(spilling())?;
            if let Some(c) = have(&diff_id) {
                spilled(&c, &spill);
                continue;
            }
            let file = crate::scratch::tempfile().map_err(scratch("a compressed layer"))?;
            let c = compress::gzip(
                BufReader::with_capacity(256 << 10, &spill),
                std::io::BufWriter::new(&file),
                diff_id,
            )
            .map_err(io(format!("compressing {name} of the save stream")))?;
            spill.rewind().map_err(spilling())?;
            spilled(&c, &spill);
            each(Handed::Done(&c, Some(file)))?;
            done.push(c);
        } else if size <= 64 << 20 {
            let mut bytes = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut bytes).map_err(reading())?;
            names.learn_from_v1_json(&name, &bytes, images);
            small.push(bytes);
        } else {
            return Err(LocalError::NotALayer { name, size }.into());
        }
    }
    Ok((small, done))
}

/// A layer compressed by [`read_and_compress`], as it hands it over.
pub(crate) enum Handed<'a> {
    /// Compressing the layer `diff_id` has begun: its compressed bytes
    /// grow in the blob given, which ends with their digest (or why not).
    Started(&'a str, std::sync::Arc<crate::registry::Growing>),
    /// The layer compressed, in the file given; `None` for one handed
    /// over as it [`Handed::Started`].
    Done(&'a Compressed, Option<std::fs::File>),
}

impl Handed<'_> {
    pub(crate) fn diff_id(&self) -> &str {
        match self {
            Handed::Started(d, _) => d,
            Handed::Done(c, _) => &c.diff_id,
        }
    }
}

/// The layer `name` (its diff_id known: `diff_id`) compressed from the
/// stream `entry` into a growing file handed to `each` as it starts (see
/// [`read_and_compress`]), spilled as it passes; its bytes must hash to
/// `diff_id`, or the blob ends unfinished and this fails.
fn compress_streaming<E: From<LocalError>>(
    name: &str,
    diff_id: &str,
    entry: &mut dyn Read,
    spilled: &mut dyn FnMut(&Compressed, &std::fs::File),
    each: &mut dyn FnMut(Handed<'_>) -> Result<(), E>,
) -> Result<Compressed, E> {
    use std::io::{Seek as _, Write as _};
    let mut spill = crate::scratch::tempfile().map_err(scratch("a layer"))?;
    let file = crate::scratch::tempfile().map_err(scratch("a compressed layer"))?;
    let handle = file
        .try_clone()
        .map_err(io(format!("opening the compressed {name} again")))?;
    let growing = crate::registry::Growing::new(handle);
    each(Handed::Started(diff_id, std::sync::Arc::clone(&growing)))?;
    let compressed = (|| -> Result<Compressed, LocalError> {
        let tee = compress::Tee {
            inner: entry,
            copy: std::io::BufWriter::with_capacity(256 << 10, &mut spill),
        };
        let mut input = compress::Hashing::new(tee);
        let out = Growth {
            file: &file,
            growing: &growing,
            written: 0,
        };
        let c = compress::gzip(
            &mut input,
            std::io::BufWriter::with_capacity(1 << 20, out),
            diff_id.to_string(),
        )
        .map_err(io(format!("compressing {name} of the save stream")))?;
        let (read, mut tee) = input.finish();
        tee.copy
            .flush()
            .map_err(io(format!("spilling {name} of the save stream")))?;
        if read != diff_id {
            return Err(LocalError::NotItsLayer {
                name: name.to_string(),
                expected: diff_id.to_string(),
                read,
            });
        }
        Ok(c)
    })();
    let c = match compressed.and_then(|c| Ok((parse_digest(&c.digest)?, c))) {
        Ok((digest, c)) => {
            growing.end(Ok(digest));
            c
        }
        Err(e) => {
            growing.end(Err(e.to_string()));
            return Err(e.into());
        }
    };
    spill
        .rewind()
        .map_err(io(format!("spilling {name} of the save stream")))?;
    spilled(&c, &spill);
    each(Handed::Done(&c, None))?;
    Ok(c)
}

/// Writes a blob's file, saying after each write how much it holds.
struct Growth<'a> {
    file: &'a std::fs::File,
    growing: &'a crate::registry::Growing,
    written: u64,
}

impl std::io::Write for Growth<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.file).write(buf)?;
        self.written += n as u64;
        self.growing.grew(self.written);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&mut &*self.file).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest as _;

    #[test]
    fn the_manifest_names_the_config_and_the_compressed_layers_in_order() {
        let config = Digest::sha256(b"{}");
        let layer = |n: u8, size| Compressed {
            diff_id: format!("sha256:{}", hex::encode([n; 32])),
            digest: format!("sha256:{}", hex::encode([n + 1; 32])),
            size,
        };
        let (a, b) = (layer(1, 10), layer(3, 20));
        let bytes = manifest_bytes(&config, 2, &[&a, &b]);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            format!(
                r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":2,"digest":"{config}"}},"layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":10,"digest":"{}"}},{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":20,"digest":"{}"}}]}}"#,
                a.digest, b.digest
            )
        );
        assert_eq!(manifest_bytes(&config, 2, &[&a, &b]), bytes);
    }

    #[test]
    fn a_save_stream_gives_each_layer_compressed_once_and_its_small_files() {
        let layer = crate::image::fixtures::layer(&[crate::image::fixtures::file("a", "x\n")]);
        let stream = crate::image::fixtures::save_stream(
            std::slice::from_ref(&layer),
            "2026-12-01T19:00:00Z",
        );
        let mut seen = Vec::new();
        let (small, done) = read_and_compress(
            &mut stream.as_slice(),
            &[],
            &LayerNames::default(),
            None,
            |_| None,
            |_| false,
            |_, _| {},
            |handed| {
                if let Handed::Done(c, _) = handed {
                    seen.push(c.clone());
                }
                Ok::<(), LocalError>(())
            },
        )
        .unwrap();
        assert_eq!(done, seen);
        assert_eq!(done.len(), 1);
        assert_eq!(
            done[0].diff_id,
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&layer)))
        );
        let mut again = Vec::new();
        assert_eq!(
            compress::gzip_unhashed(layer.as_slice(), &mut again).unwrap(),
            done[0]
        );
        // The config, manifest.json, repositories and the v1 files.
        assert!(
            small.iter().any(|s| s.starts_with(b"{\"architecture\"")),
            "{small:?}"
        );
    }

    /// A layer whose diff_id its name proved, that the caller lacks, is
    /// handed over as its compression starts, its bytes growing in a
    /// blob that ends with the same gzip a whole compression makes; it is
    /// spilled as it passes. A layer whose bytes are not the proved one
    /// fails, its blob ended unfinished.
    #[test]
    fn a_layer_known_by_name_is_compressed_as_it_streams_and_checked_against_its_name() {
        use crate::image::fixtures::{file, layer, save_stream};
        let a = layer(&[file("a", &"x\n".repeat(5000))]);
        let stream = save_stream(std::slice::from_ref(&a), "2026-12-01T19:00:00Z");
        let name = crate::image::fixtures::layer_names(&stream).remove(0);
        let diff_id = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&a)));
        let mut whole = Vec::new();
        let expected = compress::gzip_unhashed(a.as_slice(), &mut whole).unwrap();
        let run = |proved: &str| {
            let names = LayerNames::default();
            names.learn(&name, proved);
            let (mut started, mut done, mut spills) = (Vec::new(), Vec::new(), Vec::new());
            let read = read_and_compress(
                &mut stream.as_slice(),
                &[],
                &names,
                Some(0),
                |_| None,
                |_| false,
                |_, mut spill| {
                    let mut bytes = Vec::new();
                    spill.read_to_end(&mut bytes).unwrap();
                    spills.push(bytes);
                },
                |handed| {
                    match handed {
                        Handed::Started(d, growing) => started.push((d.to_string(), growing)),
                        Handed::Done(c, file) => done.push((c.clone(), file.is_some())),
                    }
                    Ok::<(), LocalError>(())
                },
            );
            (read, started, done, spills)
        };
        let (read, started, done, spills) = run(&diff_id);
        let (_, made) = read.unwrap();
        assert_eq!(made, std::slice::from_ref(&expected));
        assert_eq!(done, [(expected.clone(), false)], "done, without a file");
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].0, diff_id);
        assert_eq!(spills, std::slice::from_ref(&a));
        // The blob holds what a whole compression makes, and says so.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let growing = &started[0].1;
        let (written, end) = rt.block_on(growing.wait(u64::MAX));
        assert_eq!(written, whole.len() as u64);
        assert_eq!(end, Some(Ok(expected.digest.parse().unwrap())));
        assert_eq!(growing.read(0, whole.len()).unwrap(), whole);

        let other = format!("sha256:{}", "0".repeat(64));
        let (read, started, done, _) = run(&other);
        let err = read.unwrap_err();
        assert!(
            matches!(&err, LocalError::NotItsLayer { expected, read, .. }
                if *expected == other && *read == diff_id),
            "{err}"
        );
        assert!(done.is_empty());
        let (_, end) = rt.block_on(started[0].1.wait(u64::MAX));
        assert!(matches!(end, Some(Err(_))), "{end:?}");
    }

    #[test]
    fn a_layer_the_caller_has_is_read_past_not_compressed() {
        use crate::image::fixtures::{file, layer, save_stream};
        let (a, b) = (layer(&[file("a", "x\n")]), layer(&[file("b", "y\n")]));
        let stream = save_stream(&[a.clone(), b.clone()], "2026-12-01T19:00:00Z");
        let known = Compressed {
            diff_id: format!("sha256:{}", hex::encode(sha2::Sha256::digest(&b))),
            digest: format!("sha256:{}", "b".repeat(64)),
            size: 7,
        };
        let mut seen = Vec::new();
        let mut spills = Vec::new();
        let (small, done) = read_and_compress(
            &mut stream.as_slice(),
            &[],
            &LayerNames::default(),
            None,
            |d| (d == known.diff_id).then(|| known.clone()),
            |_| false,
            |c, mut spill| {
                let mut bytes = Vec::new();
                spill.read_to_end(&mut bytes).unwrap();
                spills.push((c.clone(), bytes));
            },
            |handed| {
                if let Handed::Done(c, _) = handed {
                    seen.push(c.diff_id.clone());
                }
                Ok::<(), LocalError>(())
            },
        )
        .unwrap();
        let first = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&a)));
        assert_eq!(seen, std::slice::from_ref(&first));
        // Every layer's spill is shown, whole, with its compressed form:
        // the one had as the caller has it, the other as made now.
        spills.sort_by(|x, y| x.1.cmp(&y.1));
        assert_eq!(spills, [(done[0].clone(), a.clone()), (known, b.clone())]);
        assert_eq!(
            done.iter().map(|c| &c.diff_id).collect::<Vec<_>>(),
            [&first]
        );
        // The config is still read from the stream.
        assert!(small.iter().any(|s| s.starts_with(b"{\"architecture\"")));
    }

    /// Another image's save that shows layers a save before it read, under
    /// the same names, runs past them when nothing more is wanted of them:
    /// neither spilled nor hashed, only its own layer read.
    #[test]
    fn a_layer_named_as_in_an_earlier_save_is_run_past_when_nothing_is_wanted_of_it() {
        use crate::image::fixtures::{file, layer, save_stream};
        let (a, b, c) = (
            layer(&[file("a", "x\n")]),
            layer(&[file("b", "y\n")]),
            layer(&[file("c", "z\n")]),
        );
        let names = LayerNames::default();
        let first = save_stream(&[a.clone(), b.clone()], "2026-12-01T19:00:00Z");
        let (_, had) = read_and_compress(
            &mut first.as_slice(),
            &[],
            &names,
            None,
            |_| None,
            |_| true,
            |_, _| {},
            |_| Ok::<(), LocalError>(()),
        )
        .unwrap();
        assert_eq!(had.len(), 2);
        let second = save_stream(&[a, b, c.clone()], "2026-12-01T19:00:00Z");
        // Spilled layers (their bytes) and compressed ones (diff_ids).
        let pass = |unread: bool| {
            let (mut spills, mut made) = (Vec::new(), Vec::new());
            read_and_compress(
                &mut second.as_slice(),
                &[],
                &names,
                None,
                |d| had.iter().find(|c| c.diff_id == d).cloned(),
                |_| unread,
                |_, mut spill| {
                    let mut bytes = Vec::new();
                    spill.read_to_end(&mut bytes).unwrap();
                    spills.push(bytes);
                },
                |handed| {
                    if let Handed::Done(c, _) = handed {
                        made.push(c.diff_id.clone());
                    }
                    Ok::<(), LocalError>(())
                },
            )
            .unwrap();
            (spills, made)
        };
        let c_id = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&c)));
        let (spills, made) = pass(true);
        assert_eq!((spills, &made), (vec![c.clone()], &vec![c_id.clone()]));
        // Wanted (say, for notes the cache lacks): read as before.
        let (spills, made) = pass(false);
        assert_eq!((spills.len(), made), (3, vec![c_id]));
    }
}
