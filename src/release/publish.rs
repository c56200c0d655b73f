//! A checked local image pushed by this client: each layer compressed here
//! ([`crate::image::compress`]: one pinned compressor, fixed settings), so the
//! pushed manifest's digest is a function of the image alone, on any engine.
//!
//! This replaces the engine's `push`. The engine compresses with its own
//! gzip and remembers what it sent; two engines (or one after a prune)
//! give one image two digests. Here the cost an engine's push avoids is
//! avoided the same way: [`LayerCache`] maps each uncompressed layer to
//! the compressed digest made before, and a layer whose blob the target
//! repository has (one HEAD) is neither read nor compressed nor sent. An
//! unchanged family is pushed with HEADs and a manifest PUT, without
//! reading the image from the engine at all. Otherwise the image is read
//! once as a `save` stream ([`crate::image::local`], the reading the
//! rebuild's manifest shares); every layer in it is compressed once into a
//! temporary file (memory holds buffers, never a layer) and remembered,
//! and the missing ones are uploaded from there, a few at once
//! ([`UPLOADS_AT_ONCE`]), while the next is compressed (the stream is read
//! on a blocking thread: [`Saving`]).
//!
//! The manifest is Docker's schema 2, as the engine's push wrote it (every
//! reader of this family knows it); its config is the image's config
//! byte for byte, so its digest is the checked image's ID.

use super::claims::{GiveUpOnDrop, LayerClaims};
use crate::engine::{Engine, EngineError};
use crate::image::compress::Compressed;
use crate::image::layer_cache::LayerCache;
use crate::image::local::{
    Handed, LocalError, config_in, manifest_of, not_in_engine, parse_digest, read_and_compress,
};
use crate::process::{PipeError, ProcessError};
use crate::registry::{self, Client, Digest, Manifest, Reference, Repository, media_type};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;

/// Why a local image could not be pushed (or its manifest made).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    #[error("{local} ({image_id}): the engine lists no layers for it")]
    NoLayers { local: String, image_id: String },
    #[error("reading {local} from the engine")]
    ReadSave {
        local: String,
        #[source]
        source: Box<PublishError>,
    },
    /// The image that was to send a shared layer stopped before it did.
    #[error("layer {layer} of {local} was to be sent by {owner}, which stopped")]
    OwnerStopped {
        layer: String,
        local: String,
        owner: String,
    },
    /// The registry stored the bytes sent under another digest.
    #[error("the compressed layer {layer} was {sent} when uploaded")]
    UploadedAs { layer: String, sent: Digest },
    /// Mapping a compressed layer to send it.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The layers' uploads stopped (one failed), so the save stream is
    /// read no further.
    #[error("the upload of the compressed layers stopped")]
    UploadStopped,
    /// Reading the local image: its save, its config, its manifest.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// The layer cache cannot be opened.
    #[error(transparent)]
    Cache(#[from] crate::image::layer_cache::CacheError),
    /// The one `save` stream of the images exported together failed.
    #[error("the save of {} (one stream for them all): {}", .0.images, .0.message)]
    ExportedTogether(super::export::ExportFailure),
    /// The engine's `save` (the program itself).
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Registry(#[from] registry::Error),
}

/// Pushing fails operationally, but for the errors it carries that say
/// their own.
impl crate::exit::HasStatus for PublishError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            PublishError::NoLayers { .. }
            | PublishError::UploadedAs { .. }
            | PublishError::OwnerStopped { .. }
            | PublishError::Io { .. }
            | PublishError::UploadStopped
            | PublishError::Cache(_) => Status::Failure,
            PublishError::ReadSave { source, .. } => source.exit_status(),
            PublishError::ExportedTogether(f) => f.status,
            PublishError::Local(e) => e.exit_status(),
            PublishError::Process(e) => e.exit_status(),
            PublishError::Engine(e) => e.exit_status(),
            PublishError::Registry(e) => e.exit_status(),
        }
    }
}

/// `context` for an I/O error of a compressed layer.
fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PublishError {
    let context = context.into();
    move |source| PublishError::Io { context, source }
}

fn read_save(local: &str, source: PublishError) -> PublishError {
    PublishError::ReadSave {
        local: local.to_string(),
        source: Box::new(source),
    }
}

/// What pushing one image did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PushStats {
    /// Layers the repository had already (by the cache's digest).
    pub present: usize,
    /// Layers mounted from another repository of the registry.
    pub mounted: usize,
    /// Layers compressed now (read from the engine).
    pub compressed: usize,
    /// Layers uploaded, and their compressed bytes.
    pub uploaded: usize,
    pub uploaded_bytes: u64,
}

/// Where a push puts the manifest: at a tag, or in a repository by its
/// digest alone (no tag is written: a release stages that way).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    Tag(&'a Reference),
    Digest(&'a Repository),
}

impl Target<'_> {
    fn repo(&self) -> &Repository {
        match self {
            Target::Tag(r) => r.repo(),
            Target::Digest(repo) => repo,
        }
    }

    /// The reference the manifest `bytes` is PUT at.
    fn reference(&self, bytes: &[u8]) -> Reference {
        match self {
            Target::Tag(r) => (*r).clone(),
            Target::Digest(repo) => Reference::in_repo(repo, Digest::sha256(bytes)),
        }
    }
}

