//! An image's config, read and edited as the stages share it: the layers
//! its `rootfs.diff_ids` name, the history step that made each layer, and
//! labels set in place (every other byte's meaning kept). What a stage
//! changes in a config and why (the normaliser's times and build-host
//! fields) stays with the stage; how a label is set, or a layer's step
//! found, is said once here.

use serde_json::{Map, Value};

/// Sets `labels` in the config's `config.Labels`, creating what is
/// missing; the error says which part is not an object.
pub(crate) fn set_labels(
    config: &mut Value,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), &'static str> {
    let top = config
        .as_object_mut()
        .ok_or("the config is not a JSON object")?;
    let inner = object_at(top, "config", "the config's `config` is not an object")?;
    let current = object_at(inner, "Labels", "the config's Labels are not an object")?;
    for (k, v) in labels {
        current.insert(k.clone(), Value::String(v.clone()));
    }
    Ok(())
}

/// The object at `key` of `map`, made (an absent or null value) when
/// missing; `not_object` when it is something else.
fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    not_object: &'static str,
) -> Result<&'a mut Map<String, Value>, &'static str> {
    let value = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if value.is_null() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().ok_or(not_object)
}

/// The `created_by` of each history step that made a layer (steps marked
/// `empty_layer` made none), in layer order.
pub(crate) fn layer_steps(config: &Value) -> Vec<String> {
    layer_history(config)
        .iter()
        .map(|s| {
            s.get("created_by")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The history steps that made a layer (steps marked `empty_layer` made
/// none), whole, in layer order.
pub(crate) fn layer_history(config: &Value) -> Vec<Value> {
    config
        .get("history")
        .and_then(Value::as_array)
        .map(|h| {
            h.iter()
                .filter(|s| s.get("empty_layer").and_then(Value::as_bool) != Some(true))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The fragment whose script a history step ran (`scripts`: each
/// fragment's script file name -> the fragment): the rendered Dockerfile
/// runs a fragment as `sh /run/sunaba/SCRIPT`.
pub(crate) fn fragment_of_step(
    step: &str,
    scripts: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    step.split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .filter_map(|word| word.strip_prefix("/run/sunaba/"))
        .find_map(|script| scripts.get(script).cloned())
}

/// The config's `rootfs.diff_ids`; `None` when it has none (or they are
/// not a list of strings).
pub(crate) fn diff_ids(config: &Value) -> Option<Vec<String>> {
    config
        .pointer("/rootfs/diff_ids")
        .and_then(|d| serde_json::from_value(d.clone()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_are_set_in_place_and_a_part_that_is_no_object_is_named() {
        let mut config = json!({"os": "linux", "config": {"Labels": {"a": "b"}, "Env": ["X=1"]}});
        let labels = std::collections::BTreeMap::from([("c".to_string(), "d".to_string())]);
        set_labels(&mut config, &labels).unwrap();
        assert_eq!(
            config.to_string(),
            r#"{"os":"linux","config":{"Labels":{"a":"b","c":"d"},"Env":["X=1"]}}"#
        );
        let mut bare = json!({"config": {"Labels": null}});
        set_labels(&mut bare, &labels).unwrap();
        assert_eq!(bare["config"]["Labels"]["c"], "d");
        assert_eq!(
            set_labels(&mut json!([1]), &labels),
            Err("the config is not a JSON object")
        );
        assert_eq!(
            set_labels(&mut json!({"config": {"Labels": 1}}), &labels),
            Err("the config's Labels are not an object")
        );
    }

    #[test]
    fn each_layer_has_the_step_that_made_it_and_its_diff_id() {
        let config = json!({
            "history": [
                {"created_by": "FROM x"},
                {"created_by": "ENV A=1", "empty_layer": true},
                {"created_by": "RUN /run/sunaba/install-go.sh"}
            ],
            "rootfs": {"type": "layers", "diff_ids": ["sha256:a", "sha256:b"]}
        });
        assert_eq!(
            layer_steps(&config),
            ["FROM x", "RUN /run/sunaba/install-go.sh"]
        );
        assert_eq!(diff_ids(&config).unwrap(), ["sha256:a", "sha256:b"]);
        assert_eq!(diff_ids(&json!({})), None);
    }

    #[test]
    fn a_step_is_attributed_to_the_fragment_whose_script_it_ran() {
        let scripts = std::collections::BTreeMap::from([
            ("install-core.sh".to_string(), "core".to_string()),
            ("install-python-tools.sh".to_string(), "python".to_string()),
        ]);
        let step = "RUN |4 PYRIGHT_VERSION=1.1.414 /bin/sh -c sh /run/sunaba/install-python-tools.sh # buildkit";
        assert_eq!(fragment_of_step(step, &scripts).as_deref(), Some("python"));
        assert_eq!(
            fragment_of_step("RUN /bin/sh -c set -eu; groupadd", &scripts),
            None
        );
        assert_eq!(
            fragment_of_step("RUN sh /run/sunaba/install-other.sh", &scripts),
            None
        );
    }
}
