//! Where a registry's API is served, and whether plain http is allowed
//! there: about reaching a registry, not about its name, so here and not in
//! [`crate::name`].

use crate::name::reference::{DOCKER_HUB, DOCKER_HUB_API_HOST};

/// The host:port that serves the registry API for `registry`.
pub fn api_host(registry: &str) -> &str {
    if registry == DOCKER_HUB {
        DOCKER_HUB_API_HOST
    } else {
        registry
    }
}

/// True for registries on the loopback interface, which may use plain http
/// without being listed as insecure.
pub fn is_loopback(registry: &str) -> bool {
    let host = host_of(registry);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

/// `registry` without its port.
pub(super) fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        // [::1]:5000
        return match rest.find(']') {
            Some(end) => &registry[..end + 2],
            None => registry,
        };
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => registry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_is_served_elsewhere() {
        assert_eq!(api_host("docker.io"), "registry-1.docker.io");
        assert_eq!(api_host("127.0.0.1:5000"), "127.0.0.1:5000");
    }

    #[test]
    fn loopback_detection() {
        for r in [
            "localhost:5000",
            "127.0.0.1:5000",
            "127.1.2.3",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(is_loopback(r), "{r}");
        }
        for r in [
            "10.0.0.1:5000",
            "ghcr.io",
            "localhost.example.com",
            "[::2]:5000",
        ] {
            assert!(!is_loopback(r), "{r}");
        }
    }
}