/// Pushes the local image `image_id` (the checked image; `local` names it
/// in messages) to `target` and returns the manifest the registry holds.
pub(crate) async fn push_checked(
    engine: &dyn Engine,
    client: &Client,
    local: &str,
    target: Target<'_>,
    image_id: &str,
) -> Result<Manifest, PublishError> {
    let cache = LayerCache::for_user()?;
    let claims = LayerClaims::default();
    let pushing = push_image(
        engine,
        client,
        local,
        target,
        image_id,
        &cache,
        &claims,
        &|_| None,
    );
    Ok(pushing.await?.0)
}

/// [`push_checked`] with a given cache, saying what it did. `claims`: the
/// layers other images of the release send (this one waits for those,
/// reading past them in its save once they are compressed, and putting its
/// manifest once they are sent), and the ones it sends for them.
/// `from_config`: a blob made from the image's config to go up with it (a
/// release's stamped config), or `None` when it cannot be made (whoever
/// asked makes it again and says why); it is called once, with the config
/// this push puts. The config and that blob go up
/// while the layers do, as soon as the config is known, so the image's
/// last layer is followed by its manifest alone. The config is remembered
/// in `cache`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn push_image(
    engine: &dyn Engine,
    client: &Client,
    local: &str,
    target: Target<'_>,
    image_id: &str,
    cache: &LayerCache,
    claims: &LayerClaims,
    from_config: &FromConfig<'_>,
) -> Result<(Manifest, PushStats), PublishError> {
    // However this push ends, whoever waits for a layer it owns stops
    // waiting (the layers it sent stay sent).
    let _give_up = GiveUpOnDrop { claims, me: local };
    let repo = target.repo();
    let layers = layers_of(engine, claims, local, image_id)?;
    if layers.is_empty() {
        return Err(PublishError::NoLayers {
            local: local.to_string(),
            image_id: image_id.to_string(),
        });
    }
    let mut stats = PushStats::default();
    let mine = Mine { claims, me: local };
    let mut have = in_repository(client, repo, cache, &mine, &layers, &mut stats).await?;
    let mut theirs = claims.theirs(local, &layers);
    theirs.retain(|d, _| !have.contains_key(d));
    let known_config = cache.config(image_id);
    let wanted: BTreeSet<&String> = layers
        .iter()
        .filter(|d| !have.contains_key(*d) && !theirs.contains_key(*d))
        .collect();
    let configs_up = |config: Vec<u8>| async {
        let also = from_config(&config);
        send_configs(client, repo, cache, image_id, &config, also).await?;
        Ok::<_, PublishError>(config)
    };
    let config = match known_config {
        Some(config) if wanted.is_empty() && theirs.is_empty() => {
            claims.pass_turn(local);
            configs_up(config).await?
        }
        known_config => {
            let Saving {
                layers: handed,
                reading,
            } = match claims.shared_export(local) {
                Some(shared) => {
                    let joining = super::export::Joining {
                        me: local,
                        image_id,
                        diff_ids: &layers,
                        have: &have,
                    };
                    let (layers, part) = shared.join(engine, claims, cache, joining).await;
                    Saving {
                        layers,
                        reading: Reading::Shared(part),
                    }
                }
                None => {
                    let turn = claims.export_turn(local).await;
                    let save = engine.save_cmd(image_id);
                    Saving::start(save, &layers, turn, &have, theirs.clone(), cache, &mine)
                }
            };
            // The configs go up once the stream is read (the config is in it),
            // while its last layers are still going up.
            let read_then_configs = async {
                let (small, compressed) =
                    (reading.finish().await).map_err(|e| read_save(local, e.into_error()))?;
                let config = match known_config {
                    Some(config) => config,
                    None => config_in(small, local, image_id)?,
                };
                Ok::<_, PublishError>((configs_up(config).await?, compressed))
            };
            let uploading = upload_as_compressed(client, repo, handed, &wanted, &mine, &mut stats);
            let (uploaded, read) = futures::join!(uploading, read_then_configs);
            // An upload that failed stopped the save: its error is the cause.
            uploaded?;
            let (config, compressed) = read?;
            stats.compressed = compressed.len();
            for c in compressed {
                have.entry(c.diff_id.clone()).or_insert(c);
            }
            config
        }
    };
    for (diff_id, t) in theirs {
        let c = t.sent().await.ok_or_else(|| PublishError::OwnerStopped {
            layer: diff_id.clone(),
            local: local.to_string(),
            owner: t.owner.clone(),
        })?;
        have.insert(diff_id, c);
    }
    let config_digest = parse_digest(image_id)?;
    let bytes = manifest_of(local, &layers, &have, &config_digest, config.len())?;
    let here = repo.to_string();
    for c in have.values() {
        cache.remember_location(&c.digest, &here);
    }
    cache.remember_location(image_id, &here);
    let digest = client
        .put_manifest(
            &target.reference(&bytes),
            media_type::DOCKER_MANIFEST,
            Bytes::from(bytes.clone()),
        )
        .await?;
    Ok((
        Manifest {
            bytes,
            media_type: media_type::DOCKER_MANIFEST.to_string(),
            digest,
        },
        stats,
    ))
}

