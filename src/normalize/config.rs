//! The image config, rewritten: times, build-host fields, diff_ids, key order
//! (the normaliser's policy; reading and editing a config is
//! [`crate::image::config`]'s).

use serde_json::{Map, Value};

/// The config of the normalised image, as the bytes whose digest is its ID.
pub(super) fn rewrite(config: &Value, diff_ids: &[String], created: &str) -> Value {
    let mut c = config.clone();
    if let Some(obj) = c.as_object_mut() {
        for key in [
            "container",
            "container_config",
            "docker_version",
            "hostname",
        ] {
            obj.remove(key);
        }
        obj.insert("created".into(), Value::String(created.into()));
        if let Some(Value::Object(inner)) = obj.get_mut("config") {
            inner.remove("Hostname");
        }
        if let Some(Value::Array(history)) = obj.get_mut("history") {
            for h in history.iter_mut().filter_map(Value::as_object_mut) {
                h.insert("created".into(), Value::String(created.into()));
            }
        }
        let rootfs = obj
            .entry("rootfs")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(r) = rootfs.as_object_mut() {
            r.insert("type".into(), Value::String("layers".into()));
            r.insert(
                "diff_ids".into(),
                Value::Array(diff_ids.iter().cloned().map(Value::String).collect()),
            );
        }
    }
    sorted(c)
}

/// Every object's keys in sorted order (the crate keeps insertion order).
pub(super) fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_build_host_fields_go_and_keys_are_sorted() {
        let config = serde_json::json!({
            "os": "linux",
            "architecture": "amd64",
            "created": "2026-12-01T19:00:01.123456789Z",
            "container": "3f1c",
            "docker_version": "20.10.24",
            "container_config": {"Hostname": "3f1c"},
            "config": {"Labels": {"b": "2", "a": "1"}, "Hostname": "3f1c", "Env": ["A=1"]},
            "history": [
                {"created": "2026-12-01T19:00:00Z", "created_by": "RUN x"},
                {"created": "2026-12-01T19:00:01Z", "empty_layer": true}
            ],
            "rootfs": {"type": "layers", "diff_ids": ["sha256:old"]}
        });
        let out = rewrite(&config, &["sha256:new".into()], "2023-11-14T22:13:20Z");
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"architecture":"amd64","config":{"Env":["A=1"],"Labels":{"a":"1","b":"2"}},"created":"2023-11-14T22:13:20Z","history":[{"created":"2023-11-14T22:13:20Z","created_by":"RUN x"},{"created":"2023-11-14T22:13:20Z","empty_layer":true}],"os":"linux","rootfs":{"diff_ids":["sha256:new"],"type":"layers"}}"#
        );
        // Idempotent: a normalised config stays as it is.
        assert_eq!(
            rewrite(&out, &["sha256:new".into()], "2023-11-14T22:13:20Z"),
            out
        );
    }
}
