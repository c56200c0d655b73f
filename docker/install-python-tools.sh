#!/bin/sh
# Fragment `python`: the Python toolchain (interpreter, installers, linter,
# type checker, test runner). Runs on base, alone or next to go and js.
# Everything from docker/locks/python, with hashes committed.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${UV_VERSION:?set by images.toml}"
: "${RUFF_VERSION:?set by images.toml}"
: "${PYTEST_VERSION:?set by images.toml}"
: "${PYRIGHT_VERSION:?set by images.toml}"

lock_requires "$SUNABA_LOCK_DIR/requirements.txt" \
	"uv==$UV_VERSION" "ruff==$RUFF_VERSION" "pytest==$PYTEST_VERSION"

# python3-venv: `python3 -m venv` is what projects' own tooling reaches for.
apt_install python3 python3-pip python3-venv

pip_install_locked "$SUNABA_LOCK_DIR/requirements.txt"

# The npm package is the type checker itself and runs on base's Node. (The
# PyPI `pyright` wrapper downloads Node at first run, which fails offline.)
prefix=/usr/local/lib/sunaba-python
npm_ci_prefix "$prefix" "$SUNABA_LOCK_DIR" pyright
npm_require_version "$prefix" pyright "$PYRIGHT_VERSION"

sunaba_cleanup