/// Makes, from an image's config, a blob to go up with it
/// ([`push_image`]'s `from_config`).
pub(crate) type FromConfig<'a> = dyn Fn(&[u8]) -> Option<Bytes> + Sync + 'a;

/// Puts the config `config` of the image `image_id` in `repo` (unless it
/// is there, or mounted from another repository this machine put it in)
/// and remembers it in `cache`; and `also`, unless it is there. At once.
async fn send_configs(
    client: &Client,
    repo: &Repository,
    cache: &LayerCache,
    image_id: &str,
    config: &[u8],
    also: Option<Bytes>,
) -> Result<(), PublishError> {
    cache.remember_config(config);
    let config_digest = parse_digest(image_id)?;
    let image_config = async {
        if client.blob_size(repo, &config_digest).await?.is_none()
            && !mounted_from_elsewhere(client, repo, cache, image_id, config.len() as u64).await
        {
            client
                .upload_blob(repo, Bytes::from(config.to_vec()))
                .await?;
        }
        Ok::<_, PublishError>(())
    };
    let also = async {
        if let Some(blob) = also
            && client
                .blob_size(repo, &Digest::sha256(&blob))
                .await?
                .is_none()
        {
            client.upload_blob(repo, blob).await?;
        }
        Ok(())
    };
    futures::future::try_join(image_config, also).await?;
    Ok(())
}

/// The layers (diff_ids) of the local image `image_id` (`local`): as the
/// release asked the engine for them, or asked now.
fn layers_of(
    engine: &dyn Engine,
    claims: &LayerClaims,
    local: &str,
    image_id: &str,
) -> Result<Vec<String>, PublishError> {
    if let Some(layers) = claims.layers(local) {
        return Ok(layers.to_vec());
    }
    // A program run (docker inspect) that borrows the engine, and the
    // next step needs its answer: run here, the runtime told.
    let info = tokio::task::block_in_place(|| engine.inspect(image_id))?
        .ok_or_else(|| not_in_engine(local, image_id))?;
    Ok(info.layers)
}

/// The layers of `layers` the cache knows compressed that `repo` has
/// (one HEAD each, all at once: the client bounds them per registry) or
/// that were mounted there from another repository this machine put them
/// in; each is marked sent in the claims. The blob itself is not read
/// (that is what the cache saves), but its size must be the one
/// remembered: an entry that names some other blob of the repository is a
/// miss, compressed again.
async fn in_repository(
    client: &Client,
    repo: &Repository,
    cache: &LayerCache,
    mine: &Mine<'_>,
    layers: &[String],
    stats: &mut PushStats,
) -> Result<BTreeMap<String, Compressed>, PublishError> {
    let mut have: BTreeMap<String, Compressed> = BTreeMap::new();
    let cached: Vec<(&String, Compressed)> = (layers.iter())
        .filter_map(|diff_id| cache.compressed(diff_id).map(|c| (diff_id, c)))
        .collect();
    let digests = (cached.iter())
        .map(|(_, c)| parse_digest(&c.digest))
        .collect::<Result<Vec<_>, _>>()?;
    let sizes = client.blob_sizes(repo, &digests).await?;
    let mut absent = Vec::new();
    for ((diff_id, c), size) in cached.into_iter().zip(sizes) {
        if size == Some(c.size) {
            mine.claims.sent(mine.me, &c);
            have.insert(diff_id.clone(), c);
        } else if size.is_none() {
            absent.push(c);
        }
    }
    stats.present = have.len();
    for c in mount_from_elsewhere(client, repo, cache, absent).await {
        mine.claims.sent(mine.me, &c);
        stats.mounted += 1;
        have.insert(c.diff_id.clone(), c);
    }
    Ok(have)
}

/// How many of a blob's remembered repositories a push tries to mount it
/// from (the latest first): a registry that refuses mounts costs two
/// round trips per repository tried.
const MOUNT_TRIES: usize = 2;

/// The layers of `absent` (compressed before, not in `repo`) that
/// [`mounted_from_elsewhere`], all at once.
async fn mount_from_elsewhere(
    client: &Client,
    repo: &Repository,
    cache: &LayerCache,
    absent: Vec<Compressed>,
) -> Vec<Compressed> {
    let tries = (absent.into_iter()).map(|c| async move {
        (mounted_from_elsewhere(client, repo, cache, &c.digest, c.size).await).then_some(c)
    });
    futures::future::join_all(tries)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Whether the blob `digest` (of `size` bytes), absent from `repo`, was
/// mounted there from another repository of the same registry this
/// machine put it in (a previous release's: [`LayerCache::locations`]),
/// and is there at that size. A mount that fails or is refused leaves the
/// blob to be sent.
async fn mounted_from_elsewhere(
    client: &Client,
    repo: &Repository,
    cache: &LayerCache,
    digest: &str,
    size: u64,
) -> bool {
    let Ok(parsed) = parse_digest(digest) else {
        return false;
    };
    for from in cache.locations(digest).into_iter().take(MOUNT_TRIES) {
        let Ok(from) = from.parse::<Repository>() else {
            continue;
        };
        if from == *repo || from.registry() != repo.registry() {
            continue;
        }
        if matches!(client.mount_blob(&from, repo, &parsed).await, Ok(true)) {
            return client.blob_size(repo, &parsed).await.ok().flatten() == Some(size);
        }
    }
    false
}

/// How many layers of one image are uploaded at once. Each is a file
/// on disk until it is sent; a link with latency wants several streams
/// (one stream's HEAD, POST and PUT round trips are idle time for the
/// link), and the client's per-registry limit bounds the requests anyway.
const UPLOADS_AT_ONCE: usize = 3;

/// The image whose push this is, among the release's claims.
#[derive(Clone, Copy)]
struct Mine<'a> {
    claims: &'a LayerClaims,
    me: &'a str,
}

