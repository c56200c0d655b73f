//! docker/lib/common.sh's helpers, run by the host's `sh` against a fake
//! `npm` (no engine: what is under test is the helper's control flow).

use std::path::Path;
use std::process::Command;

/// A fake `npm` that fails with each of `codes` in turn (one per call,
/// `npm error code <CODE>` on stderr, as npm 11 prints it) and then installs
/// a `.bin/tool`; every call is counted in `calls`. `FETCH_ERROR:timeout`
/// and `FETCH_ERROR:json` print npm's FETCH_ERROR with the message of a
/// request that got no response in time and of a body that was not JSON.
fn fake_npm(bin: &Path, codes: &[&str]) {
    let script = format!(
        r#"#!/bin/sh
n=$(cat "{calls}" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "{calls}"
set -- {codes}
if [ "$n" -le $# ]; then
	eval "code=\${{$n}}"
	echo "npm error code ${{code%%:*}}" >&2
	case "$code" in
	FETCH_ERROR:timeout) echo "npm error network timeout at: https://registry.npmjs.org/debug/-/debug-4.4.3.tgz" >&2 ;;
	FETCH_ERROR:json) echo "npm error invalid json response body at https://registry.npmjs.org/debug reason: Unexpected end of JSON input" >&2 ;;
	esac
	if [ "$code" = EINTEGRITY ]; then
		echo "npm error sha512-abc integrity checksum failed when using sha512: wanted sha512-WANTED but got sha512-GOT. (12 bytes)" >&2
	fi
	exit 1
fi
mkdir -p node_modules/.bin
printf '#!/bin/sh\n' > node_modules/.bin/tool
chmod +x node_modules/.bin/tool
"#,
        calls = bin.join("calls").display(),
        codes = codes.join(" "),
    );
    super::support::write_program(&bin.join("npm"), &script);
}

/// Source common.sh and run `npm_ci_prefix` on a one-package lock; returns
/// (succeeded, npm calls, stderr).
fn npm_ci(codes: &[&str]) -> (bool, u32, String) {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let lock = tmp.path().join("lock");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lock).unwrap();
    fake_npm(&bin, codes);
    std::fs::write(
        lock.join("package.json"),
        r#"{"name":"x","version":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(
        lock.join("package-lock.json"),
        r#"{"packages":{"node_modules/debug":{"version":"4.4.3","integrity":"sha512-WANTED"}}}"#,
    )
    .unwrap();
    let lib = super::support::repo_root().join("docker/lib/common.sh");
    let out = Command::new("sh")
        .arg("-c")
        // $1..$4: the library, the prefix, the lock dir, and where `ln` puts
        // the bins instead of /usr/local/bin.
        .arg(
            r#". "$1"; links=$4; ln() { command ln -sf "$2" "$links/${2##*/}"; }
            npm_ci_prefix "$2" "$3" tool"#,
        )
        .args(["sh", lib.to_str().unwrap()])
        .arg(tmp.path().join("prefix"))
        .arg(&lock)
        .arg(tmp.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SUNABA_NPM_RETRY_SECONDS", "0")
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(bin.join("calls"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (
        out.status.success(),
        calls,
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn npm_ci_is_tried_again_after_a_network_error_and_installs() {
    let (ok, calls, err) = npm_ci(&["ETIMEDOUT", "EAI_AGAIN"]);
    assert!(ok, "{err}");
    assert_eq!(calls, 3, "{err}");
    assert!(
        err.contains(
            "sunaba: npm ci: network error ETIMEDOUT (attempt 1 of 3); trying again in 0 s"
        ) && err.contains("sunaba: npm ci: network error EAI_AGAIN (attempt 2 of 3)"),
        "{err}"
    );
}

#[test]
fn npm_ci_gives_up_after_three_network_errors() {
    let (ok, calls, err) = npm_ci(&["ECONNRESET", "E503", "ETIMEDOUT", "ETIMEDOUT"]);
    assert!(!ok, "{err}");
    assert_eq!(calls, 3, "{err}");
    assert!(!err.contains("attempt 3 of 3"), "{err}");
    assert!(err.ends_with("npm error code ETIMEDOUT\n"), "{err}");
}

#[test]
fn a_wrong_integrity_is_never_tried_again_and_names_the_package() {
    let (ok, calls, err) = npm_ci(&["EINTEGRITY"]);
    assert!(!ok, "{err}");
    assert_eq!(calls, 1, "{err}");
    assert!(
        err.contains("sunaba: npm ci: debug@4.4.3 does not match its integrity in"),
        "{err}"
    );
}

#[test]
fn a_request_npm_timed_out_is_a_network_error_and_other_fetch_errors_are_not() {
    let (ok, calls, err) = npm_ci(&["FETCH_ERROR:timeout"]);
    assert!(ok, "{err}");
    assert_eq!(calls, 2, "{err}");
    assert!(
        err.contains(
            "sunaba: npm ci: network error FETCH_ERROR (network timeout) (attempt 1 of 3); trying again in 0 s"
        ),
        "{err}"
    );
    let (ok, calls, err) = npm_ci(&["FETCH_ERROR:json"]);
    assert!(!ok, "{err}");
    assert_eq!(calls, 1, "{err}");
    assert!(err.ends_with("Unexpected end of JSON input\n"), "{err}");
}
