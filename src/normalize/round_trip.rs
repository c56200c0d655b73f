//! The round trip through the engine: `save` streamed into [`read`], the
//! archive streamed into `load`, the result checked to be what we wrote.

use super::{NormalizeError, Options, Report, read};
use crate::engine::{Engine, EngineError};
use crate::process::PipeError;

/// Normalises the local image `image` and loads the result, tagged with
/// `opts.tags`; returns the loaded image's ID (its config digest) and what
/// was done. On any error nothing is loaded or tagged: the archive is only
/// written once the save stream has been read and checked whole, and a
/// `load` whose input fails midway is killed before it sees the end.
pub(crate) fn normalize_image(
    engine: &dyn Engine,
    image: &str,
    opts: &Options,
) -> Result<(String, Report), NormalizeError> {
    let piped = piped(image);
    // The spill is the size of the image: in the process's scratch
    // directory, so a killed run's is swept by the next (src/scratch.rs).
    let spill_dir = crate::scratch::dir().map_err(|e| NormalizeError::Io {
        image: image.to_string(),
        context: "cannot make a directory for the spill".into(),
        source: e.into(),
    })?;
    let staged = engine
        .save_cmd(image)
        .read_stdout(|out| read(image, out, &spill_dir))
        .map_err(piped)?;
    let opts = Options {
        kept_by_name: engine.loads_layers_it_has_by_chain_id(),
        ..opts.clone()
    };
    let (id, report) = load_and_verify(
        engine,
        image,
        &opts.tags,
        |stdin| staged.write(std::io::BufWriter::with_capacity(1 << 20, stdin), &opts),
        |r: &Report| r.config_digest.clone(),
    )?;
    drop(staged);
    Ok((id, report))
}

/// The engine's failure, as one of normalising `image`.
pub(super) fn engine_error(image: &str) -> impl Fn(EngineError) -> NormalizeError + '_ {
    move |source| NormalizeError::Engine {
        image: image.to_string(),
        source,
    }
}

/// A piped engine program's failure (save, load) or the stream's own.
pub(super) fn piped(image: &str) -> impl Fn(PipeError<NormalizeError>) -> NormalizeError + '_ {
    move |e| match e {
        PipeError::Process(p) => engine_error(image)(p.into()),
        PipeError::Stream(e) => e,
    }
}

