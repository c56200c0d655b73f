//! `pins verify` and `verify-attestations` under `--format github`: an
//! annotation per finding (`::error` for what fails the gate or could not
//! be checked, `::warning` for a warning), titled with the verb and the
//! alias, at the alias's entry in image_pins.json, or, for an alias that is
//! not pinned, at the `aliases` of its variant in images.toml.

use super::locate_alias;
use super::plan::AliasSpec;
use super::verify::{Finding, Severity};
use crate::github::{Annotation, toml_line};
use std::path::Path;

/// The files findings point into, as (path as shown, text).
pub(crate) struct Files<'a> {
    pub pins: (&'a Path, &'a str),
    /// images.toml and the aliases it declares, when there is one.
    pub manifest: Option<(&'a Path, &'a str, &'a [AliasSpec])>,
}

/// One annotation per finding, in the findings' order (the caller orders).
pub(crate) fn annotations(verb: &str, findings: &[Finding], files: &Files) -> Vec<Annotation> {
    findings
        .iter()
        .map(|f| {
            let message = format!("{}: {}", f.alias, f.message);
            let a = match f.severity {
                Severity::Problem => Annotation::error(0, message),
                Severity::Error => Annotation::error(1, message),
                Severity::Warning => Annotation::warning(0, message),
            };
            located(a.title(format!("{verb}: {}", f.alias)), &f.alias, files)
        })
        .collect()
}

/// At the alias's key in the pins file, else at its declaration.
fn located(a: Annotation, alias: &str, files: &Files) -> Annotation {
    let (pins, text) = files.pins;
    if let Some((line, _)) = locate_alias(text, alias) {
        return a.at(pins, Some(line));
    }
    let Some((path, text, specs)) = files.manifest else {
        return a;
    };
    match specs.iter().find(|s| s.alias == alias) {
        Some(spec) => {
            let table = format!("variants.{}", spec.variant);
            a.at(path, toml_line(text, &table, Some("aliases")))
        }
        None => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity, alias: &str, message: &str) -> Finding {
        Finding {
            severity,
            alias: alias.into(),
            message: message.into(),
        }
    }

    #[test]
    fn each_finding_at_its_pin_or_its_declaration() {
        let pins = "{\n  \"schema\": 1,\n  \"images\": {\n    \"js\": {}\n  }\n}\n";
        let manifest = "[variants.go]\nparent = \"base\"\naliases = [\"go\"]\n";
        let specs = [AliasSpec {
            alias: "go".into(),
            variant: "go".into(),
            owed: Vec::new(),
            smoke: Vec::new(),
            platforms: Vec::new(),
        }];
        let files = Files {
            pins: (Path::new("image_pins.json"), pins),
            manifest: Some((Path::new("images.toml"), manifest, &specs)),
        };
        let got: Vec<String> = annotations(
            "pins verify",
            &[
                finding(Severity::Problem, "go", "not pinned (variant go)"),
                finding(Severity::Warning, "js", "tag js-1 moved"),
                finding(Severity::Error, "snake", "cannot check: refused"),
            ],
            &files,
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            got,
            [
                "::error file=images.toml,line=3,title=pins verify%3A go::go: not pinned (variant go)",
                "::warning file=image_pins.json,line=4,title=pins verify%3A js::js: tag js-1 moved",
                "::error title=pins verify%3A snake::snake: cannot check: refused",
            ]
        );
    }
}
