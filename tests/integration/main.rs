#![allow(unreachable_pub)] // test support: `pub` is for the sibling modules
//! The one integration test binary: every module runs the real
//! `sunaba-images` binary (see `support::Cli`) against real files and, where
//! needed, the real engine and registry that `scripts/dev-env up` provides.

mod assemble;
mod attach;
mod attest;
mod bad_input;
mod bench_async;
mod build;
mod cli_docs;
mod compose;
mod custom_image;
mod detect;
mod docs;
mod engine_release;
mod exit_status;
mod fragment_lib;
mod github;
mod link;
mod link_client;
mod link_release;
mod link_timeouts;
mod locks;
mod multiarch;
mod pins;
mod plan;
mod posture;
mod rebuild;
mod refusals;
mod registry;
mod release;
mod render;
mod reproducible;
mod resume;
mod run;
mod sbom;
mod scaffold;
mod support;
mod tidy;
mod update_base;
