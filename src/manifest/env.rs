//! A fragment's runtime environment (`[fragments.NAME.env]`, rendered as
//! `ENV`): plain names and values that refer only to the posture's
//! variables, which the template sets before any fragment.

use super::problems::{Problems, valid_arg_name};
use std::collections::BTreeMap;
use toml::Spanned;

/// Names a value may refer to as `${NAME}`.
fn posture_names() -> Vec<&'static str> {
    crate::run_contract::image_env()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// Docker expands `${NAME}` in an ENV value at build time, from the ENV set
/// before it: the posture's variables. Anything else would expand to an
/// empty string, so it is refused.
fn references(value: &str) -> Result<(), String> {
    let names = posture_names();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        let Some(inner) = rest[at + 1..].strip_prefix('{') else {
            return Err("a `$` not followed by `{NAME}`".into());
        };
        let Some(end) = inner.find('}') else {
            return Err("an unclosed `${`".into());
        };
        let name = &inner[..end];
        if !names.contains(&name) {
            return Err(format!(
                "`${{{name}}}` is not set when the image's ENV is evaluated"
            ));
        }
        rest = &inner[end + 1..];
    }
    Ok(())
}

/// Checks `env` of the fragment at `key` (problems point at its `script`).
pub(super) fn check<T>(
    env: &BTreeMap<String, String>,
    key: &str,
    at: &Spanned<T>,
    p: &mut Problems,
) {
    for (var, value) in env {
        let key = format!("{key}.env.{var}");
        if !valid_arg_name(var) {
            p.at(
                at,
                &key,
                format!("invalid environment variable name `{var}`"),
                "use UPPER_CASE letters, digits and `_`",
            );
        }
        if value.contains('\n') || value.contains('"') {
            p.at(
                at,
                &key,
                "value holds a newline or a double quote",
                "keep ENV values plain",
            );
        }
        if let Err(why) = references(value) {
            p.at(
                at,
                &key,
                why,
                format!(
                    "a value may refer to the posture's {} as `${{NAME}}`",
                    posture_names().join(", ")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_refer_only_to_the_posture_variables() {
        assert_eq!(references("${XDG_CACHE_HOME}/go-build"), Ok(()));
        assert_eq!(references("-o cache_dir=${HOME}/x ${LANG}"), Ok(()));
        assert_eq!(references("local"), Ok(()));
        assert!(references("$HOME/x").unwrap_err().contains("not followed"));
        assert!(references("${HOME").unwrap_err().contains("unclosed"));
        assert!(
            references("${GOROOT}/bin")
                .unwrap_err()
                .contains("`${GOROOT}`")
        );
    }
}
