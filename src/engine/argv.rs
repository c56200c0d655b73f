//! The one way an engine command line is put together (see
//! docs/run-contract.md, "What reaches an engine's command line").

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// An engine command's arguments, built so that no value can be read as an
/// option: an option and its value are one word (`--name=value`, which the
/// engines' parsers never split into two options), and operands (an image,
/// a command) follow `--`. Every engine command line is built with it
/// (the engines' own commands here, and the run contract's
/// [`Sandbox::args`](crate::run_contract::Sandbox::args)).
#[derive(Debug, Default)]
pub struct Argv(Vec<OsString>);

impl Argv {
    /// Starts with the engine's verb (`run`, `image inspect`).
    pub(crate) fn new(verb: &str) -> Argv {
        Argv(verb.split(' ').map(OsString::from).collect())
    }
    /// An option without a value: ours, never outside text.
    pub(crate) fn flag(mut self, flag: &str) -> Argv {
        debug_assert!(flag.starts_with("--") && !flag.contains(' '));
        self.0.push(flag.into());
        self
    }
    /// `--name=value`, one word whatever the value holds.
    pub(crate) fn opt(mut self, name: &str, value: impl AsRef<OsStr>) -> Argv {
        debug_assert!(name.starts_with("--") && !name.contains('='));
        let mut word = OsString::from(name);
        word.push("=");
        word.push(value);
        self.0.push(word);
        self
    }
    /// `--`, then the operands: read as operands whatever they start with.
    pub(crate) fn operands<I, S>(mut self, operands: I) -> Argv
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.0.push("--".into());
        self.0.extend(operands.into_iter().map(Into::into));
        self
    }
    pub(crate) fn into_args(self) -> Vec<OsString> {
        self.0
    }
}

/// `type=bind,source=…,target=…[,readonly]` with the source as a CSV
/// field: quoted (and inner quotes doubled) when it holds a comma, quote or
/// line break, which is how both engines' `--mount` parsers read it (Podman
/// 4.3's too, tried). `target` is ours, never outside text. Every bind
/// mount an engine command asks for is written here (`-v` would split a
/// path on `:`).
pub(crate) fn bind_mount(source: &Path, target: &str, readonly: bool) -> OsString {
    let src = source.as_os_str().as_encoded_bytes();
    let needs_quotes = src.iter().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'));
    let mut out: Vec<u8> = b"type=bind,".to_vec();
    if needs_quotes {
        out.push(b'"');
        out.extend_from_slice(b"source=");
        for &b in src {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(b"source=");
        out.extend_from_slice(src);
    }
    out.extend_from_slice(format!(",target={target}").as_bytes());
    if readonly {
        out.extend_from_slice(b",readonly");
    }
    use std::os::unix::ffi::OsStringExt;
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_in_their_option_s_word_and_operands_follow_the_dash_dash() {
        let a = Argv::new("image inspect")
            .flag("--quiet")
            .opt("--label", "k=--privileged")
            .opt("--env", "-v")
            .operands(["-v=/:/host", "--", "x"]);
        assert_eq!(
            a.into_args(),
            [
                "image",
                "inspect",
                "--quiet",
                "--label=k=--privileged",
                "--env=-v",
                "--",
                "-v=/:/host",
                "--",
                "x"
            ]
        );
    }
}