/// Streams what `produce` writes into the engine's `load`, then checks that
/// the image now under the first of `tags` (or, untagged, the written ID)
/// is the one written; `id_of` says which that is. Returns the loaded ID.
pub(super) fn load_and_verify<T>(
    engine: &dyn Engine,
    image: &str,
    tags: &[String],
    produce: impl FnOnce(&mut dyn std::io::Write) -> Result<T, NormalizeError>,
    id_of: impl Fn(&T) -> String,
) -> Result<(String, T), NormalizeError> {
    let (engine_err, piped) = (engine_error(image), piped(image));
    let (produced, _) = engine.load_cmd().write_stdin(produce).map_err(piped)?;
    let written = id_of(&produced);
    let check = tags.first().unwrap_or(&written);
    match engine.inspect(check).map_err(&engine_err)? {
        Some(info) if info.id == written => Ok((info.id, produced)),
        other => Err(engine_err(EngineError::Parse {
            command: engine.load_cmd().display(),
            detail: format!(
                "after the load {check} is {}, not the written {written}",
                other.map_or("missing".to_string(), |i| i.id),
            ),
        })),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::{BuildRequest, LogFormat, Resources};
    use crate::image::fixtures::{dir, file, layer, raw_name, save_stream};
    use crate::process::{Cmd, ProcessError};
    use std::path::{Path, PathBuf};

    /// An engine whose program is a script: `save` prints a prepared
    /// stream, `load` keeps what it is fed (and logs that it started),
    /// `image inspect` answers with the ID of what was loaded.
    pub(in crate::normalize) struct Scripted {
        program: PathBuf,
        /// What `loads_layers_it_has_by_chain_id` answers (Docker's yes).
        pub(in crate::normalize) chain_id_loads: bool,
    }

    impl Engine for Scripted {
        fn loads_layers_it_has_by_chain_id(&self) -> bool {
            self.chain_id_loads
        }
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn program(&self) -> &Path {
            &self.program
        }
        fn log_format(&self) -> LogFormat {
            LogFormat::BuildKit
        }
        fn platform(&self) -> Result<crate::name::Platform, EngineError> {
            Ok("linux/amd64".parse().expect("a platform"))
        }
        fn resources(&self) -> Result<Resources, EngineError> {
            unreachable!()
        }
        fn build_cmd(&self, _: &BuildRequest) -> Cmd {
            unreachable!()
        }
    }

    pub(in crate::normalize) fn scripted(dir: &Path, save: &str, load: &str) -> Scripted {
        let program = dir.join("engine");
        let d = dir.display();
        crate::process::write_program(
            &program,
            &format!(
                "#!/bin/sh\ncase \"$1\" in\n\
                 save) {save} ;;\n\
                 load) echo started >> {d}/load.log; {load} ;;\n\
                 image) cfg=$(tar -xOf {d}/loaded.tar manifest.json 2>/dev/null | sed 's/.*\"Config\":\"\\([0-9a-f]*\\)\\.json\".*/\\1/')\n\
                   [ -n \"$cfg\" ] || {{ echo 'Error: No such image' >&2; exit 1; }}\n\
                   printf '[{{\"Id\":\"sha256:%s\",\"RepoTags\":[\"r:t\"],\"Config\":{{}}}}]' \"$cfg\" ;;\n\
                 esac\n"
            ),
        );
        Scripted {
            program,
            chain_id_loads: false,
        }
    }

    fn opts() -> Options {
        Options {
            source_date_epoch: crate::normalize::tests::SDE,
            base_diff_ids: vec![],
            tags: vec!["r:t".into()],
            ..Options::default()
        }
    }

    fn good_stream(at: &Path) -> Vec<u8> {
        let stream = save_stream(
            &[layer(&[dir("a"), file("a/b", "x\n")])],
            "2026-12-01T19:00:00Z",
        );
        std::fs::write(at.join("save.tar"), &stream).unwrap();
        stream
    }

    #[test]
    fn the_image_is_saved_rewritten_and_loaded_under_its_tags() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        let stream = good_stream(tmp.path());
        let engine = scripted(
            tmp.path(),
            &format!("cat {d}/save.tar"),
            &format!("cat > {d}/loaded.tar; echo 'Loaded image: r:t'"),
        );
        let (id, report) = normalize_image(&engine, "sha256:raw", &opts()).unwrap();
        assert_eq!(id, report.config_digest);
        let mut want = Vec::new();
        let spill = tempfile::tempdir().unwrap();
        crate::normalize::normalize(
            "sha256:raw",
            stream.as_slice(),
            &mut want,
            &opts(),
            spill.path(),
        )
        .unwrap();
        assert_eq!(std::fs::read(tmp.path().join("loaded.tar")).unwrap(), want);
    }

    #[test]
    fn an_engine_that_finds_layers_by_chain_id_is_sent_only_the_new_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        let from = layer(&[dir("a"), file("a/b", "x\n")]);
        let built = layer(&[file("a/c", "y\n")]);
        std::fs::write(
            tmp.path().join("save.tar"),
            save_stream(&[from.clone(), built], "2026-12-01T19:00:00Z"),
        )
        .unwrap();
        let opts = Options {
            base_diff_ids: vec![crate::image::fixtures::digest(&from)],
            ..opts()
        };
        let loaded = |chain_id_loads: bool| {
            let mut engine = scripted(
                tmp.path(),
                &format!("cat {d}/save.tar"),
                &format!("cat > {d}/loaded.tar; echo 'Loaded image: r:t'"),
            );
            engine.chain_id_loads = chain_id_loads;
            let (id, report) = normalize_image(&engine, "sha256:raw", &opts).unwrap();
            assert!(report.layers[0].kept && !report.layers[1].kept);
            let mut archive =
                tar::Archive::new(std::fs::File::open(tmp.path().join("loaded.tar")).unwrap());
            let mut names = Vec::new();
            let mut manifest = Vec::new();
            for e in archive.entries().unwrap() {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                if name == "manifest.json" {
                    std::io::Read::read_to_end(&mut e, &mut manifest).unwrap();
                }
                names.push(name);
            }
            let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
            (id, names, manifest[0]["Layers"].clone())
        };
        let (by_name, names, layers) = loaded(true);
        assert_eq!(
            layers,
            serde_json::json!(["layers/000.tar", "layers/001.tar"])
        );
        assert!(!names.contains(&"layers/000.tar".to_string()), "{names:?}");
        assert!(names.contains(&"layers/001.tar".to_string()), "{names:?}");
        // The same image either way: only what travels differs.
        let (sent, names, _) = loaded(false);
        assert!(names.contains(&"layers/000.tar".to_string()), "{names:?}");
        assert_eq!(by_name, sent);
    }

    #[test]
    fn bad_input_never_reaches_load() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        let mut h = tar::Header::new_gnu();
        raw_name(&mut h, b"../escape");
        h.set_size(0);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_cksum();
        let mut l = h.as_bytes().to_vec();
        l.extend_from_slice(&[0u8; 1024]);
        std::fs::write(
            tmp.path().join("save.tar"),
            save_stream(&[l], "2026-12-01T19:00:00Z"),
        )
        .unwrap();
        let engine = scripted(
            tmp.path(),
            &format!("cat {d}/save.tar"),
            &format!("cat > {d}/loaded.tar"),
        );
        let err = normalize_image(&engine, "r:t", &opts()).unwrap_err();
        assert!(
            matches!(err, NormalizeError::BadPath { ref path, .. } if path == "../escape"),
            "{err}"
        );
        assert!(!tmp.path().join("load.log").exists(), "load was started");
    }

    #[test]
    fn a_save_that_fails_midway_is_the_engines_error_and_nothing_is_loaded() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        good_stream(tmp.path());
        let engine = scripted(
            tmp.path(),
            &format!(
                "head -c 1500 {d}/save.tar; echo 'Error response from daemon: boom' >&2; exit 1"
            ),
            &format!("cat > {d}/loaded.tar"),
        );
        let err = normalize_image(&engine, "r:t", &opts()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("r:t: `")
                && msg.contains(
                    " save -- r:t` failed (exit status 1): Error response from daemon: boom"
                ),
            "{msg}"
        );
        assert!(!tmp.path().join("load.log").exists());
    }

    #[test]
    fn a_load_that_stops_reading_is_its_failure_not_a_broken_pipe() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().display();
        // Big enough that the load's early exit meets our writes.
        let big = layer(&[file("big", &"x".repeat(4 << 20))]);
        std::fs::write(
            tmp.path().join("save.tar"),
            save_stream(&[big], "2026-12-01T19:00:00Z"),
        )
        .unwrap();
        let engine = scripted(
            tmp.path(),
            &format!("cat {d}/save.tar"),
            "head -c 1000 >/dev/null; echo 'invalid tar header' >&2; exit 1",
        );
        let err = normalize_image(&engine, "r:t", &opts()).unwrap_err();
        let NormalizeError::Engine {
            source: EngineError::Process(p @ ProcessError::Failed { .. }),
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert!(
            p.to_string()
                .contains(" load` failed (exit status 1): invalid tar header"),
            "{p}"
        );
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        while let Some(c) = cause {
            assert!(
                c.downcast_ref::<std::io::Error>()
                    .is_none_or(|io| io.kind() != std::io::ErrorKind::BrokenPipe),
                "{err:?}"
            );
            cause = c.source();
        }
    }
}
