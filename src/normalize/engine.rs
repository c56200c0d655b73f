//! Normalising an image in the engine: `save` streamed into [`read`], the
//! archive streamed into `load`, the result checked to be what we wrote.

use super::{NormalizeError, Options, Report, read};
use crate::engine::{Engine, EngineError};
use crate::process::PipeError;

/// Normalises the local image `image` and loads the result, tagged with
/// `opts.tags`; returns the loaded image's ID (its config digest) and what
/// was done. On any error nothing is loaded or tagged: the archive is only
/// written once the save stream has been read and checked whole, and a
/// `load` whose input fails midway is killed before it sees the end.
pub fn normalize_image(
    engine: &dyn Engine,
    image: &str,
    opts: &Options,
) -> Result<(String, Report), NormalizeError> {
    let engine_err = |source: EngineError| NormalizeError::Engine {
        image: image.to_string(),
        source,
    };
    let piped = |e: PipeError<NormalizeError>| match e {
        PipeError::Process(p) => engine_err(p.into()),
        PipeError::Stream(e) => e,
    };
    let spill_dir = std::env::temp_dir();
    let staged = engine
        .save_cmd(image)
        .read_stdout(|out| read(image, out, &spill_dir))
        .map_err(piped)?;
    let (report, _) = engine
        .load_cmd()
        .write_stdin(|stdin| staged.write(std::io::BufWriter::with_capacity(1 << 20, stdin), opts))
        .map_err(piped)?;
    drop(staged);
    let check = opts.tags.first().map_or(&report.config_digest, |t| t);
    match engine.inspect(check).map_err(engine_err)? {
        Some(info) if info.id == report.config_digest => Ok((info.id, report)),
        other => Err(engine_err(EngineError::Parse {
            command: engine.load_cmd().display(),
            detail: format!(
                "after the load {check} is {}, not the written {}",
                other.map_or("missing".to_string(), |i| i.id),
                report.config_digest
            ),
        })),
    }
}