/// Uploads each layer of `wanted` as [`Saving`] hands it over (`handed`),
/// up to [`UPLOADS_AT_ONCE`] at once, while the next is compressed; a
/// diff_id met twice in the stream goes once. Each layer in the repository
/// is marked sent in the claims. The first failure stops taking layers
/// (the uploads in flight are dropped, and so is `handed`: a reader still
/// at work stops at its next layer) and is the result.
async fn upload_as_compressed(
    client: &Client,
    repo: &Repository,
    mut handed: tokio::sync::mpsc::Receiver<Ready>,
    wanted: &BTreeSet<&String>,
    mine: &Mine<'_>,
    stats: &mut PushStats,
) -> Result<(), PublishError> {
    use futures::StreamExt as _;
    let mut started: BTreeSet<String> = BTreeSet::new();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut stream_ended = false;
    loop {
        if stream_ended && in_flight.is_empty() {
            return Ok(());
        }
        tokio::select! {
            // An upload ended: its room goes to the next layer.
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                // A layer never finished: the save's error says why.
                let Some((c, sent)) = done? else {
                    continue;
                };
                if let Some(bytes) = sent {
                    stats.uploaded += 1;
                    stats.uploaded_bytes += bytes;
                }
                mine.claims.sent(mine.me, &c);
            }
            next = handed.recv(), if !stream_ended && in_flight.len() < UPLOADS_AT_ONCE => {
                match next {
                    Some(ready) => {
                        let diff_id = ready.diff_id().to_string();
                        if wanted.contains(&diff_id) && started.insert(diff_id) {
                            in_flight.push(upload(client, repo, ready));
                        }
                    }
                    None => stream_ended = true,
                }
            }
        }
    }
}

/// What [`read_and_compress`] gives for one save stream.
pub(super) type SaveRead = Result<(Vec<Vec<u8>>, Vec<Compressed>), PipeError<PublishError>>;

/// The engine's `save` of one image read on a blocking thread (a program,
/// a tar stream, gzip: work that would hold an async thread for minutes),
/// each layer compressed there, remembered in the cache and handed over
/// with its temporary file as soon as it is made. The thread owns what it
/// reads with (the command, the diff_ids already had, a cache handle), so
/// the async side is free meanwhile: it uploads layers while the next is
/// compressed. One layer waits in the hand-over at most, so the disk holds
/// [`UPLOADS_AT_ONCE`] + 2 compressed layers at most, not an image's.
struct Saving {
    layers: tokio::sync::mpsc::Receiver<Ready>,
    reading: Reading,
}

/// A layer for the uploads: compressed whole in its temporary file, or
/// (a large layer whose diff_id its name proved) being compressed into a
/// growing one, sent as it grows ([`crate::image::local::Handed`]).
pub(crate) enum Ready {
    Whole(Compressed, std::fs::File),
    Growing(String, std::sync::Arc<crate::registry::Growing>),
}

impl Ready {
    /// What the uploads get of a layer `read_and_compress` handed over:
    /// its growing blob as it starts; once done, `done` is told of it, and
    /// the uploads get its file (`None` for one they had as it started).
    pub(super) fn of(handed: Handed<'_>, done: impl FnOnce(&Compressed)) -> Option<Ready> {
        match handed {
            Handed::Started(d, growing) => Some(Ready::Growing(d.to_string(), growing)),
            Handed::Done(c, file) => {
                done(c);
                Some(Ready::Whole(c.clone(), file?))
            }
        }
    }

    fn diff_id(&self) -> &str {
        match self {
            Ready::Whole(c, _) => &c.diff_id,
            Ready::Growing(d, _) => d,
        }
    }
}

/// Layers of at least this many uncompressed bytes are sent while they
/// are compressed (when their diff_id is known before they are read): a
/// chunk goes up as soon as the compressor has written one, instead of
/// after the whole layer. Smaller ones are compressed whole and HEADed
/// first, as before: they would fit in a chunk or two anyway.
pub(crate) const STREAM_FROM: u64 = 32 << 20;

/// Who reads the stream: this push, or the images exported together
/// ([`super::export`]).
enum Reading {
    Own(tokio::task::JoinHandle<SaveRead>),
    Shared(super::export::Part),
}

impl Reading {
    /// Waits for the reading thread (or the shared export): the small
    /// files and the layers compressed.
    async fn finish(self) -> SaveRead {
        match self {
            Reading::Own(reading) => match reading.await {
                Ok(read) => read,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            },
            Reading::Shared(part) => part.finish().await,
        }
    }
}

