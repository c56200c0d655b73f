#!/bin/sh
# Fragment `js`: JS/TS dev tools on base's Node, the whole npm tree from
# docker/locks/js (npm ci, every tarball's integrity committed). A
# repository's own node_modules/.bin wins over these at verify time; these
# are the fallback.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${ESLINT_VERSION:?set by images.toml}"
: "${TYPESCRIPT_VERSION:?set by images.toml}"
: "${JEST_VERSION:?set by images.toml}"

prefix=/usr/local/lib/sunaba-js
npm_ci_prefix "$prefix" "$SUNABA_LOCK_DIR" eslint tsc jest
npm_require_version "$prefix" eslint "$ESLINT_VERSION"
npm_require_version "$prefix" typescript "$TYPESCRIPT_VERSION"
npm_require_version "$prefix" jest "$JEST_VERSION"

sunaba_cleanup
