//! Index assembly (`registry::Client::assemble_index`) against the real
//! loopback registry of the development services: two single-platform
//! images pushed by digest, an index assembled from them and PUT, then
//! assembled again (byte-identical), and what skopeo and `resolve
//! --platform` choose from it agree.

use crate::support::oci::{DOCKER_MANIFEST, Image, OCI_MANIFEST, Pusher};
use crate::support::{self, isolated_cli, skopeo, skopeo_config_for_arch};
use std::time::Duration;
use sunaba_images::registry::{
    Client, Digest, ErrorKind, Reference, Repository, RetryPolicy, media_type,
};

fn client() -> Client {
    Client::builder()
        .anonymous()
        .retry(RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            total: Duration::from_secs(20),
        })
        .request_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn resolve_for(home: &std::path::Path, platform: &str, image: &str) -> String {
    let run = isolated_cli(home)
        .args(["resolve", "--platform", platform, image])
        .stdout_like(format!(r"sha256:[0-9a-f]{{64}}\t{}", regex::escape(image)))
        .run();
    run.stdout().split('\t').next().unwrap().to_string()
}

#[test]
#[ignore = "tier: registry"]
fn an_assembled_index_is_byte_identical_on_re_assembly_and_skopeo_and_resolve_agree() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let pusher = Pusher::plain(&registry);
    let client = client();
    // Docker children give a Docker manifest list; an OCI child among them
    // an OCI index. The arm64 config says `v8` in the second case, as
    // BuildKit writes it; the entry says it too, and both tools still
    // choose it for plain `arm64`.
    for (case, arm_variant, arm_oci, want_type) in [
        ("docker", None, false, media_type::DOCKER_LIST),
        ("mixed", Some("v8"), true, media_type::OCI_INDEX),
    ] {
        let path = format!("{}/multi", support::unique(&format!("assemble-{case}")));
        let repo: Repository = format!("{registry}/{path}").parse().unwrap();
        let amd = Image::linux("amd64")
            .layer(b"amd64 layer".to_vec())
            .docker();
        let mut arm = Image::linux("arm64").layer(b"arm64 layer".to_vec());
        if let Some(v) = arm_variant {
            arm = arm.variant(v);
        }
        if !arm_oci {
            arm = arm.docker();
        }
        let (amd, arm) = pusher.wait(async {
            (
                pusher.image(&path, None, &amd).await,
                pusher.image(&path, None, &arm).await,
            )
        });
        assert_eq!(amd.media_type, DOCKER_MANIFEST);
        assert_eq!(
            arm.media_type,
            if arm_oci {
                OCI_MANIFEST
            } else {
                DOCKER_MANIFEST
            }
        );
        let children: Vec<Digest> = [&arm.digest, &amd.digest]
            .iter()
            .map(|d| d.parse().unwrap())
            .collect();

        let tag = Reference::with_tag(&repo, "v1").unwrap();
        let (first, again, stored) = pusher.wait(async {
            let first = client.assemble_index(&repo, &children).await.unwrap();
            let stored = client.put_index(&tag, &first).await.unwrap();
            let mut reversed = children.clone();
            reversed.reverse();
            let again = client.assemble_index(&repo, &reversed).await.unwrap();
            let by_digest = Reference::in_repo(&repo, again.digest.clone());
            assert_eq!(client.put_index(&by_digest, &again).await.unwrap(), stored);
            (first, again, stored)
        });
        assert_eq!(first.bytes, again.bytes, "{case}: byte-identical");
        assert_eq!(first.digest, stored, "{case}");
        assert_eq!(first.media_type, want_type, "{case}");
        let platforms: Vec<(String, String)> = first
            .platforms
            .iter()
            .map(|(p, d)| (p.to_string(), d.to_string()))
            .collect();
        assert_eq!(
            platforms,
            [
                ("linux/amd64".to_string(), amd.digest.clone()),
                ("linux/arm64".to_string(), arm.digest.clone()),
            ],
            "{case}: sorted, arm64/v8 normalised"
        );

        let image = tag.to_string();
        let raw = skopeo(&[], &["--raw"], &image);
        assert_eq!(
            raw,
            first.bytes.to_vec(),
            "{case}: the registry serves our bytes"
        );
        let doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(doc["mediaType"], want_type);
        assert_eq!(
            doc["manifests"][1]["platform"]
                .get("variant")
                .and_then(|v| v.as_str()),
            arm_variant,
            "{case}: the entry's variant is the config's"
        );
        for (arch, platform, child) in [
            ("arm64", "linux/arm64", &arm),
            ("amd64", "linux/amd64", &amd),
        ] {
            let skopeo = skopeo_config_for_arch(arch, &image);
            let resolved = resolve_for(home.path(), platform, &image);
            assert_eq!(
                (Some(&skopeo), &resolved),
                (child.config_digest.as_ref(), &child.digest),
                "{case} {platform}: skopeo --override-arch and resolve --platform choose one child"
            );
        }
        // The command: the same bytes from the children named by digest and
        // by tag, put once, then found there.
        let by_cli = format!("{repo}:v2");
        let children = [amd.digest.to_string(), format!("{repo}@{}", arm.digest)];
        // Without --write: the plan, nothing put (the tag is not there after).
        isolated_cli(home.path())
            .args(["assemble", &by_cli])
            .args(&children)
            .stdout(format!("{}\n", first.digest))
            .stderr(format!(
                "assemble: {by_cli}: {want_type} of 2 platform image(s) (linux/amd64, linux/arm64), a plan: nothing put (--write puts it)\n"
            ))
            .run();
        for note in ["", ", already there"] {
            isolated_cli(home.path())
                .args(["assemble", "--write", &by_cli])
                .args(&children)
                .stdout(format!("{}\n", first.digest))
                .stderr(format!(
                    "assemble: {by_cli}: {want_type} of 2 platform image(s) (linux/amd64, linux/arm64){note}\n"
                ))
                .run();
        }
        assert_eq!(
            skopeo(&[], &["--raw"], &by_cli),
            first.bytes.to_vec(),
            "{case}: the command puts the same bytes"
        );
        let v8 = resolve_for(home.path(), "linux/arm64/v8", &image);
        assert_eq!(&v8, &arm.digest, "{case}: linux/arm64/v8 is linux/arm64");
    }
}

#[test]
#[ignore = "tier: registry"]
fn assembling_from_a_digest_the_repository_lacks_names_digest_and_repository() {
    let Some(registry) = support::dev_registry() else {
        return;
    };
    let path = format!("{}/multi", support::unique("assemble-missing"));
    let repo: Repository = format!("{registry}/{path}").parse().unwrap();
    let pusher = Pusher::plain(&registry);
    let client = client();
    let missing = Digest::sha256(b"never pushed");
    let err = pusher.wait(async {
        let amd = pusher.image(&path, None, &Image::linux("amd64")).await;
        let children = [amd.digest.parse().unwrap(), missing.clone()];
        client.assemble_index(&repo, &children).await.unwrap_err()
    });
    assert!(
        matches!(err.kind(), ErrorKind::MissingChild { .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{repo}: cannot assemble an index: the platform image {missing} is not in the \
             repository (push each platform's image by digest first)"
        )
    );
}