impl Saving {
    /// `theirs`: the layers other images send, read past once their owner
    /// has compressed them (the thread waits for that). `turn`, this
    /// image's turn to be exported, ends with the stream's first byte.
    fn start(
        save: crate::process::Cmd,
        diff_ids: &[String],
        turn: super::claims::ExportTurn,
        have: &BTreeMap<String, Compressed>,
        theirs: BTreeMap<String, super::claims::Theirs>,
        cache: &LayerCache,
        mine: &Mine<'_>,
    ) -> Saving {
        let have = have.clone();
        let diff_ids = diff_ids.to_vec();
        let cache = cache.clone();
        let (claims, me) = (mine.claims.clone(), mine.me.to_string());
        let (send, layers) = tokio::sync::mpsc::channel(1);
        let reading = tokio::task::spawn_blocking(move || {
            save.read_stdout(|out| {
                let mut out = EndsTurn::new(out, turn);
                read_and_compress(
                    &mut out,
                    std::slice::from_ref(&diff_ids),
                    claims.names(),
                    Some(STREAM_FROM),
                    |d| (have.get(d).cloned()).or_else(|| theirs.get(d)?.compressed_blocking()),
                    |c| is_noted(&cache, c),
                    |c, spill| note_layer(&cache, c, spill),
                    |handed| {
                        let ready = Ready::of(handed, |c| {
                            cache.remember(c);
                            claims.compressed(&me, c);
                        });
                        match ready {
                            Some(ready) => {
                                (send.blocking_send(ready)).map_err(|_| PublishError::UploadStopped)
                            }
                            None => Ok(()),
                        }
                    },
                )
            })
        });
        Saving {
            layers,
            reading: Reading::Own(reading),
        }
    }
}

/// A `save` stream that ends its image's export turn once the engine has
/// answered the first read (Docker writes the whole image out first): the
/// next image's export starts while this one is read.
pub(super) struct EndsTurn<'a> {
    inner: &'a mut dyn std::io::Read,
    turn: Option<super::claims::ExportTurn>,
}

impl<'a> EndsTurn<'a> {
    pub(super) fn new(inner: &'a mut dyn std::io::Read, turn: super::claims::ExportTurn) -> Self {
        EndsTurn {
            inner,
            turn: Some(turn),
        }
    }
}

impl std::io::Read for EndsTurn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf);
        self.turn.take();
        read
    }
}

/// Notes in `cache` what the SBOM needs of the layer compressed as `c`,
/// read from its uncompressed `spill` (see [`read_and_compress`]): the
/// attach step then fetches no blob of it.
/// Whether `cache` has what the SBOM needs of the layer compressed as `c`
/// (all a push wants of a layer it has: [`note_layer`] made it).
pub(super) fn is_noted(cache: &LayerCache, c: &Compressed) -> bool {
    use crate::attest::registry_image::LayerNotes as _;
    (c.digest.parse::<Digest>()).is_ok_and(|blob| cache.is_noted(&blob))
}

pub(super) fn note_layer(cache: &LayerCache, c: &Compressed, spill: &std::fs::File) {
    if let Ok(blob) = c.digest.parse::<Digest>() {
        let spill = BufReader::with_capacity(256 << 10, spill);
        crate::attest::registry_image::note_layer(cache, &blob, spill);
    }
}

