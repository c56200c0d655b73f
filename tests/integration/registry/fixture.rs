//! The registry tests' content: an index of two platforms and an
//! attestation, single images (OCI and Docker), anonymous-pull content for
//! the token registry, and a repository of 2,000+ tags, pushed once per test
//! process and served to every test from the same storage.

use crate::support::distribution::{Auth, Registry, scratch};
use crate::support::oci::{Image, OCI_CONFIG, OCI_MANIFEST, Pusher, pretty};
use crate::support::sha256;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const TAG_COUNT: usize = 2100;

/// What the fixture holds (digests of the exact bytes pushed).
#[derive(Debug, Clone)]
pub struct Fixture {
    pub storage: PathBuf,
    pub index_digest: String,
    pub index_bytes: Vec<u8>,
    pub amd64_digest: String,
    pub arm64_digest: String,
    pub attestation_digest: String,
    pub amd64_config_digest: String,
    pub single_digest: String,
    pub single_bytes: Vec<u8>,
    pub docker_digest: String,
    pub many_digest: String,
    /// The `dev.sunaba.check` label of the amd64 image.
    pub check_label: String,
    pub tags: Vec<String>,
}

/// Pushes the fixture once per test process (through a plain instance that
/// is stopped afterwards); every test then serves the same storage with the
/// registry flavour it needs.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        std::thread::spawn(|| {
            let storage = scratch().join("storage");
            let _ = std::fs::remove_dir_all(&storage);
            std::fs::create_dir_all(&storage).unwrap();
            let registry = Registry::start(&storage, Auth::None);
            let rt = tokio::runtime::Runtime::new().unwrap();
            let f = rt.block_on(push_fixture(&registry.authority(), &storage));
            drop(registry);
            f
        })
        .join()
        .expect("pushing the registry fixture")
    })
}

async fn push_fixture(authority: &str, storage: &Path) -> Fixture {
    let p = Pusher::plain(authority);
    let check_label = r#"{"schema":1,"status":"pass","variant":"base","inputs":"sha256:00","checked_at":"2026-11-30T07:00:00Z","tools":{"rg":"14.1.1"}}"#.to_string();
    let labels = serde_json::json!({"dev.sunaba.check": check_label, "dev.sunaba.variant": "base"});
    // A layer of each image's own, as distinct images have.
    let image = |repo: &str, arch: &str| {
        Image::linux(arch)
            .labels(&labels)
            .layer(format!("layer for {repo} {arch}"))
    };

    // An index with two platforms and a BuildKit-style attestation entry.
    let repo = "fixture/multi";
    let amd64 = p
        .image(repo, Some("amd64-only"), &image(repo, "amd64"))
        .await;
    let arm64 = p
        .image(
            repo,
            Some("arm64-only"),
            &image(repo, "arm64")
                .variant("v8")
                .labels(serde_json::json!({"arch": "arm64"})),
        )
        .await;
    let statement = b"{\"_type\":\"https://in-toto.io/Statement/v0.1\"}".to_vec();
    let st_digest = p.blob(repo, &statement).await;
    let att_config = b"{\"architecture\":\"unknown\",\"os\":\"unknown\",\"config\":{},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}".to_vec();
    let att_config_digest = p.blob(repo, &att_config).await;
    let att = pretty(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": att_config_digest, "size": att_config.len()},
        "layers": [{"mediaType": "application/vnd.in-toto+json", "digest": st_digest, "size": statement.len()}],
    }));
    let att_digest = p.manifest(repo, &sha256(&att), OCI_MANIFEST, &att).await;
    let mut attestation = serde_json::json!({
        "mediaType": OCI_MANIFEST, "digest": att_digest, "size": att.len(),
        "platform": {"architecture": "unknown", "os": "unknown"},
    });
    attestation["annotations"] = serde_json::json!({
        "vnd.docker.reference.type": "attestation-manifest",
        "vnd.docker.reference.digest": amd64.digest,
    });
    let index = p
        .index(
            repo,
            "latest",
            vec![
                amd64.descriptor(serde_json::json!({"architecture": "amd64", "os": "linux"})),
                arm64.descriptor(
                    serde_json::json!({"architecture": "arm64", "os": "linux", "variant": "v8"}),
                ),
                attestation,
            ],
        )
        .await;

    let single = image("fixture/single", "amd64");
    let docker = p
        .image("fixture/single", Some("docker"), &single.clone().docker())
        .await;
    let single = p.image("fixture/single", Some("v1"), &single).await;
    // Anonymous-pull content for the token registry.
    p.image("public/app", Some("1"), &image("public/app", "amd64"))
        .await;

    // 2,000+ tags (plus a cosign-style digest-shaped one) on one manifest.
    let many = p
        .image(
            "fixture/many",
            Some("t0000"),
            &Image::linux("amd64").layer("layer for fixture/many"),
        )
        .await;
    let tags: Vec<String> = (0..TAG_COUNT).map(|i| format!("t{i:04}")).collect();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    let extra = format!("sha256-{}.sig", &many.digest[7..]);
    for tag in tags.iter().skip(1).cloned().chain([extra]) {
        let (p, bytes, sem) = (p.clone(), many.bytes.clone(), sem.clone());
        tasks.spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            p.manifest("fixture/many", &tag, OCI_MANIFEST, &bytes).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    Fixture {
        storage: storage.to_path_buf(),
        index_digest: index.digest,
        index_bytes: index.bytes,
        amd64_digest: amd64.digest,
        arm64_digest: arm64.digest,
        attestation_digest: att_digest,
        amd64_config_digest: amd64.config_digest.unwrap(),
        single_digest: single.digest,
        single_bytes: single.bytes,
        docker_digest: docker.digest,
        many_digest: many.digest,
        check_label,
        tags,
    }
}
