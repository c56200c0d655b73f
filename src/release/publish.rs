//! A checked local image pushed by the engine, and read back by the client.
//!
//! The engine pushes (it alone knows which compressed layers it uploaded
//! before, so it mounts those instead of sending them again; see
//! `release::stage`), but its answer is not trusted blindly: the manifest at
//! the digest it reports is read back and must be one platform's image
//! whose config is the checked image (a local image ID is its config's
//! digest).

use crate::engine::Engine;
use crate::registry::{self, Client, Digest, Manifest, Reference};
use anyhow::{Context as _, bail};

/// Tags the local `local` as `target`, has the engine push it, and returns
/// the manifest the registry holds at the digest the engine reported.
pub fn push_checked(
    engine: &dyn Engine,
    client: &Client,
    rt: &tokio::runtime::Runtime,
    local: &str,
    target: &Reference,
    image_id: &str,
) -> anyhow::Result<Manifest> {
    let name = target.to_string();
    engine.tag(local, &name)?;
    let pushed = engine
        .push(&name)
        .with_context(|| format!("pushing {local} as {name}"))?;
    let digest: Digest = pushed
        .parse()
        .map_err(|e| anyhow::anyhow!("the engine pushed {name} as {pushed:?}: {e}"))?;
    let manifest = rt.block_on(client.fetch_manifest(&target.by_digest(digest.clone())))?;
    if registry::media_type::is_index(&manifest.media_type) {
        bail!("the engine pushed {name} as an index ({digest}), not one platform's image");
    }
    let config = registry::config_descriptor(&name, &manifest.bytes)?.0;
    if config.to_string() != image_id {
        bail!(
            "the engine pushed {name} as {digest}, whose config is {config}, not the checked \
             image {image_id}"
        );
    }
    Ok(manifest)
}