/// Uploads one layer: whole from its temporary file (mapped, not read into
/// memory), HEAD first; or as it is compressed. The layer and its
/// compressed size when it was sent (`None` when the repository had it);
/// `None` for a layer whose compression never finished.
async fn upload(
    client: &Client,
    repo: &Repository,
    ready: Ready,
) -> Result<Option<(Compressed, Option<u64>)>, PublishError> {
    let (c, file) = match ready {
        Ready::Whole(c, file) => (c, file),
        Ready::Growing(diff_id, growing) => {
            let what = format!("the layer {diff_id}, sent as it is compressed");
            let Some((digest, size)) = client.upload_growing(repo, &growing, &what).await? else {
                return Ok(None);
            };
            let digest = digest.to_string();
            return Ok(Some((
                Compressed {
                    diff_id,
                    digest,
                    size,
                },
                Some(size),
            )));
        }
    };
    let digest = parse_digest(&c.digest)?;
    if client.blob_size(repo, &digest).await?.is_some() {
        return Ok(Some((c, None)));
    }
    // Safety of the map: the file is ours (a fresh temporary file nobody
    // else knows of) and is not written while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("mapping the compressed layer"))?;
    let sent = client.upload_blob(repo, Bytes::from_owner(map)).await?;
    if sent != digest {
        return Err(PublishError::UploadedAs {
            layer: c.digest.clone(),
            sent,
        });
    }
    let size = c.size;
    Ok(Some((c, Some(size))))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::image::compress;
    use sha2::Digest as _;

    /// What a push test starts from: a runtime (`workers` threads), a fake
    /// registry, its client, the repository `a/b` there and an empty layer
    /// cache.
    pub(crate) struct PushRig {
        pub(crate) rt: tokio::runtime::Runtime,
        pub(crate) reg: crate::registry::fake::FakeRegistry,
        pub(crate) client: Client,
        pub(crate) repo: Repository,
        pub(crate) cache: LayerCache,
        _cache_dir: tempfile::TempDir,
    }

    impl PushRig {
        pub(crate) fn new(workers: usize) -> PushRig {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap();
            let reg = rt.block_on(crate::registry::fake::FakeRegistry::start());
            let client = reg.client();
            let repo: Repository = format!("{}/a/b", reg.authority).parse().unwrap();
            let cache_dir = tempfile::tempdir().unwrap();
            let cache = LayerCache::open(cache_dir.path()).unwrap();
            PushRig {
                rt,
                reg,
                client,
                repo,
                cache,
                _cache_dir: cache_dir,
            }
        }

        /// `engine`'s image pushed alone (no other image's claims).
        pub(crate) fn push(&self, engine: &Saved) -> Result<(Manifest, PushStats), PublishError> {
            self.rt.block_on(push_image(
                engine,
                &self.client,
                "local",
                Target::Digest(&self.repo),
                &engine.info.id,
                &self.cache,
                &LayerClaims::default(),
                &|_| None,
            ))
        }
    }

    /// An engine holding one image: `inspect` answers `info`, `save` prints
    /// the stream at `stream`.
    #[derive(Clone)]
    pub(crate) struct Saved {
        pub(crate) info: crate::engine::ImageInfo,
        pub(crate) stream: std::path::PathBuf,
    }

    impl Engine for Saved {
        fn describe(&self) -> String {
            "saved".into()
        }
        fn program(&self) -> &std::path::Path {
            std::path::Path::new("/bin/false")
        }
        fn log_format(&self) -> crate::engine::LogFormat {
            crate::engine::LogFormat::BuildKit
        }
        fn platform(&self) -> Result<crate::name::Platform, crate::engine::EngineError> {
            Ok("linux/amd64".parse().expect("a platform"))
        }
        fn resources(&self) -> Result<crate::engine::Resources, crate::engine::EngineError> {
            unreachable!()
        }
        fn build_cmd(&self, _: &crate::engine::BuildRequest) -> crate::process::Cmd {
            unreachable!()
        }
        fn inspect(
            &self,
            _: &str,
        ) -> Result<Option<crate::engine::ImageInfo>, crate::engine::EngineError> {
            Ok(Some(self.info.clone()))
        }
        fn save_cmd(&self, _: &str) -> crate::process::Cmd {
            crate::process::Cmd::new("cat").arg(&self.stream)
        }
    }

    #[test]
    fn a_cache_entry_naming_a_blob_of_another_size_is_not_trusted() {
        use crate::image::fixtures::{file, layer};
        let tmp = tempfile::tempdir().unwrap();
        let layer = layer(&[file("a", "x\n")]);
        let engine = saved(tmp.path(), std::slice::from_ref(&layer));
        let diff_id = engine.info.layers[0].clone();
        let rig = PushRig::new(1);
        let PushRig { reg, cache, .. } = &rig;
        // Another blob of the repository, and a cache entry that says it is
        // this layer compressed, with a size that is not that blob's.
        let decoy = reg.put_blob("a/b", b"some other layer");
        cache.remember(&Compressed {
            diff_id: diff_id.clone(),
            digest: decoy.to_string(),
            size: 1234,
        });
        let (manifest, stats) = rig.push(&engine).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&manifest.bytes).unwrap();
        let mut want = Vec::new();
        let real = compress::gzip_unhashed(layer.as_slice(), &mut want).unwrap();
        assert_eq!(doc["layers"][0]["digest"], real.digest.as_str());
        assert_ne!(real.digest, decoy.to_string());
        assert_eq!((stats.present, stats.compressed, stats.uploaded), (0, 1, 1));
        // And the entry is corrected.
        assert_eq!(cache.compressed(&diff_id), Some(real));
    }

    /// An engine whose one image is the save stream of `layers` (written
    /// under `dir`), its ID the stream's config's digest.
    fn saved(dir: &std::path::Path, layers: &[Vec<u8>]) -> Saved {
        let labels = serde_json::json!({"dev.sunaba.variant": "t"});
        saved_with_labels(dir, layers, labels)
    }

    /// [`saved`] with the config's labels (the stream is written under
    /// `dir` with a name of its own).
    pub(crate) fn saved_with_labels(
        dir: &std::path::Path,
        layers: &[Vec<u8>],
        labels: serde_json::Value,
    ) -> Saved {
        let steps = vec!["RUN x"; layers.len()];
        let stream = crate::image::fixtures::save_stream_of_steps(
            layers,
            "2026-12-01T19:00:00Z",
            &steps,
            labels,
        );
        let path = dir.join(format!("{}.tar", &Digest::sha256(&stream).to_string()[7..]));
        std::fs::write(&path, &stream).unwrap();
        let (small, _) = read_and_compress(
            &mut stream.as_slice(),
            &[],
            &crate::image::save_stream::LayerNames::default(),
            None,
            |_| None,
            |_| false,
            |_, _| {},
            |_| Ok::<(), LocalError>(()),
        )
        .unwrap();
        let config = (small.into_iter())
            .find(|s| s.starts_with(b"{\"architecture\""))
            .unwrap();
        let diff_ids = (layers.iter())
            .map(|l| format!("sha256:{}", hex::encode(sha2::Sha256::digest(l))))
            .collect();
        Saved {
            info: crate::engine::ImageInfo {
                id: Digest::sha256(&config).to_string(),
                size: 0,
                labels: BTreeMap::new(),
                healthcheck: None,
                user: String::new(),
                env: Vec::new(),
                layers: diff_ids,
                repo_tags: Vec::new(),
                repo_digests: Vec::new(),
                platform: None,
            },
            stream: path,
        }
    }

    /// A layer's upload that fails stops the push with the registry's
    /// error (not as a failure to read the image): the uploads in flight
    /// are dropped, no layer after them is begun and no manifest is put.
    #[test]
    fn a_failed_upload_stops_the_save_and_is_the_error() {
        use crate::image::fixtures::{file, layer};
        let tmp = tempfile::tempdir().unwrap();
        let layers = [
            layer(&[file("a", "x\n")]),
            layer(&[file("b", "y\n")]),
            layer(&[file("c", "z\n")]),
        ];
        let engine = saved(tmp.path(), &layers);
        let rig = PushRig::new(1);
        let PushRig { reg, .. } = &rig;
        (reg.state().faults).push(("POST", "/blobs/uploads/".into(), 400));
        let err = rig.push(&engine).unwrap_err();
        assert!(matches!(err, PublishError::Registry(_)), "{err:?}");
        let s = reg.state();
        let begun = s.count("POST", "/blobs/uploads/");
        assert!((1..=UPLOADS_AT_ONCE).contains(&begun), "{:?}", s.log);
        assert_eq!(s.count("PUT", "/manifests/"), 0);
    }

    /// Two images sharing their first layer, pushed at once with the
    /// release's claims: the shared layer goes up once (by the first), and
    /// the second's own layer goes up while the first's are still in
    /// flight (the fake holds blob PUTs until three are in flight: all of
    /// them at once, or the hold's limit passes and the count says so).
    #[test]
    fn images_sharing_a_layer_send_it_once_and_their_own_layers_at_once() {
        use crate::image::fixtures::{file, layer};
        let (tmp_a, tmp_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let shared = layer(&[file("base", "b\n")]);
        let a = saved(tmp_a.path(), &[shared.clone(), layer(&[file("a", "x\n")])]);
        let b = saved(tmp_b.path(), &[shared, layer(&[file("b", "y\n")])]);
        let rig = PushRig::new(2);
        let PushRig {
            rt,
            reg,
            client,
            repo,
            cache,
            ..
        } = &rig;
        let claims = LayerClaims::new([
            ("a", a.info.layers.as_slice()),
            ("b", b.info.layers.as_slice()),
        ]);
        reg.state().held_method = Some("PUT");
        reg.state().hold = Some(3);
        let push = |engine: &'static Saved, local: &'static str| {
            push_image(
                engine,
                client,
                local,
                Target::Digest(repo),
                &engine.info.id,
                cache,
                &claims,
                &|_| None,
            )
        };
        let (a, b): (&'static Saved, &'static Saved) =
            (Box::leak(Box::new(a)), Box::leak(Box::new(b)));
        let (pa, pb) = rt.block_on(async { futures::join!(push(a, "a"), push(b, "b")) });
        let ((ma, sa), (mb, sb)) = (pa.unwrap(), pb.unwrap());
        assert_eq!((sa.compressed, sa.uploaded), (2, 2));
        assert_eq!(
            (sb.compressed, sb.uploaded),
            (1, 1),
            "b compressed only its own"
        );
        let s = reg.state();
        // At least three: a fourth blob can arrive before the three the hold
        // let go have left (the three layers and two configs may all be up
        // at once).
        assert!(s.max_in_flight >= 3, "{:?}", s.log);
        // Three layers and two configs.
        assert_eq!(s.count("PUT", "/blobs/uploads/"), 5, "{:?}", s.log);
        let layers_of = |m: &Manifest| -> Vec<String> {
            let doc: serde_json::Value = serde_json::from_slice(&m.bytes).unwrap();
            (doc["layers"].as_array().unwrap().iter())
                .map(|l| l["digest"].as_str().unwrap().to_string())
                .collect()
        };
        let shared = &layers_of(&ma)[0];
        assert_eq!(shared, &layers_of(&mb)[0]);
        assert_eq!(
            s.count("PUT", &format!("digest={shared}")),
            1,
            "{:?}",
            s.log
        );
    }

    /// Layers are uploaded while later ones are compressed, several at
    /// once: the registry holds each blob PUT until three are in flight
    /// (serial uploads would each wait out the hold alone).
    #[test]
    fn layers_are_uploaded_several_at_once() {
        use crate::image::fixtures::{file, layer};
        let tmp = tempfile::tempdir().unwrap();
        let layers = [
            layer(&[file("a", "x\n")]),
            layer(&[file("b", "y\n")]),
            layer(&[file("c", "z\n")]),
        ];
        let engine = saved(tmp.path(), &layers);
        let rig = PushRig::new(1);
        let PushRig { reg, .. } = &rig;
        reg.state().held_method = Some("PUT");
        reg.state().hold = Some(3);
        let (manifest, stats) = rig.push(&engine).unwrap();
        assert_eq!((stats.compressed, stats.uploaded), (3, 3));
        let s = reg.state();
        // At least three (the config may go up beside the layers).
        assert!(s.max_in_flight >= 3, "{:?}", s.log);
        assert_eq!(s.count("PUT", "/manifests/"), 1);
        assert_eq!(manifest.media_type, media_type::DOCKER_MANIFEST);
    }

    /// An image released before to `a/b`, pushed to `c/d` of the same
    /// registry: each layer and the config are mounted from `a/b` (the
    /// cache remembers where it put them), none is read from the engine,
    /// compressed or sent; a registry that refuses mounts gets the layers uploaded, and
    /// no upload session is left open for a refused mount.
    #[test]
    fn a_layer_pushed_before_to_another_repository_is_mounted_from_there() {
        use crate::image::fixtures::{file, layer};
        let tmp = tempfile::tempdir().unwrap();
        let layers = [layer(&[file("a", "x\n")]), layer(&[file("b", "y\n")])];
        let engine = saved(tmp.path(), &layers);
        let rig = PushRig::new(1);
        let (first, stats) = rig.push(&engine).unwrap();
        assert_eq!((stats.compressed, stats.uploaded, stats.mounted), (2, 2, 0));
        let a_b = rig.repo.to_string();
        for digest in blobs_of(&first) {
            assert_eq!(rig.cache.locations(&digest), std::slice::from_ref(&a_b));
        }
        let c_d: Repository = format!("{}/c/d", rig.reg.authority).parse().unwrap();
        let push_to = |repo: &Repository, engine: &Saved| {
            rig.rt.block_on(push_image(
                engine,
                &rig.client,
                "local",
                Target::Digest(repo),
                &engine.info.id,
                &rig.cache,
                &LayerClaims::default(),
                &|_| None,
            ))
        };
        // The engine's save would fail: nothing may read it.
        let unsaveable = Saved {
            stream: "/nonexistent/save.tar".into(),
            ..engine.clone()
        };
        let uploads = rig.reg.state().count("PUT", "/blobs/uploads/");
        let (second, stats) = push_to(&c_d, &unsaveable).unwrap();
        assert_eq!((stats.compressed, stats.uploaded, stats.mounted), (0, 0, 2));
        assert_eq!(blobs_of(&second), blobs_of(&first));
        let s = rig.reg.state();
        assert_eq!(s.count("POST", "mount="), 3, "two layers, the config");
        assert_eq!(s.count("PUT", "/blobs/uploads/"), uploads, "{:?}", s.log);
        drop(s);
        for digest in blobs_of(&first) {
            assert_eq!(
                rig.cache.locations(&digest),
                [format!("{c_d}"), a_b.clone()]
            );
        }
        // Refused mounts: the layers go up (compressed again), and each
        // refused mount's session is cancelled.
        rig.reg.state().refuse_mounts = true;
        let e_f: Repository = format!("{}/e/f", rig.reg.authority).parse().unwrap();
        let (_, stats) = push_to(&e_f, &engine).unwrap();
        assert_eq!((stats.mounted, stats.uploaded), (0, 2));
        let s = rig.reg.state();
        // Two repositories tried for each of the three blobs.
        let cancelled = s.count("DELETE", "/v2/e/f/blobs/uploads/");
        assert_eq!(cancelled, 2 * 3, "{:?}", s.log);
    }

    /// The layer digests a manifest names.
    fn blobs_of(m: &Manifest) -> Vec<String> {
        let doc: serde_json::Value = serde_json::from_slice(&m.bytes).unwrap();
        (doc["layers"].as_array().unwrap().iter())
            .map(|l| l["digest"].as_str().unwrap().to_string())
            .collect()
    }

    /// An unchanged image whose four layers the cache and the repository
    /// both have: one HEAD per layer, all four in flight together, and no
    /// `save` (the engine's would fail).
    #[test]
    fn the_cached_layers_are_asked_for_at_once() {
        let rig = PushRig::new(1);
        let PushRig {
            rt,
            reg,
            client,
            repo,
            cache,
            ..
        } = &rig;
        let mut layers = Vec::new();
        for n in 1..=4u8 {
            let blob = vec![n; 10 * n as usize];
            let diff_id = format!("sha256:{}", hex::encode([n; 32]));
            cache.remember(&Compressed {
                diff_id: diff_id.clone(),
                digest: reg.put_blob("a/b", &blob).to_string(),
                size: blob.len() as u64,
            });
            layers.push(diff_id);
        }
        let config = br#"{"architecture":"amd64","os":"linux"}"#;
        cache.remember_config(config);
        let engine = Saved {
            info: crate::engine::ImageInfo {
                id: Digest::sha256(config).to_string(),
                size: 0,
                labels: BTreeMap::new(),
                healthcheck: None,
                user: String::new(),
                env: Vec::new(),
                layers,
                repo_tags: Vec::new(),
                repo_digests: Vec::new(),
                platform: None,
            },
            stream: "/nonexistent/save.tar".into(),
        };
        // The client learns how to speak to the registry first (the scheme
        // is probed once), then the layers' HEADs are held for each other.
        let absent = Digest::sha256(b"absent");
        assert_eq!(rt.block_on(client.blob_size(repo, &absent)).unwrap(), None);
        reg.state().log.clear();
        reg.state().hold = Some(4);
        let (_, stats) = rig.push(&engine).unwrap();
        assert_eq!((stats.present, stats.compressed, stats.uploaded), (4, 0, 0));
        let s = reg.state();
        assert_eq!(s.count("HEAD", "/blobs/"), 5, "four layers and the config");
        // At least four (the config's HEAD may come before they left).
        assert!(
            s.max_in_flight >= 4,
            "the layers' HEADs at once: {:?}",
            s.log
        );
    }
}
