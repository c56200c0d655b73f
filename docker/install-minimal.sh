#!/bin/sh
# Fragment `minimal` (variant minimal, straight from trixie-slim): git,
# python3 and a pinned pytest (with its dependencies and their hashes from
# docker/locks/minimal), nothing else.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${PYTEST_VERSION:?set by images.toml}"

lock_requires "$SUNABA_LOCK_DIR/requirements.txt" "pytest==$PYTEST_VERSION"

# tzdata: tests that parse or print dates in a time zone (trixie-slim has none).
apt_install ca-certificates git python3 python3-pip tzdata

pip_install_locked "$SUNABA_LOCK_DIR/requirements.txt"

# pip is not owed by minimal: it was only the installer. Purge just what this
# step pulled in for it (pytest lives in /usr/local and stays).
apt-get purge -y --auto-remove python3-pip

sunaba_cleanup
